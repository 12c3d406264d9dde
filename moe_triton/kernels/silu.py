"""h = bf16(silu(gate) * up) (SPEC 1, step 3) in the judge's own arithmetic for the target (JUDGE "torch" on NVIDIA,
"ck" on AMD: moe_triton.target.silu_judge): one ulp of the silu can move a whole output row (docs/numerics.md)."""

import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def round_to_bf16(x):
    """fp32 -> nearest bf16 (ties to even), kept in fp32; NaN stays NaN. Spelled out in integer
    bits because the CPU interpreter's fp32 -> bf16 cast truncates."""
    bits = x.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -0x10000
    return tl.where(x != x, x, bits.to(tl.float32, bitcast=True))


@triton.jit
def _exp(x, INTERPRET: tl.constexpr):
    if INTERPRET:
        return tl.exp(x.to(tl.float64)).to(tl.float32)
    return libdevice.exp(x)


@triton.jit
def _flush(x):
    """x with an fp32 subnormal flushed to zero of its sign, as the judge's FTZ mode does."""
    return tl.where(tl.abs(x) < 1.1754943508222875e-38, x * 0.0, x)


@triton.jit
def gated_h(gate, up, JUDGE: tl.constexpr, INTERPRET: tl.constexpr):
    """bf16(silu(gate) * up) of fp32 tiles, as JUDGE computes it, returned in fp32."""
    tl.static_assert((JUDGE == "torch") or (JUDGE == "ck"), "gated_h: JUDGE must be 'torch' or 'ck'")
    if JUDGE == "ck":
        # A subnormal gate needs no flush of its own: its exp is 1 either way, and the flush of
        # gate * 0.5 gives the zero of its sign, as the flushed gate does.
        silu = _flush(gate * tl.math.div_rn(1.0, 1.0 + _exp(-gate, INTERPRET)))
        h = _flush(silu * _flush(up))
    else:
        h = tl.math.div_rn(gate, 1.0 + _exp(-gate, INTERPRET)) * up
    return round_to_bf16(h)
