"""The native path's steps: tl.dot_scaled on packed MXFP4 operands, gfx950's scaled MFMAs (docs/gfx950.md)."""

import torch
import triton

from moe_triton import plan
from moe_triton.kernels.native import moe_native_stage1_kernel, moe_native_stage2_kernel
from moe_triton.routing import Routing, mxfp4_buffers, route_native, routing_buffers
from moe_triton.target import amd_options, gfx950_converts, interpreting, silu_options
from moe_triton.tiles import NativeTileConfig
from problem.shapes import Shape

# The native stage 1 that routes its own block (route_launches 0): compares per step of its rank
# match (block_m rows x this / block_m slots: 256 slots per step spilled SGPRs at 32-row blocks on
# gfx950, 128 did not) and output elements zeroed per step.
OWN_ROUTE_COMPARES = 4096
ZERO_BLOCK = 1024


def check(shape: Shape, cfg: NativeTileConfig, n_blocks: int, device) -> None:
    """Tiles this path cannot run on this shape, or a shape past its 32-bit offsets: a ValueError."""
    if cfg.route_launches not in (0, 1, 2):
        raise ValueError(f"tiles: route_launches must be 0, 1 or 2, got {cfg.route_launches}")
    if cfg.route_launches == 0 and not cfg.fused_quant:
        raise ValueError("tiles: route_launches 0 (stage 1 routes its own block) needs fused_quant")
    n_tokens, d_hidden, d_inter = shape[:3]
    if d_hidden % cfg.block_k1 or d_inter % cfg.block_k2:
        raise ValueError(
            f"tiles: block_k1 {cfg.block_k1} and block_k2 {cfg.block_k2} must divide d_hidden {d_hidden} "
            f"and d_inter {d_inter}"
        )
    if max(n_tokens * d_hidden, n_blocks * cfg.block_m * d_inter // 2, 2 * d_inter * d_hidden // 2) >= 2**31:
        raise ValueError(f"hidden_states: {n_tokens} tokens of this shape exceed the native path's 32-bit offsets")


def scratch(shape: Shape, cfg, n_blocks: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """a2, stage 1's output: fp4 bytes and e8m0 scale bytes per routing block row."""
    return mxfp4_buffers("a2", n_blocks * cfg.block_m, shape.d_inter, device)


def prep(call: plan.Call, layer: plan.Layer) -> tuple[Routing, tuple[torch.Tensor, torch.Tensor]]:
    """The routing (stage 1's with route_launches 0) and a1: fp4 and scales, or with fused_quant int32 pairs."""
    shape, cfg = layer.shape, layer.cfg
    hidden_pairs = (call.hidden_bits, call.hidden_bits)
    if cfg.route_launches == 0:
        return routing_buffers(shape.n_tokens * shape.topk, shape.n_experts, cfg.block_m, call.out.device), hidden_pairs
    a1 = None if cfg.fused_quant else mxfp4_buffers("a1", shape.n_tokens, shape.d_hidden, call.out.device)
    routing = route_native(
        call.hidden_states,
        call.topk_ids,
        shape.n_experts,
        cfg.block_m,
        call.out,
        a1,
        launches=cfg.route_launches,
        quant_blocks=cfg.quant_blocks,
        hidden_bits=call.hidden_bits,
    )
    return routing, a1 or hidden_pairs


def stage1(call: plan.Call, layer: plan.Layer, routing: Routing, a1: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Stage 1, a2 = mxfp4(silu(a1 w1_gate) * a1 w1_up) per routing block (and its routing)."""
    shape, cfg = layer.shape, layer.cfg
    own_route = cfg.route_launches == 0
    n_slots = shape.n_tokens * shape.topk
    plan.launch(
        moe_native_stage1_kernel,
        (layer.n_blocks, triton.cdiv(shape.d_inter, cfg.block_n1)),
        *layer.stage1_args(call, routing, a1),
        call.topk_ids,
        call.out,
        shape.n_tokens,
        shape.n_experts,
        n_slots,
        shape.d_hidden,
        shape.d_inter,
        TOPK=shape.topk,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n1,
        BLOCK_K=cfg.block_k1,
        XCDS=cfg.xcds,
        W_CACHE=cfg.weight_cache,
        QUANT_A=cfg.fused_quant,
        ROUTE=own_route,
        # Only a stage 1 that routes itself reads these: 1 otherwise, so that shapes of one hidden
        # size share its kernels (one compile per tile).
        EXPERT_BINS=triton.next_power_of_2(shape.n_experts + 1) if own_route else 1,
        SLOT_CHUNK=min(OWN_ROUTE_COMPARES // cfg.block_m, triton.next_power_of_2(n_slots)) if own_route else 1,
        ZERO_BLOCK=ZERO_BLOCK,
        GFX950=gfx950_converts(),
        **silu_options(),
        INTERPRET=interpreting(),
        num_warps=cfg.warps1,
        num_stages=cfg.stages1,
        **amd_options(cfg.nonkdim, cfg.waves_per_eu),
    )


def stage2(call: plan.Call, layer: plan.Layer, routing: Routing) -> None:
    """Stage 2, out += topk_weights x a2 w2 per routing block."""
    shape, cfg = layer.shape, layer.cfg
    plan.launch(
        moe_native_stage2_kernel,
        (layer.n_blocks, triton.cdiv(triton.cdiv(shape.d_hidden, cfg.block_n2), cfg.n_tiles2)),
        *layer.stage2_args(call, routing),
        TOPK=shape.topk,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n2,
        BLOCK_K=cfg.block_k2,
        K_STEPS=triton.cdiv(shape.d_inter, cfg.block_k2),
        N_TILES=cfg.n_tiles2,
        EVEN_N=shape.d_hidden % cfg.block_n2 == 0,
        XCDS=cfg.xcds,
        W_CACHE=cfg.weight_cache,
        num_warps=cfg.warps2,
        num_stages=cfg.stages2,
        **amd_options(cfg.nonkdim, cfg.waves_per_eu),
    )


PATH = plan.Path(NativeTileConfig, check, scratch, prep, stage1, stage2, native=True)
