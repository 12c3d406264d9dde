"""`python -m bench.h200.occupancy`: a shape's static tiles and variants of them compiled for sm_90 on this
machine, nothing run. Per GEMM launch: its registers, warps and shared memory, the programs an SM holds and
what limits them, and its K loop body's instructions, wgmma waits and spills.

What bench.h200.ab would time, screened first. On the H200 the decode's instructions want more warps an SM to
hide behind (bench/notes/nvidia-speed.md); a variant that fits no more programs an SM, waits for every wgmma or
spills in its K loop is seldom worth device time. Variants and --neighbours as bench.h200.ab takes them:

  python -m bench.h200.occupancy --shapes bs16 --variant max_regs1=64,stages1=2 \\
      --variant g4r80=gluon1=4,stages1=2,max_regs1=80
  python -m bench.h200.occupancy --shapes E256+1-k8+1-bs512 --neighbours

It compiles with this Python's triton: use the GPU's (3.6 on the H200). Compiled figures, not times.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]

# sm_90 (H100, H200): 65,536 registers an SM in four quarters, each warp's allocated in units of 256 (a thread's
# rounded up to 8) within its quarter; 228 kB of shared memory an SM, 1 kB of it reserved for each program;
# at most 64 warps and 32 programs an SM.
QUARTER_REGISTERS = 16384
REGISTER_UNIT = 256
SHARED_PER_SM = 233472
SHARED_RESERVED = 1024
MOST_WARPS = 64
MOST_PROGRAMS = 32


class Occupancy(NamedTuple):
    programs: int
    limit: str  # what holds it there: registers, shared memory, warps or programs (each, where several do)


def programs_per_sm(registers: int, warps: int, shared: int) -> Occupancy:
    """How many programs of a kernel an sm_90 SM holds at once, and which resource limits it. A program's warps
    spread over the four quarters, so a quarter's registers bound the warps an SM holds."""
    per_warp = -(-registers * 32 // REGISTER_UNIT) * REGISTER_UNIT
    limits = {
        "registers": 4 * (QUARTER_REGISTERS // per_warp) // warps,
        "shared memory": SHARED_PER_SM // (shared + SHARED_RESERVED),
        "warps": MOST_WARPS // warps,
        "programs": MOST_PROGRAMS,
    }
    programs = min(limits.values())
    return Occupancy(programs, ", ".join(name for name, n in limits.items() if n == programs))


def launch_figures(launch) -> dict:
    """What one launch's compiled kernel holds (bench.gfx950.driver's record of a compile-only launch): its
    resources, wgmmas, waits and copies, the instructions and spills of its K loops, and the markers of the
    overlap's handshake (polls, releases, fences)."""
    from bench.h200.sass import disassemble, instructions, k_loop, loop_spans, resources

    kernel = launch.kernel
    text = disassemble(kernel.asm["cubin"])
    lines = instructions(text)
    # the K loops: loops of a few hundred instructions that issue wgmmas or cp.async (the loop that dispatches
    # a warp-specialized kernel's partitions, around them all, is thousands long)
    hot = [
        span
        for span in loop_spans(lines)
        if len(span) <= 1000 and any(re.search(r"HGMMA|LDGSTS", lines[i][1]) for i in span)
    ]
    loop = [lines[i][1] for span in hot for i in span]
    # the K loops themselves: hot loops that hold no other (stage 2's tile loop holds its K loop)
    inner = [
        lines[i][1]
        for span in hot
        if not any(o != span and span.start <= o.start and o.stop <= span.stop for o in hot)
        for i in span
    ]
    body = k_loop(lines)  # one K step, or two where the loop is unrolled
    return {
        "mma": len(re.findall(r"\bHGMMA\b", text)),
        "waits": len(re.findall(r"WARPGROUP\.DEPBAR", text)),
        "body": len(body),
        "body_mma": sum(bool(re.search(r"\bHGMMA\b", line)) for line in body),
        "body_waits": sum("WARPGROUP.DEPBAR" in line for line in body),
        "cp_async_16": "LDGSTS.E.BYPASS.128" in text,
        "loop_copies": sorted(set(re.findall(r"LDGSTS(?:\.\w+)*", "\n".join(loop)))),  # the forms, e.g. .E.64
        "register_split": "USETMAXREG" in text,
        "loop": len(loop),
        "loop_spills": sum(bool(re.search(r"\b(STL|LDL)\b", line)) for line in loop),
        "k_loop_spills": sum(bool(re.search(r"\b(STL|LDL)\b", line)) for line in inner),
        "spills": len(re.findall(r"\b(STL|LDL)\b", text)),
        "paired_atomics": bool(re.search(r"add\.noftz\.v2\.bf16", kernel.asm["ptx"])),
        "shared": kernel.metadata.shared,
        "warps": kernel.metadata.num_warps,
        "registers": resources(kernel.asm["cubin"]).registers,
        "grid_wait": "ACQBULK" in text,
        "polls": text.count("LDG.E.STRONG.GPU"),
        # in the PTX, whose order is the program's (ptxas lays a warp-specialized kernel's SASS out otherwise in
        # triton 3.6): the acquire load of the poll before the first cp.async
        "polls_before_copies": 0 <= kernel.asm["ptx"].find("acquire") < kernel.asm["ptx"].find("cp.async"),
        "releases": text.count("REDG.E.ADD.STRONG.GPU"),  # red.release.gpu: a fence, then the add
        "gpu_fences": text.count("MEMBAR.ALL.GPU"),
    }


def gemm_rows(case: dict, tiles) -> list[dict]:
    """The figures of each GEMM launch (the stages) of one call of case on tiles, compiled for sm_90."""
    from bench.h200.sm90 import decode_launches

    rows = []
    for launch in decode_launches(case, tiles):
        if "stage" not in launch.function:
            continue
        figures = launch_figures(launch)
        fit = programs_per_sm(figures["registers"], figures["warps"], figures["shared"])
        rows.append({"kernel": launch.function, **figures, "programs": fit.programs, "limit": fit.limit})
    return rows


def table(results: dict) -> list[str]:
    """One markdown row a GEMM launch of each shape's candidates."""
    lines = [
        "| shape | candidate | kernel | registers | warps | shared B | programs an SM (limit) "
        "| K loop body: instructions | waits / wgmmas | K loop spills | spills |",
        "|---|---|---|---:|---:|---:|---|---:|---:|---:|---:|",
    ]
    for shape, by_name in results.items():
        for name, rows in by_name["launches"].items():
            lines += [
                f"| {shape} | {name} | {r['kernel']} | {r['registers']} | {r['warps']} | {r['shared']:,} "
                f"| {r['programs']} ({r['limit']}) | {r['body']} | {r['body_waits']} / {r['body_mma']} "
                f"| {r['k_loop_spills']} | {r['spills']} |"
                for r in rows
            ]
        lines += [f"| {shape} | {line} | | | | | | | | | |" for line in by_name["left_out"]]
    return lines


def main(argv: list[str] | None = None) -> int:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.h200.ab import candidate_parser, candidates, chosen_candidates
    from bench.h200.sm90 import fast_decode_on
    from bench.runner.case_args import case_shape
    from bench.runner.preflight import USAGE_STATUS
    from bench.runner.worker import error_summary

    parser = candidate_parser("python -m bench.h200.occupancy", __doc__)
    args = parser.parse_args(argv)
    chosen = chosen_candidates(parser, args)
    if chosen is None:
        return USAGE_STATUS
    variants, cases = chosen

    results = {}
    for name, case in cases:
        with fast_decode_on():  # the tiles checked as for an sm_90 GPU
            tiles, left_out = candidates(case_shape(case), variants, args.neighbours)
        launches = {}
        for label, t in tiles.items():
            try:
                launches[label] = gemm_rows(case, t)
            except Exception as error:  # a tile that does not compile is a result: its type and first line
                summary = error_summary(error)[: len(type(error).__name__) + 2 + 160]
                left_out.append(f"{label}: compile failed: {summary}")
        results[name] = {"launches": launches, "left_out": left_out}
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    os.environ["TRITON_INTERPRET"] = "0"  # before moe_triton is imported: its kernels compile, not interpret
    sys.exit(main())
