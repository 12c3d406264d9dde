"""The pre-run, `python3 submission.py`, which the leaderboard's runner executes before each mode:
it selects for the official shapes ahead of the evaluation and stores the choices (DESCRIPTION
below; docs/selection.md, "The pre-run")."""

import argparse
import os
import sys
import time
from collections.abc import Callable

from problem.cases import BENCHMARKS, TESTS, TINY, case_name
from reference import generate_input, make_config
from selection.candidates import platform
from selection.selector import budget_s

PRERUN_DEADLINE_S = 95.0  # the runner gives the pre-run 120 s
MIN_SHAPE_S = 5.0  # a shape is not started with less time left than this


def _why_not() -> str:
    if os.environ.get("MOE_BACKEND"):
        return "MOE_BACKEND is set"
    if os.environ.get("MOE_SELECT") == "0":
        return "MOE_SELECT=0"
    return "no GPU; MOE_SELECT=1 selects under the interpreter"


def prerun_cases() -> list[dict]:
    return TINY if platform() == "cpu" else TESTS + BENCHMARKS


def _what(cases: list[dict] | None) -> str:
    """What the pre-run selects for, as it is: the official shapes on a GPU, TINY on the CPU."""
    if cases is not None:
        return f"{len(cases)} given shape{'s' if len(cases) != 1 else ''}"
    if platform() == "cpu":
        return (
            f"problem.cases.TINY ({len(TINY)} small shape{'s' if len(TINY) != 1 else ''}) under the CPU "
            "interpreter, which would take hours on the official shapes"
        )
    return f"the {len(TESTS + BENCHMARKS)} official shapes ({platform()})"


def prerun(
    backend: str,
    selecting: bool,
    make_selector: Callable,
    cases: list[dict] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    deadline_s: float = PRERUN_DEADLINE_S,
    out: Callable[[str], None] = print,
) -> None:
    if not selecting:
        out(f"moe-mxfp4 submission: backend {backend}; no selection ({_why_not()})")
        return
    out(f"moe-mxfp4 submission: backend {backend}; selecting for {_what(cases)}")
    chosen_by = make_selector()
    budget = budget_s()
    start = clock()
    for case in prerun_cases() if cases is None else cases:
        name = case_name(case)
        known = chosen_by.known(make_config(**{k: v for k, v in case.items() if k != "seed"}))
        if known:
            out(f"moe-mxfp4 pre-run {name}: {known[0]} ({known[1]})")
            continue
        if deadline_s - (clock() - start) < MIN_SHAPE_S:
            out(f"moe-mxfp4 pre-run {name}: skipped (pre-run deadline {deadline_s:.0f} s)")
            continue
        t0 = clock()
        data = generate_input(**case)
        left = deadline_s - (clock() - start)
        order = chosen_by.prepare(data, budget=max(0.0, min(budget, left)))
        del data
        out(f"moe-mxfp4 pre-run {name}: {order[0].name} (selected in {clock() - t0:.1f} s)")
    out(f"moe-mxfp4 pre-run done in {clock() - start:.1f} s")


DESCRIPTION = """The pre-run of the submission, which the leaderboard's runner executes before each mode (120 s,
in the evaluation's folder and home directory; no arguments). On a GPU it selects, for each of
the 10 official shapes, the fastest of the candidates that pass the leaderboard's check on
generated inputs, which compiles their kernels into Triton's cache, and stores the choices for
the evaluation's first calls; shapes stored already are skipped, and it stops at {deadline:.0f} s
(each shape's budget cut to the time left). Without selection it prints one line and exits."""
ENVIRONMENT = """environment (README, "Settings"; a bad value is one line on stderr and exit status 2):
  MOE_SELECT             auto (default: select on a GPU), 1 (also under the CPU interpreter, for
                         problem.cases.TINY), 0 (the static tables: nothing to do here)
  MOE_SELECT_BUDGET_S    seconds per shape, compiles included (default 20)
  MOE_SELECT_CANDIDATES  won (default: the candidates that won a measurement) or all
  MOE_BACKEND            aiter, aiter-fused, triton, reference: that backend only, no selection
  MOE_TRITON_NATIVE      1 / 0: the native MXFP4 path forced on or off
  XDG_CACHE_HOME         the choices go to $XDG_CACHE_HOME/moe-mxfp4/choices.json (default ~/.cache)
exit status: 0 done (or nothing to do), 2 a bad setting or argument, 130 Ctrl-C"""


class _Parser(argparse.ArgumentParser):
    """A bad argument is one line, `<prog>: error: ...`, and exit status 2, as every tool's."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def main(
    backend_of: Callable[[], str],
    selecting_of: Callable[[], bool],
    make_selector: Callable,
    prog=None,
    argv: list[str] | None = None,
) -> int:
    """`python3 submission.py`: exit status 0, 2 for a bad setting (backend_of and selecting_of,
    submission.selected_backend and selection_on, raise ValueError), 130 for Ctrl-C."""
    prog = prog or os.path.basename(sys.argv[0]) or "submission.py"
    parser = _Parser(
        prog=prog,
        description=DESCRIPTION.format(deadline=PRERUN_DEADLINE_S),
        epilog=ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.parse_args(sys.argv[1:] if argv is None else argv)
    try:
        backend, selecting = backend_of(), selecting_of()
    except ValueError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        prerun(backend, selecting, make_selector)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    return 0
