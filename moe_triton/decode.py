"""The decode path's steps: fp4 weights decoded to bf16 in registers, bf16 MMAs; Gluon on sm_90 (docs/triton.md)."""

import torch
import triton

from buffers import get_buffer
from moe_triton import plan, target
from moe_triton.kernels.decode import moe_stage1_kernel, moe_stage2_kernel
from moe_triton.routing import Routing, route_decode
from moe_triton.tiles import TileConfig
from problem.shapes import Shape


def check(shape: Shape, cfg: TileConfig, n_blocks: int, device) -> None:
    """The tiles that this path cannot run on this shape and device (the Gluon stages need sm_90, K
    steps of 128 (or 256 in stage 1, 512 on one warpgroup), 2 or 4 MMA warpgroups (or one in stage 1) and 32-bit
    offsets): a ValueError naming the field."""
    if cfg.tail_m and not (16 <= cfg.tail_m < cfg.block_m and cfg.tail_m & (cfg.tail_m - 1) == 0):
        raise ValueError(
            f"tiles: tail_m {cfg.tail_m} must be 0 or a power of two from 16 to below block_m {cfg.block_m}"
        )
    n_tokens, d_hidden, d_inter, n_experts, _ = shape
    stages = (
        (1, cfg.gluon1, d_hidden, cfg.block_n1, cfg.stage1, cfg.max_regs1, 32, d_inter),
        (2, cfg.gluon2, d_inter, cfg.block_n2, cfg.stage2, cfg.max_regs2, 64, d_hidden),
    )
    for stage, parts, k_dim, block_n, tile, regs, group, n_dim in stages:
        if not parts:
            continue
        name = f"gluon{stage}"
        if not target.gluon_kernels(device):
            raise ValueError(f"tiles: {name} needs an NVIDIA sm_90 GPU (Hopper wgmma); use {name}=0 here")
        if parts not in (1, 2, 4):
            raise ValueError(f"tiles: {name} must be 0 (off), 1, 2 or 4 (parts per K step), not {parts}")
        one_warpgroup = stage == 1 and block_n == group and tile.warps == 4
        if (
            not one_warpgroup
            and (block_n not in (2 * group, 4 * group) or tile.warps != 8)
            or tile.block_k not in gluon_block_ks(stage, one_warpgroup, parts)
        ):
            raise ValueError(
                f"tiles: {name} needs block_n{stage} {2 * group} or {4 * group} with warps{stage} 8"
                + (f" (or {group} with 4)" if stage == 1 else "")
                + f", and block_k{stage} 128"
                + (" (or 256 in 2 or 4 parts, 512 in 4 with one warpgroup)" if stage == 1 else "")
                + f", not {block_n}, {tile.warps}, {tile.block_k}"
            )
        most = 255 if one_warpgroup else gluon_launch_registers(block_n // group)
        if regs and not (56 <= regs <= most and regs % 8 == 0):
            raise ValueError(
                f"tiles: max_regs{stage} with {name} must be 0 or a multiple of 8 from 56 to {most}, not {regs}"
            )
        span = block_n * (cfg.n_tiles2 if stage == 2 else 1)
        if k_dim % tile.block_k or n_dim % span:
            raise ValueError(
                f"tiles: {name} needs its K ({k_dim}) a multiple of {tile.block_k} and its N ({n_dim}) of {span} "
                f"(block_n{stage}" + (" times n_tiles2)" if stage == 2 else ")")
            )
    if cfg.paired1 and not (cfg.paired1 == 1 and cfg.gluon1 and not cfg.fold1):
        raise ValueError(f"tiles: paired1 must be 0 or 1, with gluon1 and no fold1, not {cfg.paired1}")
    if cfg.block_n1 == 32 and cfg.gluon1 and cfg.fold1:
        raise ValueError("tiles: gluon1 with block_n1 32 (one warpgroup) takes no fold1")
    if cfg.overlap and not (cfg.overlap == 1 and (cfg.fold1 or not cfg.tail_m)):
        raise ValueError(
            f"tiles: overlap must be 0 or 1, and with tail_m only where fold1 folds the tails (one stage-1 launch), "
            f"not {cfg.overlap} with tail_m {cfg.tail_m}, fold1 {cfg.fold1}"
        )
    if cfg.route_launches not in (1, 2):
        raise ValueError(f"tiles: route_launches must be 1 or 2 (launches before stage 1), not {cfg.route_launches}")
    if cfg.fold1 and not (cfg.gluon1 and cfg.tail_m):
        raise ValueError(f"tiles: fold1 needs gluon1 and tail_m, not {cfg.gluon1} and {cfg.tail_m}")
    if cfg.fold2 and not (cfg.fold2 == 1 and cfg.gluon2 and cfg.tail_m):
        raise ValueError(
            f"tiles: fold2 must be 0 or 1, and 1 only with gluon2 and tail_m, not {cfg.fold2} with "
            f"{cfg.gluon2} and {cfg.tail_m}"
        )
    spans = ((1, cfg.slot_span1, cfg.block_k1, cfg.gluon1), (2, cfg.slot_span2, cfg.block_k2, cfg.gluon2))
    for stage, span, block_k, gluon in spans:
        # the decode kernel at K steps of 128 keeps span 128's operand in registers only through warp shuffles
        # (sm_90, triton 3.6: 317 instructions a stage-1 step against span 32's 242)
        if span not in (32, 128) or block_k % span or (span == 128 and not gluon and block_k < 256):
            raise ValueError(
                f"tiles: slot_span{stage} must be 32 or 128, and 128 only in K steps of 256 or more (128 on the "
                f"Gluon stages), not {span} with block_k{stage} {block_k}"
            )
    if not (cfg.gluon1 or cfg.gluon2):
        return
    if max(n_tokens * d_hidden, n_experts * 2 * d_inter * d_hidden // 8, n_blocks * cfg.block_m * d_inter) >= 2**31:
        raise ValueError("tiles: gluon stages address with 32-bit offsets; this shape is too large for them")
    if cfg.block_m < 16:
        raise ValueError(f"tiles: gluon stages need block_m at least 16, not {cfg.block_m}")


def gluon_block_ks(stage: int, one_warpgroup: bool, parts: int) -> tuple[int, ...]:
    """The K steps a Gluon stage takes: 128; in stage 1 also 256 in two or four parts (each part's scales one int32
    word), and on one warpgroup 512 in four."""
    block_ks = (128, 256) if stage == 1 and parts > 1 else (128,)
    return block_ks + ((512,) if one_warpgroup and parts == 4 else ())


def gluon_launch_registers(num_wg: int) -> int:
    """The most registers a thread can have at launch at one Gluon program of num_wg + 1 warpgroups an SM."""
    return 65536 // (128 * (num_wg + 1)) // 8 * 8


def gluon_registers(max_regs: int, num_wg: int) -> dict:
    """A Gluon stage's launch registers and setmaxnreg split for max_regs (docs/triton.md, "The register split")."""
    if not max_regs:
        return {"MMA_REGS": 224 if num_wg == 2 else 104, "LOADER_REGS": 56}
    loader = 56 if max_regs >= 72 else 40
    mma = ((num_wg + 1) * max_regs - loader) // num_wg // 8 * 8
    return {"maxnreg": max_regs, "MMA_REGS": mma, "LOADER_REGS": loader}


def scratch(shape: Shape, cfg, n_blocks: int, device) -> tuple[torch.Tensor]:
    """a2, stage 1's output: bf16 rows of d_inter per routing block row."""
    return (get_buffer("a2", (n_blocks * cfg.block_m, shape.d_inter), torch.bfloat16, device),)


def a2_ready(layer: plan.Layer, device) -> torch.Tensor:
    """The overlap's counts of a2 columns that stage 1 has stored, one a routing block; zeroed by launch 1."""
    return get_buffer("a2_ready", (layer.n_blocks,), torch.int32, device)


def prep(call: plan.Call, layer: plan.Layer) -> tuple[Routing, tuple[torch.Tensor]]:
    """The launches before stage 1 (route_launches of them): the routing and a1."""
    ready = a2_ready(layer, call.out.device)
    cfg = layer.cfg
    routing, a1 = route_decode(
        call.hidden_states,
        call.topk_ids,
        layer.shape.n_experts,
        cfg.block_m,
        call.out,
        ready,
        cfg.route_launches,
        cfg.quant_blocks,
        cfg.slot_span1,
    )
    return routing, (a1,)


def block_grid(n_blocks: int, tiles: int, overlap: int) -> tuple[int, int]:
    """A decode stage's grid: routing blocks along x, or with the overlap along y, so that a block's
    column tiles are launched together (kernels/routing.py, block_and_tile)."""
    return (tiles, n_blocks) if overlap else (n_blocks, tiles)


def row_tiles(cfg) -> tuple[int, ...]:
    """The row tiles of a stage's launches: block_m, and tail_m for the tail blocks where set."""
    return (cfg.block_m, cfg.tail_m) if cfg.tail_m else (cfg.block_m,)


def stage1(call: plan.Call, layer: plan.Layer, routing: Routing, a1: tuple[torch.Tensor]) -> None:
    """Stage 1, a2 = silu(a1 w1_gate) * a1 w1_up per routing block (Gluon imported only where used)."""
    shape, cfg = layer.shape, layer.cfg
    fast = target.fast_decode(call.out.device)
    if cfg.gluon1:
        from moe_triton.kernels.gluon_stage1 import moe_gluon_stage1_kernel as kernel

        grid = block_grid(layer.n_blocks, shape.d_inter // cfg.block_n1, cfg.overlap)
        options = gluon_options(cfg.block_k1, cfg.stages1, cfg.gluon1, cfg.block_n1 // 32, cfg.max_regs1, fast)
        options.update(FOLD=cfg.tail_m if cfg.fold1 else 0, PAIRED=cfg.paired1)
        if cfg.overlap:
            options.update(OVERLAP=1, a2_ready_ptr=a2_ready(layer, call.out.device))
    else:
        kernel = moe_stage1_kernel
        grid = block_grid(layer.n_blocks, triton.cdiv(shape.d_inter, cfg.block_n1), cfg.overlap)
        options = triton_options(cfg.block_n1, cfg.block_k1, cfg.warps1, cfg.stages1, cfg.max_regs1, fast)
        options.update(a2_ready_ptr=a2_ready(layer, call.out.device), OVERLAP=cfg.overlap)
    options.update(SLOT_SPAN1=cfg.slot_span1, SLOT_SPAN2=cfg.slot_span2)
    args = layer.stage1_args(call, routing, a1) + (shape.n_tokens, shape.d_hidden, shape.d_inter)
    # silu's launch option before the others: the JIT keys its kernels on the options in their order; with the
    # overlap one launch (the fold's main launch also takes the tails no block folds)
    for rows in (cfg.block_m,) if cfg.overlap else row_tiles(cfg):
        plan.launch(
            kernel, grid, *args, BLOCK_M=cfg.block_m, ROWS=rows, TAIL_M=cfg.tail_m, **target.silu_options(), **options
        )


def stage2(call: plan.Call, layer: plan.Layer, routing: Routing) -> None:
    """Stage 2, out += topk_weights x a2 w2 per routing block."""
    shape, cfg = layer.shape, layer.cfg
    fast = target.fast_decode(call.out.device)
    if cfg.gluon2:
        from moe_triton.kernels.gluon_stage2 import moe_gluon_stage2_kernel as kernel

        grid = block_grid(layer.n_blocks, shape.d_hidden // (cfg.block_n2 * cfg.n_tiles2), cfg.overlap)
        options = gluon_options(cfg.block_k2, cfg.stages2, cfg.gluon2, cfg.block_n2 // 64, cfg.max_regs2, fast)
        options.update(a2_ready_ptr=a2_ready(layer, call.out.device), OVERLAP=cfg.overlap)
        options.update(FOLD=cfg.tail_m if cfg.fold2 else 0, SLOT_SPAN=cfg.slot_span2)
    else:
        kernel = moe_stage2_kernel
        groups = triton.cdiv(triton.cdiv(shape.d_hidden, cfg.block_n2), cfg.n_tiles2)
        grid = block_grid(layer.n_blocks, groups, cfg.overlap)
        options = triton_options(cfg.block_n2, cfg.block_k2, cfg.warps2, cfg.stages2, cfg.max_regs2, fast)
        options.update(
            K_STEPS=triton.cdiv(shape.d_inter, cfg.block_k2),
            a2_ready_ptr=a2_ready(layer, call.out.device),
            OVERLAP=cfg.overlap,
            SLOT_SPAN=cfg.slot_span2,
        )
    for rows in row_tiles(cfg):
        plan.launch(
            kernel,
            grid,
            *layer.stage2_args(call, routing),
            TOPK=shape.topk,
            BLOCK_M=cfg.block_m,
            ROWS=rows,
            TAIL_M=cfg.tail_m,
            N_TILES=cfg.n_tiles2,
            **options,
        )


def triton_options(block_n: int, block_k: int, warps: int, stages: int, max_regs: int, fast: bool) -> dict:
    return dict(
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        FAST=fast,
        INTERPRET=target.interpreting(),
        num_warps=warps,
        num_stages=stages,
        **target.pdl_options(fast),
        **({"maxnreg": max_regs} if fast and max_regs else {}),  # ptxas .maxnreg, 0: the compiler's choice
    )


def gluon_options(block_k: int, stages: int, split: int, num_wg: int, max_regs: int, fast: bool) -> dict:
    """4 warps launched: MMA warpgroup 0; the kernel starts its other partitions (none for one warpgroup, which
    loads its own ring)."""
    registers = gluon_registers(max_regs, num_wg) if num_wg > 1 else {"MMA_REGS": 0, "LOADER_REGS": 0}
    if num_wg == 1 and max_regs:
        registers["maxnreg"] = max_regs
    return dict(
        BLOCK_K=block_k,
        STAGES=stages,
        SPLIT=split,
        NUM_WG=num_wg,
        num_warps=4,
        **target.pdl_options(fast),
        **registers,
    )


PATH = plan.Path(TileConfig, check, scratch, prep, stage1, stage2, native=False)
