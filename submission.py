#!POPCORN leaderboard amd-moe-mxfp4
#!POPCORN gpu MI355X
"""The leaderboard entry point: custom_kernel(data) runs the layer on the best backend here.

Backends: "aiter" (the 2-stage aiter pipeline with the shape-override table, MI355X / gfx950 with
aiter importable; the default there),
"aiter-fused" (the leaderboard template's single aiter.fused_moe call), "triton" (the Triton
kernels: the native MXFP4 path on gfx950, the decode path elsewhere; the default where aiter is
not, run by Triton's CPU interpreter when there is no GPU) and "reference" (the torch
reference). The environment variable MOE_BACKEND overrides the choice (an aiter backend is
refused where aiter cannot run); every MOE_* setting is checked on every call, used or not.
Inputs are validated (metadata, and the expert ids at the first call per shape) and never written.

On a GPU, the first call per shape selects among the candidates (selection/candidates.py) on the machine
itself: the static choice above and its alternatives, each checked against the reference and
timed (selection/selector.py, docs/selection.md); MOE_SELECT=0 keeps the static choice, MOE_SELECT=1
selects under the CPU interpreter too. `python3 submission.py` (the runner's pre-run) selects
for the official shapes ahead of the evaluation and stores the choices (selection/prerun.py;
`python3 submission.py --help`).
"""

import functools
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import torch

# Without a GPU, Triton's interpreter must be chosen before triton is first imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from moe_triton.env import native_forced  # noqa: E402
from problem.validation import validate_inputs  # noqa: E402
from selection.candidates import BACKEND_RUNNERS, candidates_for, platform  # noqa: E402
from selection.selector import budget_s, candidate_set, select_mode  # noqa: E402

if TYPE_CHECKING:  # the runner's types, for annotations only: the file runs without task.py
    from task import input_t, output_t

BACKENDS = ("aiter", "aiter-fused", "triton", "reference")
AITER_BACKENDS = ("aiter", "aiter-fused")
# The environment that steers custom_kernel (README, "Settings"); each checked on every call.
SETTINGS = ("MOE_BACKEND", "MOE_SELECT", "MOE_SELECT_BUDGET_S", "MOE_SELECT_CANDIDATES", "MOE_TRITON_NATIVE")


def settings() -> tuple[str | None, str]:
    """(MOE_BACKEND or None, MOE_SELECT's mode), every variable of SETTINGS checked whether or not
    it is used now, so that a typo shows at the first call: a ValueError naming it. The
    environment is read per call (a test or a tool may change it), each set of values checked once."""
    return _checked_settings(tuple(map(os.environ.get, SETTINGS)))


@functools.lru_cache(maxsize=16)
def _checked_settings(values: tuple) -> tuple[str | None, str]:
    environ = {name: value for name, value in zip(SETTINGS, values, strict=True) if value is not None}
    forced = environ.get("MOE_BACKEND") or None  # empty is no backend
    if forced and forced not in BACKENDS:
        raise ValueError(f"MOE_BACKEND: unknown backend {forced!r}; choose one of {', '.join(BACKENDS)}")
    mode = select_mode(environ)
    budget_s(environ)
    candidate_set(environ)
    native_forced(environ)
    return forced, mode


def default_backend() -> str:
    """aiter on a gfx950 GPU where aiter imports, else triton."""
    return "aiter" if platform() == "gfx950-aiter" else "triton"


def _aiter_missing() -> str | None:
    """Why aiter cannot run here, or None: it runs where it is imported already (real aiter, or the
    tests' double of it) and on a gfx950 GPU where it imports."""
    if "aiter" in sys.modules or platform() == "gfx950-aiter":
        return None
    return "aiter is not importable here" if platform() == "gfx950" else "no ROCm gfx950 GPU here"


def _backend(forced: str | None) -> str:
    if forced in AITER_BACKENDS and (why := _aiter_missing()):
        raise ValueError(
            f"MOE_BACKEND={forced}: {why}; aiter runs only on an MI355X (ROCm, gfx950) with aiter installed: "
            "unset MOE_BACKEND or set it to triton"
        )
    return forced or default_backend()


def _selecting(forced: str | None, mode: str) -> bool:
    return not forced and (platform() != "cpu" if mode == "auto" else mode == "1")


def selected_backend() -> str:
    """MOE_BACKEND if set (the aiter backends refused where aiter cannot run), else the default."""
    return _backend(settings()[0])


def selection_on() -> bool:
    """Whether custom_kernel selects: MOE_SELECT=1 always, 0 never, auto (default) where a GPU
    runs the kernels (not under Triton's CPU interpreter); never while MOE_BACKEND is set. Unset
    or empty is auto, as an empty MOE_BACKEND is no backend."""
    return _selecting(*settings())


@functools.cache
def selector():
    """The process's selector: the candidates of this platform, choices stored per stamp."""
    from selection.choice_file import ChoiceFile, default_path, stamp
    from selection.selector import Selector, candidate_set

    def candidates(config: dict):
        return candidates_for(config, platform(), every=candidate_set() == "all")

    return Selector(candidates, store=ChoiceFile(default_path(), stamp(Path(__file__).resolve().parent)))


def selection_choice(config: dict) -> str | None:
    """The candidate custom_kernel runs for config's shape after selecting, None where it does
    not select or has not yet (the local runner's report reads it)."""
    return selector().choice(config) if selection_on() else None


def custom_kernel(data: "input_t") -> "output_t":
    validate_inputs(data)
    forced, mode = settings()
    if _selecting(forced, mode):
        return selector()(data)
    return BACKEND_RUNNERS[_backend(forced)](data)


if __name__ == "__main__":
    from selection.prerun import main

    raise SystemExit(main(selected_backend, selection_on, selector))
