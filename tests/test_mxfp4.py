"""mxfp4/codec.py against SPEC 3: hand-computed vectors, the scalar oracle, and hypothesis properties."""

import math
import struct

import oracle
import pytest
import torch
from aiter_double import unshuffle_scales, unshuffle_weight
from hypothesis import given
from hypothesis import strategies as st

from mxfp4 import codec as mxfp4

FP4, E8M0 = torch.float4_e2m1fn_x2, torch.float8_e8m0fnu
GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
BF16_MAX = struct.unpack("<f", struct.pack("<I", 0x7F7F0000))[0]  # (2 - 2^-7) * 2^127
BF16_MIN_SUBNORMAL = 2.0**-133
BF16_MAX_SUBNORMAL = 127 * 2.0**-133  # 0x007F


def code(value: float) -> int:
    """E2M1 code of an exactly representable value (sign bit from the float, so -0.0 -> 8)."""
    return GRID.index(abs(value)) | (8 if math.copysign(1.0, value) < 0 else 0)


def block(values, fill=1.0, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """One row holding one 32-block: values, then `fill` (never an all-zero block unless asked)."""
    values = list(values) + [fill] * (32 - len(values))
    return torch.tensor([values], dtype=torch.float64).to(dtype).to(device)


def codes_of(packed: torch.Tensor) -> list[int]:
    """Unpack row 0 of a packed tensor: element 2j is the low nibble of byte j."""
    out = []
    for byte in mxfp4.as_uint8(packed).reshape(-1, packed.shape[-1])[0].tolist():
        out += [byte & 0xF, byte >> 4]
    return out


def u8(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype in (FP4, E8M0) else t


def quantize(kind: str, x: torch.Tensor) -> tuple[list[int], list[int]]:
    """(codes of row 0, scale bytes of row 0) from mxfp4's quantizer of the given kind."""
    fn = mxfp4.quantize_weight if kind == "weight" else mxfp4.quantize_activation
    packed, scales = fn(x)
    return codes_of(packed), u8(scales).reshape(-1, scales.shape[-1])[0].tolist()


def oracle_quantize(kind: str, x: torch.Tensor) -> tuple[list[int], list[int]]:
    fn = oracle.quantize_weight_rows if kind == "weight" else oracle.quantize_activation_rows
    codes, _, scales = fn(x)
    return codes[0].tolist(), scales[0].tolist()


KINDS = ("weight", "activation")


# =============================================================================================
# Hand-computed vectors
# =============================================================================================
# Every decision point of each rounding rule, at scale 1: the block's amax is 5.0, which fixes both
# scales to 2^0 (weight: v = 1.25 has exponent 0 and fraction bit 22 clear; activation: 5 has
# significand 1.25 < 1.75, so s = floor(log2 4) - 2 = 0), and 5.0 is itself the last tie.
TIES = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
TIE_EXPECTED = {
    "weight": (0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0),  # round half to even
    "activation": (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0),  # round half away from zero
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_every_tie(kind, dtype, device):
    values = list(TIES) + [-t for t in TIES] + [0.0, -0.0]
    expected = list(TIE_EXPECTED[kind]) + [-v for v in TIE_EXPECTED[kind]] + [0.0, -0.0]
    codes, scales = quantize(kind, block(values, dtype=dtype, device=device))
    assert scales == [127]
    assert codes[: len(values)] == [code(v) for v in expected]
    assert codes[len(values) :] == [code(1.0)] * (32 - len(values))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("k", [-100, -7, 3, 100])
def test_every_tie_at_other_scales(kind, k):
    """The same ties times 2^k land on the same codes with scale byte 127 + k."""
    values = [t * 2.0**k for t in TIES] + [-t * 2.0**k for t in TIES]
    expected = list(TIE_EXPECTED[kind]) + [-v for v in TIE_EXPECTED[kind]]
    codes, scales = quantize(kind, block(values, fill=2.0**k, dtype=torch.bfloat16))
    assert scales == [127 + k]
    assert codes[: len(values)] == [code(v) for v in expected]


@pytest.mark.parametrize("kind", KINDS)
def test_just_off_the_ties(kind):
    """A hair either side of each decision point rounds to the nearer grid point, for both rules."""
    values, expected = [5.0], [6.0 if kind == "activation" else 4.0]
    lower = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
    upper = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
    for mid, lo, hi in zip(TIES, lower, upper, strict=True):
        values += [mid * (1 - 2**-12), mid * (1 + 2**-12)]
        expected += [lo, hi]
    codes, scales = quantize(kind, block(values))
    assert scales == [127]
    assert codes[: len(values)] == [code(v) for v in expected]


@pytest.mark.parametrize("kind", KINDS)
def test_subnormal_half_code_and_negative_zero(kind, device):
    """E2M1's subnormal 0.5 (code 1); tiny negatives keep the sign bit (-0, code 8)."""
    values = [4.0, 0.5, -0.5, 0.3, 0.7, -0.7, 0.1, -0.1, -0.2, -1e-30, -0.0, 0.0, 1e-30]
    expected = [4.0, 0.5, -0.5, 0.5, 0.5, -0.5, 0.0, -0.0, -0.0, -0.0, -0.0, 0.0, 0.0]
    codes, scales = quantize(kind, block(values, device=device))
    assert scales == [127]
    assert codes[: len(values)] == [code(v) for v in expected]


def test_activation_saturates_at_six(device):
    """amax 6.9 has significand 1.725 < 1.75: s = 0, so 6.9 and 6.5 saturate to 6 (no 7.0 code)."""
    values = [6.9, 6.5, -6.9, 6.0, 5.5, -5.0]
    codes, scales = quantize("activation", block(values, device=device))
    assert scales == [127]
    assert codes[: len(values)] == [code(v) for v in (6.0, 6.0, -6.0, 6.0, 6.0, -6.0)]


def test_weight_largest_value_stays_below_six():
    """The weight scale keeps |x / scale| < 6 (saturation is never needed): the largest is just under 6."""
    amax = 6.0 * (1 - 2**-20)  # v = 1.4999986: exponent 127, bit 22 clear -> scale 1, y = 5.99999 -> 6
    codes, scales = quantize("weight", block([amax, -amax]))
    assert scales == [127]
    assert codes[:2] == [code(6.0), code(-6.0)]


def test_packing_order(device):
    """Element 2j sits in the low nibble of byte j, element 2j+1 in the high nibble."""
    x = block([1.0, 4.0, -0.5, 3.0, 0.0, -4.0], fill=4.0, device=device)  # both scales 1
    for fn in (mxfp4.quantize_weight, mxfp4.quantize_activation):
        packed, _ = fn(x)
        assert u8(packed)[0, :3].tolist() == [0x62, 0x59, 0xE0]
    raw = torch.tensor([[0x62, 0x59, 0xE0] + [0x00] * 13], dtype=torch.uint8, device=device)
    deq = mxfp4.dequantize(raw, torch.full((1, 1), 127, dtype=torch.uint8, device=device))
    assert deq[0, :6].tolist() == [1.0, 4.0, -0.5, 3.0, 0.0, -4.0]


def test_e2m1_decode_every_code(device):
    raw = torch.tensor([[c | (c << 4) for c in range(16)]], dtype=torch.uint8, device=device)
    deq = mxfp4.dequantize(raw, torch.full((1, 1), 127, dtype=torch.uint8, device=device)).cpu()
    table = [oracle.e2m1_value(c) for c in range(16)]
    assert deq[0, 0::2].tolist() == table and deq[0, 1::2].tolist() == table
    assert table == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    assert torch.signbit(deq[0, 16]) and not torch.signbit(deq[0, 0])  # code 8 is -0


def test_e8m0_decode_every_byte(device):
    """E8M0 byte b -> 2^(b-127); byte 0 -> 2^-127 (not 0), byte 255 -> NaN; dtype or uint8 view."""
    b = torch.arange(256, dtype=torch.int32).to(torch.uint8).to(device)
    expected = [math.ldexp(1.0, i - 127) for i in range(255)]
    for scales in (b, b.view(E8M0)):
        direct = mxfp4.e8m0_to_f32(scales).cpu()
        assert direct.dtype == torch.float32
        assert direct[:255].tolist() == expected and math.isnan(direct[255])
        packed = torch.full((256, 16), 0x22, dtype=torch.uint8, device=device)  # every element 1.0
        deq = mxfp4.dequantize(packed, scales.reshape(256, 1)).cpu()
        assert deq[:255].tolist() == [[v] * 32 for v in expected]
        assert deq[255].isnan().all()
    assert expected[0] == 2.0**-127 and expected[127] == 1.0 and expected[254] == 2.0**127


def test_zero_block(device):
    """The one all-zero vector: both quantizers give scale byte 0 and all-zero codes (dequantized 0)."""
    x = torch.zeros((1, 32), device=device)
    for fn in (mxfp4.quantize_weight, mxfp4.quantize_activation):
        packed, scales = fn(x)
        assert u8(packed).cpu().tolist() == [[0] * 16]
        assert u8(scales).cpu().tolist() == [[0]]
        assert mxfp4.dequantize(packed, scales).cpu().tolist() == [[0.0] * 32]
    for fn in (mxfp4.quantize_weight, mxfp4.quantize_activation):  # -0.0 everywhere keeps the sign bit
        packed, scales = fn(-x)
        assert u8(packed).cpu().tolist() == [[0x88] * 16] and u8(scales).cpu().tolist() == [[0]]


# (amax, weight scale byte, code of the amax element) -- SPEC 3.2: v = amax / 4, exponent field of v,
# +1 when bit 22 is set and (bits 0..21 nonzero or exponent > 0).
WEIGHT_SCALES = [
    (4.0, 127, 4.0),  # v = 1
    (5.0, 127, 4.0),  # v = 1.25: bit 22 clear; y = 5 ties to even 4
    (5.999, 127, 6.0),  # v = 1.49975
    (6.0, 128, 3.0),  # v = 1.5: exactly bit 22, exponent > 0 -> bump
    (7.0, 128, 4.0),  # v = 1.75, y = 3.5 ties to even 4
    (8.0, 128, 4.0),  # v = 2
    (3.0, 127, 3.0),  # v = 0.75 = 1.5 * 2^-1 -> 126 + 1
    (1.0, 125, 4.0),  # v = 2^-2
    (2.0**100, 225, 4.0),
    (2.0**-100, 25, 4.0),
    (BF16_MAX, 253, 4.0),  # v = 1.9921875 * 2^125 -> 252 + 1; y = 3.984 -> 4
    (2.0**-124, 1, 4.0),  # v = 2^-126, smallest normal
    (1.5 * 2.0**-124, 2, 3.0),  # v = 1.5 * 2^-126 -> 1 + 1
    (2.0**-125, 0, 4.0),  # v = 2^-127: subnormal, fraction exactly 0.5, exponent 0 -> no bump
    (1.5 * 2.0**-125, 1, 3.0),  # v = 0x00600000: bit 22 and bit 21 -> bump to 1
    (BF16_MAX_SUBNORMAL, 0, 2.0),  # v = 0x001FC000; y = 127 * 2^-6 = 1.98 -> 2
    (BF16_MIN_SUBNORMAL, 0, 0.0),  # y = 2^-6 -> 0
]

# (amax, activation scale byte, code of the amax element) -- SPEC 3.3.
ACTIVATION_SCALES = [
    (4.0, 127, 4.0),
    (5.0, 127, 6.0),  # tie away
    (6.0, 127, 6.0),
    (6.5, 127, 6.0),  # saturates
    (6.99, 127, 6.0),  # significand 1.7475 < 1.75
    (7.0, 128, 4.0),  # significand 1.75 -> rounded up to 8, s = 1; 3.5 ties away to 4
    (8.0, 128, 4.0),
    (3.5, 127, 4.0),  # rounded up to 4
    (3.49, 126, 6.0),  # s = -1; 6.98 saturates
    (1.0, 125, 4.0),
    (2.0**100, 225, 4.0),
    (2.0**-100, 25, 4.0),
    (2.0**127, 252, 4.0),
    (1.5 * 2.0**127, 252, 6.0),
    (1.75 * 2.0**127, 254, 2.0),  # rounds up to 2^128 = inf in fp32: log2 = inf, clamped to s = 127
    (BF16_MAX, 254, 2.0),  # likewise; 1.99 -> 2
    (2.0**-124, 1, 4.0),  # s = -126
    (1.75 * 2.0**-125, 1, 4.0),  # rounded up to 2^-124
    (2.0**-125, 0, 4.0),  # s = -127
    (2.0**-126, 0, 2.0),  # s = -128 clamped to -127
    (1.5 * 2.0**-126, 0, 3.0),
    (BF16_MAX_SUBNORMAL, 0, 2.0),  # bits + 0x200000 -> 2^-126 -> clamped; 1.98 -> 2
    (BF16_MIN_SUBNORMAL, 0, 0.0),  # bits + 0x200000 -> 0 -> -127; 2^-6 -> 0
]


SCALE_ROWS = [("weight", *row) for row in WEIGHT_SCALES] + [("activation", *row) for row in ACTIVATION_SCALES]


@pytest.mark.parametrize(
    ("kind", "amax", "byte", "value"), SCALE_ROWS, ids=[f"{row[0]}-{row[1]:.6g}" for row in SCALE_ROWS]
)
def test_scale_rules(kind, amax, byte, value, device):
    amax = oracle.to_f32(amax)
    for dtype in (torch.float32, torch.bfloat16):
        x = block([amax, -amax / 2], fill=amax / 8, dtype=dtype, device=device)
        if x[0, 0].item() != amax:
            continue  # not representable in this dtype (e.g. 5.999 in bf16)
        codes, scales = quantize(kind, x)
        assert scales == [byte], dtype
        assert codes[0] == code(value), dtype
        assert (codes, scales) == oracle_quantize(kind, x), dtype


def test_weight_scale_byte_function():
    """f32_to_e8m0_weight directly on v (SPEC 3.2), including the NaN/inf exponent 255."""
    cases = {
        1.0: 127,
        1.25: 127,
        1.4999999: 127,
        1.5: 128,
        1.75: 128,
        2.0**-127: 0,  # 0x00400000: no bump at exponent 0
        1.5 * 2.0**-127: 1,  # 0x00600000
        2.0**-149: 0,
        0.0: 0,
        math.inf: 255,
        math.nan: 255,
        struct.unpack("<f", struct.pack("<I", 0x7F7FFFFF))[0]: 255,  # fp32 max: 254 + 1
    }
    v = torch.tensor(list(cases), dtype=torch.float32)
    assert mxfp4.f32_to_e8m0_weight(v).tolist() == list(cases.values())
    finite = [k for k in cases if math.isfinite(k)]
    assert [oracle.weight_scale_byte(4 * k) for k in finite[:-1]] == [cases[k] for k in finite[:-1]]


# NaN inputs, as documented in mxfp4/codec.py: each quantizer follows its aiter counterpart. The weight
# quantizer (torch amax) gives a block holding a NaN scale byte 255; the activation quantizer
# (aiter's Triton kernel, whose tl.max ignores NaN) keeps the other elements' scale, encodes the
# NaN as code 7 with its sign, and gives a block of NaNs only byte 254.
NAN_BLOCK = [1.0, -2.0, math.nan, 3.0, -0.0, -0.1] + [0.5] * 26
NAN_FILLED = [0.0 if math.isnan(v) else v for v in NAN_BLOCK]
NEG_NAN = -math.nan


def test_weight_nan_block_scale_and_dequantize(device):
    x = torch.tensor([[1.0] * 32 + NAN_BLOCK], device=device)  # block 0 finite, block 1 holds a NaN
    packed, scales = mxfp4.quantize_weight(x)
    assert u8(scales).cpu().tolist() == [[125, 255]]  # amax 1: v = 2^-2 / s = -2
    deq = mxfp4.dequantize(packed, scales).cpu()
    assert deq[0, :32].tolist() == [1.0] * 32
    assert deq[0, 32:].isnan().all()
    codes = codes_of(mxfp4.quantize_weight(torch.tensor([NAN_BLOCK]))[0])
    assert codes == [7 | (8 if math.copysign(1.0, v) < 0 else 0) for v in NAN_BLOCK]


@pytest.mark.parametrize("nan", [math.nan, NEG_NAN])
def test_activation_nan_among_values_keeps_their_scale(device, nan):
    block = [nan if math.isnan(v) else v for v in NAN_BLOCK]
    codes, scales = quantize("activation", torch.tensor([block], device=device))
    ref_codes, ref_scales = quantize("activation", torch.tensor([NAN_FILLED], device=device))
    assert scales == ref_scales == [126]  # amax 3: s = floor(log2 3) - 2 = -1
    sign = 8 if math.copysign(1.0, nan) < 0 else 0
    assert codes == [7 | sign if math.isnan(v) else c for v, c in zip(NAN_BLOCK, ref_codes, strict=True)]
    packed, sc = mxfp4.quantize_activation(torch.tensor([block], device=device))
    deq = mxfp4.dequantize(packed, sc).cpu()[0]
    assert deq[2].item() == (-6.0 if sign else 6.0) * 2.0**-1 and not deq.isnan().any()


def test_activation_all_nan_block_gets_byte_254(device):
    x = torch.tensor([[math.nan] * 16 + [NEG_NAN] * 16 + [math.nan] + [0.0] * 31], device=device)
    codes, scales = quantize("activation", x)
    assert scales == [254, 0]  # NaNs only: s = 127; NaN among zeros: the zeros' byte 0
    assert codes[:32] == [7] * 16 + [15] * 16 and codes[32:] == [7] + [0] * 31
    deq = mxfp4.dequantize(*mxfp4.quantize_activation(x)).cpu()[0]
    assert deq[:16].tolist() == [math.inf] * 16 and deq[16:32].tolist() == [-math.inf] * 16


@pytest.mark.parametrize("kind", KINDS)
def test_nan_does_not_leak_into_other_blocks(kind):
    x = torch.tensor([[0.75] * 32 + NAN_BLOCK + [-3.0] * 32])
    finite = torch.tensor([[0.75] * 32 + [1.0] * 32 + [-3.0] * 32])
    codes, scales = quantize(kind, x)
    ref_codes, ref_scales = quantize(kind, finite)
    assert codes[:32] + codes[64:] == ref_codes[:32] + ref_codes[64:]
    assert [scales[0], scales[2]] == [ref_scales[0], ref_scales[2]]


def test_shapes_dtypes_and_errors():
    x = torch.randn((3, 16, 64), generator=torch.Generator().manual_seed(0))
    packed, scales = mxfp4.quantize_weight(x)
    assert packed.dtype == FP4 and packed.shape == (3, 16, 32)
    assert scales.dtype == E8M0 and scales.shape == (48, 2)
    packed, scales = mxfp4.quantize_activation(x)
    assert packed.dtype == torch.uint8 and packed.shape == (48, 32)
    assert scales.dtype == torch.uint8 and scales.shape == (48, 2)
    for fn in (mxfp4.quantize_weight, mxfp4.quantize_activation):
        with pytest.raises(ValueError):
            fn(torch.ones((2, 48)))
    # dequantize accepts extra scale rows and both dtypes / uint8 views alike
    p, s = mxfp4.quantize_weight(x[0])
    full = mxfp4.dequantize(p, s)
    assert torch.equal(mxfp4.dequantize(p.view(torch.uint8), s.view(torch.uint8)), full)
    assert torch.equal(mxfp4.dequantize(p[:5], s), full[:5])


# =============================================================================================
# Hypothesis: random blocks against the scalar oracle, and properties
# =============================================================================================
SPECIAL = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0)
EXP_RANGE = {torch.float32: (-130, 120), torch.bfloat16: (-130, 120), torch.float16: (-18, 10)}


@st.composite
def mx_inputs(draw, dtypes=(torch.float32, torch.bfloat16, torch.float16), exp_range=None):
    """Random finite [rows, 32*blocks] inputs, never all zero; per-block magnitudes 2^k."""
    rows, blocks = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    dtype = draw(st.sampled_from(dtypes))
    kind = draw(st.sampled_from(["normal", "grid", "wide", "sparse"]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    lo, hi = EXP_RANGE[dtype]
    if exp_range:
        lo, hi = max(lo, exp_range[0]), min(hi, exp_range[1])
    k = torch.randint(lo, hi + 1, (rows, blocks, 1), generator=gen).double()
    shape = (rows, blocks, 32)
    if kind == "grid":  # decision points and grid values, so ties are frequent
        idx = torch.randint(0, len(SPECIAL), shape, generator=gen)
        sign = torch.randint(0, 2, shape, generator=gen).double() * 2 - 1
        x = torch.tensor(SPECIAL, dtype=torch.float64)[idx] * sign * torch.exp2(k)
    else:
        x = torch.randn(shape, generator=gen, dtype=torch.float64) * torch.exp2(k)
        if kind == "wide":  # magnitudes spread over 2^-24 .. 1 of the block's
            x = x * torch.exp2(-torch.randint(0, 25, shape, generator=gen).double())
        if kind == "sparse":
            x = x * (torch.rand(shape, generator=gen, dtype=torch.float64) < 0.2)
    floor = torch.exp2(k[..., 0])  # representable in every dtype: no block is all zero
    x[..., 0] = torch.where(x[..., 0].abs() < floor, floor, x[..., 0])
    return x.reshape(rows, blocks * 32).to(dtype)


@pytest.mark.parametrize("kind", KINDS)
@given(x=mx_inputs())
def test_quantizers_match_scalar_oracle(kind, x):
    before = x.clone()
    fn = mxfp4.quantize_weight if kind == "weight" else mxfp4.quantize_activation
    packed, scales = fn(x)
    ref = oracle.quantize_weight_rows(x) if kind == "weight" else oracle.quantize_activation_rows(x)
    assert torch.equal(u8(scales), ref[2])
    assert torch.equal(u8(packed), ref[1])
    assert torch.equal(x, before)


@pytest.mark.parametrize("kind", KINDS)
@given(x=mx_inputs())
def test_sign_symmetry(kind, x):
    """Negating the input flips every sign bit (0 <-> -0 included) and keeps the scales."""
    fn = mxfp4.quantize_weight if kind == "weight" else mxfp4.quantize_activation
    p, s = fn(x)
    pn, sn = fn(-x)
    assert torch.equal(u8(sn), u8(s))
    assert torch.equal(u8(pn), u8(p) ^ 0x88)


@pytest.mark.parametrize("kind", KINDS)
@given(x=mx_inputs(dtypes=(torch.float32,), exp_range=(-60, 60)), shift=st.integers(-40, 40))
def test_power_of_two_scaling(kind, x, shift):
    """x * 2^j (exact, far from the clamps) keeps the codes and moves every scale byte by j."""
    fn = mxfp4.quantize_weight if kind == "weight" else mxfp4.quantize_activation
    p, s = fn(x)
    p2, s2 = fn(x * 2.0**shift)
    assert torch.equal(u8(p2), u8(p))
    assert torch.equal(u8(s2).int(), u8(s).int() + shift)


@pytest.mark.parametrize("kind", KINDS)
@given(x=mx_inputs(exp_range=(-100, 100)))
def test_dequantize_error_bounds(kind, x):
    """|deq - x| <= max(|x|, S) / 4 elementwise and <= amax / 5 per block; S within the rule's range
    (weight: amax/6 < S <= amax/3; activation: amax/7 < S <= amax/3.5), for normal-range amax."""
    fn = mxfp4.quantize_weight if kind == "weight" else mxfp4.quantize_activation
    packed, scales = fn(x)
    deq = mxfp4.dequantize(packed, scales).double()
    xd = x.double()
    rows, k = xd.shape
    amax = xd.abs().reshape(rows, k // 32, 32).amax(-1)
    scale = torch.exp2(u8(scales).double() - 127)
    lo, hi = (amax / 6, amax / 3) if kind == "weight" else (amax / 7, amax / 3.5)
    assert (scale > lo).all() and (scale <= hi).all()
    err = (deq - xd).abs()
    per_elem = torch.maximum(xd.abs(), scale.repeat_interleave(32, -1)) / 4
    assert (err <= per_elem).all()
    assert (err.reshape(rows, k // 32, 32).amax(-1) <= amax / 5).all()


@given(seed=st.integers(0, 2**31 - 1), rows=st.integers(1, 8), kb=st.sampled_from([16, 32, 48]))
def test_dequantize_matches_byte_table(seed, rows, kb):
    gen = torch.Generator().manual_seed(seed)
    packed = torch.randint(0, 256, (rows, kb), generator=gen).to(torch.uint8)
    scales = torch.randint(0, 256, (rows, kb // 16), generator=gen).to(torch.uint8)
    scales[0, 0] = 0
    before = (packed.clone(), scales.clone())
    got = mxfp4.dequantize(packed.view(FP4), scales.view(E8M0))
    want = oracle.decode_mx(packed, scales)
    assert got.dtype == torch.float32
    assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(want))
    assert torch.equal(packed, before[0]) and torch.equal(scales, before[1])


# =============================================================================================
# Shuffles
# =============================================================================================
@given(
    seed=st.integers(0, 2**31 - 1),
    lead=st.sampled_from([(), (1,), (3,), (2, 2)]),
    n16=st.integers(1, 4),
    kb32=st.integers(1, 3),
    as_fp4=st.booleans(),
)
def test_shuffle_weight(seed, lead, n16, kb32, as_fp4):
    gen = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (*lead, 16 * n16, 32 * kb32), generator=gen).to(torch.uint8)
    w = raw.view(FP4) if as_fp4 else raw.clone()
    shuffled = mxfp4.shuffle_weight(w)
    assert shuffled.is_shuffled is True
    assert not getattr(w, "is_shuffled", False)
    assert shuffled.dtype == w.dtype and shuffled.shape == w.shape
    assert torch.equal(u8(shuffled), oracle.spec_shuffle_weight(raw))
    assert torch.equal(u8(shuffled), u8(w).reshape(-1, n16, 16, kb32, 2, 16).permute(0, 1, 3, 4, 2, 5).reshape(w.shape))
    back = unshuffle_weight(shuffled)
    assert back.dtype == w.dtype and back.shape == w.shape
    assert torch.equal(u8(back), raw)
    assert torch.equal(u8(w), raw)  # input untouched


def test_shuffle_weight_is_a_permutation():
    raw = torch.arange(32 * 64, dtype=torch.int64).reshape(32, 64)
    dest = oracle.spec_shuffle_weight(raw)
    assert torch.equal(dest.flatten().sort().values, raw.flatten())
    # the first 16 x 16 output bytes: row-group 0, column-group 0, k1 = 0 -> input rows 0..15, bytes 0..15
    assert torch.equal(dest.flatten()[:256].reshape(16, 16), raw[:16, :16])
    assert torch.equal(dest.flatten()[256:512].reshape(16, 16), raw[:16, 16:32])


def test_shuffle_weight_device(device):
    raw = torch.randint(0, 256, (2, 32, 64), generator=torch.Generator().manual_seed(1)).to(torch.uint8)
    shuffled = mxfp4.shuffle_weight(raw.to(device).view(FP4))
    assert shuffled.device.type == device.type and shuffled.is_shuffled
    assert torch.equal(u8(shuffled).cpu(), oracle.spec_shuffle_weight(raw))
    assert torch.equal(u8(unshuffle_weight(shuffled)).cpu(), raw)


@given(
    seed=st.integers(0, 2**31 - 1),
    m=st.one_of(st.integers(1, 600), st.sampled_from([32, 256, 512, 288])),
    n=st.integers(1, 20),
    as_e8m0=st.booleans(),
)
def test_shuffle_scales(seed, m, n, as_e8m0):
    gen = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (m, n), generator=gen).to(torch.uint8)
    s = raw.view(E8M0) if as_e8m0 else raw.clone()
    shuffled = mxfp4.shuffle_scales(s)
    pm, pn = -(-m // 256) * 256, -(-n // 8) * 8
    assert shuffled.shape == (pm, pn) and shuffled.dtype == s.dtype
    flat = u8(shuffled).flatten()
    assert torch.equal(flat[oracle.spec_scale_destinations(m, n).flatten()], raw.flatten())
    if (pm, pn) == (m, n):
        assert torch.equal(u8(shuffled), raw.view(m // 32, 2, 16, n // 8, 2, 4).permute(0, 3, 5, 2, 4, 1).reshape(m, n))
    back = unshuffle_scales(shuffled, m, n)
    assert back.dtype == s.dtype and torch.equal(u8(back), raw)
    whole = unshuffle_scales(shuffled)
    assert whole.shape == (pm, pn) and torch.equal(u8(whole)[:m, :n], raw)
    assert torch.equal(u8(s), raw)  # input untouched


def test_shuffle_scales_destinations_are_a_permutation():
    dest = oracle.spec_scale_destinations(256, 8)
    assert torch.equal(dest.flatten().sort().values, torch.arange(256 * 8))
    # output starts with (a=0, d=0, f=0, c=0, e=0, b=0..1) = rows 0 and 16 of column 0
    assert dest[0, 0] == 0 and dest[16, 0] == 1 and dest[0, 4] == 2 and dest[0, 1] == 64


def test_shuffle_scales_device(device):
    raw = torch.randint(0, 256, (300, 12), generator=torch.Generator().manual_seed(2)).to(torch.uint8)
    shuffled = mxfp4.shuffle_scales(raw.to(device).view(E8M0))
    assert shuffled.device.type == device.type and shuffled.shape == (512, 16)
    assert torch.equal(u8(shuffled).cpu().flatten()[oracle.spec_scale_destinations(300, 12).flatten()], raw.flatten())
    assert torch.equal(u8(unshuffle_scales(shuffled, 300, 12)).cpu(), raw)
