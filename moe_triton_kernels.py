"""Triton kernels of the a4w4 MoE layer (SPEC 1); the launchers are in moe_triton.py.

Three launches per layer:
  moe_prep_kernel    one program per expert builds the aiter-compatible routing (sorted_ids,
                     sorted_expert_ids, num_valid_ids); the other programs quantize the hidden
                     states to MXFP4 (SPEC 3.3), store them dequantized as bf16 (exact), and zero
                     the output tile they cover.
  moe_stage1_kernel  per block of block_m sorted rows of one expert: gate and up GEMMs on the
                     MXFP4 weights (tl.dot_scaled), silu(gate) * up rounded to bf16, then the
                     MXFP4 round trip of h stored as bf16 in sorted order.
  moe_stage2_kernel  down GEMM of those rows, times the routing weight, added atomically into
                     the output rows of their tokens.
Weights stay in the raw row-major layout of the input tuple: [E, N, K/2] fp4 bytes and 2-D
[E*N, K/32] e8m0 scales.
"""

import triton
import triton.language as tl


@triton.jit
def _round_to_bf16(x):
    """fp32 -> nearest bf16 (ties to even), kept in fp32. Spelled out in integer bits because the
    CPU interpreter's fp32 -> bf16 cast truncates."""
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -0x10000
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _mx_round_trip(x, ROWS: tl.constexpr, COLS: tl.constexpr):
    """SPEC 3.3 quantization of an fp32 tile [ROWS, COLS] (32-blocks along COLS), returned
    dequantized: code value * 2^s, exact in bf16. Ties round away from zero."""
    xb = tl.reshape(x, (ROWS, COLS // 32, 32))
    amax = tl.max(tl.abs(xb), axis=2)
    rounded = (amax.to(tl.int32, bitcast=True) + 0x200000) & -0x800000
    biased = (rounded >> 23) & 0xFF
    s = tl.where(biased == 0xFF, 127, tl.minimum(tl.maximum(biased - 129, -127), 127))
    # 2^-s and 2^s as fp32 bit patterns; 2^-127 is the subnormal 0x00400000.
    inv = tl.where(s == 127, 0x00400000, (127 - s) << 23).to(tl.float32, bitcast=True)
    scale = tl.where(s == -127, 0x00400000, (127 + s) << 23).to(tl.float32, bitcast=True)
    mag = tl.abs(xb) * inv[:, :, None]
    v = tl.where(mag >= 0.25, 0.5, 0.0)
    v = tl.where(mag >= 0.75, 1.0, v)
    v = tl.where(mag >= 1.25, 1.5, v)
    v = tl.where(mag >= 1.75, 2.0, v)
    v = tl.where(mag >= 2.5, 3.0, v)
    v = tl.where(mag >= 3.5, 4.0, v)
    v = tl.where(mag >= 5.0, 6.0, v)
    v = tl.where(xb < 0, -v, v) * scale[:, :, None]
    return tl.reshape(v, (ROWS, COLS))


@triton.jit
def moe_prep_kernel(
    topk_ids_ptr, hidden_ptr, a1_ptr, out_ptr,
    sorted_ids_ptr, sorted_expert_ids_ptr, num_valid_ids_ptr,
    n_tokens, n_experts, n_slots, d_hidden,
    TOPK: tl.constexpr, BLOCK_M: tl.constexpr, EXPERT_BINS: tl.constexpr,
    SLOT_CHUNK: tl.constexpr, MAX_EXPERT_BLOCKS: tl.constexpr,
    QUANT_ROWS: tl.constexpr, QUANT_COLS: tl.constexpr,
):
    pid = tl.program_id(0)
    if pid < n_experts:
        # Routing for expert `pid`: count every expert (bins >= n_experts are empty or hold the
        # masked lanes), place this expert's slots after the padded groups of lower experts.
        bins = tl.arange(0, EXPERT_BINS)
        counts = tl.zeros((EXPERT_BINS,), dtype=tl.int32)
        for start in range(0, n_slots, SLOT_CHUNK):
            offs = start + tl.arange(0, SLOT_CHUNK)
            ids = tl.load(topk_ids_ptr + offs, mask=offs < n_slots, other=EXPERT_BINS - 1)
            counts += tl.histogram(ids, EXPERT_BINS)
        counts = tl.where(bins < n_experts, counts, 0)
        padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
        offset = tl.sum(tl.where(bins < pid, padded, 0), axis=0)
        my_count = tl.sum(tl.where(bins == pid, counts, 0), axis=0)
        my_padded = tl.sum(tl.where(bins == pid, padded, 0), axis=0)
        if pid == 0:
            tl.store(num_valid_ids_ptr, tl.sum(padded, axis=0))
            tl.store(num_valid_ids_ptr + 1, n_tokens)
        placed = 0
        for start in range(0, n_slots, SLOT_CHUNK):
            offs = start + tl.arange(0, SLOT_CHUNK)
            ids = tl.load(topk_ids_ptr + offs, mask=offs < n_slots, other=-1)
            hit = ids == pid
            rank = placed + tl.cumsum(hit.to(tl.int32), axis=0) - 1
            packed = ((offs % TOPK) << 24) | (offs // TOPK)
            tl.store(sorted_ids_ptr + offset + rank, packed, mask=hit)
            placed += tl.sum(hit.to(tl.int32), axis=0)
        pad = my_count + tl.arange(0, BLOCK_M)
        tl.store(sorted_ids_ptr + offset + pad, (TOPK << 24) | n_tokens, mask=pad < my_padded)
        blocks = tl.arange(0, MAX_EXPERT_BLOCKS)
        tl.store(sorted_expert_ids_ptr + offset // BLOCK_M + blocks, pid + 0 * blocks,
                 mask=blocks < my_padded // BLOCK_M)
    else:
        qid = pid - n_experts
        col_tiles = tl.cdiv(d_hidden, QUANT_COLS)
        rows = (qid // col_tiles) * QUANT_ROWS + tl.arange(0, QUANT_ROWS)
        cols = (qid % col_tiles) * QUANT_COLS + tl.arange(0, QUANT_COLS)
        mask = (rows < n_tokens)[:, None] & (cols < d_hidden)[None, :]
        offs = rows[:, None].to(tl.int64) * d_hidden + cols[None, :]
        x = tl.load(hidden_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        a1 = _mx_round_trip(x, QUANT_ROWS, QUANT_COLS)
        tl.store(a1_ptr + offs, a1.to(tl.bfloat16), mask=mask)
        tl.store(out_ptr + offs, tl.zeros((QUANT_ROWS, QUANT_COLS), dtype=out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _expert_gemm_tile(
    a_ptr, a_rows, a_row_mask, a_stride,
    w_ptr, w_scale_ptr, w_rows, k_dim,
    BLOCK_K: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr, SWAP_AB: tl.constexpr,
):
    """fp32 [ROWS, COLS] = bf16 A[a_rows, :k_dim] @ MXFP4 W[w_rows, :k_dim]^T (rows of W's
    [N, K/2] bytes and [N, K/32] scales, 64-bit row indices)."""
    acc = tl.zeros((COLS, ROWS) if SWAP_AB else (ROWS, COLS), dtype=tl.float32)
    kk = tl.arange(0, BLOCK_K)
    kb = tl.arange(0, BLOCK_K // 2)
    ks = tl.arange(0, BLOCK_K // 32)
    for k0 in range(0, k_dim, BLOCK_K):
        a = tl.load(a_ptr + a_rows[:, None] * a_stride + (k0 + kk)[None, :], mask=a_row_mask[:, None], other=0.0)
        w = tl.load(w_ptr + w_rows[:, None] * (k_dim // 2) + (k0 // 2 + kb)[None, :])
        ws = tl.load(w_scale_ptr + w_rows[:, None] * (k_dim // 32) + (k0 // 32 + ks)[None, :])
        if SWAP_AB:
            acc = tl.dot_scaled(w, ws, "e2m1", tl.trans(a), None, "bf16", acc)
        else:
            acc = tl.dot_scaled(a, None, "bf16", tl.trans(w), ws, "e2m1", acc)
    if SWAP_AB:
        acc = tl.trans(acc)
    return acc


@triton.jit
def moe_stage1_kernel(
    a1_ptr, w1_ptr, w1_scale_ptr, a2_ptr,
    sorted_ids_ptr, sorted_expert_ids_ptr, num_valid_ids_ptr,
    n_tokens, d_hidden, d_inter,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SWAP_AB: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if pid_m * BLOCK_M >= tl.load(num_valid_ids_ptr):
        return
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    tokens = tl.load(sorted_ids_ptr + rows) & 0xFFFFFF
    valid = tokens < n_tokens
    expert = tl.load(sorted_expert_ids_ptr + pid_m).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    gate_rows = expert * 2 * d_inter + tl.minimum(cols, d_inter - 1)
    gate = _expert_gemm_tile(a1_ptr, tokens.to(tl.int64), valid, d_hidden, w1_ptr, w1_scale_ptr,
                             gate_rows, d_hidden, BLOCK_K, BLOCK_M, BLOCK_N, SWAP_AB)
    up = _expert_gemm_tile(a1_ptr, tokens.to(tl.int64), valid, d_hidden, w1_ptr, w1_scale_ptr,
                           gate_rows + d_inter, d_hidden, BLOCK_K, BLOCK_M, BLOCK_N, SWAP_AB)
    h = _round_to_bf16(gate / (1.0 + tl.exp(-gate)) * up)
    a2 = _mx_round_trip(h, BLOCK_M, BLOCK_N)
    out_offs = rows[:, None].to(tl.int64) * d_inter + cols[None, :]
    tl.store(a2_ptr + out_offs, a2.to(tl.bfloat16), mask=(cols < d_inter)[None, :])


@triton.jit
def moe_stage2_kernel(
    a2_ptr, w2_ptr, w2_scale_ptr, out_ptr, topk_weights_ptr,
    sorted_ids_ptr, sorted_expert_ids_ptr, num_valid_ids_ptr,
    n_tokens, d_hidden, d_inter,
    TOPK: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    SWAP_AB: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    if pid_m * BLOCK_M >= tl.load(num_valid_ids_ptr):
        return
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    packed = tl.load(sorted_ids_ptr + rows)
    tokens = packed & 0xFFFFFF
    valid = tokens < n_tokens
    expert = tl.load(sorted_expert_ids_ptr + pid_m).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    w_rows = expert * d_hidden + tl.minimum(cols, d_hidden - 1)
    y = _expert_gemm_tile(a2_ptr, rows.to(tl.int64), rows >= 0, d_inter, w2_ptr, w2_scale_ptr,
                          w_rows, d_inter, BLOCK_K, BLOCK_M, BLOCK_N, SWAP_AB)
    slot = (tokens * TOPK + (packed >> 24)).to(tl.int64)
    weight = tl.load(topk_weights_ptr + slot, mask=valid, other=0.0)
    y = y * weight[:, None]
    out_offs = tokens[:, None].to(tl.int64) * d_hidden + cols[None, :]
    tl.atomic_add(out_ptr + out_offs, y.to(out_ptr.dtype.element_ty),
                  mask=valid[:, None] & (cols < d_hidden)[None, :], sem="relaxed")
