#!POPCORN leaderboard amd-moe-mxfp4
#!POPCORN gpu MI355X
"""The leaderboard entry point: custom_kernel(data) runs the layer on the best backend here.

Backends: "aiter" (the 2-stage aiter pipeline with the shape-override table, MI355X / gfx950 with
aiter importable; the default there),
"aiter-fused" (the leaderboard template's single aiter.fused_moe call), "triton" (the Triton
kernels: the native MXFP4 path on gfx950, the decode path elsewhere; the default where aiter is
not, run by Triton's CPU interpreter when there is no GPU) and "reference" (the torch
reference). The environment variable MOE_BACKEND overrides the choice. Inputs are validated
(metadata only) and never written.

On a GPU, the first call per shape selects among the candidates (selection/candidates.py) on the machine
itself: the static choice above and its alternatives, each checked against the reference and
timed (selection/selector.py, docs/selection.md); MOE_SELECT=0 keeps the static choice, MOE_SELECT=1
selects under the CPU interpreter too. `python3 submission.py` (the runner's pre-run) selects
for the official shapes ahead of the evaluation and stores the choices (selection/prerun.py).
"""

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING

import torch

# Without a GPU, Triton's interpreter must be chosen before triton is first imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from problem.validation import validate_inputs  # noqa: E402
from selection.candidates import BACKEND_RUNNERS, candidates_for, platform  # noqa: E402
from selection.selector import select_mode  # noqa: E402

if TYPE_CHECKING:  # the runner's types, for annotations only: the file runs without task.py
    from task import input_t, output_t

BACKENDS = ("aiter", "aiter-fused", "triton", "reference")


def default_backend() -> str:
    """aiter on a gfx950 GPU where aiter imports, else triton."""
    return "aiter" if platform() == "gfx950-aiter" else "triton"


def selected_backend() -> str:
    """MOE_BACKEND if set, else the default."""
    forced = os.environ.get("MOE_BACKEND")
    if forced and forced not in BACKENDS:
        raise ValueError(f"MOE_BACKEND: unknown backend {forced!r}; choose one of {', '.join(BACKENDS)}")
    return forced or default_backend()


def selection_on() -> bool:
    """Whether custom_kernel selects: MOE_SELECT=1 always, 0 never, auto (default) where a GPU
    runs the kernels (not under Triton's CPU interpreter); never while MOE_BACKEND is set. Unset
    or empty is auto, as an empty MOE_BACKEND is no backend."""
    value = select_mode()
    if os.environ.get("MOE_BACKEND"):
        return False
    return platform() != "cpu" if value == "auto" else value == "1"


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
    if selection_on():
        return selector()(data)
    return BACKEND_RUNNERS[selected_backend()](data)


if __name__ == "__main__":
    from selection.prerun import main

    raise SystemExit(main(selected_backend, selection_on, selector))
