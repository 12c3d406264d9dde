"""Whether a compiled kernel that computes h (SPEC 1, step 3) computes its silu with the judge's
precise exp and IEEE division (moe_triton/kernels/silu.py, docs/numerics.md), read off its gfx950
AMDGCN or its sm_90 PTX: the offline check of the code the interpreter cannot show. The offline
gfx950 check (bench.gfx950.check) applies the gfx950 rule to every kernel it compiles that computes
h; `python -m bench.numerics.silu_code` applies both to every path.

What tells the two spellings apart, per exp and per division (counts over the whole kernel):
- gfx950: the precise expf (ROCm's __ocml_exp_f32, as LLVM lowers it) rounds ph = x log2(e) to
  an integer E (v_rndne_f32), takes ph - E as a subtraction (v_sub_f32 ..., ph, E) and scales
  back with v_ldexp_f32; tl.exp's fast form has no v_rndne_f32. Under FP fusion triton 3.6's LLVM
  contracts ph - E with the multiply into v_fma_f32 ..., -E, which hipcc does not: a different exp.
  IEEE division is the v_div_scale / v_rcp_f32 / v_div_fmas / v_div_fixup_f32 sequence, one per
  silu; an approximate one has no v_div_fixup_f32 (v_rcp_f32 alone is no sign: integer division
  uses it too).
- sm_90: the precise expf (libdevice's __nv_expf) does one fma.rm per exp around its
  ex2.approx.ftz; tl.exp's fast form is ex2.approx alone. IEEE division is div.rn.f32; '/' on
  floats is div.full.f32 (approximate), and div.approx / rcp.approx are approximations too; one
  div.rn.f32 per silu.
"""

import re

# The package's kernels that compute h (moe_triton/kernels/silu.py's gated_h): one per path.
H_KERNELS = ("moe_stage1_kernel", "moe_gluon_stage1_kernel", "moe_native_stage1_kernel")


def _count(pattern: str, text: str) -> int:
    return len(re.findall(pattern, text))


_RNDNE = re.compile(r"\bv_rndne_f32(?:_e32|_e64)?\s+(v\d+),")
_REDUCTION_WINDOW = 32  # instructions after v_rndne_f32 within which the exp uses E


def _range_reductions(text: str) -> tuple[int, int]:
    """(subtracted, contracted): of the exps' roundings E = v_rndne_f32(ph), how many are used as
    ph - E by a v_sub_f32 and how many as -E by an FMA (the contracted form), before E's register
    is written again."""
    lines = [line.strip() for line in text.splitlines() if line.strip().startswith(("v_", "s_"))]
    subtracted = contracted = 0
    for i, line in enumerate(lines):
        found = _RNDNE.search(line)
        if not found:
            continue
        e = found.group(1)
        for after in lines[i + 1 : i + 1 + _REDUCTION_WINDOW]:
            name, _, operands = after.partition(" ")
            args = [a.strip() for a in operands.split(",")]
            if name.startswith("v_sub_f32") and args[-1] == e:
                subtracted += 1
            elif name.startswith("v_fma") and f"-{e}" in args:
                contracted += 1
            if args and args[0] == e:
                break
    return subtracted, contracted


def _exp_problems(exps: int, reduced: int, what: str) -> list[str]:
    """The first findings of a silu check: no exp at all, or exps without the precise range reduction."""
    if exps == 0:
        return ["no exp in a kernel that computes h"]
    return [f"fast exp in h: {exps - reduced} of {exps} {what}"] if reduced < exps else []


def amdgcn_silu_problems(text: str) -> list[str]:
    """What is wrong with the silu of a gfx950 kernel's AMDGCN; empty when it is the precise one."""
    exps = _count(r"\bv_exp_f32(?:_e32|_e64)?\b", text)
    rounds = _count(r"\bv_rndne_f32(?:_e32|_e64)?\b", text)
    subtracted, contracted = _range_reductions(text)
    # One IEEE division per silu, so per exp (v_rcp_f32 alone also serves integer division: not counted)
    fixups = _count(r"\bv_div_fixup_f32(?:_e64)?\b", text)
    problems = _exp_problems(exps, rounds, "v_exp_f32 without the precise range reduction")
    if exps == 0:
        return problems
    if rounds >= exps and (contracted or subtracted < exps):
        problems.append(
            f"contracted exp in h: {max(contracted, exps - subtracted)} of {exps} range reductions "
            "(x log2 e - E) fused into an FMA; launch with enable_fp_fusion=False"
        )
    if fixups < exps:
        problems.append(f"approximate division in h: {exps - fixups} of {exps} silus without an IEEE division")
    return problems


def ptx_silu_problems(ptx: str) -> list[str]:
    """What is wrong with the silu of an sm_90 kernel's PTX; empty when it is the precise one."""
    exps = _count(r"\bex2\.approx\.", ptx)
    reductions = _count(r"\bfma\.rm\.", ptx)
    problems = _exp_problems(exps, reductions, "ex2.approx without __nv_expf's reduction")
    if exps == 0:
        return problems
    approximate = _count(r"\b(?:div\.full|div\.approx|rcp\.approx)\.", ptx)
    if approximate:
        problems.append(f"approximate division in h: {approximate} div.full / div.approx / rcp.approx")
    ieee = _count(r"\bdiv\.rn\.f32\b", ptx)
    if ieee < exps:
        problems.append(
            f"{exps - ieee} of {exps} silus without an IEEE division (div.rn.f32) in a kernel that computes h"
        )
    return problems
