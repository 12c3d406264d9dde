"""The decode path's launcher (kernels/decode.py: the fp4 weights decoded to bf16 in registers,
bf16 MMAs; the NVIDIA path): the routing and a1 (routing.route_and_quantize), then stage 1 and
stage 2, one launch each or two with a tail tile, recorded into the shape's plan (plan.py).
Scratch: a1 and a2 in bf16 from the buffers pool.
"""

import torch
import triton

from buffers import get_buffer
from moe_triton.kernels.decode import moe_stage1_kernel, moe_stage2_kernel
from moe_triton.plan import _DecodePlan, _launch, record_plan
from moe_triton.routing import route_and_quantize, routing_capacity
from moe_triton.target import fast_decode, interpreting, pdl_options, register_cap, silu_options


def check_tail(cfg) -> None:
    if cfg.tail_m and not (16 <= cfg.tail_m < cfg.block_m and cfg.tail_m & (cfg.tail_m - 1) == 0):
        raise ValueError(
            f"tiles: tail_m {cfg.tail_m} must be 0 or a power of two from 16 to below block_m {cfg.block_m}"
        )


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
