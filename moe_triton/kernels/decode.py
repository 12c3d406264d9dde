"""The decode path's kernels (SPEC 1; launcher moe_triton/decode.py; docs/triton.md, "The kernels"): raw MXFP4
weights decoded in registers into the MMA's left operand. The bf16 activation buffers a1 and a2 hold their columns in
k_slot order (a1 of the tiles' slot_span1, a2 of slot_span2) and, on the fast (NVIDIA) path, their values times
2^FAST_EXP."""

import triton
import triton.language as tl

from moe_triton.kernels.routing import (
    a2_columns_done,
    after_previous_launch,
    block_and_tile,
    chunk_histogram,
    route_whole_histogram,
    routing_block,
    routing_weights,
    skip_block,
    stage2_start,
)
from moe_triton.kernels.silu import gated_h

# Activations times 2^FAST_EXP, decoded weights times 2^-FAST_EXP: the products are unchanged, and one bf16x2
# multiply per code pair both normalizes the codes and applies the scale (_fp4_to_bf16).
FAST_EXP = tl.constexpr(63)


@triton.jit
def _mx_round_trip(x, ROWS: tl.constexpr, COLS: tl.constexpr, EXP: tl.constexpr):
    """SPEC 3.3 quantization of an fp32 tile [ROWS, COLS] (32-blocks along COLS, ties away from zero), returned
    dequantized times 2^EXP: code value * 2^(s + EXP), exact in bf16 while s + EXP < 128."""
    xb = tl.reshape(x, (ROWS, COLS // 32, 32))
    inv, scale = mx_block_scales(tl.max(tl.abs(xb), axis=2), EXP)
    return tl.reshape(mx_values(xb, inv[:, :, None], scale[:, :, None]), (ROWS, COLS))


@triton.jit
def mx_block_scales(amax, EXP: tl.constexpr):
    """The e8m0 scale s of 32-blocks of largest magnitude amax (SPEC 3.3), as fp32 2^-s and 2^(s + EXP)."""
    rounded = (amax.to(tl.int32, bitcast=True) + 0x200000) & -0x800000
    biased = (rounded >> 23) & 0xFF
    s = tl.where(biased == 0xFF, 127, tl.minimum(tl.maximum(biased - 129, -127), 127))
    # 2^-s and 2^(s + EXP) as fp32 bit patterns; 2^-127 is the subnormal 0x00400000.
    inv = tl.where(s == 127, 0x00400000, (127 - s) << 23).to(tl.float32, bitcast=True)
    scale = tl.where(s + EXP == -127, 0x00400000, (127 + s + EXP) << 23).to(tl.float32, bitcast=True)
    return inv, scale


@triton.jit
def mx_values(x, inv, scale):
    """x times its block's 2^-s rounded to e2m1 (ties away from zero), times 2^(s + EXP); inv, scale broadcast."""
    mag = tl.abs(x) * inv
    v = tl.where(mag >= 0.25, 0.5, 0.0)
    v = tl.where(mag >= 0.75, 1.0, v)
    v = tl.where(mag >= 1.25, 1.5, v)
    v = tl.where(mag >= 1.75, 2.0, v)
    v = tl.where(mag >= 2.5, 3.0, v)
    v = tl.where(mag >= 3.5, 4.0, v)
    v = tl.where(mag >= 5.0, 6.0, v)
    # A NaN element saturates to code 7 with its sign bit, as aiter's quantizer encodes it (SPEC 3.3).
    v = tl.where(mag != mag, 6.0, v)
    return tl.where(x.to(tl.int32, bitcast=True) < 0, -v, v) * scale


@triton.jit
def k_slot(cols, SPAN: tl.constexpr):
    """Column of the activation buffers holding activation column `cols`: the order in which _fp4_to_bf16 lays out
    the decoded weights, so that the thread of a row's four that the MMA's register operand gives a column decodes it.
    Column 32B + 8t + 4b + 2s + h of each 128 (code 4b + 2s + h of word t of 32-block B) goes to
    SPAN 32: 32B + 16s + 8h + 2t + b, thread t holding word t of every block, one scale byte a word;
    SPAN 128: 32t + 16s + 8h + 2B + b, thread B holding block B's four words, one scale byte for all four."""
    r = cols % 128
    if SPAN == 128:
        outer, thread = (r >> 3) & 3, r >> 5
    else:
        outer, thread = r >> 5, (r >> 3) & 3
    return cols - r + (outer << 5) + (((r >> 1) & 1) << 4) + ((r & 1) << 3) + (thread << 1) + ((r >> 2) & 1)


@triton.jit
def moe_prep_kernel(
    topk_ids_ptr,
    hidden_ptr,
    a1_ptr,
    out_ptr,
    chunk_counts_ptr,
    n_tokens,
    n_slots,
    n_chunks,
    d_hidden,
    a2_ready_ptr,
    n_ready,
    EXPERT_BINS: tl.constexpr,
    HIST_CHUNK: tl.constexpr,
    QUANT_BLOCKS: tl.constexpr,
    SLOT_SPAN: tl.constexpr,
    FAST: tl.constexpr,
    PDL: tl.constexpr,
):
    """Launch 1 of two: programs below n_chunks each count a chunk of topk_ids (the first also zeroes the overlap's
    counts); the others write a1 and zero the output."""
    after_previous_launch(PDL)
    pid = tl.program_id(0)
    if pid < n_chunks:
        chunk_histogram(topk_ids_ptr, chunk_counts_ptr, n_slots, EXPERT_BINS, HIST_CHUNK)
        if pid == 0:
            _zero_counts(a2_ready_ptr, n_ready)
    else:
        _a1_share(pid - n_chunks, hidden_ptr, a1_ptr, out_ptr, n_tokens, d_hidden, QUANT_BLOCKS, SLOT_SPAN, FAST)


@triton.jit
def moe_route_prep_kernel(
    topk_ids_ptr,
    hidden_ptr,
    a1_ptr,
    out_ptr,
    sorted_ids_ptr,
    sorted_expert_ids_ptr,
    num_valid_ids_ptr,
    n_tokens,
    n_experts,
    n_slots,
    d_hidden,
    a2_ready_ptr,
    n_ready,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    EXPERT_BINS: tl.constexpr,
    SLOT_CHUNK: tl.constexpr,
    MAX_EXPERT_BLOCKS: tl.constexpr,
    COUNT_CHUNK: tl.constexpr,
    QUANT_BLOCKS: tl.constexpr,
    SLOT_SPAN: tl.constexpr,
    FAST: tl.constexpr,
    PDL: tl.constexpr,
):
    """The prep and route launches in one (route_launches 1): programs below n_experts each count the whole
    histogram and place their expert's slots (the first also zeroes the overlap's counts); the others write a1
    and zero the output, as moe_prep_kernel's do."""
    after_previous_launch(PDL)
    pid = tl.program_id(0)
    if pid < n_experts:
        routing = (sorted_ids_ptr, sorted_expert_ids_ptr, num_valid_ids_ptr)
        route_whole_histogram(
            topk_ids_ptr,
            routing,
            n_tokens,
            n_experts,
            n_slots,
            TOPK,
            BLOCK_M,
            EXPERT_BINS,
            SLOT_CHUNK,
            MAX_EXPERT_BLOCKS,
            COUNT_CHUNK,
        )
        if pid == 0:
            _zero_counts(a2_ready_ptr, n_ready)
    else:
        _a1_share(pid - n_experts, hidden_ptr, a1_ptr, out_ptr, n_tokens, d_hidden, QUANT_BLOCKS, SLOT_SPAN, FAST)


@triton.jit
def _zero_counts(a2_ready_ptr, n_ready):
    """The overlap's counts of a2 columns per routing block (n_ready 0 without it), zeroed before stage 1."""
    for start in range(0, n_ready, 1024):
        blocks = start + tl.arange(0, 1024)
        tl.store(a2_ready_ptr + blocks, tl.zeros((1024,), dtype=tl.int32), mask=blocks < n_ready)


@triton.jit
def _a1_share(
    q,
    hidden_ptr,
    a1_ptr,
    out_ptr,
    n_tokens,
    d_hidden,
    QUANT_BLOCKS: tl.constexpr,
    SLOT_SPAN: tl.constexpr,
    FAST: tl.constexpr,
):
    """Quantization program q's QUANT_BLOCKS 32-blocks of the hidden states, taken as one flat array (no block
    straddles rows, nor does k_slot's span: d_hidden % 128 == 0): a1 written in k_slot order, the output's same
    elements zeroed."""
    blocks = q * QUANT_BLOCKS + tl.arange(0, QUANT_BLOCKS)
    lanes = tl.arange(0, 32)
    mask = (blocks < n_tokens * (d_hidden // 32))[:, None]
    offs = blocks[:, None].to(tl.int64) * 32 + lanes[None, :]
    x = tl.load(hidden_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    a1 = _mx_round_trip(x, QUANT_BLOCKS, 32, FAST_EXP if FAST else 0)
    tl.store(a1_ptr + k_slot(offs, SLOT_SPAN), a1.to(tl.bfloat16), mask=mask)
    tl.store(out_ptr + offs, tl.zeros((QUANT_BLOCKS, 32), dtype=out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def scaled_pairs(pairs, scale):
    """int32 pairs of bf16 bit patterns (low half first) times the bf16x2 `scale` -> bf16 [..., 2] (NVIDIA PTX)."""
    return tl.inline_asm_elementwise(
        "mul.rn.bf16x2 $0, $1, $3;",
        "=r,r,r,r,r",
        [tl.join(pairs, pairs), tl.join(scale, scale)],
        dtype=tl.bfloat16,
        is_pure=True,
        pack=2,
    )


@triton.jit
def _portable_pairs(w):
    """int32 pairs of bf16 bits worth code * 2^-126 (low half first) -> the codes' values, fp32 [..., 2], built
    without subnormals (some backends flush them): exponent-0 codes (0, 0.5) read 0.5 + m/4, mapped by 2v - 1."""
    bits = tl.join(w << 16, w & -65536)
    mag = ((bits & 0x01C00000) + (126 << 23)).to(tl.float32, bitcast=True)
    mag = tl.where((bits & 0x01800000) == 0, 2.0 * mag - 1.0, mag)
    return tl.where(bits < 0, -mag, mag)


@triton.jit
def code_pairs(x):
    """int32 words of 8 fp4 codes (low nibble first) -> codes (0, 4), (1, 5), (2, 6), (3, 7) of each word as int32
    pairs of bf16 bits worth code * 2^-126, the first in the low half."""
    PAIR: tl.constexpr = -2118090304  # 0x81C081C0: sign (bit 15) and magnitude (bits 6-8) of both bf16 halves
    y = x >> 8
    # One multiply writes two non-overlapping copies of each nibble: magnitude at bits 6-8, sign at bit 15.
    p0 = ((x & 0x000F000F) * 0x1040) & PAIR
    p1 = ((x & 0x00F000F0) * 0x0104) & PAIR
    p2 = ((y & 0x000F000F) * 0x1040) & PAIR
    p3 = ((y & 0x00F000F0) * 0x0104) & PAIR
    return p0, p1, p2, p3


@triton.jit
def _fp4_to_bf16(words, scales, ROWS: tl.constexpr, BLOCK_K: tl.constexpr, FAST: tl.constexpr, SPAN: tl.constexpr):
    """MXFP4 weights, int32 words [ROWS, BLOCK_K/8] (low nibble first) and e8m0 scales [ROWS, BLOCK_K/32] ->
    [ROWS, BLOCK_K] in k_slot order of SPAN (SPEC 3.1). FAST: bf16 value * 2^-FAST_EXP, exact for scale bytes
    58..191 and 255 (NaN); otherwise fp32 holding the exact bf16 value for every scale byte."""
    G: tl.constexpr = BLOCK_K // 32
    x = tl.reshape(words, (ROWS, G, 4))
    p0, p1, p2, p3 = code_pairs(x)
    if FAST:
        s = tl.reshape(scales, (ROWS, G, 1)).to(tl.int32)
        scale = tl.broadcast_to(fast_pair_scale(s), (ROWS, G, 4))
        p0, p1 = scaled_pairs(p0, scale), scaled_pairs(p1, scale)
        p2, p3 = scaled_pairs(p2, scale), scaled_pairs(p3, scale)
    else:
        p0, p1, p2, p3 = _portable_pairs(p0), _portable_pairs(p1), _portable_pairs(p2), _portable_pairs(p3)
    codes = tl.join(tl.join(p0, p1), tl.join(p2, p3))  # [ROWS, G, t, b, h, s]: code 2s + h + 4b of word t
    if not FAST:
        # 2^(s-127): s = 0 is the subnormal 2^-127, s = 255 is NaN.
        s = tl.reshape(scales, (ROWS, G, 1, 1, 1, 1)).to(tl.int32)
        scale = tl.where(s == 0, 0x00400000, tl.where(s == 255, 0x7FC00000, s << 23))
        codes = codes * scale.to(tl.float32, bitcast=True)
    return in_slot_order(codes, ROWS, BLOCK_K, SPAN)


@triton.jit
def fast_pair_scale(s):
    """e8m0 scale bytes s (int32) -> both bf16 halves of 2^(s - 1 - FAST_EXP), a code pair's multiplier; 255: NaN."""
    return tl.where(s == 255, 0x7FC07FC0, (s + 126 - FAST_EXP) * 0x00800080)


@triton.jit
def in_slot_order(codes, ROWS: tl.constexpr, BLOCK_K: tl.constexpr, SPAN: tl.constexpr):
    """_fp4_to_bf16's joined code pairs ([ROWS, BLOCK_K / 32, word t, b, h, s] in any shape of that element order:
    code 2s + h + 4b of word t) -> [ROWS, BLOCK_K] in k_slot order of SPAN (BLOCK_K a multiple of SPAN). SPAN 128
    also takes a part of 128 columns (BLOCK_K 32 or 64) as [ROWS, block B, its words of the part, b, h, s]."""
    if SPAN == 128:
        # [..., block B of each 128, word t, b, h, s] -> [..., t, s, h, B, b]
        WORDS: tl.constexpr = min(BLOCK_K // 32, 4)
        shape: tl.constexpr = (ROWS, BLOCK_K // (32 * WORDS), 4, WORDS, 2, 2, 2)
        codes = tl.permute(tl.reshape(codes, shape), (0, 1, 3, 6, 5, 2, 4))
    else:
        codes = tl.permute(tl.reshape(codes, (ROWS, BLOCK_K // 32, 4, 2, 2, 2)), (0, 1, 5, 4, 2, 3))
    return tl.reshape(codes, (ROWS, BLOCK_K))


@triton.jit
def _act_tile(a_ptr, a_rows, a_row_mask, a_stride, k0, BLOCK_K: tl.constexpr):
    """bf16 A[a_rows, k0:k0+BLOCK_K] (64-bit row indices); masked rows read zero."""
    kk = k0 + tl.arange(0, BLOCK_K)
    return tl.load(a_ptr + a_rows[:, None] * a_stride + kk[None, :], mask=a_row_mask[:, None], other=0.0)


@triton.jit
def weight_tile(w_ptr, w_scale_ptr, w_rows, k_dim, k0, BLOCK_K: tl.constexpr):
    """MXFP4 W[w_rows, k0:k0+BLOCK_K] as loaded: int32 words [len(w_rows), BLOCK_K / 8] (8 codes each) and e8m0 scale
    bytes [len(w_rows), BLOCK_K / 32], from W's [N, K/2] bytes and [N, K/32] scales (64-bit row indices)."""
    # k_dim % 256 == 0 (problem/validation.py): scale rows 8-byte aligned, so the pipeliner copies them asynchronously
    scale_stride = tl.multiple_of(k_dim // 32, 8)
    # and rows of words a multiple of 32 words (128 bytes) apart: a thread's 4 words are one 16-byte copy, not two of 8
    words = tl.load(
        w_ptr.to(tl.pointer_type(tl.int32))
        + w_rows[:, None] * tl.multiple_of(k_dim // 8, 32)
        + (k0 // 8 + tl.arange(0, BLOCK_K // 8))[None, :]
    )
    ws = tl.load(w_scale_ptr + w_rows[:, None] * scale_stride + (k0 // 32 + tl.arange(0, BLOCK_K // 32))[None, :])
    return words, ws


@triton.jit
def _weight_step(
    acc,
    a,
    w_ptr,
    w_scale_ptr,
    w_rows,
    k_dim,
    k0,
    BLOCK_K: tl.constexpr,
    COLS: tl.constexpr,
    FAST: tl.constexpr,
    INTERPRET: tl.constexpr,
    SPAN: tl.constexpr,
):
    """acc [COLS, ROWS] += MXFP4 W[w_rows, k0:k0+BLOCK_K] @ a^T, a the activation tile [ROWS, BLOCK_K] (_act_tile, in
    k_slot order of SPAN) and W its [N, K/2] bytes and [N, K/32] scales (64-bit row indices). The CPU interpreter's
    tl.dot multiplies bf16 bit patterns, so there both operands go in as fp32."""
    words, ws = weight_tile(w_ptr, w_scale_ptr, w_rows, k_dim, k0, BLOCK_K)
    w = _fp4_to_bf16(words, ws, COLS, BLOCK_K, FAST, SPAN)
    if INTERPRET:
        return tl.dot(w.to(tl.float32), tl.trans(a.to(tl.float32)), acc, input_precision="ieee")
    return tl.dot(w.to(tl.bfloat16), tl.trans(a), acc)


@triton.jit
def _whole_dot(acc, ROWS: tl.constexpr, BLOCK_N: tl.constexpr, FAST: tl.constexpr):
    """acc through an identity the compiler cannot see into (NVIDIA PTX), so that the loop uses the K step's dot
    at once: Triton then issues its wgmmas behind one fence and one wait, instead of splitting the dot into k16
    slices with a fence, descriptor arithmetic and a wait each. Only on one warpgroup's 64 weight rows and at most
    64 rows, where it was measured to pay (docs/triton.md, "One fence a K step")."""
    if FAST and ROWS <= 64 and BLOCK_N <= 32:
        acc = tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [acc], dtype=tl.float32, is_pure=True, pack=1)
    return acc


@triton.jit
def moe_stage1_kernel(
    a1_ptr,
    w1_ptr,
    w1_scale_ptr,
    a2_ptr,
    sorted_ids_ptr,
    sorted_expert_ids_ptr,
    num_valid_ids_ptr,
    n_tokens,
    d_hidden,
    d_inter,
    a2_ready_ptr,
    BLOCK_M: tl.constexpr,
    ROWS: tl.constexpr,
    TAIL_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    FAST: tl.constexpr,
    INTERPRET: tl.constexpr,
    JUDGE: tl.constexpr,
    OVERLAP: tl.constexpr,
    PDL: tl.constexpr,
    SLOT_SPAN1: tl.constexpr,
    SLOT_SPAN2: tl.constexpr,
):
    after_previous_launch(PDL)
    block, tile = block_and_tile(OVERLAP)
    if skip_block(block, sorted_ids_ptr, num_valid_ids_ptr, n_tokens, BLOCK_M, ROWS, TAIL_M):
        if OVERLAP:
            a2_columns_done(a2_ready_ptr, block, tl.minimum(BLOCK_N, d_inter - tile * BLOCK_N))
        return
    rows, _packed, tokens, valid, expert = routing_block(
        block, sorted_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M, ROWS
    )
    cols = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    # Gate and up rows interleaved (gate col 0, up col 0, ...): one K loop, and wgmma's 64 rows already at BLOCK_N 32
    gate_rows = expert * 2 * d_inter + tl.minimum(cols, d_inter - 1)
    w_rows = tl.reshape(tl.join(gate_rows, gate_rows + d_inter), (2 * BLOCK_N,))
    acc = tl.zeros((2 * BLOCK_N, ROWS), dtype=tl.float32)
    for k0 in range(0, d_hidden, BLOCK_K):
        a = _act_tile(a1_ptr, tokens.to(tl.int64), valid, d_hidden, k0, BLOCK_K)
        acc = _weight_step(
            acc, a, w1_ptr, w1_scale_ptr, w_rows, d_hidden, k0, BLOCK_K, 2 * BLOCK_N, FAST, INTERPRET, SLOT_SPAN1
        )
        acc = _whole_dot(acc, ROWS, BLOCK_N, FAST)
    gate, up = tl.split(tl.reshape(tl.trans(acc), (ROWS, BLOCK_N, 2)))
    h = gated_h(gate, up, JUDGE, INTERPRET)
    a2 = _mx_round_trip(h, ROWS, BLOCK_N, FAST_EXP if FAST else 0)
    out_offs = rows[:, None].to(tl.int64) * d_inter + k_slot(cols, SLOT_SPAN2)[None, :]
    tl.store(a2_ptr + out_offs, a2.to(tl.bfloat16), mask=(cols < d_inter)[None, :])
    if OVERLAP:
        a2_columns_done(a2_ready_ptr, block, tl.minimum(BLOCK_N, d_inter - tile * BLOCK_N))


@triton.jit
def moe_stage2_kernel(
    a2_ptr,
    w2_ptr,
    w2_scale_ptr,
    out_ptr,
    topk_weights_ptr,
    sorted_ids_ptr,
    sorted_expert_ids_ptr,
    num_valid_ids_ptr,
    n_tokens,
    d_hidden,
    d_inter,
    a2_ready_ptr,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    ROWS: tl.constexpr,
    TAIL_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    K_STEPS: tl.constexpr,
    N_TILES: tl.constexpr,
    FAST: tl.constexpr,
    INTERPRET: tl.constexpr,
    OVERLAP: tl.constexpr,
    PDL: tl.constexpr,
    SLOT_SPAN: tl.constexpr,
):
    block, group = stage2_start(a2_ready_ptr, d_inter, OVERLAP, PDL)
    if skip_block(block, sorted_ids_ptr, num_valid_ids_ptr, n_tokens, BLOCK_M, ROWS, TAIL_M):
        return
    rows, packed, tokens, valid, expert = routing_block(
        block, sorted_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M, ROWS
    )
    weight = routing_weights(topk_weights_ptr, packed, tokens, valid, TOPK)
    # N_TILES output tiles in one loop over (tile, K step); columns past d_hidden read the last weight row, add nothing
    acc = tl.zeros((BLOCK_N, ROWS), dtype=tl.float32)
    if K_STEPS == 1:
        # d_inter in one step: every tile multiplies this activation tile, read once per program
        a = _act_tile(a2_ptr, rows.to(tl.int64), rows >= 0, d_inter, 0, BLOCK_K)
    for step in range(0, N_TILES * K_STEPS):
        cols = (group * N_TILES + step // K_STEPS) * BLOCK_N + tl.arange(0, BLOCK_N)
        w_rows = expert * d_hidden + tl.minimum(cols, d_hidden - 1)
        k0 = (step % K_STEPS) * BLOCK_K
        if K_STEPS > 1:
            a = _act_tile(a2_ptr, rows.to(tl.int64), rows >= 0, d_inter, k0, BLOCK_K)
        acc = _weight_step(
            acc, a, w2_ptr, w2_scale_ptr, w_rows, d_inter, k0, BLOCK_K, BLOCK_N, FAST, INTERPRET, SLOT_SPAN
        )
        if step % K_STEPS == K_STEPS - 1:
            y = tl.trans(acc) * weight[:, None]
            out_offs = tokens[:, None].to(tl.int64) * d_hidden + cols[None, :]
            tl.atomic_add(
                out_ptr + out_offs,
                y.to(out_ptr.dtype.element_ty),
                mask=valid[:, None] & (cols < d_hidden)[None, :],
                sem="relaxed",
            )
            acc = tl.zeros((BLOCK_N, ROWS), dtype=tl.float32)
