"""MXFP4 activation encoding (SPEC 3.3) inside Triton kernels: gfx950's fp4 convert on values nudged so
that it rounds ties away from zero, or its emulation elsewhere (docs/gfx950.md, "The fp4 converts")."""

import triton
import triton.language as tl

from mxfp4.encode import e2m1_magnitude, quarter_steps


@triton.jit
def fp4_code_emulated(bits, scale_byte):
    """The E2M1 code (sign in bit 3) that the convert gives an fp32 bit pattern (int32) at the scale
    whose exponent field is scale_byte: rounded to nearest even, saturating (Inf and NaN too)."""
    # floor(4 |y|) against the doubled E2M1 midpoints, and whether it is exact.
    v, exact, e = quarter_steps(bits & 0x7FFFFFFF, scale_byte, 23)
    code = e2m1_magnitude(v)
    # Exact ties whose lower neighbour is even (0.25, 1.25, 2.5, 5) stay down.
    tie_down = exact & ((v == 1) | (v == 5) | (v == 10) | (v == 20))
    code = tl.where(e == 255, 7, code - tie_down.to(tl.int32))
    return code | ((bits >> 28) & 8)


@triton.jit
def fp4_pair_emulated(even_bits, odd_bits, scale_byte):
    """v_cvt_scalef32_pk_fp4_f32 emulated: the byte of two fp32 bit patterns' codes (even low)."""
    low = fp4_code_emulated(even_bits, scale_byte)
    return (low | (fp4_code_emulated(odd_bits, scale_byte) << 4)).to(tl.uint8)


@triton.jit
def fp4_pair_gfx950(even_bits, odd_bits, scale_byte):
    """v_cvt_scalef32_pk_fp4_f32 itself (gfx950 only), with the s_nop 0 that inline assembly must add."""
    return tl.inline_asm_elementwise(
        "v_cvt_scalef32_pk_fp4_f32 $0, $1, $2, $3\n\ts_nop 0",
        "=v,v,v,v",
        [even_bits, odd_bits, scale_byte << 23],
        dtype=tl.int32,
        is_pure=True,
        pack=1,
    ).to(tl.uint8)


@triton.jit
def fp4_pair(even_bits, odd_bits, scale_byte, GFX950: tl.constexpr):
    """The convert's byte of two fp32 bit patterns: the instruction on gfx950, its emulation elsewhere."""
    if GFX950:
        return fp4_pair_gfx950(even_bits, odd_bits, scale_byte)
    else:
        return fp4_pair_emulated(even_bits, odd_bits, scale_byte)


@triton.jit
def mx_block_scale(even_bits, odd_bits, JOINED: tl.constexpr):
    """SPEC 3.3 scale bytes (int32 [R, G]) of [R, G, 16] pairs of fp32 bit patterns, NaNs left out of
    the amax. JOINED (one reduction over 32) and the pairs' maximum first give the same bytes; which
    compiles leaner depends on the layout (docs/gfx950.md, "The fp4 converts")."""
    # "* 1.0" quiets signalling NaNs, which numpy's max reduction would keep, and compiles to nothing.
    even = tl.abs(even_bits.to(tl.float32, bitcast=True) * 1.0)
    odd = tl.abs(odd_bits.to(tl.float32, bitcast=True) * 1.0)
    if JOINED:
        amax = tl.max(tl.reshape(tl.join(even, odd), (even.shape[0], even.shape[1], 32)), axis=2)
    else:
        amax = tl.max(tl.maximum(even, odd), axis=2)
    # A block of NaNs only keeps a NaN amax (exponent field 255, like Inf): byte 254.
    exp_r = ((amax.to(tl.int32, bitcast=True) + 0x200000) >> 23) & 0x1FF
    return tl.where(exp_r >= 255, 254, tl.minimum(tl.maximum(exp_r - 2, 0), 254))


@triton.jit
def mx_convert_pairs(even_bits, odd_bits, GFX950: tl.constexpr, JOINED: tl.constexpr = False):
    """SPEC 3.3 quantization of element pairs given as the fp32 bit patterns (int32 [R, G, 16]) of
    bf16 values (16 low bits clear), elements 2j and 2j+1 of each 32-block -> (fp4 bytes uint8
    [R, G, 16], e8m0 bytes uint8 [R, G]), through the convert (fp4_pair) on nudged values."""
    scale = mx_block_scale(even_bits, odd_bits, JOINED)
    fp4 = fp4_pair(even_bits | 1, odd_bits | 1, scale[:, :, None], GFX950)
    return fp4, scale.to(tl.uint8)


@triton.jit
def mx_convert_bf16_pairs(pairs, GFX950: tl.constexpr):
    """mx_convert_pairs of bf16 pairs given as int32 (element 2j in the low half, [R, G, 16])."""
    return mx_convert_pairs(pairs << 16, pairs & -0x10000, GFX950, True)
