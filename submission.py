#!POPCORN leaderboard amd-moe-mxfp4
#!POPCORN gpu MI355X
"""The leaderboard entry point: custom_kernel(data) runs the layer on the best backend here: aiter's
stages on an MI355X with aiter, the Triton kernels elsewhere, MOE_BACKEND and the other settings as
the README's "Settings" says; on a GPU the first call per shape selects among candidates
(docs/selection.md). `python3 submission.py` is the runner's pre-run (selection/prerun.py).
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
    """(MOE_BACKEND or None, MOE_SELECT's mode), every variable of SETTINGS checked, used or not, so
    that a typo shows at the first call; read per call, each set of values checked once."""
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
    """Why aiter cannot run here; None where it is imported (or the tests' double) or a gfx950 GPU imports it."""
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
    """Whether custom_kernel selects: MOE_SELECT=1 always, 0 never, auto on a GPU; never while MOE_BACKEND is set."""
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
    """The candidate custom_kernel runs for config's shape (None before it selects); the runner's report reads it."""
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
