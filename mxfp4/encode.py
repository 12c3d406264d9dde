"""MXFP4 activation encoding (SPEC 3.3) inside Triton kernels in integer arithmetic on bit patterns, exact
on any backend and under the interpreter (docs/numerics.md, "The software MXFP4 encoder")."""

import triton
import triton.language as tl


@triton.jit
def mx_scale_byte(mag_even, mag_odd, MANT: tl.constexpr):
    """SPEC 3.3 scale byte (s + 127, int32 [R, G]) from the magnitude bits of [R, G, 16] pairs."""
    INF_BITS: tl.constexpr = 255 << MANT
    ROUND_ADD: tl.constexpr = 1 << (MANT - 2)  # fp32 0x200000 in this format's bit positions
    # NaNs (magnitudes above Inf's) are left out, as aiter's tl.max leaves them out; a block of
    # NaNs only has amax -1
    num_even = tl.where(mag_even > INF_BITS, -1, mag_even)
    num_odd = tl.where(mag_odd > INF_BITS, -1, mag_odd)
    amax = tl.maximum(tl.max(num_even, axis=2), tl.max(num_odd, axis=2))
    exp_r = (tl.maximum(amax, 0) + ROUND_ADD) >> MANT
    sbyte = tl.where(exp_r == 255, 254, tl.minimum(tl.maximum(exp_r - 2, 0), 254))
    return tl.where(amax < 0, 254, sbyte)


@triton.jit
def quarter_steps(mag, sbyte, MANT: tl.constexpr):
    """floor(4 |x| 2^-s) of elements given as magnitude bits (s = sbyte - 127; values past the
    top midpoint stay past it), whether that floor is exact, and the exponent field (255: Inf or
    NaN). Shared with mxfp4.convert's emulation of gfx950's convert, which rounds ties otherwise."""
    e = mag >> MANT
    sig = (mag & ((1 << MANT) - 1)) | tl.where(e > 0, 1 << MANT, 0)
    # 4 |x| 2^-s = sig * 2^sh  with  sh = max(e, 1) - MANT - (s + 127) + 2
    sh = tl.maximum(e, 1) - MANT - sbyte + 2
    up = sig << tl.minimum(tl.maximum(sh, 0), 5)  # 5 left shifts already exceed the top midpoint
    down_by = tl.minimum(tl.maximum(-sh, 0), 31)
    down = sig >> down_by
    v = tl.where(sh >= 0, up, down)
    exact = (sh >= 0) | ((down << down_by) == sig)
    return v, exact, e


@triton.jit
def e2m1_magnitude(v):
    """The E2M1 magnitude code of v = floor(4 |y|): the count of the doubled E2M1 midpoints
    1, 3, 5, 7, 10, 14, 20 it reaches, which rounds ties away from zero."""
    return (
        (v >= 1).to(tl.int32)
        + (v >= 3).to(tl.int32)
        + (v >= 5).to(tl.int32)
        + (v >= 7).to(tl.int32)
        + (v >= 10).to(tl.int32)
        + (v >= 14).to(tl.int32)
        + (v >= 20).to(tl.int32)
    )


@triton.jit
def e2m1_nibble(raw, mag, sbyte, MANT: tl.constexpr):
    """E2M1 nibble (sign in bit 3) of elements given as bit patterns, scale byte broadcast."""
    v, _, e = quarter_steps(mag, sbyte, MANT)
    code = tl.where(e == 255, 7, e2m1_magnitude(v))  # Inf / NaN elements
    return code | (((raw >> (MANT + 8)) & 1) << 3)


@triton.jit
def mx_encode_pairs(raw_even, raw_odd, MANT: tl.constexpr):
    """SPEC 3.3 quantization of element pairs given as bit patterns (int32 [R, G, 16], element 2j
    and 2j+1 of each 32-block; MANT 7 for bf16 bits, 23 for fp32) -> (fp4 bytes uint8 [R, G, 16],
    e8m0 bytes uint8 [R, G])."""
    mag_mask: tl.constexpr = (1 << (MANT + 8)) - 1
    mag_even, mag_odd = raw_even & mag_mask, raw_odd & mag_mask
    sbyte = mx_scale_byte(mag_even, mag_odd, MANT)
    nib_even = e2m1_nibble(raw_even, mag_even, sbyte[:, :, None], MANT)
    nib_odd = e2m1_nibble(raw_odd, mag_odd, sbyte[:, :, None], MANT)
    return (nib_even | (nib_odd << 4)).to(tl.uint8), sbyte.to(tl.uint8)
