"""The Gluon kernels compiled for sm_90 on the CPU (tests/test_gluon_stage1.py, test_gluon_stage2.py):
what the SASS and PTX of each launch of one kernel hold, for (case, tiles) pairs, compiled the
H200's way by bench.h200.twin.decode_launches in a fresh process with TRITON_INTERPRET unset (the
kernels of the test process were made for the interpreter when moe_triton was imported); compiled_by runs a bench
probe's own summary of what it compiles in such a process."""

import json
import os
import subprocess
import sys
from pathlib import Path

from moe_triton.tiles import TileConfig

ROOT = Path(__file__).resolve().parents[1]

COMPILE_DRIVER = """
import json, re, sys
from bench.h200.compile import loops
from bench.h200.sass import disassemble, instructions, resources
from bench.h200.twin import decode_launches
from moe_triton.tiles import TileConfig

function, pairs = json.loads(sys.argv[1])
out = []
for case, fields in pairs:
    for launch in decode_launches(case, TileConfig.from_dict(fields)):  # compiled for sm_90, the H200's way
        if launch.function != function:
            continue
        kernel = launch.kernel
        text = disassemble(kernel.asm["cubin"])
        lines = instructions(text)
        # the K loops: loops of a few hundred instructions that issue wgmmas or cp.async (the loop
        # that dispatches the partitions, around them all, is thousands long)
        hot = [body for body in loops(lines) if len(body) <= 1000 and re.search(r"HGMMA|LDGSTS", str(body))]
        loop = [line for body in hot for line in body]
        # the K loops themselves: hot loops that hold no other (stage 2's tile loop holds its K loop)
        inner = [b for b in hot if not any(o is not b and set(o) < set(b) for o in hot)]
        out.append({
            "mma": len(re.findall(r"\\bHGMMA\\b", text)),
            "waits": len(re.findall(r"WARPGROUP\\.DEPBAR", text)),
            "cp_async_16": "LDGSTS.E.BYPASS.128" in text,
            "loop_copies": sorted(set(re.findall(r"LDGSTS(?:\\.\\w+)*", "\\n".join(loop)))),  # the forms, e.g. .E.64
            "register_split": "USETMAXREG" in text,
            "loop": len(loop),
            "loop_spills": sum(bool(re.search(r"\\b(STL|LDL)\\b", line)) for line in loop),
            "k_loop_spills": sum(bool(re.search(r"\\b(STL|LDL)\\b", line)) for body in inner for line in body),
            "spills": len(re.findall(r"\\b(STL|LDL)\\b", text)),
            "paired_atomics": bool(re.search(r"add\\.noftz\\.v2\\.bf16", kernel.asm["ptx"])),
            "shared": kernel.metadata.shared,
            "registers": resources(kernel.asm["cubin"]).registers,
            "grid_wait": "ACQBULK" in text,
            "polls": text.count("LDG.E.STRONG.GPU"),
            # in the PTX, whose order is the program's (ptxas lays a warp-specialized kernel's SASS out otherwise in
            # triton 3.6): the acquire load of the poll before the first cp.async
            "polls_before_copies": 0 <= kernel.asm["ptx"].find("acquire") < kernel.asm["ptx"].find("cp.async"),
            "releases": text.count("REDG.E.ADD.STRONG.GPU"),  # red.release.gpu: a fence, then the add
            "gpu_fences": text.count("MEMBAR.ALL.GPU"),
        })
print(json.dumps(out))
"""


def compiled_launches(pairs: list[tuple[dict, TileConfig]], function: str) -> list[dict]:
    """What the SASS of each launch of `function` holds, for (case, tiles) pairs compiled for sm_90."""
    return _fresh_process(COMPILE_DRIVER, json.dumps([function, [(c, t.as_dict()) for c, t in pairs]]))


def compiled_by(module: str, function: str, *args) -> dict:
    """What `module.function(*args)` returns (a JSON-able summary of kernels it compiles for sm_90), run in a fresh
    process without the interpreter."""
    return _fresh_process(f"import json; from {module} import {function} as f; print(json.dumps(f(*{args!r})))")


def _fresh_process(code: str, *argv: str):
    """The JSON that code prints last, run with this Python without the interpreter's settings."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_DEFAULT_FP_FUSION")}
    done = subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
