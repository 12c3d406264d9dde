"""The leaderboard's input generation (its draws in its order) and a torch a4w4 reference of the layer
that accumulates in fp32 and rounds once (SPEC 1, 2, 4)."""

import contextlib
import functools
import math
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from mxfp4.codec import MX_BLOCK, dequantize, quantize_activation, quantize_weight, shuffle_scales, shuffle_weight

if TYPE_CHECKING:  # the runner's types, for annotations only: the file runs without task.py
    from task import input_t, output_t

PAD_ALIGN = 256
RTOL = ATOL = 5e-2


def pad_to(x: int, align: int) -> int:
    return -(-x // align) * align


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _quantize_experts(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize_weight over [E, N, K], one expert at a time to bound the fp32 temporaries."""
    packed, scales = zip(*(quantize_weight(w[e]) for e in range(w.shape[0])), strict=True)
    return torch.stack(packed), torch.cat(scales)


def make_config(dhidden: int, dexpert: int, nroutedexperts: int, nexpertspertoken: int, nsharedexperts: int, bs: int):
    """The config dict of the input tuple (SPEC 2), as generate_input makes it."""
    return {
        "d_hidden": dhidden,
        "d_expert": dexpert,
        "d_hidden_pad": pad_to(dhidden, PAD_ALIGN),
        "d_expert_pad": pad_to(dexpert, PAD_ALIGN),
        "n_routed_experts": nroutedexperts,
        "n_shared_experts": nsharedexperts,
        "n_experts_per_token": nexpertspertoken,
        "total_top_k": nexpertspertoken + nsharedexperts,
        "bs": bs,
    }


def generate_input(
    dhidden: int,
    dexpert: int,
    nroutedexperts: int,
    nexpertspertoken: int,
    nsharedexperts: int,
    bs: int,
    seed: int,
) -> "input_t":
    """The runner's generate_input (SPEC 2): same draws, same order, on CUDA if present else CPU."""
    device = default_device()
    config = make_config(dhidden, dexpert, nroutedexperts, nexpertspertoken, nsharedexperts, bs)
    d_hidden_pad, d_expert_pad = config["d_hidden_pad"], config["d_expert_pad"]
    n_experts = nroutedexperts + nsharedexperts
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    draw = functools.partial(torch.randn, device=device, dtype=torch.bfloat16, generator=gen)

    hidden_states = draw((bs, dhidden))
    router_weight = draw((nroutedexperts, dhidden)) / math.sqrt(dhidden)
    scores = F.linear(hidden_states, router_weight).softmax(dim=-1)
    routed_weights, routed_ids = torch.topk(scores, k=nexpertspertoken, dim=-1, sorted=False)
    shared_ids = torch.arange(nroutedexperts, n_experts, device=device, dtype=torch.int32).expand(bs, -1)
    shared_weights = torch.ones((bs, nsharedexperts), device=device, dtype=torch.float32)
    topk_ids = torch.cat([routed_ids.to(torch.int32), shared_ids], dim=-1)
    topk_weights = torch.cat([routed_weights.to(torch.float32), shared_weights], dim=-1)

    gate_up_bf16 = draw((n_experts, 2 * d_expert_pad, d_hidden_pad)) / math.sqrt(dhidden)
    down_bf16 = draw((n_experts, d_hidden_pad, d_expert_pad)) / math.sqrt(dexpert)
    gate_up_weight, gate_up_weight_scale = _quantize_experts(gate_up_bf16)
    del gate_up_bf16
    down_weight, down_weight_scale = _quantize_experts(down_bf16)
    del down_bf16

    return (
        hidden_states,
        gate_up_weight,
        down_weight,
        gate_up_weight_scale,
        down_weight_scale,
        shuffle_weight(gate_up_weight),
        shuffle_weight(down_weight),
        shuffle_scales(gate_up_weight_scale),
        shuffle_scales(down_weight_scale),
        topk_weights,
        topk_ids,
        config,
    )


def quant_dequant_activation(x: torch.Tensor) -> torch.Tensor:
    """MXFP4 activation quantization (SPEC 3.3) of x [rows, K], back to fp32 (exact)."""
    packed, scales = quantize_activation(x)
    return dequantize(packed, scales)


@contextlib.contextmanager
def _exact_fp32_matmul():
    """fp32 products without TF32, whatever the process-wide setting."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def require_unpadded(config: dict) -> None:
    """The package computes the zero-padding layer of every official shape (SPEC 1) only."""
    for dim in ("d_hidden", "d_expert"):
        if config[f"{dim}_pad"] != config[dim]:
            raise ValueError(
                f"config: {dim}_pad ({config[f'{dim}_pad']}) != {dim} ({config[dim]}); padded shapes are not supported"
            )


def silu_and_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """SPEC 1 step 3: h = bf16(silu(g) * u), the silu in fp32 (torch's F.silu: g / (1 + exp(-g)))."""
    return (F.silu(gate) * up).to(torch.bfloat16)


@torch.no_grad()
def slot_outputs(data: "input_t", h_of=silu_and_mul, quantize=None, round_gemm=None):
    """SPEC 1 a4w4 per expert that is hit: yields (slots, y * w), the fp32 contributions of its slots
    (flat indices into topk_ids). The steps that tools vary: h_of(gate, up) -> h, quantize(rows) ->
    fp32 GEMM activations (None: SPEC 3.3), round_gemm(fp32) -> a GEMM's output as stored (None: fp32)."""
    quantize = quantize or quant_dequant_activation
    round_gemm = round_gemm or (lambda t: t)
    hidden, w1, w2, w1_scale, w2_scale, *_, topk_weights, topk_ids, config = data
    require_unpadded(config)
    n_tokens, d_hidden = hidden.shape
    n_experts, two_inter, _ = w1.shape
    inter = two_inter // 2
    topk = topk_ids.shape[1]
    w1_scale = w1_scale.reshape(n_experts, two_inter, d_hidden // MX_BLOCK)
    w2_scale = w2_scale.reshape(n_experts, d_hidden, inter // MX_BLOCK)

    a1 = quantize(hidden)
    slot_ids = topk_ids.reshape(-1)
    slot_weights = topk_weights.reshape(-1)
    with _exact_fp32_matmul():
        for e in torch.unique(slot_ids).tolist():
            slots = torch.nonzero(slot_ids == e).squeeze(1)
            gate_up = round_gemm(a1[slots // topk] @ dequantize(w1[e], w1_scale[e]).T)
            h = h_of(gate_up[:, :inter], gate_up[:, inter:])
            y = round_gemm(quantize(h) @ dequantize(w2[e], w2_scale[e]).T)
            yield slots, y * slot_weights[slots, None]


@torch.no_grad()
def ref_kernel(data: "input_t", h_of=silu_and_mul, quantize=None, round_gemm=None) -> "output_t":
    """SPEC 1 a4w4: slot_outputs added per token in fp32, rounded once."""
    hidden, *_, topk_ids, _config = data
    out = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
    for slots, y in slot_outputs(data, h_of, quantize, round_gemm):
        out.index_add_(0, slots // topk_ids.shape[1], y)
    return out.to(torch.bfloat16)


@torch.no_grad()
def compare(output: torch.Tensor, expected: torch.Tensor, rtol=RTOL, atol=ATOL, max_print=5) -> tuple[bool, str]:
    """The leaderboard's elementwise check (SPEC 4), with a message naming the worst elements."""
    if not isinstance(output, torch.Tensor):
        return False, f"output is a {type(output).__name__}, not a tensor"
    if output.shape != expected.shape:
        return False, f"shape mismatch: got {tuple(output.shape)}, expected {tuple(expected.shape)}"
    got, ref = output.float(), expected.float()
    diff = (got - ref).abs()
    bad = diff > atol + rtol * ref.abs()
    for test in (torch.isnan, torch.isposinf, torch.isneginf):
        bad |= test(got) ^ test(ref)
    n_bad = int(bad.sum())
    if n_bad == 0:
        finite = torch.isfinite(diff)
        worst = float(diff[finite].max()) if finite.any() else 0.0
        return True, f"max abs error {worst:.4g}"
    excess = torch.where(bad, torch.nan_to_num(diff - rtol * ref.abs(), nan=math.inf), torch.full_like(diff, -1.0))
    order = torch.argsort(excess.flatten(), descending=True)[:max_print]
    lines = [f"{n_bad} of {bad.numel()} elements mismatch (rtol={rtol}, atol={atol})"]
    for flat in order.tolist():
        idx = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), bad.shape))
        lines.append(f"  at {idx}: got {got[idx].item():.6g}, expected {ref[idx].item():.6g}")
    return False, "\n".join(lines)


def check_implementation(data: "input_t", output: "output_t") -> tuple[bool, str]:
    """Run ref_kernel on the same data (after the submission, as the runner does) and compare."""
    return compare(output, ref_kernel(data))
