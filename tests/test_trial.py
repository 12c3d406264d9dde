"""bench/h200/trial.py: candidates tried in a child process, with a stand-in runner (the real one needs a GPU):
those that run are kept in order, a refusal or a failure is left out with its line, and one that never ends is
killed at its limit while the candidates after it are still tried."""

import textwrap

import pytest

from bench.h200 import trial
from moe_triton.tiles_nvidia import TUNED

RUNNER = """
import sys
import time


def make_input(case):
    return case["seed"]


def run(data, tiles):
    print("a library's own line on stdout", flush=True)
    if tiles.stages1 == 5:
        raise ValueError("tiles: moe_gluon_stage1_kernel needs shared memory 253,024 and this GPU has 232,448")
    if tiles.stages1 == 6:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")
    if tiles.stages1 == 7:
        time.sleep(3600)
    if tiles.stages1 == 8:
        print("Fatal Python error: the driver went away", file=sys.stderr, flush=True)
        sys.exit(3)
"""


@pytest.fixture
def runner(tmp_path, monkeypatch):
    (tmp_path / "stand_in_runner.py").write_text(textwrap.dedent(RUNNER))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return "stand_in_runner"


def tiles(*stages):
    row = next(iter(TUNED.values()))
    return {f"s{n}": row.replace(stages1=n) for n in stages}


def test_candidates_that_run_are_kept_in_order(runner):
    ran, left_out = trial.tried({"seed": 1}, tiles(2, 3, 4), 60, runner)
    assert ran == tiles(2, 3, 4) and list(ran) == ["s2", "s3", "s4"] and left_out == []


def test_a_refusal_and_a_failure_are_left_out_with_their_line(runner):
    ran, left_out = trial.tried({"seed": 1}, tiles(2, 5, 6, 3), 60, runner)
    assert ran == tiles(2, 3)
    assert left_out == [
        "s5: tiles: moe_gluon_stage1_kernel needs shared memory 253,024 and this GPU has 232,448",
        "s6: failed: RuntimeError: CUDA error: an illegal memory access was encountered",
    ]


def test_one_that_never_ends_is_killed_and_the_rest_still_tried(runner):
    ran, left_out = trial.tried({"seed": 1}, tiles(2, 7, 3, 8, 4), 8, runner)
    assert ran == tiles(2, 3, 4)
    assert left_out == [
        "s7: did not finish in 8 s (a kernel that never ends, or compiles past the limit)",
        "s8: failed and took its process down: Fatal Python error: the driver went away",
    ]
