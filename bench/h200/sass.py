"""Reading what the CUDA backend compiled for sm_90: SASS instructions, the K loop, the tensor-core
work of its warpgroup MMAs, and the registers and shared memory a program holds.

The SASS comes from cuobjdump (shipped in triton's NVIDIA backend, triton/backends/nvidia/bin/):
one instruction a line, `/*addr*/ [@pred] OPCODE operands ;`, branches to absolute addresses. A loop is
the text from a backward branch's target down to the branch; the K loop is the shortest loop holding MMAs
(one K step, or two where the compiler unrolled it; the loop of a warp-specialized kernel's partitions,
around them all, is far longer).
Its counts are per iteration as compiled (the static body: a conditional block inside counts as if
taken). Every instruction a warp issues counts once, as ncu's smsp__inst_executed counts it.
Tensor-core work: HGMMA.64xNx16 (a warpgroup of 4 warps over the SM's 4 sub-partitions) is
2 x 64 x N x 16 flops, a quarter of it on each warp's sub-partition; HMMA.16816 (one warp) is
2 x 16 x 8 x 16 flops on its own.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

_LINE = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH = re.compile(r"\bBRA(?:\.\w+)*\s+(?:`?\(?)0x([0-9a-f]+)")
_WGMMA = re.compile(r"\b[HI]GMMA\.(\d+)x(\d+)x(\d+)")  # bf16 (HGMMA) and int8 (IGMMA) warpgroup MMAs
_HMMA = re.compile(r"\bHMMA\.16(8)(\d+)")  # HMMA.16816: m16 n8 k16
_RESOURCES = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)")


def tool(name: str) -> Path:
    """cuobjdump (or another CUDA binary tool) from triton's NVIDIA backend."""
    import triton.backends.nvidia

    found = Path(triton.backends.nvidia.__file__).parent / "bin" / name
    if not found.exists():
        raise FileNotFoundError(f"{found}: not in this triton's NVIDIA backend")
    return found


def _cuobjdump(cubin: bytes, *options: str) -> str:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kernel.cubin"
        path.write_bytes(cubin)
        return subprocess.run(
            [str(tool("cuobjdump")), *options, str(path)], check=True, capture_output=True, text=True
        ).stdout


def disassemble(cubin: bytes) -> str:
    return _cuobjdump(cubin, "-sass")


@dataclass
class Resources:
    registers: int  # per thread
    stack: int  # bytes per thread
    local: int  # bytes per thread (spills)


def resources(cubin: bytes) -> Resources:
    """Registers, stack and local memory of the kernel (cuobjdump -res-usage)."""
    found = _RESOURCES.search(_cuobjdump(cubin, "-res-usage"))
    if not found:
        raise ValueError("cuobjdump -res-usage printed no REG/STACK/SHARED/LOCAL line")
    reg, stack, _, local = (int(x) for x in found.groups())
    return Resources(registers=reg, stack=stack, local=local)


def instructions(text: str) -> list[tuple[int, str]]:
    """(address, instruction without its ';') per SASS line; headers and encodings dropped."""
    return [(int(m[1], 16), m[2]) for m in map(_LINE.match, text.splitlines()) if m]


def opcode(instruction: str) -> str:
    """The opcode without predicate or modifiers: '@!P0 BRA 0x10' -> 'BRA'."""
    words = instruction.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def tensor_flops(instruction: str) -> float:
    """Flops this instruction puts on its own warp's sub-partition's tensor core (0: not an MMA)."""
    found = _WGMMA.search(instruction)
    if found:
        m, n, k = (int(x) for x in found.groups())
        return 2 * m * n * k / 4  # a warpgroup's MMA, shared by its four warps' sub-partitions (int8: ops)
    found = _HMMA.search(instruction)
    if found:
        n, k = (int(x) for x in found.groups())
        return 2 * 16 * n * k
    return 0.0


def is_mma(instruction: str) -> bool:
    return opcode(instruction) in ("HGMMA", "IGMMA", "HMMA")


def loop_spans(lines: list[tuple[int, str]]) -> list[range]:
    """The index ranges into instructions() of every loop: a backward branch's target down to the branch."""
    where = {addr: i for i, (addr, _) in enumerate(lines)}
    spans = []
    for i, (addr, text) in enumerate(lines):
        branch = _BRANCH.search(text)
        if branch and int(branch[1], 16) < addr and int(branch[1], 16) in where:
            spans.append(range(where[int(branch[1], 16)], i + 1))
    return spans


def loops(lines: list[tuple[int, str]]) -> list[list[str]]:
    """The instructions of every loop (loop_spans)."""
    return [[lines[i][1] for i in span] for span in loop_spans(lines)]


def _k_loop_span(lines: list[tuple[int, str]]) -> range | None:
    """The shortest loop holding an MMA; None where none does."""
    hot = [span for span in loop_spans(lines) if any(is_mma(lines[i][1]) for i in span)]
    return min(hot, key=len, default=None)


def k_loop(lines: list[tuple[int, str]]) -> list[str]:
    """The K loop's instructions: the shortest loop holding an MMA; empty where none does."""
    span = _k_loop_span(lines)
    return [lines[i][1] for i in span] if span else []


@dataclass
class Counts:
    instructions: int  # warp instructions issued
    mma: int  # HGMMA / IGMMA / HMMA instructions among them
    tensor_flops: float  # on the warp's sub-partition

    def __add__(self, other: Counts) -> Counts:
        return Counts(
            self.instructions + other.instructions, self.mma + other.mma, self.tensor_flops + other.tensor_flops
        )

    def scaled(self, factor: float) -> Counts:
        return Counts(self.instructions * factor, self.mma * factor, self.tensor_flops * factor)


def counts(body: list[str]) -> Counts:
    return Counts(len(body), sum(map(is_mma, body)), sum(map(tensor_flops, body)))


@dataclass
class Kernel:
    """A kernel's SASS split into its K loop (per iteration) and the rest (once per program)."""

    loop: Counts | None  # None: no loop holds an MMA
    rest: Counts  # every instruction outside that loop, as if each ran once
    total: Counts  # the whole kernel, each instruction once
    path: Counts  # one program's path (bench.gfx950.cfg: the shortest to an exit, loops entered once)


def program_path(lines: list[tuple[int, str]]) -> list[str]:
    """bench.gfx950.cfg.shortest_path of the SASS lines."""
    from bench.gfx950.cfg import Instruction, shortest_path

    at = {addr: i for i, (addr, _) in enumerate(lines)}
    code = []
    for _, text in lines:
        found = _BRANCH.search(text)
        code.append(
            Instruction(
                text=text,
                target=at.get(int(found[1], 16)) if found else None,
                conditional=text.startswith("@"),
                exit=opcode(text) == "EXIT",
            )
        )
    return shortest_path(code)


def split(text: str) -> Kernel:
    """The K loop (k_loop) and everything else."""
    lines = instructions(text)
    total, path = counts([t for _, t in lines]), counts(program_path(lines))
    span = _k_loop_span(lines)
    if span is None:
        return Kernel(loop=None, rest=total, total=total, path=path)
    rest = [t for i, (_, t) in enumerate(lines) if i not in span]
    return Kernel(loop=counts([lines[i][1] for i in span]), rest=counts(rest), total=total, path=path)
