"""Peer adapter: the layer computed with OpenAI's triton_kernels (python/triton_kernels of triton v3.6.0,
MIT; carried uncommitted in .peers/, .peers/SOURCE.txt names the commit) on an NVIDIA Hopper GPU.

PEERS maps a name to (prepare, run) (bench.h200.rivals times each).

  prepare(data) -> state   untimed: the package's MXFP4 weights re-laid, bit for bit (no
                           requantization), in the Hopper layouts matmul_ogs reads (HopperMXValueLayout,
                           HopperMXScaleLayout), and the routing metadata (RoutingData, GatherIndx,
                           ScatterIndx) built from the given topk_ids and topk_weights.
  run(state) -> [M, H] bf16  timed: gate_up = matmul_ogs over the gathered token rows (bf16 activations,
                           weights decoded to bf16 in registers), h = bf16(silu(gate) * up) as
                           reference.silu_and_mul (one kernel, glue.swiglu), down = matmul_ogs with
                           each row times its slot's weight, the k slots of a token summed in fp32
                           by matmul_ogs's scatter reduction and rounded once to bf16. No host
                           synchronisation.

Entries:
  triton_kernels-w4a16         gate_up written in fp32, so silu sees the fp32 accumulator as in the
                               reference.
  triton_kernels-w4a16-bf16gu  gate_up written in bf16 (what a plain matmul_ogs call returns), then
                               the same silu on the bf16 values; less traffic between the two steps.

No W4A8 entry: triton_kernels 3.6 has no fp8-activation x mxfp4-weight path on Hopper. The Hopper
weight layout (HOPPER_VALUE) static-asserts bf16 activations in _matmul_ogs (the weights are
decoded to bf16 for a bf16 wgmma, and the layout's swizzle assumes a bf16 operand); without it, the
strided layout goes through tl.dot_scaled, which sm90 emulates by upcasting both operands to bf16,
so fp8 activations would only change the input's storage. Its own tests skip the case ("float8 x mx
not supported with cuda capability < 10", tests/test_matmul.py) and bench_mlp.py times bf16 x mx4
where the GPU lacks native mxfp4. Activations are not quantized at all here (w4a16), where the
leaderboard's reference quantizes a1 and h to MXFP4 (a4w4): the outputs differ by that rounding.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.h200.peers.glue import swiglu
from bench.h200.peers.inputs import check_input, expert_bytes, routed_slots

PEERS_DIR = Path(__file__).resolve().parents[3] / ".peers"


def _tk():
    """The triton_kernels modules this adapter calls, imported on first use; .peers/ is put on
    sys.path only when triton_kernels is not importable already (the harness's --peer-path)."""
    try:
        return _import_tk()
    except ImportError:
        if not (PEERS_DIR / "triton_kernels").is_dir():
            raise ImportError(
                f"triton_kernels is not importable and {PEERS_DIR / 'triton_kernels'} is absent: export "
                "python/triton_kernels/triton_kernels of triton v3.6.0 there (see .peers/SOURCE.txt)"
            ) from None
        if str(PEERS_DIR) not in sys.path:
            sys.path.insert(0, str(PEERS_DIR))
        return _import_tk()


def _import_tk():
    import triton_kernels
    import triton_kernels.matmul_ogs as matmul_ogs
    import triton_kernels.numerics_details.mxfp as mxfp
    import triton_kernels.tensor as tensor
    from triton_kernels.tensor_details import layout

    if Path(triton_kernels.__file__ or "").resolve() == Path(__file__).resolve():
        raise ImportError(f"'import triton_kernels' found this adapter ({__file__}), not OpenAI's package")
    return _Modules(matmul_ogs, tensor, layout, mxfp)


@dataclass(frozen=True)
class _Modules:
    matmul_ogs: object
    tensor: object
    layout: object
    mxfp: object


@dataclass
class Routing:
    """matmul_ogs's routing arguments for the given top-k, and the plain index arrays behind them.
    A slot is a flat index t * k + j into topk_ids; rows are the slots sorted by expert (stable, so
    token order within an expert)."""

    data: object  # RoutingData: gate_scal (= gammas), expt_hist, n_expts_tot, n_expts_act, expt_data
    gather: object  # GatherIndx(src_indx = slot of each row, dst_indx = row of each slot)
    scatter: object  # ScatterIndx(src_indx = row of each slot, dst_indx = slot of each row)
    slot_of_row: torch.Tensor  # int32 [M k]
    row_of_slot: torch.Tensor  # int32 [M k]
    expert_rows: torch.Tensor  # int32 [E]: rows per expert
    gammas: torch.Tensor  # fp32 [M k]: the slot weight of each row


@dataclass
class State:
    hidden: torch.Tensor
    w1: object  # triton_kernels Tensor, logical [E, H, 2I] fp4, HopperMXValueLayout
    w2: object  # logical [E, I, H]
    gate_up_config: object  # PrecisionConfig: w1's scales (HopperMXScaleLayout), gate_up's dtype
    down_config: object  # PrecisionConfig: w2's scales, fp32 rows before the slot sum
    routing: Routing
    d_expert: int
    num_warps: int


def num_warps_for(n_tokens: int) -> int:
    """Warps of matmul_ogs's Hopper mxfp4 kernel, fixed by the scale layout (its block_n is
    32 x warps): triton_kernels' bench_mlp.py takes 4 up to 512 tokens, 8 above."""
    return 4 if n_tokens <= 512 else 8


def build_routing(topk_ids: torch.Tensor, topk_weights: torch.Tensor, n_experts: int) -> Routing:
    """matmul_ogs's routing metadata from the given top-k (no top-k is recomputed): the rows are the
    slots sorted by expert, as triton_kernels' own routing orders them (bitmatrix col_sorted_indx);
    the ragged metadata by make_ragged_tensor_metadata (its torch twin off CUDA)."""
    tk = _tk()
    if topk_ids.dim() != 2 or topk_weights.shape != topk_ids.shape:
        raise ValueError(
            f"topk_ids {tuple(topk_ids.shape)} and topk_weights {tuple(topk_weights.shape)}: expected the same [M, k]"
        )
    slots = routed_slots(topk_ids, n_experts)  # prepare is untimed: its syncs cost nothing measured
    n_tokens, topk = topk_ids.shape
    n_slots = slots.numel()
    slot_of_row = torch.argsort(slots, stable=True).to(torch.int32)
    row_of_slot = torch.empty_like(slot_of_row)
    row_of_slot[slot_of_row.long()] = torch.arange(n_slots, dtype=torch.int32, device=slots.device)
    expert_rows = torch.bincount(slots, minlength=n_experts).to(torch.int32)
    gammas = topk_weights.reshape(-1).to(torch.float32)[slot_of_row.long()].contiguous()
    if slots.is_cuda:
        ragged = tk.tensor.make_ragged_tensor_metadata(expert_rows, n_slots)
    else:
        ragged = tk.tensor.make_ragged_tensor_metadata_torch(expert_rows, n_slots)
    mo = tk.matmul_ogs
    return Routing(
        data=mo.RoutingData(gammas, expert_rows, n_experts, topk, ragged),
        gather=mo.GatherIndx(src_indx=slot_of_row, dst_indx=row_of_slot),
        scatter=mo.ScatterIndx(src_indx=row_of_slot, dst_indx=slot_of_row),
        slot_of_row=slot_of_row,
        row_of_slot=row_of_slot,
        expert_rows=expert_rows,
        gammas=gammas,
    )


def convert_weight(w: torch.Tensor, w_scale: torch.Tensor, num_warps: int, name: str = "w"):
    """The package's [E, N, K/2] packed fp4 (element 2j in the low nibble) and its [E N, K/32] e8m0
    scales as matmul_ogs's Hopper operands: logical [E, K, N] fp4 quantized along K (mx_axis 1), the
    bytes re-laid by HopperMXValueLayout and HopperMXScaleLayout(num_warps) without changing a code
    or a scale (triton_kernels packs fp4 the same way: even element in the low nibble)."""
    tk = _tk()
    values, scales = expert_bytes(w, w_scale, name)
    # [E, K/2, N] and [E, K/32, N] views with K innermost: matmul_ogs wants mxfp weights column-major
    values_t = tk.tensor.wrap_torch_tensor(values.transpose(1, 2), dtype=tk.tensor.FP4)
    scales_t = tk.tensor.wrap_torch_tensor(scales.transpose(1, 2))
    layout = tk.layout
    values_t = tk.tensor.convert_layout(values_t, layout.HopperMXValueLayout, mx_axis=1)
    scales_t = tk.tensor.convert_layout(scales_t, layout.HopperMXScaleLayout, mx_axis=1, num_warps=num_warps)
    return values_t, scales_t


def _check_input(data) -> None:
    check_input(data)
    hidden = data[0]
    if hidden.is_cuda:
        major, minor = torch.cuda.get_device_capability(hidden.device)
        if major != 9:
            raise RuntimeError(
                f"this adapter lays the weights out for Hopper (sm_90); the GPU is sm_{major}{minor}, whose "
                "matmul_ogs wants other layouts (triton_kernels.tensor_details.layout.make_default_*)"
            )


def _prepare(data, gate_up_dtype: torch.dtype) -> State:
    _check_input(data)
    tk = _tk()
    hidden, w1, w2, w1_scale, w2_scale, *_shuffled, topk_weights, topk_ids, _config = data
    n_tokens = hidden.shape[0]
    warps = num_warps_for(n_tokens)
    w1_t, w1_scale_t = convert_weight(w1, w1_scale, warps, "w1")
    w2_t, w2_scale_t = convert_weight(w2, w2_scale, warps, "w2")
    mo = tk.matmul_ogs
    return State(
        hidden=hidden.contiguous(),
        w1=w1_t,
        w2=w2_t,
        gate_up_config=mo.PrecisionConfig(weight_scale=w1_scale_t, out_dtype=gate_up_dtype),
        # fp32 rows, so the scatter's reduction adds fp32 products; it writes run's bf16 output
        down_config=mo.PrecisionConfig(weight_scale=w2_scale_t, out_dtype=torch.float32),
        routing=build_routing(topk_ids, topk_weights, w1.shape[0]),
        d_expert=w1.shape[1] // 2,
        num_warps=warps,
    )


def forward(state: State, matmul) -> torch.Tensor:
    """run's computation with matmul_ogs passed in (the tests pass a torch stand-in)."""
    r = state.routing
    gate_up = matmul(state.hidden, state.w1, None, r.data, gather_indx=r.gather, precision_config=state.gate_up_config)
    h = swiglu(gate_up, state.d_expert)  # reference.silu_and_mul, one kernel
    out = torch.empty(state.hidden.shape, dtype=torch.bfloat16, device=state.hidden.device)
    # matmul_ogs sums the k fp32 rows of a token (its scratch is out_dtype fp32) into y in fp32 and
    # stores the sum to y's dtype once
    return matmul(
        h, state.w2, None, r.data, scatter_indx=r.scatter, precision_config=state.down_config, gammas=r.gammas, y=out
    )


def run(state: State) -> torch.Tensor:
    if not state.hidden.is_cuda:
        raise RuntimeError("matmul_ogs's mxfp4 path needs a CUDA GPU (inline PTX; not under TRITON_INTERPRET)")
    return forward(state, _tk().matmul_ogs.matmul_ogs)


def w4a16_reference(data) -> torch.Tensor:
    """What run computes, in torch: reference.ref_kernel (the repository root on sys.path) without
    its two activation quantizations. ref_kernel's a4w4 output differs from it well beyond the
    leaderboard's tolerance (docs/spec.md, the W4A16 rows of aiter's cktile stages), so a peer's
    check belongs against this."""
    from reference import ref_kernel

    return ref_kernel(data, quantize=torch.Tensor.float)


def prepare(data) -> State:
    return _prepare(data, torch.float32)


def prepare_bf16_gate_up(data) -> State:
    return _prepare(data, torch.bfloat16)


PEERS = {
    "triton_kernels-w4a16": (prepare, run),
    "triton_kernels-w4a16-bf16gu": (prepare_bf16_gate_up, run),
}
# name -> (what the entry computes in torch, the bound on its excess over that model): the adapter's
# own check (the bf16 gate_up entry rounds once more and has none)
OWN_REFERENCES = {"triton_kernels-w4a16": (w4a16_reference, 1.0)}
