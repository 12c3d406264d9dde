"""Peer adapter: the layer computed with vLLM's humming kernels (humming-kernels 0.1.20, Apache-2.0;
github.com/vllm-project/humming) on an NVIDIA GPU, Hopper (sm_90) in mind.

PEERS maps a name to (prepare, run) (bench.h200.rivals times each). `python -m bench.h200.peers.humming`
prints what humming finds on the machine (compiler, CUDA toolkits, which of its dependencies it
imported) as JSON.

  prepare(data) -> state   untimed: the package's MXFP4 weights loaded as humming's "mxfp4" weight
                           schema bit for bit (the fp4 bytes and e8m0 bytes as they are, no
                           requantization), transformed by humming into its kernel layout, one
                           HummingLayer per GEMM; humming's default (heuristic) tuning config for
                           M k rows, its kernel JIT-compiled; the indexed-MoE routing metadata
                           (sorted_ids, expert_ids, num_tokens_padded) built from the given
                           topk_ids for each GEMM's block_shape_m; then one warm-up run.
  run(state) -> [M, H] bf16  timed: [fp8 quantization of the hidden rows, humming's process_input
                           kernel], the indexed gate_up GEMM (rows of the (token, expert) slot list,
                           bf16 out), h = bf16(silu(gate) * up) as reference.silu_and_mul (one
                           kernel, glue.swiglu), [fp8 quantization of h], the indexed down GEMM
                           (bf16 out per slot), the k slots of each token weighted by topk_weights
                           and summed in fp32, rounded once to bf16 (one kernel, glue.topk_sum). No
                           host synchronisation.

Entries:
  humming-w4a8        fp8 e4m3 activations with one dynamic fp32 scale per row (humming's
                      DynamicToken mode, input_scale_group_size 0); on sm_90 humming folds the e8m0
                      scales into the fp4 -> e4m3 weight conversion (LayerConfig.use_fused_e8m0_scale):
                      exact while an expert's scale bytes span at most 11 binades (scale_span), as
                      the generated weights do.
  humming-w4a16       bf16 activations, no input quantization.
EXTRA_PEERS:
  humming-w4a8-g128   fp8 e4m3 with one fp32 scale per 128 values of a row (DynamicGroup; humming's
                      sm_90 packed-K weight layout).

Neither quantizes activations to MXFP4 as the leaderboard's reference does (a4w4): the outputs
differ from reference.ref_kernel by that rounding, beyond the leaderboard's tolerance on some
elements; OWN_REFERENCES below has what each entry computes in torch (layer_reference), the one to
check it against.

The humming calls (humming-kernels 0.1.20's source): humming.layer.HummingLayer with
weight_config {"quant_method": "mxfp4"} (schema/mxfp4.py: weight uint8 [E, N, K/2] viewed as int32,
weight_scale uint8 [E, N, K/32] viewed as e8m0) and HummingLayer.transform (transform.py:
prepare_layer_config, transform_humming_tensors); humming.tune.get_heuristics_config(shape_m = M k,
gemm_type indexed); humming.kernel.humming.HummingKernel.prepare_kernels (the JIT compile, cached
on disk under HUMMING_CACHE_DIR or ~/.humming/cache); humming.forward.may_quant_input (fp8 rows
and scales); humming.ops.launch_kernel (indexed GEMM: input row = sorted_id // top_k, output row =
sorted_id, pad ids = M k skipped; include/humming/scheduler.cuh, epilogue/pipeline.cuh).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from bench.h200.peers.glue import swiglu, topk_sum
from bench.h200.peers.inputs import as_uint8, check_input, expert_bytes, routed_slots

PEERS_DIR = Path(__file__).resolve().parents[3] / ".peers"
HUMMING_VERSION = "0.1.20"
# process_fused_e8m0_scale (humming transform.py) keeps the scales within this many binades below
# an expert's largest (per row with a channel weight_scale_2) when fp8 activations meet e8m0 weights
FUSED_E8M0_SPAN = 11
E4M3_MAX = 448.0  # the largest finite e4m3 (fn) value: humming's dynamic fp8 scales map a row's amax onto it
# HummingLayer's padding, as vLLM's humming integration pads N and K
PAD_N, PAD_K = 256, 128
# humming-kernels' requirements and what its import chain brings in (environment_report checks which)
DEPENDENCIES = (
    "cuda",
    "jinja2",
    "numpy",
    "filelock",
    "packaging",
    "setuptools",
    "triton",
    "safetensors",
    "tabulate",
    "tqdm",
)

# variant -> HummingLayer input_config (None: bf16 activations)
INPUT_CONFIGS = {
    "humming-w4a8": {"quant_method": "humming", "dtype": "float8e4m3", "group_size": 0},
    "humming-w4a16": None,
    "humming-w4a8-g128": {"quant_method": "humming", "dtype": "float8e4m3", "group_size": 128},
}


class PeerError(RuntimeError):
    """A failed prepare or run, naming the entry and the step."""


# ------------------------------------------------------------------ plain torch (tested on the CPU)


def scale_span(scales: torch.Tensor) -> int:
    """Largest (max - min) of the e8m0 scale bytes within one expert of [E, N, K/32] scales; the
    humming-w4a8 weights are exact while it is at most FUSED_E8M0_SPAN."""
    u = as_uint8(scales, "scales").reshape(scales.shape[0], -1).to(torch.int16)
    return int((u.amax(dim=1) - u.amin(dim=1)).max())


def build_indexed_routing(
    topk_ids: torch.Tensor, n_experts: int, block_m: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """humming's indexed-MoE metadata (vLLM's moe_align_block_size layout) for the given top-k:
    sorted_ids int32 [P], the slots (flat indices t k + j of topk_ids) grouped by expert in slot
    order, each expert's group padded with the id M k to a multiple of block_m; expert_ids int32
    [P / block_m], the expert of each block; num_tokens_padded int32 [1] = P. Experts without a slot
    get no block. Host syncs (P and the blocks per expert): for prepare only."""
    if block_m <= 0 or block_m % 4:
        raise ValueError(
            f"block_m: expected a positive multiple of 4 (sorted_ids is read in int4 words), got {block_m}"
        )
    device = topk_ids.device
    slots = routed_slots(topk_ids, n_experts)
    n_slots = slots.numel()
    counts = torch.bincount(slots, minlength=n_experts)
    blocks = (counts + block_m - 1) // block_m
    padded = blocks * block_m
    group_start = torch.cumsum(padded, 0) - padded  # where each expert's group starts in sorted_ids
    slot_start = torch.cumsum(counts, 0) - counts  # where each expert starts among the sorted slots
    order = torch.sort(slots, stable=True).indices  # slots by expert, slot order kept
    expert_of = slots[order]
    rank = torch.arange(n_slots, device=device) - slot_start[expert_of]
    total = int(padded.sum())
    sorted_ids = torch.full((total,), n_slots, dtype=torch.int32, device=device)
    sorted_ids[group_start[expert_of] + rank] = order.to(torch.int32)
    expert_ids = torch.repeat_interleave(torch.arange(n_experts, device=device), blocks).to(torch.int32)
    num_tokens_padded = torch.tensor([total], dtype=torch.int32, device=device)
    return sorted_ids, expert_ids.contiguous(), num_tokens_padded


def humming_pack_words(codes: torch.Tensor) -> torch.Tensor:
    """4-bit codes [..., 8 n] packed as humming packs them (include/humming/kernel/pack_weight.cuh,
    common_pack_weight<4>: element i at bits 4 i of its int32 word): int32 [..., n]."""
    c = codes.to(torch.int64).reshape(*codes.shape[:-1], -1, 8)
    word = sum(c[..., i] << (4 * i) for i in range(8))
    return torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)


def humming_e2m1_values(codes: torch.Tensor) -> torch.Tensor:
    """fp32 values of e2m1 codes by humming's rule (include/humming/kernel/dequant_weight.cuh,
    dequant_unpacked_fp_type with 2 exponent and 1 mantissa bits): the sign bit to bit 31, the 3
    low bits to bits 22-24 of an fp32, times 2^126."""
    c = codes.to(torch.int32)
    bits = ((c & 0x8) << 28) | ((c & 0x7) << 22)
    return bits.view(torch.float32) * 2.0**126


@dataclass
class Layer:
    """The state: the two GEMMs (callables rows -> bf16 [M k, N]) and what run needs around them."""

    name: str
    hidden: torch.Tensor
    gate_up: Callable[[torch.Tensor], torch.Tensor]
    down: Callable[[torch.Tensor], torch.Tensor]
    inter: int
    topk_weights: torch.Tensor
    info: dict  # the layer configs, tuning configs and routing sizes humming uses


def forward(state: Layer) -> torch.Tensor:
    """run's computation; the GEMMs are the state's callables (the tests pass torch stand-ins)."""
    gate_up = state.gate_up(state.hidden)
    h = swiglu(gate_up, state.inter)
    y = state.down(h)
    return topk_sum(y, state.topk_weights)


def fp8_rows(group: int):
    """humming's dynamic fp8 e4m3 activation quantization as the values it stands for (fp32), after
    humming's process_input kernel (include/humming/kernel/process_input/quantization.cuh,
    quant_group): one fp32 scale max(amax / 448, 1e-30) per row (group 0, DynamicToken) or per
    `group` values of a row (DynamicGroup), the codes x times the scale's reciprocal rounded to
    nearest e4m3."""

    def quantize(x: torch.Tensor) -> torch.Tensor:
        rows, width = x.shape
        parts = x.float().reshape(rows, -1, group or width)
        scale = (parts.abs().amax(-1, keepdim=True) / E4M3_MAX).clamp_min(1e-30)
        codes = parts * scale.reciprocal()
        return (codes.to(torch.float8_e4m3fn).float() * scale).reshape(rows, width)

    return quantize


def _bf16(t: torch.Tensor) -> torch.Tensor:
    """A GEMM's fp32 output as humming stores it (c_dtype bf16), kept in fp32."""
    return t.to(torch.bfloat16).float()


def layer_reference(data, quantize=None) -> torch.Tensor:
    """What an entry computes, in torch: reference.ref_kernel (the repository root on sys.path) with
    each GEMM's output rounded to bf16 (humming's c_dtype; the silu then on those values, as
    glue.swiglu computes it) and quantize(rows) -> fp32 for both GEMMs' activations (None: bf16
    activations, humming-w4a16) in place of its two MXFP4 roundings."""
    from reference import ref_kernel

    return ref_kernel(data, quantize=quantize or torch.Tensor.float, round_gemm=_bf16)


def w4a16_reference(data) -> torch.Tensor:
    """What humming-w4a16 computes (layer_reference with bf16 activations)."""
    return layer_reference(data)


def w4a8_reference(data) -> torch.Tensor:
    """What humming-w4a8 computes: fp8 e4m3 rows with one fp32 scale each."""
    return layer_reference(data, fp8_rows(0))


def w4a8_g128_reference(data) -> torch.Tensor:
    """What humming-w4a8-g128 computes: fp8 e4m3 with one fp32 scale per 128 values of a row."""
    return layer_reference(data, fp8_rows(128))


# ------------------------------------------------------------------------------------ humming side


def _humming():
    """The humming modules this adapter calls, imported on first use; .peers/ (an unpacked wheel
    there: .peers/humming) is put on sys.path only when humming is not importable already."""
    try:
        return _import_humming()
    except ImportError as first:
        if not (PEERS_DIR / "humming").is_dir():
            raise PeerError(
                f"humming-kernels {HUMMING_VERSION} is not importable ({type(first).__name__}: {first}) and "
                f"{PEERS_DIR / 'humming'} is absent: pip install the wheel or unpack it into .peers/; it needs "
                "cuda-bindings (cuda.bindings.driver), jinja2, numpy, filelock, packaging and triton"
            ) from first
        if str(PEERS_DIR) not in sys.path:
            sys.path.insert(0, str(PEERS_DIR))
        try:
            return _import_humming()
        except ImportError as second:
            raise PeerError(f"humming from {PEERS_DIR}: {type(second).__name__}: {second}") from second


def _import_humming():
    import humming

    if Path(humming.__file__ or "").resolve() == Path(__file__).resolve():
        raise ImportError(f"'import humming' found this adapter ({__file__}), not the humming-kernels package")
    import humming.forward
    import humming.layer
    import humming.ops
    import humming.tune
    from humming.config import ComputeConfig, GemmType
    from humming.kernel.humming import HummingKernel

    return {
        "version": getattr(humming, "__version__", "?"),
        "HummingLayer": humming.layer.HummingLayer,
        "get_heuristics_config": humming.tune.get_heuristics_config,
        "prepare_kernels": HummingKernel.prepare_kernels,
        "may_quant_input": humming.forward.may_quant_input,
        "launch_kernel": humming.ops.launch_kernel,
        "indexed": GemmType.INDEXED,
        "compute_config": ComputeConfig(gemm_type=GemmType.INDEXED).to_str(),
    }


class HummingGemm:
    """One indexed MoE GEMM with humming: x [rows, K] bf16 (rows = M, top_k = k for gate_up; rows =
    M k, top_k = 1 for down) -> the preallocated bf16 [M k, N], row s = slot s's product with its
    expert's weights."""

    def __init__(self, hm, layer, tuning, configs, routing, top_k, out):
        self.layer = layer  # keeps the transformed weights and the Stream-K locks alive
        self.config = layer.humming_config
        self.quantize = self.config.a_dtype.num_bits != 16
        self.tuning = tuning
        self.configs = configs
        self.sorted_ids, self.expert_ids, self.num_tokens_padded = routing
        self.top_k = top_k
        self.out = out
        self.weight = layer.weight
        self.weight_scale = layer.weight_scale
        self.weight_scale_2 = getattr(layer, "weight_scale_2", None)
        self.locks = layer.locks
        self._may_quant_input = hm["may_quant_input"]
        self._launch = hm["launch_kernel"]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        scale = None
        if self.quantize:
            x, scale = self._may_quant_input(self.config, x)
        return self._launch(
            configs=self.configs,
            inputs=x,
            weight=self.weight,
            weight_scale=self.weight_scale,
            weight_scale_2=self.weight_scale_2,
            input_scale=scale,
            outputs=self.out,
            sorted_ids=self.sorted_ids,
            expert_ids=self.expert_ids,
            num_tokens_padded=self.num_tokens_padded,
            locks=self.locks,
            top_k=self.top_k,
        )


def _build_gemm(hm, variant, values, scales, topk_ids, rows_total, top_k, device, routings, info, label):
    """A HummingLayer for one weight set, transformed; the heuristic tuning for rows_total routed
    rows, compiled; the routing for its block_shape_m."""
    n_experts, n, half_k = values.shape
    layer = hm["HummingLayer"](
        shape_n=n,
        shape_k=2 * half_k,
        weight_config={"quant_method": "mxfp4"},
        input_config=None if INPUT_CONFIGS[variant] is None else dict(INPUT_CONFIGS[variant]),
        pad_n_to_multiple=PAD_N,
        pad_k_to_multiple=PAD_K,
        num_experts=n_experts,
        torch_dtype=torch.bfloat16,
    )
    # the schema's tensors as the layer's parameters (copies: transform must not see the inputs)
    layer.weight = torch.nn.Parameter(values.clone(), requires_grad=False)
    layer.weight_scale = torch.nn.Parameter(scales.clone(), requires_grad=False)
    layer.transform()
    config = layer.humming_config
    tuning = dict(hm["get_heuristics_config"](config, shape_m=rows_total, gemm_type=hm["indexed"], device=device))
    configs = hm["prepare_kernels"](config.to_str(), hm["compute_config"], tuning, device=device)
    block_m = int(tuning["block_shape"][0])
    if block_m not in routings:
        routings[block_m] = build_indexed_routing(topk_ids, n_experts, block_m)
    out = torch.empty((rows_total, n), dtype=torch.bfloat16, device=device)
    info[label] = {
        "layer_config": json.loads(config.to_str()),
        "tuning": {k: list(v) if isinstance(v, tuple) else v for k, v in tuning.items()},
        "block_m": block_m,
        "num_tokens_padded": int(routings[block_m][2][0]),
    }
    return HummingGemm(hm, layer, tuning, configs, routings[block_m], top_k, out)


@torch.no_grad()
def _prepare(data, variant: str) -> Layer:
    step = "input"
    try:
        check_input(data)
        hidden, w1, w2, w1_scale, w2_scale, *_shuffled, topk_weights, topk_ids, _config = data
        if not (hidden.is_cuda and torch.cuda.is_available()):
            raise PeerError(f"{variant}: humming runs on a CUDA GPU; the input tuple is on {hidden.device}")
        device = hidden.device
        step = "import"
        hm = _humming()
        step = "weights"
        w1_values, w1_scales = expert_bytes(w1, w1_scale, "w1")
        w2_values, w2_scales = expert_bytes(w2, w2_scale, "w2")
        n_tokens, topk = topk_ids.shape
        rows_total = n_tokens * topk
        info = {
            "humming": hm["version"],
            "variant": variant,
            "scale_span": max(scale_span(w1_scales), scale_span(w2_scales)),
        }
        routings: dict = {}
        with torch.cuda.device(device):
            step = "gate_up GEMM (transform, tuning, compile)"
            gate_up = _build_gemm(
                hm, variant, w1_values, w1_scales, topk_ids, rows_total, topk, device, routings, info, "gate_up"
            )
            step = "down GEMM (transform, tuning, compile)"
            down = _build_gemm(
                hm, variant, w2_values, w2_scales, topk_ids, rows_total, 1, device, routings, info, "down"
            )
            state = Layer(
                variant,
                hidden.contiguous(),
                gate_up,
                down,
                w1.shape[1] // 2,
                topk_weights.contiguous(),
                info,
            )
            step = "warm-up run"
            forward(state)
            torch.cuda.synchronize(device)
        return state
    except PeerError:
        raise
    except Exception as exc:
        raise PeerError(f"{variant} prepare, {step}: {type(exc).__name__}: {exc}") from exc


def run(state: Layer) -> torch.Tensor:
    try:
        return forward(state)
    except Exception as exc:
        raise PeerError(f"{getattr(state, 'name', 'humming')} run: {type(exc).__name__}: {exc}") from exc


def prepare_w4a8(data) -> Layer:
    return _prepare(data, "humming-w4a8")


def prepare_w4a16(data) -> Layer:
    return _prepare(data, "humming-w4a16")


def prepare_w4a8_g128(data) -> Layer:
    return _prepare(data, "humming-w4a8-g128")


PEERS = {
    "humming-w4a8": (prepare_w4a8, run),
    "humming-w4a16": (prepare_w4a16, run),
}
EXTRA_PEERS = {"humming-w4a8-g128": (prepare_w4a8_g128, run)}
# name -> (what the entry computes in torch, the bound on its excess over that model): the adapter's
# own check. Only the order of fp32 sums differs, but a bf16 gate_up that rounds the other way moves
# h's fp8 code by a step 16 times a bf16 one: the W4A8 models sit 1.6-2.6 tolerances from humming's
# output at the official shapes (H200), the W4A16 one within 0.6; ref_kernel's a4w4 rounding alone
# is 12 away.
OWN_REFERENCES = {
    "humming-w4a8": (w4a8_reference, 4.0),
    "humming-w4a16": (w4a16_reference, 1.0),
    "humming-w4a8-g128": (w4a8_g128_reference, 4.0),
}


def environment_report() -> dict:
    """What humming finds here: its version, the kernel compiler it picks (NVRTC when
    cuda.bindings.nvrtc imports, else nvcc; HUMMING_COMPILER overrides), the CUDA toolkits it sees
    (it wants the major version of torch.version.cuda), and which dependencies importing it loaded."""
    report = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        report["device"] = torch.cuda.get_device_name()
        report["capability"] = list(torch.cuda.get_device_capability())
    before = {m for m in DEPENDENCIES if m in sys.modules}
    try:
        hm = _humming()
    except PeerError as exc:
        report["humming_error"] = str(exc)
        return report
    import humming

    report["humming"] = hm["version"]
    report["humming_path"] = str(Path(humming.__file__).parent)
    report["imported_by_humming"] = sorted(m for m in DEPENDENCIES if m in sys.modules and m not in before)
    report["already_imported"] = sorted(before)
    try:
        from humming.jit.runtime import KernelRuntime

        report["compiler"] = KernelRuntime._get_compiler().__name__
    except Exception as exc:
        report["compiler_error"] = f"{type(exc).__name__}: {exc}"
    try:
        from humming.utils.cuda import find_all_cuda_paths

        report["cuda_toolkits"] = [
            {
                "path": env.get("path"),
                "version": f"{env.get('major')}.{env.get('minor')}",
                "source": env.get("source"),
                "nvcc": "nvcc" in env.get("binaries", {}),
            }
            for env in find_all_cuda_paths()
        ]
    except Exception as exc:
        report["cuda_toolkits_error"] = f"{type(exc).__name__}: {exc}"
    return report


if __name__ == "__main__":
    # run as a script, its own folder would shadow the humming package
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    print(json.dumps(environment_report(), indent=2))
