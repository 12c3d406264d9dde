"""Checks made before any case runs, so that a run that cannot work, or would take hours, stops
at once with one line that names the option: numeric options, the runner's libraries, --out,
the device, aiter's availability (--backend aiter, --check leaderboard) and the Triton interpreter's run time."""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from bench.runner import interpreter_time
from bench.runner.case_args import Case, UsageError

AITER_BACKENDS = ("aiter", "aiter-fused")
USAGE_STATUS = 2  # every tool's exit status for a usage error
ANNOUNCE_S = 60.0  # say how long an interpreted run takes from this estimate on
REFUSE_S = 600.0  # and refuse it without --force from this one


def _number(kind: type, low: float, inclusive: bool):
    """An argparse type: a `kind` number at least (or above) `low`."""
    word = "at least" if inclusive else "above"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            kind_name = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {kind_name}, got {text!r}") from None
        if value != value or value < low or (value == low and not inclusive):
            raise argparse.ArgumentTypeError(f"must be {word} {low:g}, got {text}")
        return value

    return parse


class UsageParser(argparse.ArgumentParser):
    """The command line of a tool (the runner, bench.job, bench.seed_check, the tuners): a usage
    error is one line, `<prog>: error: <message>` naming the option, and exit status 2; the usage
    is one --help away."""

    def error(self, message: str):
        self.exit(USAGE_STATUS, f"{self.prog}: error: {message}\n")

    def fail(self, message: str) -> int:
        """The same line for an error found after parsing, as the status for main() to return."""
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        return USAGE_STATUS


def shown(path: str | Path) -> str:
    """A path as every tool prints it: relative to the current folder when it lies under it (as a
    user types it), else absolute."""
    path = Path(path).absolute()
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


positive_int = _number(int, 1, inclusive=True)
non_negative_int = _number(int, 0, inclusive=True)
positive_float = _number(float, 0, inclusive=False)
non_negative_float = _number(float, 0, inclusive=True)


def doc_parser(prog: str, doc: str) -> UsageParser:
    """The command line of a tool whose --help starts with its module docstring, laid out as written."""
    return UsageParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def seeds_parser(prog: str, doc: str, seeds: int, seeds_help: str) -> UsageParser:
    """The command line of a tool that runs cases on many leaderboard-style seeds: --cases, --seeds
    (the description is the first paragraph of doc)."""
    p = UsageParser(prog=prog, description=doc.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=["official"], help="case selectors as for python -m bench")
    p.add_argument("--seeds", type=positive_int, default=seeds, help=seeds_help)
    return p


def parse_cases(p: UsageParser, argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[Case] | None]:
    """p's arguments and the cases of their --cases; None for the cases after p's one-line error."""
    from bench.runner.case_args import select_cases

    args = p.parse_args(argv)
    try:
        return args, select_cases(args.cases)
    except UsageError as exc:
        p.fail(f"--cases: {exc}")
        return args, None


def check_libraries() -> None:
    """The runner's own dependencies (the `bench` extra), before any case runs."""
    missing = [name for name in ("rich", "matplotlib", "pandas") if importlib.util.find_spec(name) is None]
    if missing:
        raise UsageError(f"the runner needs {', '.join(missing)}: pip install '.[bench]'")


def check_out_dir(out: str | None) -> None:
    """--out must be a folder the run can write, so that no result is lost at the end."""
    if out is None:
        return
    if not out.strip():
        raise UsageError("--out: empty folder name; give the folder to write the results to, e.g. --out out/")
    path = Path(out)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out}: cannot create it ({exc.strerror or exc})") from None
    if not os.access(path, os.W_OK):
        raise UsageError(f"--out {out}: not writable")


def check_device(choice: str) -> str:
    """The device to run on: --device as given (cuda only where torch sees a GPU), or detected."""
    import torch

    if choice == "cuda" and not torch.cuda.is_available():
        raise UsageError(
            f"--device cuda: torch {torch.__version__} sees no GPU here (no CUDA or ROCm device); "
            "use --device cpu (Triton's interpreter) or leave --device auto"
        )
    if choice != "auto":
        return choice
    return "cuda" if torch.cuda.is_available() else "cpu"


def _aiter_missing(device: str) -> str | None:
    """Why aiter cannot run here, or None."""
    import torch

    if "aiter" in sys.modules:
        return None  # imported in this process already: real aiter (which imports only on ROCm) or a test double
    if importlib.util.find_spec("aiter") is None:
        return "aiter is not installed here"
    if device != "cuda" or torch.version.hip is None:
        return "this machine has no ROCm GPU"
    return None


def check_aiter(backends: Sequence, device: str) -> None:
    """Refuse aiter backends where aiter cannot run, naming what can."""
    wanted = [b for b in backends if b.moe_backend in AITER_BACKENDS]
    if not wanted:
        return
    why = _aiter_missing(device)
    if not why:
        return
    given = [b.label for b in wanted if not getattr(b, "from_env", False)]
    if given:
        subject, instead = f"--backend {' '.join(given)}", "use --backend triton"
    else:
        subject = f"MOE_BACKEND={wanted[0].moe_backend} (from the environment)"
        instead = "unset MOE_BACKEND or set it to triton"
    raise UsageError(
        f"{subject}: {why}; aiter runs only with ROCm on an MI355X (gfx950). Here {instead} (the same layer "
        "in Triton; the CPU interpreter without a GPU) or reference"
    )


def check_mode(mode: str, device: str) -> None:
    """--mode host times the host side of calls queued on a GPU; the interpreter has no queue."""
    if mode == "host" and device != "cuda":
        raise UsageError(
            "--mode host: measures custom_kernel's enqueue time on a GPU, and this run has none "
            "(under Triton's CPU interpreter a call runs to its end); use --mode test or benchmark here"
        )


def check_leaderboard_check(check: str, device: str) -> None:
    """--check leaderboard and both compare with aiter's fused_moe: refused where aiter cannot run."""
    if check == "a4w4":
        return
    why = _aiter_missing(device)
    if why:
        raise UsageError(
            f"--check {check}: {why}; the leaderboard's check runs aiter's fused_moe, which needs ROCm on an "
            "MI355X (gfx950). Here use --check a4w4 (the default: reference.ref_kernel)"
        )


def interpreted(backends: Sequence, device: str) -> list:
    """The backends that run the Triton kernels under the interpreter (auto and files run triton on a CPU)."""
    if device != "cpu":
        return []
    return [b for b in backends if b.moe_backend in (None, "triton")]


def check_run_time(
    backends: Sequence, device: str, cases: Sequence[Case], mode: str, limits, warmup, force: bool
) -> str | None:
    """The estimate's line for an interpreted run long enough to mention; UsageError past REFUSE_S
    without --force."""
    slow = interpreted(backends, device)
    if not slow:
        return None
    per_case = interpreter_time.run_seconds(cases, mode, limits, warmup)
    total = sum(per_case) * len(slow)
    if total < ANNOUNCE_S:
        return None
    worst = max(range(len(cases)), key=per_case.__getitem__)
    text = f"this run takes about {interpreter_time.duration_text(total)} under Triton's CPU interpreter"
    if len(cases) * len(slow) > 1:
        text += f" (the longest case, {cases[worst].label}, about {interpreter_time.duration_text(per_case[worst])})"
    if total >= REFUSE_S and not force:
        raise UsageError(f"{text}: pass --force to run it anyway, or choose smaller cases (--cases smoke)")
    return text
