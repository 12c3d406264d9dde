"""The decode path's launcher (kernels/decode.py: the fp4 weights decoded to bf16 in registers,
bf16 MMAs; the NVIDIA path): the routing and a1 (routing.route_and_quantize), then stage 1 and
stage 2, one launch each or two with a tail tile, recorded into the shape's plan (plan.py). With
gluon1 tiles, stage 1 is the warp-specialized Gluon kernel (kernels/gluon_stage1.py, sm_90); with
gluon2 tiles stage 2 is (kernels/gluon_stage2.py).
Scratch: a1 and a2 in bf16 from the buffers pool.
"""

import torch
import triton

from buffers import get_buffer
from moe_triton import plan, target
from moe_triton.kernels.decode import moe_stage1_kernel, moe_stage2_kernel
from moe_triton.routing import route_and_quantize, routing_capacity


def check_tail(cfg) -> None:
    if cfg.tail_m and not (16 <= cfg.tail_m < cfg.block_m and cfg.tail_m & (cfg.tail_m - 1) == 0):
        raise ValueError(
            f"tiles: tail_m {cfg.tail_m} must be 0 or a power of two from 16 to below block_m {cfg.block_m}"
        )


def check_gluon(cfg, n_tokens: int, d_hidden: int, d_inter: int, n_experts: int, topk: int, device) -> None:
    """The Gluon stages (kernels/gluon_stage1.py, gluon_stage2.py) run where their tiles fit: an
    sm_90 GPU (wgmma, setmaxnreg), K steps of 128, 2 or 4 MMA warpgroups (of 32 h columns in stage
    1, of 64 output columns in stage 2), 32-bit offsets."""
    stages = (
        (1, cfg.gluon1, d_hidden, cfg.block_n1, 32, d_inter),
        (2, cfg.gluon2, d_inter, cfg.block_n2, 64, d_hidden),
    )
    for stage, parts, k_dim, block_n, group, n_dim in stages:
        if not parts:
            continue
        name = f"gluon{stage}"
        if not target.gluon_kernels(device):
            raise ValueError(f"tiles: {name} needs an NVIDIA sm_90 GPU (Hopper wgmma); use {name}=0 here")
        if parts not in (1, 2, 4):
            raise ValueError(f"tiles: {name} must be 0 (off), 1, 2 or 4 (parts per K step), not {parts}")
        block_k, warps = (cfg.block_k1, cfg.warps1) if stage == 1 else (cfg.block_k2, cfg.warps2)
        if block_n not in (2 * group, 4 * group) or (block_k, warps) != (128, 8):
            raise ValueError(
                f"tiles: {name} needs block_n{stage} {2 * group} or {4 * group}, block_k{stage} 128 and "
                f"warps{stage} 8, not {block_n}, {block_k}, {warps}"
            )
        regs = cfg.max_regs1 if stage == 1 else cfg.max_regs2
        most = gluon_launch_registers(block_n // group)
        if regs and not (56 <= regs <= most and regs % 8 == 0):
            raise ValueError(
                f"tiles: max_regs{stage} with {name} must be 0 or a multiple of 8 from 56 to {most}, not {regs}"
            )
        span = block_n * (cfg.n_tiles2 if stage == 2 else 1)
        if k_dim % 128 or n_dim % span:
            raise ValueError(
                f"tiles: {name} needs its K ({k_dim}) a multiple of 128 and its N ({n_dim}) of {span} "
                f"(block_n{stage}" + (" times n_tiles2)" if stage == 2 else ")")
            )
    if getattr(cfg, "fold1", 0) and not (cfg.gluon1 and cfg.tail_m):
        raise ValueError(f"tiles: fold1 needs gluon1 and tail_m, not {cfg.gluon1} and {cfg.tail_m}")
    if not (cfg.gluon1 or cfg.gluon2):
        return
    a2_rows = routing_capacity(n_tokens * topk, n_experts, cfg.block_m) * cfg.block_m
    if max(n_tokens * d_hidden, n_experts * 2 * d_inter * d_hidden // 8, a2_rows * d_inter) >= 2**31:
        raise ValueError("tiles: gluon stages address with 32-bit offsets; this shape is too large for them")
    if cfg.block_m < 16:
        raise ValueError(f"tiles: gluon stages need block_m at least 16, not {cfg.block_m}")


def gluon_launch_registers(num_wg: int) -> int:
    """The most registers a thread of a Gluon program of num_wg MMA warpgroups and the loader's can
    have at launch: one program an SM (65536 registers), in multiples of 8 (168 or 96)."""
    return 65536 // (128 * (num_wg + 1)) // 8 * 8


def gluon_registers(max_regs: int, num_wg: int) -> dict:
    """A Gluon stage's register split (max_regs1 or max_regs2 of its tiles, num_wg MMA warpgroups):
    with 0 the whole register file for one program an SM (the compiler's 168 a thread at two
    warpgroups; MMA warpgroups 224 or 104, the loader 56); with R, R a thread at launch (ptxas
    .maxnreg), so that 65536 / (R x 32 x the program's warps) programs share an SM, split by
    setmaxnreg between the loader (56, or 40 below R 72) and equal MMA warpgroups, the default
    partition (MMA warpgroup 0) taking what is left."""
    if not max_regs:
        return {"MMA_REGS": 224 if num_wg == 2 else 104, "LOADER_REGS": 56}
    loader = 56 if max_regs >= 72 else 40
    mma = ((num_wg + 1) * max_regs - loader) // num_wg // 8 * 8
    return {"maxnreg": max_regs, "MMA_REGS": mma, "LOADER_REGS": loader}


def decode_plan(hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids, cfg) -> "plan.DecodePlan":
    """The decode path's first call of a shape: its launches, recorded into its plan."""
    n_tokens, d_hidden = hidden_states.shape
    n_experts, two_inter, _ = w1.shape
    d_inter = two_inter // 2
    topk = topk_ids.shape[1]
    n_slots = n_tokens * topk
    check_tail(cfg)
    check_gluon(cfg, n_tokens, d_hidden, d_inter, n_experts, topk, hidden_states.device)
    block_m = cfg.block_m
    n_blocks = routing_capacity(n_slots, n_experts, block_m)
    device = hidden_states.device
    fast, interpret = target.fast_decode(device), target.interpreting()
    pdl = target.pdl_options(fast)
    a2 = get_buffer("a2", (n_blocks * block_m, d_inter), torch.bfloat16, device)

    def launch_all(out, w1_bytes, w2_bytes, w1_scale_bytes, w2_scale_bytes):
        sorted_ids, sorted_expert_ids, num_valid_ids, a1 = route_and_quantize(
            hidden_states, topk_ids, n_experts, block_m, out
        )
        # One launch per stage, or two when the tiles name a tail: blocks with at most tail_m real
        # rows (an expert's last block, mostly) then run on tail_m-row tiles instead of block_m.
        row_tiles = (block_m, cfg.tail_m) if cfg.tail_m else (block_m,)
        # imported here: a Triton without Gluon (or another GPU's) never needs them
        if cfg.gluon1:
            from moe_triton.kernels.gluon_stage1 import moe_gluon_stage1_kernel
        if cfg.gluon2:
            from moe_triton.kernels.gluon_stage2 import moe_gluon_stage2_kernel
        stage1_args = (a1, w1_bytes, w1_scale_bytes, a2, sorted_ids, sorted_expert_ids, num_valid_ids)
        stage1_args += (n_tokens, d_hidden, d_inter)
        for rows in row_tiles:
            if cfg.gluon1:
                plan.launch(
                    moe_gluon_stage1_kernel,
                    (n_blocks, d_inter // cfg.block_n1),
                    *stage1_args,
                    BLOCK_M=block_m,
                    ROWS=rows,
                    TAIL_M=cfg.tail_m,
                    BLOCK_K=128,
                    STAGES=cfg.stages1,
                    SPLIT=cfg.gluon1,
                    NUM_WG=cfg.block_n1 // 32,
                    FOLD=cfg.tail_m if cfg.fold1 else 0,
                    **target.silu_options(),
                    num_warps=4,  # group 0's MMA warpgroup; the kernel starts its other partitions
                    **pdl,
                    **gluon_registers(cfg.max_regs1, cfg.block_n1 // 32),
                )
            else:
                plan.launch(
                    moe_stage1_kernel,
                    (n_blocks, triton.cdiv(d_inter, cfg.block_n1)),
                    *stage1_args,
                    BLOCK_M=block_m,
                    ROWS=rows,
                    TAIL_M=cfg.tail_m,
                    BLOCK_N=cfg.block_n1,
                    BLOCK_K=cfg.block_k1,
                    FAST=fast,
                    INTERPRET=interpret,
                    **target.silu_options(),
                    num_warps=cfg.warps1,
                    num_stages=cfg.stages1,
                    **pdl,
                    **target.register_cap(fast, cfg.max_regs1),
                )
        stage2_args = (a2, w2_bytes, w2_scale_bytes, out, topk_weights, sorted_ids, sorted_expert_ids, num_valid_ids)
        stage2_args += (n_tokens, d_hidden, d_inter)
        for rows in row_tiles:
            if cfg.gluon2:
                plan.launch(
                    moe_gluon_stage2_kernel,
                    (n_blocks, d_hidden // (cfg.block_n2 * cfg.n_tiles2)),
                    *stage2_args,
                    TOPK=topk,
                    BLOCK_M=block_m,
                    ROWS=rows,
                    TAIL_M=cfg.tail_m,
                    BLOCK_K=128,
                    STAGES=cfg.stages2,
                    SPLIT=cfg.gluon2,
                    NUM_WG=cfg.block_n2 // 64,
                    N_TILES=cfg.n_tiles2,
                    num_warps=4,  # MMA warpgroup 0; the kernel starts its other partitions
                    **pdl,
                    **gluon_registers(cfg.max_regs2, cfg.block_n2 // 64),
                )
            else:
                plan.launch(
                    moe_stage2_kernel,
                    (n_blocks, triton.cdiv(triton.cdiv(d_hidden, cfg.block_n2), cfg.n_tiles2)),
                    *stage2_args,
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
                    **target.register_cap(fast, cfg.max_regs2),
                )

    return plan.record_plan(launch_all, hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids)
