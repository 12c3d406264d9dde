"""The fp8 path's kernels of the a4w4 MoE layer (SPEC 1): both GEMMs as e4m3 x e4m3 MMAs with fp32
accumulation, exact (docs/triton.md, "The fp8 path"); the launcher is moe_triton/fp8.py.

Every e2m1 value times 2^d is exact in fp8 e4m3 for d in [-8, 6]. A 32-block's scale is folded
into its e4m3 values relative to a base:
  a1 (stage 1's activations)  per token row, by the prep kernel: base = the largest scale exponent
      of the row's nonzero blocks, d = s - base + 6 in [-8, 6]; the factor 2^(base - 6) is applied
      to the fp32 result. Rows outside the window also get their exact bf16 values (a1_exact).
  weights (both stages) and a2 (stage 2's activations, written as MXFP4 by stage 1)  decoded from
      their e2m1 codes in the K loop: base = the largest scale byte of the row (stage 1's weights:
      of the whole row; stage 2: of the row's K step), d = byte - base + 6 in [-5, 6] (the window
      in which the code 0.5 stays a normal e4m3, so the 8 magnitudes form a table linear in the
      byte: two IMADs and a prmt lookup per word); factor 2^(base - 133).
A row or step outside its window is detected before the K loop and the program runs the exact
bf16 loop instead (the fallback).

Launches: moe_fp8_prep_kernel (histograms, a1, out zeroed), the routing's moe_route_kernel,
moe_fp8_stage1_kernel, moe_fp8_stage2_kernel (tail tiles as on the decode path). The decoded
operands' columns come out permuted within each 32-block (_fp8_slot); a1 is stored in that order,
a2 and the weights are decoded into it, which leaves every dot product unchanged.
"""

import triton
import triton.language as tl

from moe_triton.kernels.decode import FAST_EXP, _k_slot, _mx_round_trip
from moe_triton.kernels.routing import _after_previous_launch, _chunk_histogram, _routing_block, _skip_block
from moe_triton.kernels.silu import gated_h
from mxfp4.encode import mx_encode_pairs

# The base of an a1 row whose blocks do not fit the fp8 window.
OUT_OF_WINDOW = tl.constexpr(-1024)
# Scale bytes a base may take (factor 2^(base - 133) between 2^-69 and 2^58): beyond them the fp32
# products and sums could leave the normal range, and the fallback takes the row.
W_BASE_MIN = tl.constexpr(64)
W_BASE_MAX = tl.constexpr(191)
# Octaves below the base that a block may lie: d = 6 .. -5.
W_WINDOW = tl.constexpr(11)
# The fallback's K step: exact fp32 weight values in registers, so a narrow one, unpipelined.
FALLBACK_K = tl.constexpr(32)
# a2's scale byte for a block whose codes are all zero (SPEC 3.3 bytes stop at 254).
EMPTY_BLOCK = tl.constexpr(255)


@triton.jit
def _exp2_int(e):
    """2^e as fp32 for int32 e in [-149, 127], subnormals included (built from bits)."""
    bits = tl.where(e >= -126, (e + 127) << 23, 1 << tl.maximum(e + 149, 0))
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _fp8_slot(cols):
    """Column of the fp8 activation buffers where activation column `cols` is stored: within each
    32-block, column 8t + 4h + i goes to 16h + 4t + i, where the weight decode puts code i of half
    h of word t (the wgmma k32 register fragment: a thread holds k 4t..4t+3 and 16+4t..16+4t+3)."""
    r = cols % 32
    return cols - r + (((r >> 2) & 1) << 4) + ((r >> 3) << 2) + (r & 3)


@triton.jit
def _e4m3_value(byte):
    """e4m3 bytes (int32, 0..255, never 0x7F / 0xFF) -> their fp32 values, from the bits."""
    e = (byte >> 3) & 0xF
    m = byte & 7
    normal = (((e + 120) << 23) | (m << 20)).to(tl.float32, bitcast=True)
    v = tl.where(e > 0, normal, m.to(tl.float32) * 0.001953125)
    return tl.where((byte & 0x80) != 0, -v, v)


@triton.jit
def moe_fp8_prep_kernel(
    topk_ids_ptr,
    hidden_ptr,
    a1_ptr,
    a1_base_ptr,
    a1_exact_ptr,
    out_ptr,
    chunk_counts_ptr,
    n_tokens,
    n_slots,
    n_chunks,
    d_hidden,
    EXPERT_BINS: tl.constexpr,
    HIST_CHUNK: tl.constexpr,
    ROW_BLOCKS: tl.constexpr,
    FAST: tl.constexpr,
    PDL: tl.constexpr,
):
    """Programs below n_chunks count experts (as moe_prep_kernel); each other program takes one
    token row: SPEC 3.3 (the package's integer encoder), the codes decoded into e4m3 against the
    row's largest scale byte as the weights are, the base stored (OUT_OF_WINDOW and the exact
    bf16 values where the row leaves the window), the output row zeroed."""
    _after_previous_launch(PDL)
    pid = tl.program_id(0)
    if pid < n_chunks:
        _chunk_histogram(topk_ids_ptr, chunk_counts_ptr, n_slots, EXPERT_BINS, HIST_CHUNK)
    else:
        row = (pid - n_chunks).to(tl.int64)
        blocks = tl.arange(0, ROW_BLOCKS)
        inside = blocks < d_hidden // 32
        pairs = row * (d_hidden // 2) + blocks[:, None] * 16 + tl.arange(0, 16)[None, :]
        bits = tl.load(hidden_ptr.to(tl.pointer_type(tl.int32)) + pairs, mask=inside[:, None], other=0)
        bits = tl.reshape(bits, (1, ROW_BLOCKS, 16))
        fp4, scale = mx_encode_pairs(bits & 0xFFFF, (bits >> 16) & 0xFFFF, 7)
        s = scale.to(tl.int32)
        used = tl.max((fp4 & 0x77).to(tl.int32), axis=2) > 0  # blocks with a nonzero code
        top = tl.max(tl.where(used, s, 0), axis=1)
        bad = _window(top, tl.min(tl.where(used, s, 255), axis=1)) & (tl.max(used.to(tl.int32), axis=1) > 0)
        quads = tl.reshape(fp4, (1, ROW_BLOCKS, 4, 4)).to(tl.int32) << (8 * tl.arange(0, 4))[None, None, None, :]
        words = tl.reshape(tl.sum(quads, axis=3), (1, ROW_BLOCKS * 4))
        codes = _fp4_to_e4m3(words, s, top, 1, ROW_BLOCKS * 32, FAST)
        codes = codes.to(tl.uint8, bitcast=True) if FAST else codes.to(tl.uint8)
        cols = tl.arange(0, ROW_BLOCKS * 32)[None, :]
        tl.store(a1_ptr + row * d_hidden + cols, codes, mask=cols < d_hidden)
        tl.store(a1_base_ptr + row + tl.zeros((1,), dtype=tl.int64), tl.where(bad, OUT_OF_WINDOW, top))
        if tl.max(bad.to(tl.int32), axis=0) > 0:
            exact = _fp4_values(words, s, 1, ROW_BLOCKS * 32, False)
            tl.store(a1_exact_ptr + row * d_hidden + cols, exact.to(tl.bfloat16), mask=cols < d_hidden)
        zeros = tl.zeros((1, ROW_BLOCKS * 32), dtype=out_ptr.dtype.element_ty)
        tl.store(out_ptr + row * d_hidden + cols, zeros, mask=cols < d_hidden)


@triton.jit
def _e4m3_lookup(words, t0, t1):
    """NVIDIA PTX: 8 e2m1 codes per int32 word -> two registers of 4 e4m3 bytes (codes 0-3 and
    4-7 of the word, in order), each magnitude looked up with prmt in the table t0 (codes 0-3)
    : t1 (codes 4-7), each sign taken from the code's bit 3 by a sign-replicating prmt. 11
    instructions per word; t0, t1 and words [..] int32, outputs fp8 [.., 2, 2] each."""
    w4 = tl.join(tl.join(words, words), tl.join(words, words))
    a4 = tl.join(tl.join(t0, t0), tl.join(t0, t0))
    b4 = tl.join(tl.join(t1, t1), tl.join(t1, t1))
    return tl.inline_asm_elementwise(
        """{
        .reg .b32 m, h, w4, s0, s1, p0, p1;
        and.b32 m, $2, 0x77777777;
        shr.b32 h, m, 16;
        prmt.b32 p0, $6, $10, m;
        prmt.b32 p1, $6, $10, h;
        shl.b32 w4, $2, 4;
        prmt.b32 s0, w4, $2, 0xD9C8;
        prmt.b32 s1, w4, $2, 0xFBEA;
        and.b32 s0, s0, 0x80808080;
        and.b32 s1, s1, 0x80808080;
        or.b32 $0, p0, s0;
        or.b32 $1, p1, s1;
        }""",
        "=r,=r,r,r,r,r,r,r,r,r,r,r,r,r",
        [w4, a4, b4],
        dtype=(tl.float8e4nv, tl.float8e4nv),
        is_pure=True,
        pack=4,
    )


@triton.jit
def _portable_e4m3(words, field):
    """The bytes _e4m3_lookup produces, in integer arithmetic (any backend, the interpreter):
    words [R, G, 4] int32, field [R, G] int32 (the exponent field of the code 0.5 at the block's
    d, shifted to bits 3-6) -> int32 bytes [R, G, 4 words, 8 codes]."""
    nibbles = (words[:, :, :, None] >> (4 * tl.arange(0, 8))[None, None, None, :]) & 0xF
    mag = nibbles & 7
    e = field[:, :, None, None]
    byte = tl.where(mag == 0, 0, tl.where(mag == 1, e, e + 4 * mag))
    return byte | ((nibbles & 8) << 4)


@triton.jit
def _window(top, low):
    """Rows whose scale bytes (largest top, smallest low) leave the weights' fp8 window: some byte
    below top - W_WINDOW, or top outside W_BASE_MIN..W_BASE_MAX (NaN, huge or tiny scales)."""
    return (top - low > W_WINDOW) | (top < W_BASE_MIN) | (top > W_BASE_MAX)


@triton.jit
def _row_bases(w_scale_ptr, w_rows, k_dim, ROWS: tl.constexpr):
    """(top, bad) of whole weight rows: the largest scale byte of each row over k_dim, and whether
    the row leaves the window (_window). Read before stage 1's K loop, 64 bytes of a row at a time."""
    top = tl.zeros((ROWS,), dtype=tl.int32)
    low = tl.full((ROWS,), 255, dtype=tl.int32)
    for c0 in tl.range(0, k_dim // 32, 32, num_stages=1):
        cols = c0 + tl.arange(0, 32)
        inside = (cols < k_dim // 32)[None, :]
        s = tl.load(w_scale_ptr + w_rows[:, None] * (k_dim // 32) + cols[None, :], mask=inside, other=0).to(tl.int32)
        top = tl.maximum(top, tl.max(s, axis=1))
        low = tl.minimum(low, tl.min(tl.where(inside, s, 255), axis=1))
    return top, _window(top, low)


@triton.jit
def _fp4_to_e4m3(words, scales, top, ROWS: tl.constexpr, BLOCK_K: tl.constexpr, FAST: tl.constexpr):
    """MXFP4 weights, int32 words [ROWS, BLOCK_K/8] and e8m0 scales [ROWS, BLOCK_K/32] -> w [ROWS,
    BLOCK_K] in _fp8_slot order holding code x 2^d, d = byte - top + 6 for the row's base byte top
    [ROWS] (weight = w x 2^(top - 133)); exact while every byte lies in top - W_WINDOW .. top.
    FAST: e4m3 (fp8) by the PTX lookup; otherwise the e4m3 bytes as int32 (_portable_e4m3)."""
    G: tl.constexpr = BLOCK_K // 32
    s = scales.to(tl.int32)
    x = tl.reshape(words, (ROWS, G, 4))
    if FAST:
        # Table bytes [0, E, E+8, E+12] and [E+16 .. E+28], E = 8 (byte - top + 12): one IMAD each.
        lift = 12 - top
        t0 = s * 0x08080800 + (lift * 0x08080800 + 0x0C080000)[:, None]
        t1 = s * 0x08080808 + (lift * 0x08080808 + 0x1C181410)[:, None]
        t0 = tl.broadcast_to(t0[:, :, None], (ROWS, G, 4))
        t1 = tl.broadcast_to(t1[:, :, None], (ROWS, G, 4))
        lo, hi = _e4m3_lookup(x, t0, t1)
        codes = tl.join(tl.reshape(lo, (ROWS, G, 4, 4)), tl.reshape(hi, (ROWS, G, 4, 4)))  # [R, G, t, i, h]
        w = tl.reshape(tl.permute(codes, (0, 1, 4, 2, 3)), (ROWS, BLOCK_K))
    else:
        codes = _portable_e4m3(x, (s - top[:, None] + 12) * 8)  # [R, G, t, 8 codes = 4h + i]
        w = tl.reshape(tl.permute(tl.reshape(codes, (ROWS, G, 4, 2, 4)), (0, 1, 3, 2, 4)), (ROWS, BLOCK_K))
    return w


@triton.jit
def _fp4_values(words, scales, ROWS: tl.constexpr, BLOCK_K: tl.constexpr, ACT: tl.constexpr):
    """The exact MXFP4 values in _fp8_slot order (fp32 [ROWS, BLOCK_K]), for every scale byte: byte 0
    is 2^-127, 255 is NaN (SPEC 3.1), or for activations (ACT) EMPTY_BLOCK. The fallback's decode."""
    G: tl.constexpr = BLOCK_K // 32
    nibbles = (tl.reshape(words, (ROWS, G, 4))[:, :, :, None] >> (4 * tl.arange(0, 8))[None, None, None, :]) & 0xF
    mag = nibbles & 7
    bits = tl.where(mag >= 2, ((mag >> 1) + 126) << 23 | (mag & 1) << 22, tl.where(mag == 1, 0x3F000000, 0))
    value = (bits | (nibbles & 8) << 28).to(tl.float32, bitcast=True)
    s = scales.to(tl.int32)
    scale = tl.where(s == 0, 0x00400000, tl.where(s == 255, 0 if ACT else 0x7FC00000, s << 23))
    scale = scale.to(tl.float32, bitcast=True)
    value = value * scale[:, :, None, None]
    return tl.reshape(tl.permute(tl.reshape(value, (ROWS, G, 4, 2, 4)), (0, 1, 3, 2, 4)), (ROWS, BLOCK_K))


@triton.jit
def _weight_tile(w_ptr, w_scale_ptr, w_rows, k_dim, k0, BLOCK_K: tl.constexpr):
    """The raw words [rows, BLOCK_K/8] and scales [rows, BLOCK_K/32] of W[w_rows, k0:k0+BLOCK_K]."""
    # k_dim is a multiple of 256 (problem/validation.py): rows of scales start 8-byte aligned, which
    # lets the pipeliner copy the scales asynchronously like the weights.
    scale_stride = tl.multiple_of(k_dim // 32, 8)
    words = tl.load(
        w_ptr.to(tl.pointer_type(tl.int32))
        + w_rows[:, None] * (k_dim // 8)
        + (k0 // 8 + tl.arange(0, BLOCK_K // 8))[None, :]
    )
    scales = tl.load(w_scale_ptr + w_rows[:, None] * scale_stride + (k0 // 32 + tl.arange(0, BLOCK_K // 32))[None, :])
    return words, scales


@triton.jit
def _fp8_dot(acc, w, a, ACC_K: tl.constexpr, FAST: tl.constexpr):
    """acc + w @ a^T for folded weights w [COLS, K] and activations a [rows, K]: e4m3 on the fast
    path, where each k32 wgmma starts from a zero accumulator and is added into fp32
    (max_num_imprecise_acc = ACC_K = 32): its 32 products share one power of two, so their sum is
    an integer of at most 13 bits times it, exact in the tensor core. Elsewhere (the interpreter)
    both come as e4m3 bytes in int32 and multiply as fp32, the same exact products."""
    if not FAST:
        acc = tl.dot(_e4m3_value(w), tl.trans(_e4m3_value(a)), acc, input_precision="ieee")
    elif ACC_K > 0:
        acc = tl.dot(w, tl.trans(a), acc, max_num_imprecise_acc=ACC_K)
    else:
        acc = tl.dot(w, tl.trans(a), acc)
    return acc


@triton.jit
def _a1_tile(a1_ptr, tokens, valid, d_hidden, k0, BLOCK_K: tl.constexpr, DIRECT: tl.constexpr, FAST: tl.constexpr):
    """a1[tokens, k0:k0+BLOCK_K]: e4m3 on the fast path, the bytes as int32 elsewhere. DIRECT loads
    it as e4m3, which the pipeliner copies straight into the MMA's shared-memory operand; otherwise
    as uint8 bitcast in registers, because triton 3.6 and 3.9 fail to pipeline an e4m3 operand
    loaded as such into a dot whose max_num_imprecise_acc is below its K."""
    offs = tokens[:, None] * d_hidden + (k0 + tl.arange(0, BLOCK_K))[None, :]
    if FAST and DIRECT:
        a = tl.load(a1_ptr.to(tl.pointer_type(tl.float8e4nv)) + offs, mask=valid[:, None], other=0.0)
    else:
        a = tl.load(a1_ptr + offs, mask=valid[:, None], other=0)
        a = a.to(tl.float8e4nv, bitcast=True) if FAST else a.to(tl.int32)
    return a


@triton.jit
def _exact_dot(acc, a, words, scales, COLS: tl.constexpr, BLOCK_K: tl.constexpr, INTERPRET: tl.constexpr):
    """The fallback's step: acc += W @ a^T with the exact weight values (bf16 MMAs on a GPU, whose
    products are exact; fp32 under the interpreter). a fp32 [rows, BLOCK_K], values exact in bf16."""
    w = _fp4_values(words, scales, COLS, BLOCK_K, False)
    if INTERPRET:
        return tl.dot(w, tl.trans(a), acc, input_precision="ieee")
    return tl.dot(w.to(tl.bfloat16), tl.trans(a.to(tl.bfloat16)), acc)


@triton.jit
def _exact_activations(a_ptr, base, exact_ptr, offs, mask):
    """a1's values (fp32) of a tile for the fallback: e4m3 bytes times 2^(base - 133) where the row
    fits the window, the bf16 values written beside them where it does not."""
    outside = (base == OUT_OF_WINDOW)[:, None]
    bytes_ = tl.load(a_ptr + offs, mask=mask, other=0).to(tl.int32)
    folded = _e4m3_value(bytes_) * _exp2_int(tl.where(base == OUT_OF_WINDOW, 133, base) - 133)[:, None]
    exact = tl.load(exact_ptr + offs, mask=mask & outside, other=0.0).to(tl.float32)
    return tl.where(outside, exact, folded)


@triton.jit
def moe_fp8_stage1_kernel(
    a1_ptr,
    a1_base_ptr,
    a1_exact_ptr,
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
    ROWS: tl.constexpr,
    TAIL_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    ACC_K: tl.constexpr,
    A2_BF16: tl.constexpr,
    FAST: tl.constexpr,
    INTERPRET: tl.constexpr,
    JUDGE: tl.constexpr,
    PDL: tl.constexpr,
):
    """Per routing block and BLOCK_N columns of h: the gate and up rows interleaved (as on the
    decode path) times a1, then silu(gate) * up rounded to bf16 and quantized into a2: MXFP4 for
    moe_fp8_stage2_kernel, or (A2_BF16) the decode path's bf16 a2 for its moe_stage2_kernel."""
    _after_previous_launch(PDL)
    if _skip_block(tl.program_id(0), sorted_ids_ptr, num_valid_ids_ptr, n_tokens, BLOCK_M, ROWS, TAIL_M):
        return
    rows, _packed, tokens, valid, expert = _routing_block(
        tl.program_id(0), sorted_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M, ROWS
    )
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    gate_rows = expert * 2 * d_inter + tl.minimum(cols, d_inter - 1)
    w_rows = tl.reshape(tl.join(gate_rows, gate_rows + d_inter), (2 * BLOCK_N,))
    tokens64 = tokens.to(tl.int64)
    base = tl.load(a1_base_ptr + tokens64, mask=valid, other=0)
    fits = tl.max((base == OUT_OF_WINDOW).to(tl.int32), axis=0) == 0
    top, bad = _row_bases(w1_scale_ptr, w_rows, d_hidden, 2 * BLOCK_N)
    fits = fits & (tl.max(bad.to(tl.int32), axis=0) == 0)
    acc = tl.zeros((2 * BLOCK_N, ROWS), dtype=tl.float32)
    if fits:
        for k0 in range(0, d_hidden, BLOCK_K):
            a = _a1_tile(a1_ptr, tokens64, valid, d_hidden, k0, BLOCK_K, ACC_K == 0, FAST)
            words, scales = _weight_tile(w1_ptr, w1_scale_ptr, w_rows, d_hidden, k0, BLOCK_K)
            w = _fp4_to_e4m3(words, scales, top, 2 * BLOCK_N, BLOCK_K, FAST)
            acc = _fp8_dot(acc, w, a, ACC_K, FAST)
        acc = acc * _exp2_int(top - 133)[:, None] * _exp2_int(base - 133)[None, :]
    else:
        acc = tl.zeros((2 * BLOCK_N, ROWS), dtype=tl.float32)
        for k0 in tl.range(0, d_hidden, FALLBACK_K, num_stages=1):
            offs = tokens64[:, None] * d_hidden + (k0 + tl.arange(0, FALLBACK_K))[None, :]
            a = _exact_activations(a1_ptr, base, a1_exact_ptr, offs, valid[:, None])
            words, scales = _weight_tile(w1_ptr, w1_scale_ptr, w_rows, d_hidden, k0, FALLBACK_K)
            acc = _exact_dot(acc, a, words, scales, 2 * BLOCK_N, FALLBACK_K, INTERPRET)
    gate, up = tl.split(tl.reshape(tl.trans(acc), (ROWS, BLOCK_N, 2)))
    h = gated_h(gate, up, JUDGE, INTERPRET)
    if A2_BF16:
        # For the decode path's stage 2 (moe_stage2_kernel): a2 dequantized in bf16, as its stage 1
        # writes it (times 2^FAST_EXP on the fast path, columns in _k_slot order).
        a2 = _mx_round_trip(h, ROWS, BLOCK_N, FAST_EXP if FAST else 0)
        offs = rows[:, None].to(tl.int64) * d_inter + _k_slot(cols)[None, :]
        tl.store(a2_ptr + offs, a2.to(tl.bfloat16), mask=(cols < d_inter)[None, :])
        return
    # a2 as MXFP4 (SPEC 3.3, the package's integer encoder), EMPTY_BLOCK for blocks of zero codes.
    bits = tl.reshape(h.to(tl.int32, bitcast=True), (ROWS, BLOCK_N // 32, 16, 2))
    even, odd = tl.split(bits)
    fp4, scale = mx_encode_pairs(even, odd, 23)
    empty = tl.max((fp4 & 0x77).to(tl.int32), axis=2) == 0
    scale = tl.where(empty, EMPTY_BLOCK, scale.to(tl.int32)).to(tl.uint8)
    pairs = tl.program_id(1) * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
    tl.store(
        a2_ptr + rows[:, None].to(tl.int64) * (d_inter // 2) + pairs[None, :],
        tl.reshape(fp4, (ROWS, BLOCK_N // 2)),
        mask=(pairs < d_inter // 2)[None, :],
    )
    blocks = tl.program_id(1) * (BLOCK_N // 32) + tl.arange(0, BLOCK_N // 32)
    tl.store(
        a2_scale_ptr + rows[:, None].to(tl.int64) * (d_inter // 32) + blocks[None, :],
        scale,
        mask=(blocks < d_inter // 32)[None, :],
    )


@triton.jit
def _add_tile(acc, weight, tokens, valid, cols, out_ptr, d_hidden):
    """out[tokens, cols] += acc^T x the routing weights (bf16 atomics; fp32 under the interpreter)."""
    y = tl.trans(acc) * weight[:, None]
    tl.atomic_add(
        out_ptr + tokens[:, None].to(tl.int64) * d_hidden + cols[None, :],
        y.to(out_ptr.dtype.element_ty),
        mask=valid[:, None] & (cols < d_hidden)[None, :],
        sem="relaxed",
    )


@triton.jit
def _steps_fit(scale_ptr, rows, k_dim, STEPS: tl.constexpr, BLOCK_K: tl.constexpr, ACT: tl.constexpr):
    """Whether the rows' scale bytes fit the fp8 window in every K step (_window per row and step),
    read before stage 2's loop: it adds each tile into the output as it finishes, so a step found
    outside could no longer be redone. ACT: activation scales, whose EMPTY_BLOCK entries (blocks of
    zero codes) take no part."""
    G: tl.constexpr = BLOCK_K // 32
    STEPS_P2: tl.constexpr = triton.next_power_of_2(STEPS)
    cols = tl.arange(0, STEPS_P2)[:, None] * G + tl.arange(0, G)[None, :]
    s = tl.load(
        scale_ptr + rows[:, None, None] * (k_dim // 32) + cols[None, :, :],
        mask=(tl.arange(0, STEPS_P2) < STEPS)[None, :, None],
        other=EMPTY_BLOCK,
    ).to(tl.int32)
    real = s != EMPTY_BLOCK if ACT else s >= 0
    bad = _window(tl.max(tl.where(real, s, 0), axis=2), tl.min(tl.where(real, s, 255), axis=2))
    bad = bad & (tl.max(real.to(tl.int32), axis=2) > 0)
    return tl.max(tl.max(bad.to(tl.int32), axis=1), axis=0) == 0


@triton.jit
def _mx_tile(ptr, scale_ptr, rows, k_dim, k0, BLOCK_K: tl.constexpr):
    """The MXFP4 words [rows, BLOCK_K/8] (int32, 8 codes each) and scales [rows, BLOCK_K/32] of
    rows of a [*, k_dim] operand (fp4 bytes [*, k_dim/2], scales [*, k_dim/32]) at columns k0.."""
    return _weight_tile(ptr, scale_ptr, rows, k_dim, k0, BLOCK_K)


@triton.jit
def _act_top(scales):
    """Each activation row's base byte in a step: its largest scale byte, EMPTY_BLOCK left out."""
    s = scales.to(tl.int32)
    return tl.max(tl.where(s == EMPTY_BLOCK, 0, s), axis=1)


@triton.jit
def moe_fp8_stage2_kernel(
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
    ROWS: tl.constexpr,
    TAIL_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    K_STEPS: tl.constexpr,
    N_TILES: tl.constexpr,
    ACC_K: tl.constexpr,
    FAST: tl.constexpr,
    INTERPRET: tl.constexpr,
    PDL: tl.constexpr,
):
    """Down GEMM of a routing block's rows, N_TILES output tiles per program in one loop over (tile,
    K step) as on the decode path. Both operands are MXFP4 and decoded into e4m3 per step, each
    against its rows' largest scale byte in the step; the step's partial is scaled by both bases."""
    _after_previous_launch(PDL)
    if _skip_block(tl.program_id(0), sorted_ids_ptr, num_valid_ids_ptr, n_tokens, BLOCK_M, ROWS, TAIL_M):
        return
    rows, packed, tokens, valid, expert = _routing_block(
        tl.program_id(0), sorted_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M, ROWS
    )
    slot = (tokens * TOPK + (packed >> 24)).to(tl.int64)
    weight = tl.load(topk_weights_ptr + slot, mask=valid, other=0.0)
    rows64 = rows.to(tl.int64)
    # Every weight row of the program's tiles (the count padded to a power of two: clamped repeats).
    program_cols = tl.program_id(1) * N_TILES * BLOCK_N + tl.arange(0, triton.next_power_of_2(N_TILES * BLOCK_N))
    fits = _steps_fit(a2_scale_ptr, rows64, d_inter, K_STEPS, BLOCK_K, True)
    w_rows_all = expert * d_hidden + tl.minimum(program_cols, d_hidden - 1)
    fits = fits & _steps_fit(w2_scale_ptr, w_rows_all, d_inter, K_STEPS, BLOCK_K, False)
    acc = tl.zeros((BLOCK_N, ROWS), dtype=tl.float32)
    if fits:
        if K_STEPS == 1:
            # The whole of d_inter in one step: the activation tile is decoded once per program.
            a_words, a_scales = _mx_tile(a2_ptr, a2_scale_ptr, rows64, d_inter, 0, BLOCK_K)
            top_a = _act_top(a_scales)
            a = _fp4_to_e4m3(a_words, a_scales, top_a, ROWS, BLOCK_K, FAST)
        for step in range(0, N_TILES * K_STEPS):
            cols = (tl.program_id(1) * N_TILES + step // K_STEPS) * BLOCK_N + tl.arange(0, BLOCK_N)
            w_rows = expert * d_hidden + tl.minimum(cols, d_hidden - 1)
            k0 = (step % K_STEPS) * BLOCK_K
            if K_STEPS > 1:
                a_words, a_scales = _mx_tile(a2_ptr, a2_scale_ptr, rows64, d_inter, k0, BLOCK_K)
                top_a = _act_top(a_scales)
                a = _fp4_to_e4m3(a_words, a_scales, top_a, ROWS, BLOCK_K, FAST)
            words, scales = _weight_tile(w2_ptr, w2_scale_ptr, w_rows, d_inter, k0, BLOCK_K)
            top_w = tl.max(scales.to(tl.int32), axis=1)
            w = _fp4_to_e4m3(words, scales, top_w, BLOCK_N, BLOCK_K, FAST)
            part = _fp8_dot(tl.zeros((BLOCK_N, ROWS), dtype=tl.float32), w, a, ACC_K, FAST)
            acc += part * (_exp2_int(top_w - 133)[:, None] * _exp2_int(top_a - 133)[None, :])
            if step % K_STEPS == K_STEPS - 1:
                _add_tile(acc, weight, tokens, valid, cols, out_ptr, d_hidden)
                acc = tl.zeros((BLOCK_N, ROWS), dtype=tl.float32)
    else:
        # The fallback: the exact values, FALLBACK_K columns at a time.
        for step in tl.range(0, N_TILES * K_STEPS, num_stages=1):
            cols = (tl.program_id(1) * N_TILES + step // K_STEPS) * BLOCK_N + tl.arange(0, BLOCK_N)
            w_rows = expert * d_hidden + tl.minimum(cols, d_hidden - 1)
            k_step = step % K_STEPS
            for k0 in tl.range(k_step * BLOCK_K, (k_step + 1) * BLOCK_K, FALLBACK_K, num_stages=1):
                a_words, a_scales = _mx_tile(a2_ptr, a2_scale_ptr, rows64, d_inter, k0, FALLBACK_K)
                a = _fp4_values(a_words, a_scales, ROWS, FALLBACK_K, True)
                words, scales = _weight_tile(w2_ptr, w2_scale_ptr, w_rows, d_inter, k0, FALLBACK_K)
                acc = _exact_dot(acc, a, words, scales, BLOCK_N, FALLBACK_K, INTERPRET)
            if k_step == K_STEPS - 1:
                _add_tile(acc, weight, tokens, valid, cols, out_ptr, d_hidden)
                acc = tl.zeros((BLOCK_N, ROWS), dtype=tl.float32)
