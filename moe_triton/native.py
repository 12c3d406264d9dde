"""The native path's launcher (kernels/native.py: tl.dot_scaled on packed MXFP4 operands, gfx950's
scaled MFMAs; Triton emulates dot_scaled elsewhere): its tile checks, the routing and a1
(routing.route_and_quantize; none where stage 1 routes its own block), stage 1 and stage 2,
recorded into the shape's plan (plan.py). Scratch: a2 as fp4 bytes and e8m0 scales, from the
buffers pool.
"""

import torch
import triton

from buffers import get_buffer
from moe_triton import plan
from moe_triton.kernels.native import moe_native_stage1_kernel, moe_native_stage2_kernel
from moe_triton.routing import route_and_quantize, routing_buffers, routing_capacity
from moe_triton.target import amd_options, gfx950_converts, interpreting, silu_options
from moe_triton.tiles import NativeTileConfig
from moe_triton.tiles_amd import native_tile_config
from problem.shapes import Shape

# The native stage 1 that routes its own block (route_launches 0): compares per step of its rank
# match (block_m rows x this / block_m slots: 256 slots per step spilled SGPRs at 32-row blocks on
# gfx950, 128 did not) and output elements zeroed per step.
OWN_ROUTE_COMPARES = 4096
ZERO_BLOCK = 1024


def _check_native_tiles(cfg, d_hidden: int, d_inter: int) -> None:
    if not isinstance(cfg, NativeTileConfig):
        raise ValueError(f"tiles: the native path takes a NativeTileConfig, got {type(cfg).__name__}")
    if cfg.route_launches not in (0, 1, 2):
        raise ValueError(f"tiles: route_launches must be 0, 1 or 2, got {cfg.route_launches}")
    if cfg.route_launches == 0 and not cfg.fused_quant:
        raise ValueError("tiles: route_launches 0 (stage 1 routes its own block) needs fused_quant")
    if type(cfg.quant_blocks) is not int or cfg.quant_blocks < 1 or cfg.quant_blocks & (cfg.quant_blocks - 1):
        raise ValueError(f"tiles: quant_blocks must be a power of 2, got {cfg.quant_blocks!r}")
    if d_hidden % cfg.block_k1 or d_inter % cfg.block_k2:
        raise ValueError(
            f"tiles: block_k1 {cfg.block_k1} and block_k2 {cfg.block_k2} must divide d_hidden {d_hidden} "
            f"and d_inter {d_inter}"
        )


def fused_moe_native(
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
    route_launches 0), then stage 1 and stage 2 on packed MXFP4 operands (moe_native_kernels).
    Its launches are recorded
    into a plan at the first call of a shape and tiles and replayed after, as the decode path's
    are (direct launches on a GPU: half the JIT launches' host time per call, docs/gfx950.md)."""
    inputs = (hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids)
    interpret = interpreting()
    key = ("native", hidden_states.shape, w1.shape, topk_ids.shape, hidden_states.device, tiles, interpret)
    return plan.planned_call(key, lambda: _native_plan(*inputs, tiles), inputs, interpret)


def _native_plan(hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids, tiles) -> "plan.DecodePlan":
    """The native path's first call of a shape and tiles: its checks, buffers and launches,
    recorded into its plan."""
    n_tokens, d_hidden = hidden_states.shape
    n_experts, two_inter, _ = w1.shape
    d_inter = two_inter // 2
    topk = topk_ids.shape[1]
    n_slots = n_tokens * topk
    cfg = tiles or native_tile_config(Shape.of(hidden_states, w1, topk_ids))
    _check_native_tiles(cfg, d_hidden, d_inter)
    block_m = cfg.block_m
    n_blocks = routing_capacity(n_slots, n_experts, block_m)
    column_tiles = triton.cdiv(d_inter, cfg.block_n1)
    # The native kernels address within an expert, a1, a2 and the output with 32-bit offsets.
    largest = max(n_tokens * d_hidden, n_blocks * block_m * d_inter // 2, 2 * d_inter * d_hidden // 2)
    if largest >= 2**31:
        raise ValueError(f"hidden_states: {n_tokens} tokens of this shape exceed the native path's 32-bit offsets")
    device = hidden_states.device
    a2 = get_buffer("a2_fp4", (n_blocks * block_m, d_inter // 2), torch.uint8, device)
    a2_scale = get_buffer("a2_scale", (n_blocks * block_m, d_inter // 32), torch.uint8, device)
    amd = amd_options(cfg.nonkdim, cfg.waves_per_eu)
    own_route = cfg.route_launches == 0

    def launch_all(out, w1_bytes, w2_bytes, w1_scale_bytes, w2_scale_bytes, hidden_bits):
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
                quant_blocks=cfg.quant_blocks,
                hidden_bits=hidden_bits,
            )
        # With fused_quant stage 1 reads the hidden states' bf16 bits as int32 pairs (and no scales).
        plan.launch(
            moe_native_stage1_kernel,
            (n_blocks, column_tiles),
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
            TOPK=topk,
            BLOCK_M=block_m,
            BLOCK_N=cfg.block_n1,
            BLOCK_K=cfg.block_k1,
            XCDS=cfg.xcds,
            W_CACHE=cfg.weight_cache,
            QUANT_A=cfg.fused_quant,
            ROUTE=own_route,
            # Only a stage 1 that routes itself reads these: 1 otherwise, so that shapes of one hidden
            # size share its kernels (one compile per tile).
            EXPERT_BINS=triton.next_power_of_2(n_experts + 1) if own_route else 1,
            SLOT_CHUNK=min(OWN_ROUTE_COMPARES // block_m, triton.next_power_of_2(n_slots)) if own_route else 1,
            ZERO_BLOCK=ZERO_BLOCK,
            GFX950=gfx950_converts(),
            **silu_options(),
            INTERPRET=interpreting(),
            num_warps=cfg.warps1,
            num_stages=cfg.stages1,
            **amd,
        )
        plan.launch(
            moe_native_stage2_kernel,
            (n_blocks, triton.cdiv(triton.cdiv(d_hidden, cfg.block_n2), cfg.n_tiles2)),
            a2,
            a2_scale,
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
            BLOCK_N=cfg.block_n2,
            BLOCK_K=cfg.block_k2,
            K_STEPS=triton.cdiv(d_inter, cfg.block_k2),
            N_TILES=cfg.n_tiles2,
            EVEN_N=d_hidden % cfg.block_n2 == 0,
            XCDS=cfg.xcds,
            W_CACHE=cfg.weight_cache,
            num_warps=cfg.warps2,
            num_stages=cfg.stages2,
            **amd,
        )

    return plan.record_plan(launch_all, hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids, native=True)
