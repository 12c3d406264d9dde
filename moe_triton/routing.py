"""The routing launches (a call's first one or two): topk_ids into aiter-compatible routing blocks, a1
written and the output zeroed in the same launches (docs/triton.md, "The kernels")."""

from typing import NamedTuple

import torch
import triton

from buffers import get_buffer
from moe_triton import plan, target
from moe_triton.kernels.decode import moe_prep_kernel, moe_route_prep_kernel
from moe_triton.kernels.native import moe_native_prep_kernel, moe_native_route_kernel
from moe_triton.kernels.routing import moe_route_kernel, moe_route_slots_kernel
from moe_triton.tiles import QUANT_BLOCKS

# Slots per step of the route loop, measured on the H200 (2026-11-30, bench/notes/decode-path-1-4.md, "a separate
# route launch").
ROUTE_CHUNK = 4096
# Slots per step where one routing program counts all of topk_ids (route_launches 1), or a moe_route_slots_kernel
# program the slots of its chunk before its own: 4096 (ROUTE_CHUNK) spilled 33 SGPRs into a 512-bin histogram on
# gfx950 (E-257 bs-512, triton 3.9). The decode path's one launch also places its expert's slots in steps of this
# size: at 4096 its sm_90 kernel took 124-173 registers a thread at the bs-512 shapes, which its a1 programs share;
# at 1024 32-64 (triton 3.6, 3.9).
COUNT_CHUNK = 1024
# Launch 2 of two places the slots by chunks of slots (moe_route_slots_kernel) from SLOTS_ROUTE_FROM slots on, else by
# experts (moe_route_kernel): on an H100 a call with 4,608 slots (512 tokens) took 0-4.0 us less by slots, with 144
# (16 tokens) 0.5-1.9 us more, with 1,152 0.2-1.5 more (2026-12-06, bench/results/h100/route-slots-2026-12-06.md).
SLOTS_ROUTE_FROM = 2048
# "slots" or "experts" forces that placement at every size; "" follows SLOTS_ROUTE_FROM.
ROUTE_BY = ""
# Slots and warps of a moe_route_slots_kernel program: 128 slots spilled SGPRs on gfx950 (4 or 8 warps, triton 3.9),
# 64 and 4 warps came within 7 SGPRs of spilling; 64 and 8 take 38-66 SGPRs there and 32-64 registers on sm_90
# (triton 3.6, 3.9, the official shapes).
ROUTE_SLOTS = 64
ROUTE_WARPS = 8


class Routing(NamedTuple):
    """aiter's moe_sorting layout: each block's slots, its expert, and [valid slots, tokens]."""

    sorted_ids: torch.Tensor
    sorted_expert_ids: torch.Tensor
    num_valid_ids: torch.Tensor


def routing_capacity(n_slots: int, n_experts: int, block_m: int) -> int:
    """Blocks that the padded routing can take at most: every expert that is hit pads < block_m."""
    return triton.cdiv(n_slots + min(n_experts, n_slots) * (block_m - 1), block_m)


def routing_buffers(n_slots: int, n_experts: int, block_m: int, device: torch.device) -> Routing:
    """The routing arrays from the buffers pool, sized for routing_capacity."""
    n_blocks = routing_capacity(n_slots, n_experts, block_m)
    return Routing(
        get_buffer("sorted_ids", (n_blocks * block_m,), torch.int32, device),
        get_buffer("sorted_expert_ids", (n_blocks,), torch.int32, device),
        get_buffer("num_valid_ids", (2,), torch.int32, device),
    )


def mxfp4_buffers(name: str, rows: int, cols: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The native path's MXFP4 a1 or a2 from the pool: fp4 bytes [rows, cols/2], e8m0 bytes [rows, cols/32]."""
    return (
        get_buffer(f"{name}_fp4", (rows, cols // 2), torch.uint8, device),
        get_buffer(f"{name}_scale", (rows, cols // 32), torch.uint8, device),
    )


def route_decode(
    hidden_states: torch.Tensor,
    topk_ids: torch.Tensor,
    n_experts: int,
    block_m: int,
    out: torch.Tensor,
    a2_ready: torch.Tensor,
    launches: int = 2,
    quant_blocks: int = QUANT_BLOCKS,
    slot_span: int = 32,
) -> tuple[Routing, torch.Tensor]:
    """The decode path's routing for blocks of block_m rows in `launches` (1 or 2) launches, `out` and `a2_ready`
    (int32, the overlap's counts of a2 columns per routing block) zeroed, and a1: the hidden states in a bf16 buffer
    in k_slot column order of slot_span, quant_blocks 32-element blocks a quantizing program."""
    n_tokens, d_hidden = hidden_states.shape
    device = hidden_states.device
    n_slots = topk_ids.numel()
    routing = routing_buffers(n_slots, n_experts, block_m, device)
    a1 = get_buffer("a1", (n_tokens, d_hidden), torch.bfloat16, device)
    fast = target.fast_decode(device)
    pdl = target.pdl_options(fast)
    options = dict(QUANT_BLOCKS=quant_blocks, SLOT_SPAN=slot_span, FAST=fast, **pdl)
    if launches == 1:
        plan.launch(
            moe_route_prep_kernel,
            (n_experts + _quant_programs(out, quant_blocks),),
            topk_ids,
            hidden_states,
            a1,
            out,
            *routing,
            n_tokens,
            n_experts,
            n_slots,
            d_hidden,
            a2_ready,
            a2_ready.numel(),
            **_whole_histogram(topk_ids, n_experts, block_m, COUNT_CHUNK),
            **options,
        )
        return routing, a1
    chunk_counts = _histograms(
        moe_prep_kernel,
        topk_ids,
        n_experts,
        (hidden_states, a1),
        out,
        a2_ready_ptr=a2_ready,
        n_ready=a2_ready.numel(),
        **options,
    )
    _launch_route(topk_ids, chunk_counts, routing, n_experts, block_m, pdl)
    return routing, a1


def route_native(
    hidden_states: torch.Tensor,
    topk_ids: torch.Tensor,
    n_experts: int,
    block_m: int,
    out: torch.Tensor,
    a1: tuple[torch.Tensor, torch.Tensor] | None = None,
    launches: int = 2,
    quant_blocks: int = QUANT_BLOCKS,
    hidden_bits: torch.Tensor | None = None,
) -> Routing:
    """The native path's routing in `launches` (1 or 2) launches, `out` zeroed, and with a1
    (mxfp4_buffers) the hidden states quantized into it; hidden_bits: their int32 view (a plan's)."""
    n_tokens, d_hidden = hidden_states.shape
    n_slots = topk_ids.numel()
    routing = routing_buffers(n_slots, n_experts, block_m, hidden_states.device)
    bits = hidden_states.view(torch.int32) if hidden_bits is None else hidden_bits
    # Without a1 its pointers are the hidden states' (never written: QUANT is off).
    activations = (bits, *(a1 or (hidden_states, hidden_states)))
    quant = dict(QUANT_BLOCKS=quant_blocks, QUANT=a1 is not None, GFX950=target.gfx950_converts())
    if launches == 1:
        plan.launch(
            moe_native_route_kernel,
            (n_experts + _quant_programs(out, quant_blocks),),
            topk_ids,
            *activations,
            out,
            *routing,
            n_tokens,
            n_experts,
            n_slots,
            d_hidden,
            **_whole_histogram(topk_ids, n_experts, block_m),
            **quant,
        )
        return routing
    chunk_counts = _histograms(moe_native_prep_kernel, topk_ids, n_experts, activations, out, **quant)
    _launch_route(topk_ids, chunk_counts, routing, n_experts, block_m, target.pdl_options(False))
    return routing


def _quant_programs(out: torch.Tensor, quant_blocks: int) -> int:
    """Programs that quantize the hidden states (and zero `out`, of their shape), quant_blocks 32-blocks each."""
    return triton.cdiv(out.numel() // 32, quant_blocks)


def _histograms(kernel, topk_ids, n_experts: int, activations: tuple, out, **options) -> torch.Tensor:
    """Launch 1 of two: the experts' histogram per chunk of slots, a1 written, `out` zeroed."""
    n_tokens, d_hidden = out.shape
    n_slots = topk_ids.numel()
    hist_chunk = _hist_chunk(n_slots)
    n_chunks = triton.cdiv(n_slots, hist_chunk)
    expert_bins = triton.next_power_of_2(n_experts + 1)
    chunk_counts = get_buffer("chunk_counts", (n_chunks, expert_bins), torch.int32, out.device)
    plan.launch(
        kernel,
        (n_chunks + _quant_programs(out, options["QUANT_BLOCKS"]),),
        topk_ids,
        *activations,
        out,
        chunk_counts,
        n_tokens,
        n_slots,
        n_chunks,
        d_hidden,
        EXPERT_BINS=expert_bins,
        HIST_CHUNK=hist_chunk,
        **options,
    )
    return chunk_counts


def _hist_chunk(n_slots: int) -> int:
    """Slots per chunk of launch 1's histograms: at most 8 chunks, so that each route program sums their counts in
    one load; a power of two, 1024 or more unless topk_ids is shorter."""
    return min(triton.next_power_of_2(n_slots), max(1024, triton.next_power_of_2(triton.cdiv(n_slots, 8))))


def _placement(topk_ids: torch.Tensor, n_experts: int, block_m: int, slot_chunk: int = ROUTE_CHUNK) -> dict:
    """The constexprs of a launch that places each expert's slots into the routing arrays, slot_chunk slots a step."""
    n_tokens, topk = topk_ids.shape
    n_slots = n_tokens * topk
    return dict(
        TOPK=topk,
        BLOCK_M=block_m,
        EXPERT_BINS=triton.next_power_of_2(n_experts + 1),
        SLOT_CHUNK=min(slot_chunk, triton.next_power_of_2(n_slots)),
        MAX_EXPERT_BLOCKS=triton.next_power_of_2(triton.cdiv(n_slots, block_m)),
    )


def _whole_histogram(topk_ids: torch.Tensor, n_experts: int, block_m: int, slot_chunk: int = ROUTE_CHUNK) -> dict:
    """The constexprs of a one-launch routing (route_whole_histogram): each expert's program counts all of topk_ids,
    COUNT_CHUNK slots a step, then places its slots, slot_chunk a step."""
    return dict(
        COUNT_CHUNK=min(COUNT_CHUNK, triton.next_power_of_2(topk_ids.numel())),
        **_placement(topk_ids, n_experts, block_m, slot_chunk),
    )


def route_by(n_slots: int) -> str:
    """How launch 2 places n_slots slots: "slots" or "experts" (ROUTE_BY, else by SLOTS_ROUTE_FROM)."""
    if ROUTE_BY not in ("", "slots", "experts"):
        raise ValueError(f"ROUTE_BY must be '', 'slots' or 'experts', not {ROUTE_BY!r}")
    return ROUTE_BY or ("slots" if n_slots >= SLOTS_ROUTE_FROM else "experts")


def _launch_route(topk_ids, chunk_counts, routing: Routing, n_experts: int, block_m: int, pdl: dict) -> None:
    """Launch 2 of two: the slots placed from the histograms, by slot chunks or by experts (route_by)."""
    n_chunks = chunk_counts.shape[0]
    n_slots = topk_ids.numel()
    args = (topk_ids, chunk_counts, *routing, topk_ids.shape[0], n_experts, n_slots, n_chunks)
    if route_by(n_slots) == "experts":
        placement = _placement(topk_ids, n_experts, block_m)
        plan.launch(
            moe_route_kernel, (n_experts,), *args, MAX_CHUNKS=triton.next_power_of_2(n_chunks), **placement, **pdl
        )
        return
    hist_chunk = _hist_chunk(n_slots)
    route_slots = min(ROUTE_SLOTS, hist_chunk)
    plan.launch(
        moe_route_slots_kernel,
        (triton.cdiv(n_slots, route_slots),),
        *args,
        TOPK=topk_ids.shape[1],
        BLOCK_M=block_m,
        EXPERT_BINS=triton.next_power_of_2(n_experts + 1),
        MAX_CHUNKS=triton.next_power_of_2(n_chunks),
        HIST_CHUNK=hist_chunk,
        ROUTE_SLOTS=route_slots,
        COUNT_CHUNK=min(COUNT_CHUNK, hist_chunk),
        num_warps=ROUTE_WARPS,
        **pdl,
    )
