"""Launcher of the Triton backend: routing, stage 1 and stage 2 in four launches (six with a tail
tile), no host sync.

Three paths: the decode path (kernels/decode.py: fp4 weights decoded to bf16 in registers, bf16
MMAs; the NVIDIA one), the fp8 path (kernels/fp8.py: e4m3 MMAs on operands with the scales
folded in, NVIDIA; run for an Fp8TileConfig) and the native path (kernels/native.py:
tl.dot_scaled on packed MXFP4 operands, gfx950's scaled MFMAs), chosen automatically on a gfx950
device and selectable anywhere (`native=True`, or MOE_TRITON_NATIVE=1 / 0), where Triton
emulates dot_scaled.

Scratch (routing arrays; the activations of both GEMMs, bf16 on the decode path, fp4 bytes and
e8m0 scales on the native path) comes from the buffers pool; the output is a new tensor every
call. Under Triton's CPU interpreter, which has no bf16 atomics,
stage 2 accumulates into an fp32 tensor that is rounded to bf16 at the end; on a GPU it adds
bf16 atomically into the output, as the runner's aiter kernel does.
"""

import functools
import inspect
import os
from collections import OrderedDict

import torch
import triton
from triton.compiler import CompiledKernel
from triton.runtime import driver
from triton.runtime.errors import OutOfResources

from buffers import get_buffer
from moe_triton.env import native_forced
from moe_triton.kernels.decode import moe_prep_kernel, moe_stage1_kernel, moe_stage2_kernel
from moe_triton.kernels.fp8 import moe_fp8_prep_kernel, moe_fp8_stage1_kernel, moe_fp8_stage2_kernel
from moe_triton.kernels.native import (
    moe_native_prep_kernel,
    moe_native_reduce_kernel,
    moe_native_route_kernel,
    moe_native_stage1_kernel,
    moe_native_stage2_kernel,
)
from moe_triton.kernels.routing import moe_route_kernel
from moe_triton.tiles import Fp8TileConfig, NativeTileConfig, TileConfig
from moe_triton.tiles_amd import native_tile_config
from moe_triton.tiles_nvidia import static_tiles

# Measured on the H200 (bench/NOTES.md, fourth version): 32-blocks per quantization program
# (16: 2-12 us for the prep kernel, 32 and more: 3-50 us) and slots per step of the route loop.
QUANT_BLOCKS = 16
ROUTE_CHUNK = 4096
# Slots per step where one routing program counts all of topk_ids (route_launches 1): 4096
# (ROUTE_CHUNK) spilled 33 SGPRs into a 512-bin histogram on gfx950 (E-257 bs-512, triton 3.9).
COUNT_CHUNK = 1024
# The native stage 1 that routes its own block (route_launches 0): compares per step of its rank
# match (block_m rows x this / block_m slots: 256 slots per step spilled SGPRs at 32-row blocks on
# gfx950, 128 did not) and output elements zeroed per step.
OWN_ROUTE_COMPARES = 4096
ZERO_BLOCK = 1024
# stage2_store "slots": output columns per program of the launch that sums each token's slot rows.
REDUCE_BLOCK = 2048


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def fast_decode(device: torch.device) -> bool:
    """The weight decode's PTX path (one bf16x2 multiply per code pair, activations carrying
    2^FAST_EXP) on NVIDIA GPUs; the portable, exact fp32 path everywhere else (ROCm, the
    interpreter)."""
    return device.type == "cuda" and torch.version.hip is None and not interpreting()


@functools.cache
def _is_gfx950(index: int) -> bool:
    return torch.cuda.get_device_properties(index).gcnArchName.startswith("gfx950")


def native_default(device: torch.device) -> bool:
    """The native path where the hardware has scaled MXFP4 MFMAs (a gfx950 device), unless
    MOE_TRITON_NATIVE says otherwise (1: always, 0: never)."""
    forced = native_forced()
    if forced is not None:
        return forced
    is_rocm = device.type == "cuda" and torch.version.hip is not None
    return is_rocm and _is_gfx950(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _targets_amd(driver) -> bool:
    """Whether a Triton driver compiles for AMD GPUs; asked once per driver object, since the
    query reads the device's properties (a HIP call) and this runs on every layer call."""
    return driver.get_current_target().backend == "hip"


@functools.cache
def _targets_gfx950(driver) -> bool:
    target = driver.get_current_target()
    return target.backend == "hip" and str(target.arch).startswith("gfx950")


def gfx950_converts() -> bool:
    """Whether the native kernels compile for gfx950 (a ROCm MI355X, or the compile-only gfx950
    driver of bench/gfx950/run.py), where they encode MXFP4 with its fp4 convert instruction
    (mxfp4/convert.py); elsewhere (NVIDIA GPUs, other AMD GPUs, the interpreter) they run its
    emulation."""
    return not interpreting() and _targets_gfx950(triton.runtime.driver.active)


def silu_judge() -> str:
    """Whose silu the kernels that compute h reproduce bit for bit (moe_triton/kernels/silu.py,
    docs/numerics.md): "ck" where Triton compiles for AMD GPUs (the MI355X's judge is aiter's CK
    stage 1), "torch" elsewhere (reference.py on NVIDIA GPUs and under the CPU interpreter)."""
    return "ck" if not interpreting() and _targets_amd(triton.runtime.driver.active) else "torch"


def silu_options() -> dict:
    """The launch arguments of a kernel that computes h: its judge and, for aiter's CK (AMD), no FP
    fusion (moe_triton/kernels/silu.py says why)."""
    judge = silu_judge()
    return {"JUDGE": judge, **({"enable_fp_fusion": False} if judge == "ck" else {})}


def amd_options(nonkdim: int, waves_per_eu: int) -> dict:
    """The AMD backend's launch options, where the active Triton driver is AMD's (a ROCm GPU, or
    the compile-only gfx950 driver of bench/gfx950/run.py); none elsewhere."""
    if interpreting() or not _targets_amd(triton.runtime.driver.active):
        return {}
    return {"matrix_instr_nonkdim": nonkdim, "waves_per_eu": waves_per_eu}


# Programmatic dependent launch on the NVIDIA path. bench/tune/tiles.py turns it off while it
# times kernels one by one: with it, a kernel's time includes its wait for the previous one.
PDL = True


def pdl_options(fast: bool) -> dict:
    """The kernel argument that compiles the wait for the previous kernel into every kernel
    (moe_triton.kernels.routing._after_previous_launch) and the launch option, where PDL applies."""
    return {"PDL": True, "launch_pdl": True} if fast and PDL else {"PDL": False}


def register_cap(fast: bool, max_regs: int) -> dict:
    """The launch option that caps a kernel's registers per thread (ptxas .maxnreg), on the
    NVIDIA path and where the tiles set one (0: the compiler's choice)."""
    return {"maxnreg": max_regs} if fast and max_regs else {}


def routing_capacity(n_slots: int, n_experts: int, block_m: int) -> int:
    """Blocks that the padded routing can take at most: every expert that is hit pads < block_m."""
    return triton.cdiv(n_slots + min(n_experts, n_slots) * (block_m - 1), block_m)


# ---------------------------------------------------------------- the decode path's per-shape plans
#
# The decode path's first call of a shape runs the launches as written (buffers from the pool,
# grids, constexprs); _launch records each one into a _DecodePlan, which later calls of the shape
# replay with their own tensors: no tile lookup, buffer lookups or argument building per call. On
# the NVIDIA path the replay launches the CompiledKernel that the first call's JIT launch returned,
# through its launcher, as JITFunction.run itself ends (triton 3.6 to 3.9): the same kernel, grid,
# stream and arguments, without re-binding and re-specialising the arguments. It falls back to the
# JIT launch while a launch hook is registered (a profiler), for an input not 16-byte aligned
# (the pointers were specialised aligned), and for good if a plan's first direct launch raises.

MAX_PLANS = 16  # shapes whose plans are kept (least recently used dropped first)
# Direct launches on the NVIDIA path; MOE_TRITON_DIRECT=0 keeps the JIT launches (to compare).
DIRECT_LAUNCH = os.environ.get("MOE_TRITON_DIRECT", "1") != "0"
_plans: "OrderedDict[tuple, _DecodePlan]" = OrderedDict()
_recording: "list | None" = None  # the launches of the plan being built, while a first call runs


def _launch(fn, grid: tuple, *args, **kwargs) -> None:
    """fn[grid](*args, **kwargs), recorded into the plan being built, if any. A tile that asks the
    GPU for more than it has (shared memory, registers) is a ValueError naming the kernel."""
    try:
        compiled = fn[grid](*args, **kwargs)
    except OutOfResources as exc:
        raise ValueError(
            f"tiles: {fn.__name__} needs {exc.name} {exc.required:,} and this GPU has {exc.limit:,}; "
            "choose smaller block or stage fields"
        ) from None
    if _recording is not None:
        _recording.append((fn, grid, args, kwargs, compiled))


def _hooks_idle() -> bool:
    """No launch hook registered: the launcher may be called without launch metadata."""
    runtime = triton.knobs.runtime
    hooks = (runtime.launch_enter_hook, runtime.launch_exit_hook)  # HookChains (3.6+) or None
    return all(h is None or not getattr(h, "calls", True) for h in hooks)


class _Launch:
    """One recorded launch: its JIT arguments with the call's tensors marked by position
    (`slots`), and, for direct launches, every kernel parameter in signature order."""

    __slots__ = ("fn", "grid", "args", "kwargs", "slots", "params", "param_slots", "compiled")

    def __init__(self, fn, grid: tuple, args: tuple, kwargs: dict, compiled, call_tensors: tuple):
        where = {id(t): i for i, t in enumerate(call_tensors)}
        self.fn, self.grid = fn, tuple(grid) + (1,) * (3 - len(grid))
        self.args, self.kwargs = list(args), kwargs
        self.slots = [(k, where[id(a)]) for k, a in enumerate(args) if id(a) in where]
        signature = inspect.signature(fn.fn)
        bound = signature.bind(*args, **{k: v for k, v in kwargs.items() if k in signature.parameters})
        bound.apply_defaults()
        self.params = list(bound.arguments.values())
        self.param_slots = [(k, where[id(a)]) for k, a in enumerate(self.params) if id(a) in where]
        self.compiled = compiled if isinstance(compiled, CompiledKernel) else None

    def jit(self, tensors: tuple) -> None:
        args = self.args.copy()
        for k, i in self.slots:
            args[k] = tensors[i]
        self.fn[self.grid](*args, **self.kwargs)

    def direct(self, tensors: tuple, stream) -> None:
        params = self.params.copy()
        for k, i in self.param_slots:
            params[k] = tensors[i]
        c = self.compiled
        c.run(*self.grid, stream, c.function, c.packed_metadata, None, None, None, *params)


class _DecodePlan:
    """The recorded launches of one shape (tiles, grids, constexprs, scratch buffers held)."""

    def __init__(
        self, launches: list[_Launch], out_shape: tuple, acc_dtype: torch.dtype, direct: bool, bits: bool = False
    ):
        self.launches, self.out_shape, self.acc_dtype = launches, out_shape, acc_dtype
        self.bits = bits  # the launches take the hidden states as int32 pairs too (the native path)
        self.direct = direct and all(launch.compiled is not None for launch in launches)
        self.tried = False  # a direct replay has gone through once
        self.first_out: torch.Tensor | None = None

    def run(self, hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids) -> torch.Tensor:
        out = torch.empty(self.out_shape, dtype=self.acc_dtype, device=hidden_states.device)
        raw = (hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids)
        if self.direct and _hooks_idle() and all(t.data_ptr() % 16 == 0 for t in raw):
            stream = driver.active.get_current_stream(driver.active.get_current_device())
            # A direct launch passes pointers: the hidden states stand for their int32 view.
            tensors = (*raw, out, hidden_states) if self.bits else (*raw, out)
            try:
                for launch in self.launches:
                    launch.direct(tensors, stream)
                self.tried = True
                return out
            except Exception:
                if self.tried:
                    raise
                self.direct = False  # the launcher is not called as this Triton expects: JIT launches
        tensors = (hidden_states, *(t.view(torch.uint8) for t in (w1, w2, w1_scale, w2_scale)), topk_weights, topk_ids)
        tensors += (out, hidden_states.view(torch.int32)) if self.bits else (out,)
        for launch in self.launches:
            launch.jit(tensors)
        return out


def routing_buffers(n_slots: int, n_experts: int, block_m: int, device: torch.device) -> tuple:
    """The routing arrays from the buffers pool: sorted_ids, sorted_expert_ids, num_valid_ids."""
    n_blocks = routing_capacity(n_slots, n_experts, block_m)
    return (
        get_buffer("sorted_ids", (n_blocks * block_m,), torch.int32, device),
        get_buffer("sorted_expert_ids", (n_blocks,), torch.int32, device),
        get_buffer("num_valid_ids", (2,), torch.int32, device),
    )


def route_and_quantize(
    hidden_states: torch.Tensor,
    topk_ids: torch.Tensor,
    n_experts: int,
    block_m: int,
    out: torch.Tensor,
    native: bool = False,
    quantize: bool = True,
    launches: int = 2,
    zero: bool = True,
    quant_blocks: int = QUANT_BLOCKS,
    hidden_bits: torch.Tensor | None = None,
):
    """Launches 1 and 2: the aiter-compatible routing of topk_ids for routing blocks of block_m
    rows (sorted_ids, sorted_expert_ids, num_valid_ids), the activations a1 (hidden_states
    quantized), and `out` zeroed. Returns (sorted_ids, sorted_expert_ids, num_valid_ids, a1), all
    from the buffers pool; a1 is the decode path's bf16 buffer (in _k_slot column order), or with
    native the pair (fp4 bytes [M, H/2], e8m0 bytes [M, H/32]). The native path's variants:
    quantize=False writes no a1 (None; stage 1 quantizes), launches=1 does it all in one launch
    (moe_native_route_kernel), zero=False leaves `out` as it is (stage 2 writes no atomics),
    quant_blocks sets the 32-blocks per quantizing program (NativeTileConfig.quant_blocks);
    hidden_bits is hidden_states viewed as int32 pairs (the native launches' view of it; made here if
    None, given by a caller whose launches are recorded into a plan)."""
    n_tokens, d_hidden = hidden_states.shape
    topk = topk_ids.shape[1]
    n_slots = n_tokens * topk
    device = hidden_states.device
    sorted_ids, sorted_expert_ids, num_valid_ids = routing_buffers(n_slots, n_experts, block_m, device)
    hist_chunk, n_chunks = histogram_chunks(n_slots)
    expert_bins = triton.next_power_of_2(n_experts + 1)
    chunk_counts = get_buffer("chunk_counts", (n_chunks, expert_bins), torch.int32, device)
    quant_programs = triton.cdiv(n_tokens * d_hidden // 32, quant_blocks)
    fast = fast_decode(device) and not native
    pdl = pdl_options(fast)
    if native:
        a1 = (
            (
                get_buffer("a1_fp4", (n_tokens, d_hidden // 2), torch.uint8, device),
                get_buffer("a1_scale", (n_tokens, d_hidden // 32), torch.uint8, device),
            )
            if quantize
            else None
        )
        # Without a1 its pointers are the hidden states' (never written: QUANT is off).
        a1_ptrs = a1 or (hidden_states, hidden_states)
        bits = hidden_states.view(torch.int32) if hidden_bits is None else hidden_bits
        if launches == 1:
            _launch(
                moe_native_route_kernel,
                (n_experts + quant_programs,),
                topk_ids,
                bits,
                *a1_ptrs,
                out,
                sorted_ids,
                sorted_expert_ids,
                num_valid_ids,
                n_tokens,
                n_experts,
                n_slots,
                d_hidden,
                TOPK=topk,
                BLOCK_M=block_m,
                EXPERT_BINS=expert_bins,
                SLOT_CHUNK=min(ROUTE_CHUNK, triton.next_power_of_2(n_slots)),
                MAX_EXPERT_BLOCKS=triton.next_power_of_2(triton.cdiv(n_slots, block_m)),
                COUNT_CHUNK=min(COUNT_CHUNK, triton.next_power_of_2(n_slots)),
                QUANT_BLOCKS=quant_blocks,
                QUANT=quantize,
                ZERO=zero,
                GFX950=gfx950_converts(),
            )
            return sorted_ids, sorted_expert_ids, num_valid_ids, a1
        _launch(
            moe_native_prep_kernel,
            (n_chunks + quant_programs,),
            topk_ids,
            bits,
            *a1_ptrs,
            out,
            chunk_counts,
            n_tokens,
            n_slots,
            n_chunks,
            d_hidden,
            EXPERT_BINS=expert_bins,
            HIST_CHUNK=hist_chunk,
            QUANT_BLOCKS=quant_blocks,
            QUANT=quantize,
            ZERO=zero,
            GFX950=gfx950_converts(),
        )
    else:
        a1 = get_buffer("a1", (n_tokens, d_hidden), torch.bfloat16, device)
        _launch(
            moe_prep_kernel,
            (n_chunks + quant_programs,),
            topk_ids,
            hidden_states,
            a1,
            out,
            chunk_counts,
            n_tokens,
            n_slots,
            n_chunks,
            d_hidden,
            EXPERT_BINS=expert_bins,
            HIST_CHUNK=hist_chunk,
            QUANT_BLOCKS=quant_blocks,
            FAST=fast,
            **pdl,
        )
    launch_route(topk_ids, chunk_counts, (sorted_ids, sorted_expert_ids, num_valid_ids), n_experts, block_m, pdl)
    return sorted_ids, sorted_expert_ids, num_valid_ids, a1


def histogram_chunks(n_slots: int) -> tuple[int, int]:
    """(slots per histogram program, programs): a handful (at most 8), few enough for each route
    program to sum their counts in one load, large enough chunks for their histograms to be cheap."""
    hist_chunk = min(triton.next_power_of_2(n_slots), max(1024, triton.next_power_of_2(triton.cdiv(n_slots, 8))))
    return hist_chunk, triton.cdiv(n_slots, hist_chunk)


def launch_route(topk_ids, chunk_counts, routing: tuple, n_experts: int, block_m: int, pdl: dict) -> None:
    """Launch 2 of the decode and fp8 paths: moe_route_kernel places each expert's slots from the
    chunk histograms into the routing arrays (routing_buffers)."""
    n_tokens, topk = topk_ids.shape
    n_slots = n_tokens * topk
    n_chunks, expert_bins = chunk_counts.shape
    _launch(
        moe_route_kernel,
        (n_experts,),
        topk_ids,
        chunk_counts,
        *routing,
        n_tokens,
        n_experts,
        n_slots,
        n_chunks,
        TOPK=topk,
        BLOCK_M=block_m,
        EXPERT_BINS=expert_bins,
        MAX_CHUNKS=triton.next_power_of_2(n_chunks),
        SLOT_CHUNK=min(ROUTE_CHUNK, triton.next_power_of_2(n_slots)),
        MAX_EXPERT_BLOCKS=triton.next_power_of_2(triton.cdiv(n_slots, block_m)),
        **pdl,
    )


def fused_moe_triton(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    w1_scale: torch.Tensor,
    w2_scale: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    config: dict | None = None,
    tiles: TileConfig | Fp8TileConfig | NativeTileConfig | None = None,
    native: bool | None = None,
) -> torch.Tensor:
    """SPEC 1 on raw MXFP4 weights: w1 [E, 2I, H/2], w2 [E, H, I/2] (fp4x2 or uint8), scales
    2-D [E*2I, H/32] and [E*H, I/32]; returns [M, H] bf16. The caller validates the inputs against
    config (problem.validation.validate_inputs); the shapes are read from the tensors. native picks the
    path (None: native_default); tiles overrides that path's tile table (bench/tune/tiles.py). Off the
    native path, an Fp8TileConfig runs the fp8 path (_fp8_plan) and a TileConfig the decode
    path; without tiles, the static table (tiles_nvidia.static_tiles) picks."""
    if native is None:
        native = native_default(hidden_states.device)
    if native:
        return _fused_moe_native(hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids, tiles)
    inputs = (hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids)
    interpret = interpreting()
    key = (hidden_states.shape, w1.shape, topk_ids.shape, hidden_states.device, tiles, PDL, interpret)

    def build() -> "_DecodePlan":
        n_tokens, d_hidden = hidden_states.shape
        n_experts, two_inter, _ = w1.shape
        cfg = tiles or static_tiles(
            n_tokens, d_hidden, two_inter // 2, n_experts, topk_ids.shape[1], fast_decode(hidden_states.device)
        )
        return (_fp8_plan if isinstance(cfg, Fp8TileConfig) else _decode_plan)(*inputs, cfg)

    return planned_call(key, build, inputs, interpret)


def planned_call(key: tuple, build, inputs: tuple, interpret: bool) -> torch.Tensor:
    """A call through its shape's plan: build() makes it (and its output) at the key's first call,
    later calls replay it with their own inputs (hidden_states, w1, w2, w1_scale, w2_scale,
    topk_weights, topk_ids); the least recently used of more than MAX_PLANS plans is dropped. Under
    the interpreter (interpret) the fp32 output is returned as bf16."""
    plan = _plans.get(key)
    if plan is None:
        plan = build()
        _plans[key] = plan
        while len(_plans) > MAX_PLANS:
            _plans.popitem(last=False)
        out = plan.first_out
        plan.first_out = None
    else:
        _plans.move_to_end(key)
        out = plan.run(*inputs)
    return out if not interpret else out.to(torch.bfloat16)


def check_tail(cfg) -> None:
    if cfg.tail_m and not (16 <= cfg.tail_m < cfg.block_m and cfg.tail_m & (cfg.tail_m - 1) == 0):
        raise ValueError(
            f"tiles: tail_m {cfg.tail_m} must be 0 or a power of two from 16 to below block_m {cfg.block_m}"
        )


def record_plan(
    launch_all, hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids, native: bool = False
) -> "_DecodePlan":
    """A first call of a shape: launch_all(out, w1, w2, w1_scale, w2_scale) (the weights as bytes;
    native: and the hidden states as int32 pairs, the native launches' view) makes its launches
    through _launch, which records them into the shape's plan (plan.first_out holds this call's
    output). The decode, fp8 and native paths build their plans so; direct launches on NVIDIA GPUs
    (the decode and fp8 paths) and on any GPU (the native path)."""
    global _recording
    device = hidden_states.device
    acc_dtype = torch.float32 if interpreting() else torch.bfloat16
    out = torch.empty(hidden_states.shape, dtype=acc_dtype, device=device)
    weights = tuple(t.view(torch.uint8) for t in (w1, w2, w1_scale, w2_scale))
    bits = (hidden_states.view(torch.int32),) if native else ()
    call_tensors = (hidden_states, *weights, topk_weights, topk_ids, out, *bits)
    _recording = recorded = []
    try:
        launch_all(out, *weights, *bits)
    finally:
        _recording = None
    launches = [_Launch(*launch, call_tensors) for launch in recorded]
    gpu = device.type == "cuda" and not interpreting()
    direct = DIRECT_LAUNCH and (gpu if native else fast_decode(device))
    plan = _DecodePlan(launches, tuple(hidden_states.shape), acc_dtype, direct=direct, bits=native)
    plan.first_out = out
    return plan


def _decode_plan(hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids, cfg) -> "_DecodePlan":
    """The decode path's first call of a shape: its launches, recorded into its plan."""
    n_tokens, d_hidden = hidden_states.shape
    n_experts, two_inter, _ = w1.shape
    d_inter = two_inter // 2
    topk = topk_ids.shape[1]
    n_slots = n_tokens * topk
    check_tail(cfg)
    block_m = cfg.block_m
    n_blocks = routing_capacity(n_slots, n_experts, block_m)
    device = hidden_states.device
    fast, interpret = fast_decode(device), interpreting()
    pdl = pdl_options(fast)
    a2 = get_buffer("a2", (n_blocks * block_m, d_inter), torch.bfloat16, device)

    def launch_all(out, w1_bytes, w2_bytes, w1_scale_bytes, w2_scale_bytes):
        sorted_ids, sorted_expert_ids, num_valid_ids, a1 = route_and_quantize(
            hidden_states, topk_ids, n_experts, block_m, out
        )
        # One launch per stage, or two when the tiles name a tail: blocks with at most tail_m real
        # rows (an expert's last block, mostly) then run on tail_m-row tiles instead of block_m.
        row_tiles = (block_m, cfg.tail_m) if cfg.tail_m else (block_m,)
        for rows in row_tiles:
            _launch(
                moe_stage1_kernel,
                (n_blocks, triton.cdiv(d_inter, cfg.block_n1)),
                a1,
                w1_bytes,
                w1_scale_bytes,
                a2,
                sorted_ids,
                sorted_expert_ids,
                num_valid_ids,
                n_tokens,
                d_hidden,
                d_inter,
                BLOCK_M=block_m,
                ROWS=rows,
                TAIL_M=cfg.tail_m,
                BLOCK_N=cfg.block_n1,
                BLOCK_K=cfg.block_k1,
                FAST=fast,
                INTERPRET=interpret,
                **silu_options(),
                num_warps=cfg.warps1,
                num_stages=cfg.stages1,
                **pdl,
                **register_cap(fast, cfg.max_regs1),
            )
        for rows in row_tiles:
            _launch(
                moe_stage2_kernel,
                (n_blocks, triton.cdiv(triton.cdiv(d_hidden, cfg.block_n2), cfg.n_tiles2)),
                a2,
                w2_bytes,
                w2_scale_bytes,
                out,
                topk_weights,
                sorted_ids,
                sorted_expert_ids,
                num_valid_ids,
                n_tokens,
                d_hidden,
                d_inter,
                TOPK=topk,
                BLOCK_M=block_m,
                ROWS=rows,
                TAIL_M=cfg.tail_m,
                BLOCK_N=cfg.block_n2,
                BLOCK_K=cfg.block_k2,
                K_STEPS=triton.cdiv(d_inter, cfg.block_k2),
                N_TILES=cfg.n_tiles2,
                FAST=fast,
                INTERPRET=interpret,
                num_warps=cfg.warps2,
                num_stages=cfg.stages2,
                **pdl,
                **register_cap(fast, cfg.max_regs2),
            )

    return record_plan(launch_all, hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids)


# ---------------------------------------------------------------- the fp8 path (kernels/fp8.py)
#
# Both GEMMs on e4m3 MMAs with the MXFP4 scales folded into the operands (docs/triton.md, "The fp8
# path"); four launches (six with tail tiles), recorded into the shape's plan as the decode path's
# are. Scratch: a1 (e4m3 bytes [M, H]) with its bases [M] and its exact bf16 copy for rows outside
# the window; a2 as MXFP4 (fp4 bytes [rows, I/2], scales [rows, I/32]), or with decode_stage2 the
# decode path's bf16 a2, which its moe_stage2_kernel reads.


def check_fp8_tiles(cfg: Fp8TileConfig, d_inter: int) -> None:
    """The tiles the fp8 kernels can take, refused in one line naming the field."""
    check_tail(cfg)
    for name in ("block_k1", "block_k2"):
        if getattr(cfg, name) % 32 or getattr(cfg, name) < 32:
            raise ValueError(f"tiles: {name} {getattr(cfg, name)} must be a multiple of 32")
    if d_inter % cfg.block_k2:
        raise ValueError(f"tiles: block_k2 {cfg.block_k2} must divide d_inter {d_inter}")
    if cfg.acc_k and (
        cfg.acc_k % 32 or cfg.acc_k > min(cfg.block_k1, cfg.block_k1 if cfg.decode_stage2 else cfg.block_k2)
    ):
        raise ValueError(f"tiles: acc_k {cfg.acc_k} must be 0 or a multiple of 32 up to both block_k")


def _fp8_plan(hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids, cfg: Fp8TileConfig):
    """The fp8 path's first call of a shape: its launches, recorded into its plan."""
    if not isinstance(cfg, Fp8TileConfig):
        raise ValueError(f"tiles: the fp8 path takes an Fp8TileConfig, got {type(cfg).__name__}")
    n_tokens, d_hidden = hidden_states.shape
    n_experts, two_inter, _ = w1.shape
    d_inter = two_inter // 2
    topk = topk_ids.shape[1]
    n_slots = n_tokens * topk
    check_fp8_tiles(cfg, d_inter)
    block_m = cfg.block_m
    n_blocks = routing_capacity(n_slots, n_experts, block_m)
    device = hidden_states.device
    fast, interpret = fast_decode(device), interpreting()
    pdl = pdl_options(fast)
    hist_chunk, n_chunks = histogram_chunks(n_slots)
    expert_bins = triton.next_power_of_2(n_experts + 1)
    chunk_counts = get_buffer("chunk_counts", (n_chunks, expert_bins), torch.int32, device)
    routing = routing_buffers(n_slots, n_experts, block_m, device)
    rows_sorted = n_blocks * block_m
    a1 = get_buffer("fp8_a1", (n_tokens, d_hidden), torch.uint8, device)
    a1_base = get_buffer("fp8_a1_base", (n_tokens,), torch.int32, device)
    a1_exact = get_buffer("fp8_a1_exact", (n_tokens, d_hidden), torch.bfloat16, device)
    if cfg.decode_stage2:
        # The decode path's a2 (bf16); its stage-2 kernel never reads a scale tensor.
        a2 = a2_scale = get_buffer("a2", (rows_sorted, d_inter), torch.bfloat16, device)
    else:
        a2 = get_buffer("fp8_a2", (rows_sorted, d_inter // 2), torch.uint8, device)
        a2_scale = get_buffer("fp8_a2_scale", (rows_sorted, d_inter // 32), torch.uint8, device)
    kernel_options = dict(ACC_K=cfg.acc_k, FAST=fast, INTERPRET=interpret, **pdl)

    def launch_all(out, w1_bytes, w2_bytes, w1_scale_bytes, w2_scale_bytes):
        _launch(
            moe_fp8_prep_kernel,
            (n_chunks + n_tokens,),
            topk_ids,
            hidden_states,
            a1,
            a1_base,
            a1_exact,
            out,
            chunk_counts,
            n_tokens,
            n_slots,
            n_chunks,
            d_hidden,
            EXPERT_BINS=expert_bins,
            HIST_CHUNK=hist_chunk,
            ROW_BLOCKS=triton.next_power_of_2(d_hidden // 32),
            FAST=fast,
            num_warps=8 if d_hidden >= 4096 else 4,
            **pdl,
        )
        launch_route(topk_ids, chunk_counts, routing, n_experts, block_m, pdl)
        row_tiles = (block_m, cfg.tail_m) if cfg.tail_m else (block_m,)
        for rows in row_tiles:
            _launch(
                moe_fp8_stage1_kernel,
                (n_blocks, triton.cdiv(d_inter, cfg.block_n1)),
                a1,
                a1_base,
                a1_exact,
                w1_bytes,
                w1_scale_bytes,
                a2,
                a2_scale,
                *routing,
                n_tokens,
                d_hidden,
                d_inter,
                BLOCK_M=block_m,
                ROWS=rows,
                TAIL_M=cfg.tail_m,
                BLOCK_N=cfg.block_n1,
                BLOCK_K=cfg.block_k1,
                A2_BF16=cfg.decode_stage2,
                **silu_options(),
                num_warps=cfg.warps1,
                num_stages=cfg.stages1,
                **kernel_options,
                **register_cap(fast, cfg.max_regs1),
            )
        for rows in row_tiles:
            stage2 = (
                (moe_stage2_kernel, a2, w2_bytes)
                if cfg.decode_stage2
                else (moe_fp8_stage2_kernel, a2, a2_scale, w2_bytes)
            )
            options = dict(FAST=fast, INTERPRET=interpret, **pdl) if cfg.decode_stage2 else kernel_options
            _launch(
                stage2[0],
                (n_blocks, triton.cdiv(triton.cdiv(d_hidden, cfg.block_n2), cfg.n_tiles2)),
                *stage2[1:],
                w2_scale_bytes,
                out,
                topk_weights,
                *routing,
                n_tokens,
                d_hidden,
                d_inter,
                TOPK=topk,
                BLOCK_M=block_m,
                ROWS=rows,
                TAIL_M=cfg.tail_m,
                BLOCK_N=cfg.block_n2,
                BLOCK_K=cfg.block_k2,
                K_STEPS=d_inter // cfg.block_k2,
                N_TILES=cfg.n_tiles2,
                num_warps=cfg.warps2,
                num_stages=cfg.stages2,
                **options,
                **register_cap(fast, cfg.max_regs2),
            )

    return record_plan(launch_all, hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids)


def native_launches(cfg: NativeTileConfig) -> int:
    """Kernel launches of one native-path call under these tiles: the routing's, then stage 1
    and stage 2, and the slot rows' sum with stage2_store "slots"."""
    return cfg.route_launches + 2 + (cfg.stage2_store == "slots")


STAGE2_STORES = ("atomic", "slots")
STORE_CACHES = ("", ".wt", ".cs")


def _check_native_tiles(cfg, d_hidden: int, d_inter: int) -> None:
    if not isinstance(cfg, NativeTileConfig):
        raise ValueError(f"tiles: the native path takes a NativeTileConfig, got {type(cfg).__name__}")
    if cfg.route_launches not in (0, 1, 2):
        raise ValueError(f"tiles: route_launches must be 0, 1 or 2, got {cfg.route_launches}")
    if cfg.route_launches == 0 and not cfg.fused_quant:
        raise ValueError("tiles: route_launches 0 (stage 1 routes its own block) needs fused_quant")
    if type(cfg.split_k1) is not int or cfg.split_k1 < 1:
        raise ValueError(f"tiles: split_k1 must be an int >= 1, got {cfg.split_k1!r}")
    if cfg.stage2_store not in STAGE2_STORES:
        raise ValueError(f"tiles: stage2_store must be one of {', '.join(STAGE2_STORES)}, got {cfg.stage2_store!r}")
    if cfg.store_cache not in STORE_CACHES:
        raise ValueError(f"tiles: store_cache must be one of {STORE_CACHES}, got {cfg.store_cache!r}")
    if type(cfg.quant_blocks) is not int or cfg.quant_blocks < 1 or cfg.quant_blocks & (cfg.quant_blocks - 1):
        raise ValueError(f"tiles: quant_blocks must be a power of 2, got {cfg.quant_blocks!r}")
    if cfg.store_cache and cfg.stage2_store != "slots":
        raise ValueError("tiles: store_cache applies to the plain stores of stage2_store 'slots' only")
    if d_hidden % cfg.block_k1 or d_inter % cfg.block_k2:
        raise ValueError(
            f"tiles: block_k1 {cfg.block_k1} and block_k2 {cfg.block_k2} must divide d_hidden {d_hidden} "
            f"and d_inter {d_inter}"
        )


def _fused_moe_native(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    w1_scale: torch.Tensor,
    w2_scale: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    tiles: NativeTileConfig | None,
) -> torch.Tensor:
    """fused_moe_triton's native path: the routing and a1 (route_and_quantize; none with
    route_launches 0), then stage 1 and stage 2 on packed MXFP4 operands (moe_native_kernels),
    and with stage2_store "slots" the sum of each token's slot rows. Its launches are recorded
    into a plan at the first call of a shape and tiles and replayed after, as the decode path's
    are (direct launches on a GPU: half the JIT launches' host time per call, docs/gfx950.md)."""
    inputs = (hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids)
    interpret = interpreting()
    key = ("native", hidden_states.shape, w1.shape, topk_ids.shape, hidden_states.device, tiles, interpret)
    return planned_call(key, lambda: _native_plan(*inputs, tiles), inputs, interpret)


def _native_plan(hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids, tiles) -> "_DecodePlan":
    """The native path's first call of a shape and tiles: its checks, buffers and launches,
    recorded into its plan."""
    n_tokens, d_hidden = hidden_states.shape
    n_experts, two_inter, _ = w1.shape
    d_inter = two_inter // 2
    topk = topk_ids.shape[1]
    n_slots = n_tokens * topk
    cfg = tiles or native_tile_config(n_tokens, d_hidden, d_inter, n_experts, topk)
    _check_native_tiles(cfg, d_hidden, d_inter)
    block_m = cfg.block_m
    n_blocks = routing_capacity(n_slots, n_experts, block_m)
    column_tiles = triton.cdiv(d_inter, cfg.block_n1)
    slots = cfg.stage2_store == "slots"
    split_tiles = n_blocks * column_tiles if cfg.split_k1 > 1 else 0
    partial_elements = split_tiles * cfg.split_k1 * 2 * cfg.block_n1 * block_m
    # The native kernels address within an expert, a1, a2, the output, the slot rows and the
    # split-K partials with 32-bit offsets.
    largest = max(
        (n_slots if slots else n_tokens) * d_hidden,
        n_blocks * block_m * d_inter // 2,
        2 * d_inter * d_hidden // 2,
        partial_elements,
    )
    if largest >= 2**31:
        raise ValueError(f"hidden_states: {n_tokens} tokens of this shape exceed the native path's 32-bit offsets")
    device = hidden_states.device
    a2 = get_buffer("a2_fp4", (n_blocks * block_m, d_inter // 2), torch.uint8, device)
    a2_scale = get_buffer("a2_scale", (n_blocks * block_m, d_inter // 32), torch.uint8, device)
    acc_dtype = torch.float32 if interpreting() else torch.bfloat16
    # stage2_store "slots": stage 2 stores into one row per slot, the last launch sums them into
    # out (every element written, so nothing is zeroed).
    slot_rows = get_buffer("slot_rows", (n_slots, d_hidden), acc_dtype, device) if slots else None
    if split_tiles:
        partials = get_buffer("split_partials", (partial_elements,), torch.float32, device)
        arrivals = get_buffer("split_arrivals", (split_tiles,), torch.int32, device, kept_zero=True)
    amd = amd_options(cfg.nonkdim, cfg.waves_per_eu)
    own_route = cfg.route_launches == 0

    def launch_all(out, w1_bytes, w2_bytes, w1_scale_bytes, w2_scale_bytes, hidden_bits):
        stage2_out = slot_rows if slots else out
        if own_route:  # stage 1 routes its own block into these
            sorted_ids, sorted_expert_ids, num_valid_ids = routing_buffers(n_slots, n_experts, block_m, device)
            a1 = None
        else:
            sorted_ids, sorted_expert_ids, num_valid_ids, a1 = route_and_quantize(
                hidden_states,
                topk_ids,
                n_experts,
                block_m,
                out,
                native=True,
                quantize=not cfg.fused_quant,
                launches=cfg.route_launches,
                zero=not slots,
                quant_blocks=cfg.quant_blocks,
                hidden_bits=hidden_bits,
            )
        # Unused without split-K: any pointers.
        split_bufs = (partials, arrivals) if split_tiles else (a2_scale, num_valid_ids)
        # With fused_quant stage 1 reads the hidden states' bf16 bits as int32 pairs (and no scales).
        _launch(
            moe_native_stage1_kernel,
            (n_blocks, column_tiles * cfg.split_k1),
            *(a1 or (hidden_bits, hidden_bits)),
            w1_bytes,
            w1_scale_bytes,
            a2,
            a2_scale,
            sorted_ids,
            sorted_expert_ids,
            num_valid_ids,
            topk_ids,
            out,
            n_tokens,
            n_experts,
            n_slots,
            d_hidden,
            d_inter,
            *split_bufs,
            TOPK=topk,
            BLOCK_M=block_m,
            BLOCK_N=cfg.block_n1,
            BLOCK_K=cfg.block_k1,
            XCDS=cfg.xcds,
            W_CACHE=cfg.weight_cache,
            QUANT_A=cfg.fused_quant,
            ROUTE=own_route,
            ZERO=not slots,
            SPLIT_K=cfg.split_k1,
            # Only a stage 1 that routes itself reads these: 1 otherwise, so that shapes of one hidden
            # size share its kernels (one compile per tile).
            EXPERT_BINS=triton.next_power_of_2(n_experts + 1) if own_route else 1,
            SLOT_CHUNK=min(OWN_ROUTE_COMPARES // block_m, triton.next_power_of_2(n_slots)) if own_route else 1,
            ZERO_BLOCK=ZERO_BLOCK,
            GFX950=gfx950_converts(),
            AMD=bool(amd),
            **silu_options(),
            INTERPRET=interpreting(),
            num_warps=cfg.warps1,
            num_stages=cfg.stages1,
            **amd,
        )
        _launch(
            moe_native_stage2_kernel,
            (n_blocks, triton.cdiv(triton.cdiv(d_hidden, cfg.block_n2), cfg.n_tiles2)),
            a2,
            a2_scale,
            w2_bytes,
            w2_scale_bytes,
            stage2_out,
            topk_weights,
            sorted_ids,
            sorted_expert_ids,
            num_valid_ids,
            n_tokens,
            d_hidden,
            d_inter,
            TOPK=topk,
            BLOCK_M=block_m,
            BLOCK_N=cfg.block_n2,
            BLOCK_K=cfg.block_k2,
            K_STEPS=triton.cdiv(d_inter, cfg.block_k2),
            N_TILES=cfg.n_tiles2,
            EVEN_N=d_hidden % cfg.block_n2 == 0,
            XCDS=cfg.xcds,
            W_CACHE=cfg.weight_cache,
            SLOTS=slots,
            STORE_CACHE=cfg.store_cache,
            num_warps=cfg.warps2,
            num_stages=cfg.stages2,
            **amd,
        )
        if slots:
            _launch(
                moe_native_reduce_kernel,
                (n_tokens, triton.cdiv(d_hidden, REDUCE_BLOCK)),
                stage2_out,
                topk_ids,
                out,
                d_hidden,
                TOPK=topk,
                TOPK_BINS=triton.next_power_of_2(topk),
                BLOCK=REDUCE_BLOCK,
                STORE_CACHE=cfg.store_cache,
            )

    return record_plan(launch_all, hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids, native=True)
