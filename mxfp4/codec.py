"""MXFP4 in plain torch, bit-exact to SPEC 3 on any device; takes the torch fp4/e8m0 dtypes or their
uint8 views. NaN and Inf inputs follow each aiter quantizer (docs/aiter_overrides.md, "NaN inputs")."""

import torch

MX_BLOCK = 32
FP4_DTYPE = torch.float4_e2m1fn_x2
E8M0_DTYPE = torch.float8_e8m0fnu

# E2M1 code -> value; bit 3 is the sign.
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)

# Decision points between consecutive magnitude codes 0..7 (code k -> k+1 above the k-th point).
_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
# Round-half-even (weights): a tie goes up only when the lower code is odd.
_TIE_GOES_UP_EVEN = (False, True, False, True, False, True, False)


def as_uint8(t: torch.Tensor, name: str = "tensor") -> torch.Tensor:
    """A uint8 view of packed fp4 / e8m0 / uint8 data."""
    if t.dtype in (FP4_DTYPE, E8M0_DTYPE):
        return t.view(torch.uint8)
    if t.dtype != torch.uint8:
        raise ValueError(f"{name}: expected uint8, float4_e2m1fn_x2 or float8_e8m0fnu, got {t.dtype}")
    return t


def _blocks(x: torch.Tensor, name: str) -> torch.Tensor:
    """x [..., K] as fp32 [rows, K/32, 32]."""
    if x.dim() < 1 or x.shape[-1] % MX_BLOCK:
        raise ValueError(f"{name}: last dim must be a multiple of {MX_BLOCK}, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"{name}: expected a floating tensor, got {x.dtype}")
    return x.reshape(-1, x.shape[-1] // MX_BLOCK, MX_BLOCK).float()


def _codes_from_magnitude(mag: torch.Tensor, half_even: bool) -> torch.Tensor:
    """Magnitude (fp32, >= 0 or NaN) -> e2m1 magnitude code 0..7 (saturating; NaN -> 7)."""
    code = torch.zeros(mag.shape, dtype=torch.uint8, device=mag.device)
    for mid, tie_up in zip(_MIDPOINTS, _TIE_GOES_UP_EVEN, strict=True):
        above = (mag >= mid) if (tie_up or not half_even) else (mag > mid)
        code += above.to(torch.uint8)
    return torch.where(torch.isnan(mag), torch.full_like(code, 7), code)


def _pack(codes: torch.Tensor) -> torch.Tensor:
    """uint8 codes [..., K] -> bytes [..., K/2], element 2j in the low nibble."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def _unpack(packed: torch.Tensor) -> torch.Tensor:
    """bytes [..., K/2] -> codes [..., K]."""
    return torch.stack((packed & 0xF, packed >> 4), dim=-1).flatten(-2)


def _sign_bits(xb: torch.Tensor) -> torch.Tensor:
    """Bit 3 set where the fp32 sign bit is set (so -0 and tiny negatives keep it)."""
    return ((xb.view(torch.int32) >> 31) & 1).to(torch.uint8) << 3


def f32_to_e8m0_weight(v: torch.Tensor) -> torch.Tensor:
    """SPEC 3.2 scale byte of v = amax/4: exponent, plus one when the fraction is >= 0.5."""
    bits = v.view(torch.int32)
    exponent = (bits >> 23) & 0xFF
    bump = ((bits & 0x400000) != 0) & (((bits & 0x3FFFFF) != 0) | (exponent > 0))
    out = torch.where(exponent == 0xFF, exponent, exponent + bump.to(torch.int32))
    return out.clamp(max=0xFF).to(torch.uint8)


def _pow2(b: torch.Tensor) -> torch.Tensor:
    """2^(b - 127) (fp32) of int32 b in [0, 255] (0: 2^-127, 255: NaN), built from bits: torch.exp2
    on CUDA is not exact at 2^-127."""
    bits = torch.where(b == 0, 0x00400000, b << 23)
    return torch.where(b == 0xFF, 0x7FC00000, bits).to(torch.int32).view(torch.float32)


def e8m0_to_f32(scales: torch.Tensor) -> torch.Tensor:
    """E8M0 bytes -> fp32 2^(b-127); byte 0 -> 2^-127, byte 255 -> NaN."""
    return _pow2(as_uint8(scales, "scales").to(torch.int32))


def quantize_weight(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """SPEC 3.2 (aiter's torch per_1x32 quantizer): x [..., K] -> fp4x2 [..., K/2], e8m0 [prod(lead), K/32]."""
    xb = _blocks(x, "x")
    amax = xb.abs().amax(dim=-1)
    scale_bytes = f32_to_e8m0_weight(amax / 4.0)
    y = xb / e8m0_to_f32(scale_bytes).unsqueeze(-1)
    codes = _codes_from_magnitude(y.abs(), half_even=True) | _sign_bits(xb)
    packed = _pack(codes.reshape(*x.shape[:-1], x.shape[-1]))
    return packed.view(FP4_DTYPE), scale_bytes.reshape(-1, x.shape[-1] // MX_BLOCK).view(E8M0_DTYPE)


def activation_scale_exponent(amax: torch.Tensor) -> torch.Tensor:
    """SPEC 3.3 unbiased scale exponent s (int32) of a block amax (fp32): amax rounded up to a
    power of two iff its significand is >= 1.75, then floor(log2) - 2 clamped to [-127, 127]
    (an Inf amax gives 127). amax must not be NaN (quantize_activation leaves NaNs out of it)."""
    biased = (((amax.view(torch.int32) + 0x200000) >> 23) & 0xFF).to(torch.int32)
    return torch.where(biased == 0xFF, 127, (biased - 129).clamp(-127, 127)).to(torch.int32)


def quantize_activation(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """SPEC 3.3 (aiter's Triton quantizer): x [..., K] -> packed uint8 [rows, K/2], scales uint8 [rows, K/32]."""
    xb = _blocks(x, "x")
    mag = xb.abs()
    nan = torch.isnan(mag)
    s = activation_scale_exponent(torch.where(nan, 0.0, mag).amax(dim=-1))
    s = torch.where(nan.all(dim=-1), 127, s)
    q = xb * _pow2(127 - s).unsqueeze(-1)
    codes = _codes_from_magnitude(q.abs(), half_even=False) | _sign_bits(xb)
    return _pack(codes.reshape(xb.shape[0], -1)), (s + 127).to(torch.uint8)


def dequantize(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """packed [rows, K/2] + scales [rows', K/32] (rows' >= rows, extra rows ignored) -> fp32 [rows, K]."""
    p = as_uint8(packed, "packed")
    p = p.reshape(-1, p.shape[-1])
    s = as_uint8(scales, "scales")
    k = p.shape[-1] * 2
    if s.dim() != 2 or s.shape[1] * MX_BLOCK < k or s.shape[0] < p.shape[0]:
        raise ValueError(f"scales: shape {tuple(s.shape)} does not cover packed {tuple(p.shape)}")
    lut = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=p.device)
    values = lut[_unpack(p).long()]
    scale = e8m0_to_f32(s[: p.shape[0], : k // MX_BLOCK]).repeat_interleave(MX_BLOCK, dim=-1)
    return values * scale


def shuffle_weight(w: torch.Tensor) -> torch.Tensor:
    """SPEC 3.4 (aiter shuffle_weight, layout (16, 16)); same shape and dtype, is_shuffled = True."""
    u = as_uint8(w, "w")
    if u.dim() < 2 or u.shape[-2] % 16 or u.shape[-1] % 32:
        raise ValueError(f"w: needs [..., N, Kb] with N % 16 == 0 and Kb % 32 == 0, got {tuple(u.shape)}")
    tiles = u.reshape(-1, u.shape[-2] // 16, 16, u.shape[-1] // 32, 2, 16)  # [B, N/16, 16, Kb/32, 2, 16]
    out = tiles.permute(0, 1, 3, 4, 2, 5).contiguous().view(w.shape).view(w.dtype)
    out.is_shuffled = True
    return out


def shuffle_scales(s: torch.Tensor) -> torch.Tensor:
    """SPEC 3.5 (aiter e8m0_shuffle) of a 2-D scale [m, n]: padded to [ceil256(m), ceil8(n)]
    (the padding is filled with zero bytes where aiter leaves garbage), then tiled."""
    u = as_uint8(s, "s")
    if u.dim() != 2:
        raise ValueError(f"s: expected a 2-D scale tensor, got shape {tuple(u.shape)}")
    m, n = u.shape
    pm, pn = -(-m // 256) * 256, -(-n // 8) * 8
    padded = torch.zeros((pm, pn), dtype=torch.uint8, device=u.device)
    padded[:m, :n] = u
    out = padded.view(pm // 32, 2, 16, pn // 8, 2, 4).permute(0, 3, 5, 2, 4, 1).contiguous()
    return out.view(pm, pn).view(s.dtype)
