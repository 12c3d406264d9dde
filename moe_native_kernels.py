"""Native MXFP4 kernels of the a4w4 MoE layer for AMD CDNA4 (gfx950); launchers in moe_triton.py.

gfx950 multiplies MXFP4 by MXFP4 in hardware (v_mfma_scale_f32_16x16x128_f8f6f4 and
32x32x64): packed e2m1 bytes and e8m0 scale bytes go to the MFMA as they are, which is this
layer's numerics exactly (SPEC 1: dequantized operands, fp32 accumulation). tl.dot_scaled with
"e2m1" on both sides emits those instructions; elsewhere (NVIDIA GPUs, the CPU interpreter)
Triton emulates it, so the same source is checked there.

So the activation buffers hold packed fp4 bytes and e8m0 scale bytes (SPEC 3.3, bit for bit),
written by the quantization launch (a1, token order) and by stage 1's epilogue (a2, sorted
order), and the weights are read as the input tuple carries them: raw [E, N, K/2] bytes and 2-D
[E*N, K/32] scales, no decode and no conversion. Three launches besides the shared routing:
  moe_native_prep_kernel    chunk histograms (moe_triton_kernels._chunk_histogram), and a1
                            quantized to bytes and scales; the output zeroed.
  moe_native_stage1_kernel  per routing block and block_n1 columns of h: one scaled GEMM over
                            the gate and up rows interleaved, silu(gate) * up rounded to bf16,
                            quantized to a2 bytes and scales in sorted order.
  moe_native_stage2_kernel  down GEMM of those rows, times the routing weight, added atomically
                            into the output; N_TILES output tiles per program.
The weights are the MMA's left operand ([weight rows, K] x [K, routing rows]): the routing
block is the narrow side, which the MFMA's 16-wide N dimension takes without padding at
block_m 16. The quantizer is mxfp4_kernels' integer one, which quant.py uses too: exact on every
backend and under the interpreter.
"""

import triton
import triton.language as tl

from moe_triton_kernels import _chunk_histogram, _round_to_bf16, _routing_block, _skip_block
from mxfp4_kernels import mx_encode_pairs


@triton.jit
def _mx_operand(ptr, scale_ptr, rows, k_dim, k0, BLOCK_K: tl.constexpr):
    """MXFP4 rows[:, k0:k0+BLOCK_K] of a [*, k_dim] matrix stored as bytes [*, k_dim/2] at ptr and
    scales [*, k_dim/32] at scale_ptr: (bytes [R, BLOCK_K/2], scales [R, BLOCK_K/32]). rows are
    32-bit and relative to the (scalar) base pointers, so on AMD the loads can be buffer loads
    (a scalar base and 32-bit offsets) rather than 64-bit address arithmetic per element."""
    # k_dim is a multiple of 256 (validation.py): rows start 128-byte aligned, scale rows 8-byte.
    row_bytes = tl.multiple_of(k_dim // 2, 128)
    row_scales = tl.multiple_of(k_dim // 32, 8)
    kb = k0 // 2 + tl.arange(0, BLOCK_K // 2)
    ks = k0 // 32 + tl.arange(0, BLOCK_K // 32)
    values = tl.load(ptr + (rows[:, None] * row_bytes + kb[None, :]))
    return values, tl.load(scale_ptr + (rows[:, None] * row_scales + ks[None, :]))


@triton.jit
def _mx_step(acc, w, w_scale, a, a_scale):
    """acc [N, R] += W [N, K] @ A[R, K]^T, both MXFP4 (bytes and scales as _mx_operand gives)."""
    return tl.dot_scaled(w, w_scale, "e2m1", tl.trans(a), a_scale, "e2m1", acc)


@triton.jit
def moe_native_prep_kernel(
    topk_ids_ptr,
    hidden_ptr,
    a1_ptr,
    a1_scale_ptr,
    out_ptr,
    chunk_counts_ptr,
    n_tokens,
    n_slots,
    n_chunks,
    d_hidden,
    EXPERT_BINS: tl.constexpr,
    HIST_CHUNK: tl.constexpr,
    QUANT_BLOCKS: tl.constexpr,
):
    """hidden_ptr: the hidden states' bf16 bits as int32 pairs. Programs below n_chunks count
    the experts of one chunk of topk_ids; the others quantize QUANT_BLOCKS 32-blocks of the
    hidden states, taken as one flat array (no block straddles two rows), and zero the output
    elements they cover."""
    pid = tl.program_id(0)
    if pid < n_chunks:
        _chunk_histogram(topk_ids_ptr, chunk_counts_ptr, n_slots, EXPERT_BINS, HIST_CHUNK)
    else:
        blocks = (pid - n_chunks) * QUANT_BLOCKS + tl.arange(0, QUANT_BLOCKS)
        valid = blocks < n_tokens * (d_hidden // 32)
        pairs = blocks[:, None].to(tl.int64) * 16 + tl.arange(0, 16)[None, :]
        bits = tl.reshape(tl.load(hidden_ptr + pairs, mask=valid[:, None], other=0), (QUANT_BLOCKS, 1, 16))
        fp4, scale = mx_encode_pairs(bits & 0xFFFF, (bits >> 16) & 0xFFFF, 7)
        tl.store(a1_ptr + pairs, tl.reshape(fp4, (QUANT_BLOCKS, 16)), mask=valid[:, None])
        tl.store(a1_scale_ptr + blocks, tl.reshape(scale, (QUANT_BLOCKS,)), mask=valid)
        offs = blocks[:, None].to(tl.int64) * 32 + tl.arange(0, 32)[None, :]
        tl.store(out_ptr + offs, tl.zeros((QUANT_BLOCKS, 32), dtype=out_ptr.dtype.element_ty), mask=valid[:, None])


@triton.jit
def moe_native_stage1_kernel(
    a1_ptr,
    a1_scale_ptr,
    w1_ptr,
    w1_scale_ptr,
    a2_ptr,
    a2_scale_ptr,
    sorted_ids_ptr,
    sorted_expert_ids_ptr,
    num_valid_ids_ptr,
    n_tokens,
    d_hidden,
    d_inter,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    if _skip_block(sorted_ids_ptr, num_valid_ids_ptr, n_tokens, BLOCK_M, BLOCK_M, 0):
        return
    rows, _packed, tokens, valid, expert = _routing_block(
        sorted_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M, BLOCK_M
    )
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    # The expert's weights as scalar base pointers (64-bit), its rows as 32-bit offsets. Gate and
    # up rows interleaved (gate col 0, up col 0, ...): one K loop and one activation tile per
    # step feed both, and the epilogue splits them apart in registers.
    w_base = w1_ptr + expert * (2 * d_inter) * (d_hidden // 2)
    w_scale_base = w1_scale_ptr + expert * (2 * d_inter) * (d_hidden // 32)
    gate_rows = tl.minimum(cols, d_inter - 1)
    w_rows = tl.reshape(tl.join(gate_rows, gate_rows + d_inter), (2 * BLOCK_N,))
    acc = tl.zeros((2 * BLOCK_N, BLOCK_M), dtype=tl.float32)
    # Padding rows read token 0's activations instead of masked loads: a row of the product
    # depends on its own activation row only, and stage 2 adds nothing from padding rows.
    a_rows = tl.where(valid, tokens, 0)
    for k0 in range(0, d_hidden, BLOCK_K):
        a, a_scale = _mx_operand(a1_ptr, a1_scale_ptr, a_rows, d_hidden, k0, BLOCK_K)
        w, w_scale = _mx_operand(w_base, w_scale_base, w_rows, d_hidden, k0, BLOCK_K)
        acc = _mx_step(acc, w, w_scale, a, a_scale)
    gate, up = tl.split(tl.reshape(tl.trans(acc), (BLOCK_M, BLOCK_N, 2)))
    h = _round_to_bf16(gate / (1.0 + tl.exp(-gate)) * up)
    bits = tl.reshape(h.to(tl.int32, bitcast=True), (BLOCK_M, BLOCK_N // 32, 16, 2))
    h_even, h_odd = tl.split(bits)
    fp4, scale = mx_encode_pairs(h_even, h_odd, 23)
    byte_cols = tl.program_id(1) * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
    scale_cols = tl.program_id(1) * (BLOCK_N // 32) + tl.arange(0, BLOCK_N // 32)
    tl.store(
        a2_ptr + (rows[:, None] * (d_inter // 2) + byte_cols[None, :]),
        tl.reshape(fp4, (BLOCK_M, BLOCK_N // 2)),
        mask=(byte_cols < d_inter // 2)[None, :],
    )
    tl.store(
        a2_scale_ptr + (rows[:, None] * (d_inter // 32) + scale_cols[None, :]),
        scale,
        mask=(scale_cols < d_inter // 32)[None, :],
    )


@triton.jit
def moe_native_stage2_kernel(
    a2_ptr,
    a2_scale_ptr,
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
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    K_STEPS: tl.constexpr,
    N_TILES: tl.constexpr,
    EVEN_N: tl.constexpr,
):
    if _skip_block(sorted_ids_ptr, num_valid_ids_ptr, n_tokens, BLOCK_M, BLOCK_M, 0):
        return
    rows, packed, tokens, valid, expert = _routing_block(
        sorted_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M, BLOCK_M
    )
    slot = (tokens * TOPK + (packed >> 24)).to(tl.int64)
    weight = tl.load(topk_weights_ptr + slot, mask=valid, other=0.0)
    # The expert's weights and the output as scalar base pointers, moved along by whole tiles;
    # the per-row and per-column offsets (32-bit) stay the same from tile to tile.
    w_base = w2_ptr + expert * d_hidden * (d_inter // 2)
    w_scale_base = w2_scale_ptr + expert * d_hidden * (d_inter // 32)
    out_offs = tokens[:, None] * d_hidden + tl.arange(0, BLOCK_N)[None, :]
    # N_TILES output tiles per program (the routing and setup paid once), each a K loop over
    # d_inter; when d_inter fits one K step the activation tile is read once per program.
    # Padding rows of a2 hold stage 1's values of token 0 and add nothing (masked below). A last
    # partial tile (EVEN_N false) reads the last weight row for its columns past d_hidden and
    # masks them out of the add.
    if K_STEPS == 1:
        a, a_scale = _mx_operand(a2_ptr, a2_scale_ptr, rows, d_inter, 0, BLOCK_K)
    # The program's tiles that lie inside d_hidden (a runtime count: no work past the end).
    first_tile = tl.program_id(1) * N_TILES
    for tile in range(first_tile, tl.minimum(first_tile + N_TILES, tl.cdiv(d_hidden, BLOCK_N))):
        w_ptr = w_base + tile * BLOCK_N * (d_inter // 2)
        w_scale_ptr = w_scale_base + tile * BLOCK_N * (d_inter // 32)
        if EVEN_N:
            w_rows = tl.arange(0, BLOCK_N)
            mask = valid[:, None]
        else:
            w_rows = tl.minimum(tl.arange(0, BLOCK_N), d_hidden - 1 - tile * BLOCK_N)
            mask = valid[:, None] & (tile * BLOCK_N + tl.arange(0, BLOCK_N) < d_hidden)[None, :]
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        if K_STEPS == 1:
            # No K loop: the tile loop is the innermost one, which the pipeliner software-pipelines
            # (the next tile's weights load during this one's epilogue).
            w, w_scale = _mx_operand(w_ptr, w_scale_ptr, w_rows, d_inter, 0, BLOCK_K)
            acc = _mx_step(acc, w, w_scale, a, a_scale)
        else:
            for k0 in range(0, d_inter, BLOCK_K):
                a, a_scale = _mx_operand(a2_ptr, a2_scale_ptr, rows, d_inter, k0, BLOCK_K)
                w, w_scale = _mx_operand(w_ptr, w_scale_ptr, w_rows, d_inter, k0, BLOCK_K)
                acc = _mx_step(acc, w, w_scale, a, a_scale)
        y = tl.trans(acc) * weight[:, None]
        tl.atomic_add(out_ptr + tile * BLOCK_N + out_offs, y.to(out_ptr.dtype.element_ty), mask=mask, sem="relaxed")
