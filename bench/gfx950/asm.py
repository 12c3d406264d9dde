"""Reading what the HIP backend compiled: AMDGCN resources and K loop, and the dots of the TTGIR.

Instruction classes (AMDGCN mnemonics):
  MFMA   v_mfma_* and v_smfmac_* (the matrix cores);
  VALU   every other v_* (v_accvgpr_read/write and v_readfirstlane included: they issue on the VALU);
  other  s_* (scalar, branches, waits), buffer_/global_/flat_/scratch_ (memory), ds_ (LDS), ...
The K loop is the innermost loop that holds MFMAs: the text from a label to a backward branch to it
(s_branch or s_cbranch_* .LBBx_y, the label above the branch). Its counts are per iteration of the
loop as compiled: the static body, forward branches inside included (a conditional epilogue inside
the loop counts as if taken). LLVM may unroll: a loop body can hold several K steps (a runtime
unroll, with a remainder copy after it), and a loop of a constant, short trip count can become
straight code. Counts are then given per K step: the loop's over its K steps, or the whole
kernel's over the kernel's K steps (an upper bound: set-up and epilogue included); bench.gfx950.check
finds the K steps from the MFMAs the dots need.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

_LABEL = re.compile(r"^([.\w$]+):")
_BRANCH = re.compile(r"^\s*s_(?:cbranch_\w+|branch)\s+([.\w$]+)")
_MFMA_SHAPE = re.compile(r"_(\d+)x(\d+)x(\d+)")
_OPERAND_FORMAT = dict(zip("01234", ("fp8", "bf8", "fp6", "bf6", "fp4"), strict=True))


def instructions(text: str) -> list[str]:
    """The instruction lines of AMDGCN text, stripped; labels, directives and comments dropped."""
    out = []
    for raw in text.splitlines():
        line = raw.split(";", 1)[0].strip()
        if not line or line.startswith(".") or _LABEL.match(line):
            continue
        out.append(line)
    return out


def mnemonic(instruction: str) -> str:
    return instruction.split(None, 1)[0]


def is_mfma(name: str) -> bool:
    return name.startswith(("v_mfma", "v_smfmac"))


def is_valu(name: str) -> bool:
    return name.startswith("v_") and not is_mfma(name)


def is_scaled_mfma(name: str) -> bool:
    """gfx950's MXFP4/6/8 MFMAs with block scales (v_mfma_scale_f32_*_f8f6f4)."""
    return name.startswith("v_mfma_scale_f32_") and name.endswith("_f8f6f4")


def mfma_shape(name: str) -> tuple[int, int, int]:
    """(m, n, k) of an MFMA mnemonic, e.g. v_mfma_scale_f32_16x16x128_f8f6f4 -> (16, 16, 128)."""
    found = _MFMA_SHAPE.search(name)
    if not found:
        raise ValueError(f"no m x n x k in MFMA mnemonic {name!r}")
    return tuple(int(x) for x in found.groups())


def operand_formats(instruction: str) -> tuple[str, str]:
    """(A, B) operand formats of an f8f6f4 MFMA from its cbsz / blgp fields (absent: 0, fp8)."""
    fields = dict(re.findall(r"\b(cbsz|blgp):([0-4])", instruction))
    return _OPERAND_FORMAT[fields.get("cbsz", "0")], _OPERAND_FORMAT[fields.get("blgp", "0")]


@dataclass
class LoopCounts:
    instructions: int
    mfma: int
    valu: int
    mfma_lines: list[str] = field(default_factory=list)  # the MFMAs of one K step
    steps: int = 1  # K steps the counted text holds; the counts are per K step
    whole_kernel: bool = False  # no loop holds the MFMAs: the whole kernel was counted
    body: list[str] = field(default_factory=list, repr=False)  # the instructions counted

    def per_step(self, steps: int) -> LoopCounts:
        """These counts taken as `steps` K steps (an unrolled body)."""
        return _counts(self.body, steps, self.whole_kernel)


def _counts(body: list[str], steps: int = 1, whole_kernel: bool = False) -> LoopCounts:
    steps = max(1, steps)
    mfma = [line for line in body if is_mfma(mnemonic(line))]
    valu = sum(is_valu(mnemonic(line)) for line in body)
    return LoopCounts(
        instructions=round(len(body) / steps),
        mfma=round(len(mfma) / steps),
        valu=round(valu / steps),
        mfma_lines=mfma[: round(len(mfma) / steps)],
        steps=steps,
        whole_kernel=whole_kernel,
        body=body,
    )


def k_loop(text: str) -> LoopCounts | None:
    """Counts of one iteration of the innermost loop holding MFMAs (None: no loop holds one)."""
    lines = text.splitlines()
    labels: dict[str, int] = {}
    spans = []
    for i, raw in enumerate(lines):
        found = _LABEL.match(raw.strip())
        if found:
            labels[found[1]] = i
            continue
        branch = _BRANCH.match(raw)
        if branch and branch[1] in labels:  # the label is above: a backward branch
            spans.append((labels[branch[1]], i))
    best = None
    for start, end in spans:
        body = instructions("\n".join(lines[start : end + 1]))
        if any(is_mfma(mnemonic(line)) for line in body) and (best is None or len(body) < best.instructions):
            best = _counts(body)
    return best


def whole_kernel(text: str) -> LoopCounts:
    """The whole kernel's counts, for MFMAs outside any loop (a K loop unrolled into straight code)."""
    return _counts(instructions(text), 1, whole_kernel=True)


_ENDPGM = re.compile(r"^\s*s_endpgm\b")


def program_path(text: str) -> LoopCounts:
    """One program's instructions (bench.gfx950.cfg.shortest_path: the shortest path to an s_endpgm that
    enters every loop once), for a kernel whose programs take different branches by role."""
    from bench.gfx950.cfg import Instruction, shortest_path

    code, labels, pending = [], {}, []
    for raw in text.splitlines():
        line = raw.split(";", 1)[0].strip()
        found = _LABEL.match(line)
        if found:
            pending.append(found[1])
            continue
        if not line or line.startswith("."):
            continue
        for name in pending:
            labels[name] = len(code)
        pending = []
        branch = _BRANCH.match(line)
        code.append(
            (
                line,
                branch[1] if branch else None,
                bool(branch) and not line.startswith("s_branch"),
                bool(_ENDPGM.match(line)),
            )
        )
    for name in pending:
        labels[name] = len(code)
    instructions_ = [
        Instruction(text=t, target=labels.get(target) if target else None, conditional=cond, exit=end)
        for t, target, cond, end in code
    ]
    return _counts(shortest_path(instructions_))


def mfma_counts(text: str) -> Counter:
    """Static count of each MFMA mnemonic in the whole kernel."""
    return Counter(m for m in map(mnemonic, instructions(text)) if is_mfma(m))


@dataclass
class Resources:
    vgpr: int  # architected VGPRs
    agpr: int  # accumulation VGPRs
    total_vgpr: int  # the unified register file's share of one wave (VGPRs, aligned, then AGPRs)
    sgpr: int
    scratch: int  # bytes of private segment per work item
    vgpr_spill: int
    sgpr_spill: int


def _field(text: str, pattern: str, default: int | None = None) -> int:
    found = re.search(pattern, text, re.MULTILINE)
    if found:
        return int(found[1])
    if default is None:
        raise ValueError(f"AMDGCN text has no {pattern!r}")
    return default


def resources(text: str) -> Resources:
    """Register, scratch and spill figures from the assembler's kernel info and metadata."""
    vgpr = _field(text, r"^; NumVgprs:\s*(\d+)")
    agpr = _field(text, r"^; NumAgprs:\s*(\d+)", 0)
    return Resources(
        vgpr=vgpr,
        agpr=agpr,
        total_vgpr=_field(text, r"^; TotalNumVgprs:\s*(\d+)", vgpr + agpr),
        sgpr=_field(text, r"^; TotalNumSgprs:\s*(\d+)"),
        scratch=max(
            _field(text, r"^; ScratchSize:\s*(\d+)"), _field(text, r"\.private_segment_fixed_size:\s*(\d+)", 0)
        ),
        vgpr_spill=_field(text, r"\.vgpr_spill_count:\s*(\d+)", 0),
        sgpr_spill=_field(text, r"\.sgpr_spill_count:\s*(\d+)", 0),
    )


@dataclass
class Dot:
    """One tt.dot / tt.dot_scaled of a K loop: its tile M x N x K and its MFMA layout."""

    m: int
    n: int
    k: int
    warps: tuple[int, int]  # warpsPerCTA over (M, N)
    instr: tuple[int, int]  # the layout's MFMA instruction (m, n)
    scaled: bool

    @property
    def replication(self) -> float:
        """How many warps compute each output element: warps x instruction over the tile, where > 1."""
        return max(1.0, self.warps[0] * self.instr[0] / self.m) * max(1.0, self.warps[1] * self.instr[1] / self.n)


_MFMA_LAYOUT = re.compile(r"^(#[\w]+)\s*=\s*#ttg\.amd_mfma<\{(.*)\}>", re.MULTILINE)
_DOT = re.compile(r"\btt\.(dot|dot_scaled)\b(.*)$")
_TENSOR = re.compile(r"tensor<([\dx]+)x(\w+)\s*,\s*(#[\w]+|#ttg\.dot_op<\{[^}]*\}>)")


def _ints(text: str) -> list[int]:
    return [int(x) for x in re.findall(r"\d+", text)]


def mfma_layouts(ttgir: str) -> dict[str, tuple[tuple[int, int], tuple[int, int]]]:
    """#name -> (warpsPerCTA, instrShape[:2]) of each AMD MFMA layout the TTGIR defines."""
    out = {}
    for name, body in _MFMA_LAYOUT.findall(ttgir):
        warps = re.search(r"warpsPerCTA\s*=\s*\[([^\]]*)\]", body)
        instr = re.search(r"instrShape\s*=\s*\[([^\]]*)\]", body)
        if warps and instr:
            w, s = _ints(warps[1]), _ints(instr[1])
            out[name] = ((w[0], w[1]), (s[0], s[1]))
    return out


def _loop_lines(ttgir: str) -> list[tuple[str, int]]:
    """Lines inside scf.for regions (their bodies, by indentation), each with its loop depth."""
    lines = ttgir.splitlines()
    inside, depth_indent = [], []
    for line in lines:
        indent = len(line) - len(line.lstrip())
        if depth_indent and line.lstrip().startswith("}") and indent == depth_indent[-1]:
            depth_indent.pop()
            continue
        if depth_indent:
            inside.append((line, len(depth_indent)))
        if re.search(r"=\s*scf\.for\b|^\s*scf\.for\b", line) and line.rstrip().endswith("{"):
            depth_indent.append(indent)
    return inside


def loop_dots(ttgir: str) -> tuple[list[Dot], bool]:
    """The dots of the K loop, the innermost loops that hold dots (the peeled copies outside it are left
    out, also where an outer loop holds both: stage 2's loop over output tiles around its K loop), and
    True; or, where no loop holds a dot (a K loop of constant trip count, unrolled), every dot of the
    kernel and False."""
    inside = _loop_lines(ttgir)
    depth = max((d for line, d in inside if _DOT.search(line)), default=0)
    dots = _dots(ttgir, [line for line, d in inside if d == depth])
    return (dots, True) if dots else (_dots(ttgir, ttgir.splitlines()), False)


def _dots(ttgir: str, lines: list[str]) -> list[Dot]:
    layouts = mfma_layouts(ttgir)
    dots = []
    for line in lines:
        found = _DOT.search(line)
        if not found:
            continue
        kind, rest = found.groups()
        lhs_type, _, result = rest.partition("->")
        operands = _TENSOR.findall(lhs_type)
        out = _TENSOR.search(result)
        if not operands or not out:
            continue
        m, n = _ints(out[1])[-2:]
        k = _ints(operands[0][0])[-1]
        scaled = kind == "dot_scaled"
        if scaled and re.search(r"lhs\s*=\s*e2m1", rest):
            k *= 2  # two fp4 codes per byte along K
        warps, instr = layouts.get(out[3], ((1, 1), (m, n)))
        dots.append(Dot(m=m, n=n, k=k, warps=warps, instr=instr, scaled=scaled))
    return dots
