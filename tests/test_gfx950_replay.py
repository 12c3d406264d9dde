"""The native path's plan replay on gfx950 (bench.gfx950.replay): for every launch of the native path on
the SMOKE cases and the official shapes, what the replay passes to each compiled kernel's launcher is
what Triton's own JIT launch passes, argument for argument, compiled for gfx950 on the CPU in fresh
processes (the kernels of this one were made for the interpreter). Under this Python's Triton and
each Python in MOE_TEST_PYTHONS (os.pathsep-separated: other environments, e.g. one with triton
3.6); the comparison itself is checked here on made-up launcher calls."""

import json
import os
import subprocess
import sys
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from bench.gfx950.replay import LEADING, LauncherCall, differences
from bench.runner.case_args import SMOKE, case_shape
from moe_triton.tiles_amd import NATIVE_VARIANTS, native_tile_config
from problem.cases import BENCHMARKS, TESTS

ROOT = Path(__file__).resolve().parents[1]
PYTHONS = [sys.executable, *filter(None, os.environ.get("MOE_TEST_PYTHONS", "").split(os.pathsep))]

pytestmark = pytest.mark.cpu_only

# Kernel variants of smoke:0's table tiles beyond the MI355X's alternates: the other routing launches
# and stage 1 inputs (one routing launch; stage 1 routing and quantizing its own rows, the hidden
# states' int32 view).
EXTRA = {"route1": NATIVE_VARIANTS["route1"], "quant0": NATIVE_VARIANTS["quant0"]}


def _launches(tiles) -> int:
    """A native-path call's launches: the routing's, then stage 1 and stage 2."""
    return tiles.route_launches + 2


def _replay(python: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run(
        [python, "-m", "bench.gfx950.replay", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def _table_tiles(case):
    return native_tile_config(case_shape(case))


def test_the_replay_passes_each_launcher_what_the_jit_passes_on_gfx950(tmp_path):
    extra = tmp_path / "variants.json"
    extra.write_text(json.dumps(EXTRA))
    runs = [
        ("--cases", "all", "--tiles", "table"),
        ("--cases", "smoke:0", "--tiles", *EXTRA, "--extra-variants", str(extra), "--respecialised", ""),
    ]

    def both(python):
        return [_replay(python, *args) for args in runs]

    with ThreadPoolExecutor(len(PYTHONS)) as pool:  # the Tritons compile side by side
        done = dict(zip(PYTHONS, pool.map(both, PYTHONS), strict=True))
    smoke0 = _table_tiles(SMOKE[0])
    # the rows that differ between triton 3.6 and 3.9 (tiles_amd) launch as many kernels
    table_launches = sum(_launches(_table_tiles(case)) for case in SMOKE + TESTS + BENCHMARKS)
    expected = [
        f"PASS: {table_launches} launches of 13 case tiles replayed as the JIT "
        "launches them on gfx950; respecialised inputs of smoke0 left to the JIT",
        f"PASS: {sum(_launches(smoke0.replace(**f)) for f in EXTRA.values())} launches of 2 case tiles "
        "replayed as the JIT launches them on gfx950 (",
    ]
    for python, results in done.items():
        for result, line in zip(results, expected, strict=True):
            assert result.returncode == 0, (python, result.stdout[-3000:] + result.stderr[-3000:])
            assert result.stdout.splitlines()[-1].startswith(line), (python, result.stdout[-1000:])


def test_a_bad_option_is_a_one_line_error():
    done = _replay(sys.executable, "--tiles", "bogus")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "python -m bench.gfx950.replay: error: --tiles: no variant bogus" in done.stderr


class HookChain:
    """Stands for triton.knobs.HookChain: a callable compared by identity."""

    def __call__(self, metadata):
        pass


class LaunchMetadata:
    """Stands for the launch metadata (triton.compiler.compiler.LazyDict): compared by content."""

    def __init__(self, **data):
        self.data, self.extras = data, []


def _call(metadata, out, tensor, *, hook, launch=None, flag=True, grid=(4, 1, 1)):
    arguments = (*grid, 0, None, (4, 1, 0), launch or LaunchMetadata(name="k", stream=0), hook, hook)
    return LauncherCall(metadata, ["x_ptr", "out_ptr", "FLAG"], (*arguments, tensor, out, flag))


def test_the_comparison_names_every_argument_that_differs():
    kernel, other_kernel = (types.SimpleNamespace(name="k", hash=h) for h in ("a" * 64, "b" * 64))
    hook = HookChain()
    x, y = torch.empty(4), torch.empty(4)
    out_jit, out_replay = torch.empty(4), torch.empty(4)
    jit = [_call(kernel, out_jit, x, hook=hook)]
    # the output tensor of each call is matched by its role, every other tensor by its address
    assert differences(jit, [_call(kernel, out_replay, x, hook=hook)], out_jit, out_replay) == []
    cases = {
        ("x_ptr",): _call(kernel, out_replay, y, hook=hook),
        ("out_ptr",): _call(kernel, x, x, hook=hook),
        ("FLAG",): _call(kernel, out_replay, x, hook=hook, flag=1),  # equal, but of another type
        ("launch enter hook", "launch exit hook"): _call(kernel, out_replay, x, hook=HookChain()),
        ("launch metadata",): _call(kernel, out_replay, x, hook=hook, launch=LaunchMetadata(name="k", stream=1)),
        ("grid y",): _call(kernel, out_replay, x, hook=hook, grid=(4, 2, 1)),
    }
    for names, replay in cases.items():
        found = differences(jit, [replay], out_jit, out_replay)
        assert all(line.startswith("launch 0 (k): ") for line in found), found
        assert tuple(line.split(": ")[1] for line in found) == names, found
    (line,) = differences(jit, [_call(other_kernel, out_replay, x, hook=hook)], out_jit, out_replay)
    assert line == "launch 0: kernel k (bbbbbbbb), the JIT's aaaaaaaa"
    assert differences(jit, jit * 2, out_jit, out_jit) == ["2 launcher calls in the replay against the JIT's 1"]
    assert len(LEADING) == 9 and differences(jit, [_call(kernel, out_replay, x, hook=None)], out_jit, out_replay)
