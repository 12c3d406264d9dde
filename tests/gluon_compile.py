"""The Gluon kernels compiled for sm_90 on the CPU (tests/test_gluon_stage1.py, test_gluon_stage2.py):
what the SASS and PTX of each launch of one kernel hold (bench.h200.occupancy.launch_figures), for (case,
tiles) pairs, compiled the H200's way by bench.h200.sm90.decode_launches in a fresh process with
TRITON_INTERPRET unset (the kernels of the test process were made for the interpreter when moe_triton was
imported); compiled_by runs a bench probe's own summary of what it compiles in such a process."""

import json
import os
import subprocess
import sys
from pathlib import Path

from moe_triton.tiles import TileConfig

ROOT = Path(__file__).resolve().parents[1]

COMPILE_DRIVER = """
import json, sys
from bench.h200.occupancy import launch_figures
from bench.h200.sm90 import decode_launches
from moe_triton.tiles import TileConfig

function, pairs = json.loads(sys.argv[1])
launches = [launch for case, fields in pairs for launch in decode_launches(case, TileConfig.from_dict(fields))]
print(json.dumps([launch_figures(launch) for launch in launches if launch.function == function]))
"""


def compiled_launches(pairs: list[tuple[dict, TileConfig]], function: str) -> list[dict]:
    """What the SASS of each launch of `function` holds, for (case, tiles) pairs compiled for sm_90."""
    return _fresh_process(COMPILE_DRIVER, json.dumps([function, [(c, t.as_dict()) for c, t in pairs]]))


def compiled_by(module: str, function: str, *args) -> dict:
    """What `module.function(*args)` returns (a JSON-able summary of kernels it compiles for sm_90), run in a fresh
    process without the interpreter."""
    return _fresh_process(f"import json; from {module} import {function} as f; print(json.dumps(f(*{args!r})))")


def fresh_run(*argv: str) -> subprocess.CompletedProcess:
    """This Python run on argv from the repository root, in a fresh process without the interpreter's settings."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_DEFAULT_FP_FUSION")}
    return subprocess.run(
        [sys.executable, *argv],
        cwd=ROOT,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )


def _fresh_process(code: str, *argv: str):
    """The JSON that code prints last, run in a fresh process (fresh_run)."""
    done = fresh_run("-c", code, *argv)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
