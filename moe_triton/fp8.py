"""The fp8 path's launcher (kernels/fp8.py): both GEMMs on e4m3 MMAs with the MXFP4 scales folded
into the operands (docs/triton.md, "The fp8 path"), NVIDIA, run for an Fp8TileConfig; four
launches (six with tail tiles), recorded into the shape's plan (plan.py) as the decode path's are.
Scratch: a1 (e4m3 bytes [M, H]) with its bases [M] and its exact bf16 copy for rows outside the
window; a2 as MXFP4 (fp4 bytes [rows, I/2], scales [rows, I/32]), or with decode_stage2 the decode
path's bf16 a2, which its moe_stage2_kernel reads.
"""

import torch
import triton

from buffers import get_buffer
from moe_triton.decode import check_tail
from moe_triton.kernels.decode import moe_stage2_kernel
from moe_triton.kernels.fp8 import moe_fp8_prep_kernel, moe_fp8_stage1_kernel, moe_fp8_stage2_kernel
from moe_triton.plan import _launch, record_plan
from moe_triton.routing import histogram_chunks, launch_route, routing_buffers, routing_capacity
from moe_triton.target import fast_decode, interpreting, pdl_options, register_cap, silu_options
from moe_triton.tiles import Fp8TileConfig


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
