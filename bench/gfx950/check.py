"""Per launched kernel: what gfx950 code it compiled to (bench.gfx950.asm), and which of the limits
below it breaks. A kernel specialised the same way is analysed once per process (by its hash).

Limits (every kernel): no scratch and no spilled registers; at most 160 KiB of LDS per workgroup; at
least 2 waves per SIMD (bench.gfx950.model); no replicated MFMA work. GEMM kernels (names with
"stage1" or "stage2") must use native scaled MFMAs (v_mfma_scale_f32_*_f8f6f4) and no others.
The kernels that compute h (bench.numerics.rules.H_KERNELS) must compute its silu with the precise exp
and IEEE division (bench.numerics.rules, docs/numerics.md).

Replication is read from the layouts, not guessed from counts: the TTGIR gives each K-loop dot's
tile (M x N) and its MFMA layout (warpsPerCTA [wm, wn], instrShape [m, n]). If wm * m > M (or
wn * n > N), warps along that dimension hold the same output elements, so they issue the same
MFMAs: the work is replicated by the ratio. The counts then fix how many K steps the compiled loop
body holds (LLVM may unroll it): MFMAs issued in it (per wave x waves) over the MFMAs one step's
dots need (sum of M*N*K / (m*n*k)) over that replication, rounded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.gfx950 import asm
from bench.gfx950.model import FLOPS_PER_SIMD_CYCLE, LDS_PER_CU, mfma_cycles, waves_per_simd
from bench.numerics.rules import H_KERNELS, amdgcn_silu_problems

MIN_WAVES_PER_SIMD = 2
GEMM_MARKERS = ("stage1", "stage2")
_NON_SCALED_FORMATS = {"bf16": "bf16", "f16": "f16", "fp8": "fp8", "bf8": "bf8", "i8": "fp8"}


def is_gemm(name: str) -> bool:
    return any(marker in name for marker in GEMM_MARKERS)


@dataclass
class KernelReport:
    name: str
    num_warps: int
    num_stages: int
    lds: int
    mfma: dict  # mnemonic -> static count in the kernel
    loop: asm.LoopCounts | None
    res: asm.Resources
    waves: float
    dots: list[asm.Dot]
    loop_mfma_cycles: float  # matrix-core cycles of one K step of one wave
    kernel: asm.LoopCounts | None = None  # the whole kernel, each instruction once
    path: asm.LoopCounts | None = None  # one program's path (asm.program_path), for kernels without MFMAs
    violations: list[str] = field(default_factory=list)

    @property
    def replication(self) -> float:
        return max((d.replication for d in self.dots), default=1.0)

    @property
    def other_per_iter(self) -> int:
        return self.loop.instructions - self.loop.mfma - self.loop.valu if self.loop else 0


def k_steps(loop: asm.LoopCounts, dots: list[asm.Dot], num_warps: int) -> int:
    """K steps in the counted text: MFMAs issued (per wave x waves) over those one step's dots need,
    less the replication the layouts show (which issues more MFMAs within one step)."""
    issued = len(loop.mfma_lines) * loop.steps * num_warps / _needed(dots, asm.mnemonic(loop.mfma_lines[0]))
    return max(1, round(issued / max(d.replication for d in dots)))


def _needed(dots: list[asm.Dot], mfma_name: str) -> float:
    """MFMAs of this instruction shape that the dots' tiles need, without replication."""
    m, n, k = asm.mfma_shape(mfma_name)
    return sum(d.m * d.n * d.k for d in dots) / (m * n * k)


def _format_of(instruction: str) -> str:
    name = asm.mnemonic(instruction)
    if asm.is_scaled_mfma(name):
        return min(asm.operand_formats(instruction), key=FLOPS_PER_SIMD_CYCLE.__getitem__)
    return _NON_SCALED_FORMATS.get(name.rsplit("_", 1)[-1], "bf16")


def loop_cycles(lines: list[str]) -> float:
    """Matrix-core cycles of the given MFMA instructions (the slower operand format sets the rate)."""
    return sum(mfma_cycles(asm.mfma_shape(asm.mnemonic(line)), _format_of(line)) for line in lines)


def violations(rep: KernelReport) -> list[str]:
    out = []
    if rep.res.scratch:
        out.append(f"scratch {rep.res.scratch} B")
    if rep.res.vgpr_spill or rep.res.sgpr_spill:
        out.append(f"spills (VGPR {rep.res.vgpr_spill}, SGPR {rep.res.sgpr_spill})")
    if rep.lds > LDS_PER_CU:
        out.append(f"LDS {rep.lds / 1024:.0f} KiB > {LDS_PER_CU // 1024} KiB")
    if rep.waves < MIN_WAVES_PER_SIMD:
        out.append(f"{rep.waves:g} waves/SIMD < {MIN_WAVES_PER_SIMD}")
    for d in rep.dots:
        if d.replication > 1:
            out.append(
                f"replicated MFMA work x{d.replication:g} (warps {list(d.warps)} x MFMA {list(d.instr)} "
                f"over the {d.m}x{d.n} tile)"
            )
    if is_gemm(rep.name):
        plain = sorted(m for m in rep.mfma if not asm.is_scaled_mfma(m))
        if not rep.mfma:
            out.append("GEMM without MFMAs")
        elif plain:
            out.append(f"GEMM with non-scaled MFMAs ({', '.join(plain)})")
    return out


_reports: dict[str, KernelReport] = {}


def _analyse(kernel) -> KernelReport:
    md = kernel.metadata
    text, ttgir = kernel.asm["amdgcn"], kernel.asm["ttgir"]
    res = asm.resources(text)
    loop = asm.k_loop(text)
    dots, in_loop = asm.loop_dots(ttgir)
    mfma = asm.mfma_counts(text)
    if not in_loop:
        dots = dots[:1]  # unrolled in the TTGIR already: one dot per K step
    if loop is None and mfma and dots:
        loop = asm.whole_kernel(text)
    if loop and dots:
        loop = loop.per_step(k_steps(loop, dots, md.num_warps))
    rep = KernelReport(
        name=md.name,
        num_warps=md.num_warps,
        num_stages=md.num_stages,
        lds=md.shared,
        mfma=dict(mfma),
        loop=loop,
        res=res,
        waves=waves_per_simd(res.total_vgpr, md.shared, md.num_warps),
        dots=dots if loop else [],
        loop_mfma_cycles=loop_cycles(loop.mfma_lines) if loop else 0.0,
        kernel=asm.whole_kernel(text),
        path=asm.program_path(text),
    )
    rep.violations = violations(rep) + (amdgcn_silu_problems(text) if md.name in H_KERNELS else [])
    return rep


def analyse(kernel) -> KernelReport:
    """The report of one compiled kernel (cached by its hash within the process)."""
    key = kernel.metadata.hash
    if key not in _reports:
        _reports[key] = _analyse(kernel)
    return _reports[key]
