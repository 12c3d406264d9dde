"""The pre-run: `python3 submission.py`, which the leaderboard's runner executes before each mode
(120 s, in the same folder and home directory as the evaluation). On a GPU it selects for the
ten official shapes on generated inputs, which compiles every candidate's kernels into Triton's
cache and stores the choices (selection/choice_file.py) for the evaluation's first calls; shapes stored
already are skipped, and it stops itself at PRERUN_DEADLINE_S, each shape's selection budget cut
to the time left. One line per shape. Without selection (no GPU, MOE_SELECT=0, MOE_BACKEND set)
it prints one line and does nothing else; MOE_SELECT=1 under the CPU interpreter runs problem.cases.TINY
instead, so CI exercises it. A bad setting (MOE_BACKEND, MOE_SELECT, MOE_SELECT_BUDGET_S,
MOE_SELECT_CANDIDATES, MOE_TRITON_NATIVE) is one line on stderr and exit status 2, as the runner's
usage errors; Ctrl-C is one line and 130.
"""

import os
import sys
import time
from collections.abc import Callable

from moe_triton.env import native_forced
from problem.cases import BENCHMARKS, TESTS, TINY, case_name
from reference import generate_input, make_config
from selection.candidates import platform
from selection.selector import budget_s, candidate_set

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
        shape = {k: v for k, v in case.items() if k != "seed"}
        known = chosen_by.known(make_config(**shape))
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


def main(backend_of: Callable[[], str], selecting_of: Callable[[], bool], make_selector: Callable, prog=None) -> int:
    """`python3 submission.py`: backend_of and selecting_of (submission.selected_backend and
    selection_on) raise ValueError on a bad MOE_BACKEND or MOE_SELECT; the budget, the candidate set
    and MOE_TRITON_NATIVE are checked here even where nothing selects, so that a typo shows before the
    evaluation. Exit status 0, 2 for a bad setting, 130 for Ctrl-C, each with one line."""
    prog = prog or os.path.basename(sys.argv[0]) or "submission.py"
    try:
        backend, selecting = backend_of(), selecting_of()
        budget_s()
        candidate_set()
        native_forced()
    except ValueError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    try:
        prerun(backend, selecting, make_selector)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    return 0
