"""The routing launches of the Triton backend (launches 1 and 2 of a call): the aiter-compatible
routing of topk_ids into routing blocks (kernels/routing.py, and the native path's own routing
kernels in kernels/native.py), the activations a1 quantized in the same launch, and the routing
arrays' sizes and buffers, which every path's stage 1 and stage 2 read.
"""

import torch
import triton

from buffers import get_buffer
from moe_triton import plan, target
from moe_triton.kernels.decode import moe_prep_kernel
from moe_triton.kernels.native import moe_native_prep_kernel, moe_native_route_kernel
from moe_triton.kernels.routing import moe_route_kernel

# Measured on the H200 (2026-11-30, bench/notes/decode-path-1-4.md, "a separate route launch"): 32-blocks
# per quantization program (16: 2-12 us for the prep kernel, 32 and more: 3-50 us) and slots per step of
# the route loop.
QUANT_BLOCKS = 16
ROUTE_CHUNK = 4096
# Slots per step where one routing program counts all of topk_ids (route_launches 1): 4096
# (ROUTE_CHUNK) spilled 33 SGPRs into a 512-bin histogram on gfx950 (E-257 bs-512, triton 3.9).
COUNT_CHUNK = 1024


def routing_capacity(n_slots: int, n_experts: int, block_m: int) -> int:
    """Blocks that the padded routing can take at most: every expert that is hit pads < block_m."""
    return triton.cdiv(n_slots + min(n_experts, n_slots) * (block_m - 1), block_m)


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
    quant_blocks: int = QUANT_BLOCKS,
    hidden_bits: torch.Tensor | None = None,
):
    """Launches 1 and 2: the aiter-compatible routing of topk_ids for routing blocks of block_m
    rows (sorted_ids, sorted_expert_ids, num_valid_ids), the activations a1 (hidden_states
    quantized), and `out` zeroed. Returns (sorted_ids, sorted_expert_ids, num_valid_ids, a1), all
    from the buffers pool; a1 is the decode path's bf16 buffer (in k_slot column order), or with
    native the pair (fp4 bytes [M, H/2], e8m0 bytes [M, H/32]). The native path's variants:
    quantize=False writes no a1 (None; stage 1 quantizes), launches=1 does it all in one launch
    (moe_native_route_kernel), quant_blocks sets the 32-blocks per quantizing program
    (NativeTileConfig.quant_blocks); hidden_bits is hidden_states viewed as int32 pairs (the native
    launches' view of it; made here if None, given by a caller whose launches are recorded into a
    plan)."""
    n_tokens, d_hidden = hidden_states.shape
    topk = topk_ids.shape[1]
    n_slots = n_tokens * topk
    device = hidden_states.device
    sorted_ids, sorted_expert_ids, num_valid_ids = routing_buffers(n_slots, n_experts, block_m, device)
    hist_chunk, n_chunks = histogram_chunks(n_slots)
    expert_bins = triton.next_power_of_2(n_experts + 1)
    chunk_counts = get_buffer("chunk_counts", (n_chunks, expert_bins), torch.int32, device)
    quant_programs = triton.cdiv(n_tokens * d_hidden // 32, quant_blocks)
    fast = target.fast_decode(device) and not native
    pdl = target.pdl_options(fast)
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
            plan.launch(
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
                GFX950=target.gfx950_converts(),
            )
            return sorted_ids, sorted_expert_ids, num_valid_ids, a1
        plan.launch(
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
            GFX950=target.gfx950_converts(),
        )
    else:
        a1 = get_buffer("a1", (n_tokens, d_hidden), torch.bfloat16, device)
        plan.launch(
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
    """Launch 2 of the decode path: moe_route_kernel places each expert's slots from the
    chunk histograms into the routing arrays (routing_buffers)."""
    n_tokens, topk = topk_ids.shape
    n_slots = n_tokens * topk
    n_chunks, expert_bins = chunk_counts.shape
    plan.launch(
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
