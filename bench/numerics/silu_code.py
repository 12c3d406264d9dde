"""`python -m bench.numerics.silu_code --cases smoke`: every path's kernels compiled for both targets
on this (CPU) machine, nothing run, and each kernel that computes h checked by bench.numerics.rules:
sm_90 the decode path (its NVIDIA fast decode) and its Gluon stage 1, and the native path
(dot_scaled emulated); gfx950 the native and the decode paths. One line per kernel; exit status
1 if any breaks the rule.
"""

import os
import sys
from unittest import mock

from bench.numerics.rules import H_KERNELS, amdgcn_silu_problems, ptx_silu_problems


def compiled_h_kernels(params: dict) -> list[tuple[str, str, str, list[str]]]:
    """(target, path, kernel, problems) of every launch that computes h in one call of a case, compiled (never
    run) for sm_90 and gfx950 as the launchers launch them there."""
    from bench.gfx950.run import launch_case
    from bench.h200.sm90 import decode_launches
    from bench.runner.case_args import case_shape
    from moe_triton.tiles_nvidia import GLUON_TUNED, gluon_variant, tile_config

    shape = case_shape(params)
    decode = tile_config(shape)
    # the Gluon stage 1: its table tile, or the decode tile's routing with its fixed stage-1 fields
    gluon = GLUON_TUNED.get(shape) or gluon_variant(decode, 64, stages=decode.stages1, parts=2)
    paths = (("decode", decode, False), ("gluon", gluon, False), ("native", None, True))
    compiled = [
        ("sm_90", path, launch) for path, tiles, native in paths for launch in decode_launches(params, tiles, native)
    ]
    compiled += [("gfx950", path, launch) for path in ("native", "decode") for launch in launch_case(params, path)[0]]
    rows = []
    for target, path, launch in compiled:
        if launch.function not in H_KERNELS:
            continue
        asm = launch.kernel.asm
        problems = ptx_silu_problems(asm["ptx"]) if target == "sm_90" else amdgcn_silu_problems(asm["amdgcn"])
        rows.append((target, path, launch.function, problems))
    return rows


PROG = "python -m bench.numerics.silu_code"


def main(argv=None) -> int:
    """Exit status 0, 1 if a kernel breaks the rule, 2 a usage error, 130 Ctrl-C (one line)."""
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted (Ctrl-C)", file=sys.stderr)
        return 130


def _main(argv) -> int:
    from bench.runner.case_args import UsageError, select_cases
    from bench.runner.preflight import UsageParser

    p = UsageParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=["smoke"], help="case selectors as for python -m bench")
    args = p.parse_args(argv)
    try:
        cases = select_cases(args.cases)
    except UsageError as exc:
        return p.fail(f"--cases: {exc}")
    broken = 0
    # The kernels compile for the GPUs here, never under the interpreter (the modules must be imported
    # with it off: bench.gfx950.run refuses interpreted kernels).
    with mock.patch.dict(os.environ, {"TRITON_INTERPRET": "0"}):
        for case in cases:
            for target, path, kernel, problems in compiled_h_kernels(case.params):
                broken += bool(problems)
                verdict = "; ".join(problems) if problems else "precise exp, IEEE division"
                print(f"{case.label} {target:6} {path:6} {kernel}: {verdict}", flush=True)
    return 1 if broken else 0


def exit_without_finalizing(status: int) -> None:
    """End the process once its output is flushed, skipping the interpreter's finalization. Why:
    triton 3.9's gluon_ir (nanobind) takes references it never releases at the first compile of a
    Gluon kernel that converts a layout (measured: one more on each Gluon layout class after a cold
    compile of the Gluon stage 1), and at shutdown nanobind finds libtriton's types still alive
    and prints "nanobind: leaked ..." lines, some 25 of them, after every run that compiled; with
    Triton's cache warm, or triton 3.6 (pybind11), there are none. Nothing is lost by skipping the
    finalization: everything is printed and flushed here, the process holds no file open for
    writing, runs no other thread, and Triton's cache writes are finished (each entry is written
    whole before the compile returns)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    exit_without_finalizing(main())
