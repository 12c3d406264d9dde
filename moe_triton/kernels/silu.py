"""h = bf16(silu(gate) * up) (SPEC 1, step 3), computed the way the judge computes it.

g and u are exact sums in fp32 on every path (docs/numerics.md), so h is equal to the judge's
whenever the silu is: one ulp of the silu that moves h across a bf16 rounding boundary moves an
MXFP4 block of a2 and then a whole output row. So every kernel that computes h calls gated_h,
which spells the judge's own arithmetic, chosen by the target the launcher compiles for
(moe_triton.target.silu_judge):

  JUDGE "torch"  reference.py's F.silu(g) * u on CUDA: g / (1 + expf(-g)), then times u, each
                 rounded in fp32 (torch's CUDA kernel: CUDA's expf, IEEE division).
  JUDGE "ck"     aiter's CK stage-1 epilogue on the MI355X: g * (1 / (1 + expf(-g))), then times
                 u (the ROCm device library's expf, IEEE division), with fp32 subnormals flushed
                 to zero as aiter compiles it (-fgpu-flush-denormals-to-zero): g, u, g * s and h.
                 The launcher compiles it with enable_fp_fusion=False: triton 3.6's LLVM contracts
                 the exp's range reduction (x log2 e - round(x log2 e)) into an FMA under fusion,
                 which hipcc (fusion "Standard") does not.

libdevice.exp is the precise expf of each target (libdevice's __nv_expf, the ROCm device library's
__ocml_exp_f32); tl.math.div_rn is IEEE division on both (div.rn.f32 on NVIDIA, where '/' is
div.full, an approximation). tl.exp on fp32 is a fast exp2-based approximation on both GPUs; it
appears here only for the CPU interpreter (INTERPRET), which has no libdevice: numpy's exp in
float64, rounded once to fp32.
"""

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
