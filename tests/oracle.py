"""A second, independent implementation of the MXFP4 format and of the MoE layer (SPEC 1, 3).

Written from the SPEC text only, deliberately differently from mxfp4/codec.py and reference.py:
scalar Python per 32-block for both quantizers (rounding by nearest-grid search with an explicit
tie rule, scale bytes from the fp32 bit fields via struct), a 256-entry byte -> (low, high) value
table for dequantization, and a dense per-token, per-slot loop for the layer, accumulated in
float64. Nothing here imports mxfp4 or reference.

Finite inputs only: the NaN policy is a documented choice of mxfp4/codec.py, tested there directly.
"""

import math
import struct

import torch

BLOCK = 32
GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # E2M1 magnitudes of codes 0..7


# ---------------------------------------------------------------------------------------------
# fp32 bit helpers
# ---------------------------------------------------------------------------------------------
def f32_bits(x: float) -> int:
    """The fp32 bit pattern of x (rounded to fp32 first, nearest-even)."""
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bits_f32(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b & 0xFFFFFFFF))[0]


def to_f32(x: float) -> float:
    return bits_f32(f32_bits(x))


def sign_bit(x: float) -> int:
    return 1 if math.copysign(1.0, x) < 0 else 0


# ---------------------------------------------------------------------------------------------
# E2M1 / E8M0 decoding
# ---------------------------------------------------------------------------------------------
def e2m1_value(code: int) -> float:
    """Decode a 4-bit E2M1 code from its fields: sign bit 3, exponent bits 2..1, mantissa bit 0."""
    sign = -1.0 if code & 8 else 1.0
    exp = (code >> 1) & 3
    man = code & 1
    mag = 0.5 * man if exp == 0 else 2.0 ** (exp - 1) * (1.0 + 0.5 * man)
    return sign * mag


def e8m0_value(byte: int) -> float:
    """SPEC 3.1: 2^(b-127); byte 0 -> 2^-127, byte 255 -> NaN."""
    if byte == 255:
        return math.nan
    return math.ldexp(1.0, byte - 127)


def byte_table() -> torch.Tensor:
    """[256, 2] float32: byte -> (value of the low nibble = element 2j, value of the high nibble = 2j+1)."""
    return torch.tensor([[e2m1_value(b & 0xF), e2m1_value(b >> 4)] for b in range(256)], dtype=torch.float32)


def scale_table() -> torch.Tensor:
    """[256] float32: E8M0 byte -> scale."""
    return torch.tensor([e8m0_value(b) for b in range(256)], dtype=torch.float32)


def decode_mx(packed_u8: torch.Tensor, scales_u8: torch.Tensor) -> torch.Tensor:
    """packed uint8 [..., Kb] and scales uint8 (any shape with prod(lead) rows of Kb*2/32) -> fp32 [..., 2*Kb]."""
    lead, kb = packed_u8.shape[:-1], packed_u8.shape[-1]
    k = 2 * kb
    vals = byte_table()[packed_u8.cpu().long()].reshape(*lead, k)
    sc = scale_table()[scales_u8.cpu().long()].reshape(*lead, k // BLOCK)
    return vals * sc.repeat_interleave(BLOCK, dim=-1)


# ---------------------------------------------------------------------------------------------
# Rounding onto the E2M1 grid
# ---------------------------------------------------------------------------------------------
def round_to_grid(mag: float, ties: str) -> int:
    """Magnitude code 0..7 of the grid point nearest mag >= 0; a tie goes to the even code
    (ties='even', SPEC 3.2) or to the larger magnitude (ties='away', SPEC 3.3); saturates at 6."""
    if mag >= GRID[-1]:
        return 7
    dists = [abs(g - mag) for g in GRID]
    best = min(dists)
    near = [k for k, d in enumerate(dists) if d == best]
    if len(near) == 1:
        return near[0]
    lo, hi = near  # a tie sits between two neighbouring codes
    if ties == "even":
        return lo if lo % 2 == 0 else hi
    if ties == "away":
        return hi
    raise ValueError(ties)


# ---------------------------------------------------------------------------------------------
# Scale rules
# ---------------------------------------------------------------------------------------------
def weight_scale_byte(amax: float) -> int:
    """SPEC 3.2: v = fp32(amax / 4); its exponent field, plus one when its mantissa fraction is
    >= 0.5 -- except the exact half of a subnormal (exponent field 0, fraction exactly 0.5)."""
    v = f32_bits(to_f32(amax) / 4.0)
    exponent, fraction = (v >> 23) & 0xFF, v & 0x7FFFFF
    if exponent == 0xFF:
        return 0xFF
    half = 1 << 22
    bump = fraction >= half and not (exponent == 0 and fraction == half)
    return min(exponent + int(bump), 0xFF)


def activation_scale_exponent(amax: float) -> int:
    """SPEC 3.3: add 0x200000 to amax's fp32 bits, clear the mantissa, s = floor(log2) - 2 in [-127, 127]."""
    rounded = bits_f32((f32_bits(amax) + 0x200000) & 0xFF800000)
    if rounded == 0.0:
        return -127
    if math.isinf(rounded):
        return 127
    return max(-127, min(127, math.floor(math.log2(rounded)) - 2))


# ---------------------------------------------------------------------------------------------
# Quantizers, one 32-block at a time
# ---------------------------------------------------------------------------------------------
def quantize_weight_block(values: list[float]) -> tuple[list[int], int]:
    """SPEC 3.2 on one block of finite fp32 values -> (codes, scale byte)."""
    assert len(values) == BLOCK
    byte = weight_scale_byte(max(abs(v) for v in values))
    scale = e8m0_value(byte)
    codes = []
    for v in values:
        y = v / scale
        codes.append(round_to_grid(abs(y), "even") | (8 * sign_bit(y)))
    return codes, byte


def quantize_activation_block(values: list[float]) -> tuple[list[int], int]:
    """SPEC 3.3 on one block of finite fp32 values -> (codes, scale byte)."""
    assert len(values) == BLOCK
    s = activation_scale_exponent(max(abs(v) for v in values))
    codes = []
    for v in values:
        q = v * 2.0**-s
        codes.append(round_to_grid(abs(q), "away") | (8 * sign_bit(v)))
    return codes, s + 127


def _rows(x: torch.Tensor) -> list[list[float]]:
    assert x.shape[-1] % BLOCK == 0
    rows = x.detach().cpu().float().reshape(-1, x.shape[-1]).tolist()
    assert all(math.isfinite(v) for row in rows for v in row), "oracle takes finite inputs only"
    return rows


def _quantize_rows(x: torch.Tensor, block_fn) -> tuple[torch.Tensor, torch.Tensor]:
    codes, scales = [], []
    for row in _rows(x):
        row_codes, row_scales = [], []
        for b in range(0, len(row), BLOCK):
            c, s = block_fn(row[b : b + BLOCK])
            row_codes += c
            row_scales.append(s)
        codes.append(row_codes)
        scales.append(row_scales)
    return torch.tensor(codes, dtype=torch.uint8), torch.tensor(scales, dtype=torch.uint8)


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    """codes uint8 [rows, K] -> bytes [rows, K/2]; byte j = code[2j] + 16 * code[2j+1]."""
    rows, k = codes.shape
    out = torch.empty((rows, k // 2), dtype=torch.uint8)
    for j in range(k // 2):
        out[:, j] = codes[:, 2 * j] + 16 * codes[:, 2 * j + 1]
    return out


def quantize_weight_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [..., K] -> (codes uint8 [rows, K], packed uint8 [rows, K/2], scale bytes uint8 [rows, K/32])."""
    codes, scales = _quantize_rows(x, quantize_weight_block)
    return codes, pack_codes(codes), scales


def quantize_activation_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    codes, scales = _quantize_rows(x, quantize_activation_block)
    return codes, pack_codes(codes), scales


def activation_qdq(row: list[float]) -> list[float]:
    """SPEC 3.3 quantize + dequantize of one row of fp32 values (exact)."""
    out = []
    for b in range(0, len(row), BLOCK):
        codes, byte = quantize_activation_block(row[b : b + BLOCK])
        scale = e8m0_value(byte)
        out += [e2m1_value(c) * scale for c in codes]
    return out


# ---------------------------------------------------------------------------------------------
# The layer, densely
# ---------------------------------------------------------------------------------------------
def _u8(t: torch.Tensor) -> torch.Tensor:
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


@torch.no_grad()
def dense_moe(data) -> torch.Tensor:
    """SPEC 1 from the raw (unshuffled) weights: every expert dequantized up front, then a plain
    loop over tokens and their slots, float64 products, fp32 silu, bf16 h. Returns bf16 [M, d_hidden] on CPU."""
    hidden, w1, w2, w1_scale, w2_scale, *_, topk_weights, topk_ids, config = data
    n_experts = w1.shape[0]
    inter = config["d_expert"]
    w1_deq = decode_mx(_u8(w1), _u8(w1_scale).reshape(n_experts, w1.shape[1], -1)).double()
    w2_deq = decode_mx(_u8(w2), _u8(w2_scale).reshape(n_experts, w2.shape[1], -1)).double()
    assert w1_deq.shape[1] == 2 * inter

    hidden_rows = hidden.detach().cpu().float().tolist()
    ids = topk_ids.cpu().tolist()
    weights = topk_weights.cpu().tolist()
    out = torch.zeros((len(hidden_rows), w2_deq.shape[1]), dtype=torch.float64)
    for t, row in enumerate(hidden_rows):
        a1 = torch.tensor(activation_qdq(row), dtype=torch.float64)
        for e, w in zip(ids[t], weights[t], strict=True):
            gate_up = (w1_deq[e] @ a1).float()  # fp32 values of the gate and up projections
            g, u = gate_up[:inter], gate_up[inter:]
            silu = g / (1.0 + torch.exp(-g))  # fp32
            h = (silu * u).to(torch.bfloat16).float()
            a2 = torch.tensor(activation_qdq(h.tolist()), dtype=torch.float64)
            out[t] += (w2_deq[e] @ a2) * w  # w is an fp32 value
    return out.to(torch.bfloat16)


# ---------------------------------------------------------------------------------------------
# Shuffles as index formulas (SPEC 3.4, 3.5)
# ---------------------------------------------------------------------------------------------
def spec_shuffle_weight(u: torch.Tensor) -> torch.Tensor:
    """SPEC 3.4 on uint8 [..., N, Kb]: byte (n, kb) with n = 16*n0 + n1, kb = 32*k0 + 16*k1 + k2
    goes to flat position n0*16*Kb + k0*512 + k1*256 + n1*16 + k2 of its [N, Kb] matrix."""
    n_rows, kb_cols = u.shape[-2:]
    n = torch.arange(n_rows).reshape(-1, 1)
    kb = torch.arange(kb_cols).reshape(1, -1)
    dest = (n // 16) * 16 * kb_cols + (kb // 32) * 512 + ((kb // 16) % 2) * 256 + (n % 16) * 16 + kb % 16
    src = u.cpu().reshape(-1, n_rows * kb_cols)
    out = torch.empty_like(src)
    out[:, dest.flatten()] = src
    return out.reshape(u.shape)


def spec_scale_destinations(m: int, n: int) -> torch.Tensor:
    """SPEC 3.5: flat index, in the padded [ceil256(m), ceil8(n)] output, of each input scale (i, j) < (m, n).
    i = 32a + 16b + c, j = 8d + 4e + f; the output is ordered (a, d, f, c, e, b)."""
    pn = -(-n // 8) * 8
    i = torch.arange(m).reshape(-1, 1)
    j = torch.arange(n).reshape(1, -1)
    a, b, c = i // 32, (i // 16) % 2, i % 16
    d, e, f = j // 8, (j // 4) % 2, j % 4
    return ((((a * (pn // 8) + d) * 4 + f) * 16 + c) * 2 + e) * 2 + b
