"""One backend over a list of cases, in one process (as the runner uses one process for all
cases, so module-level caches persist from case to case and from the warm-up on).

`run_backend(job, emit)` reports through emit(dict): {"type": "device"}, {"type": "loaded"},
{"type": "warmup-start"}, {"type": "warmup"}, {"type": "start"}, {"type": "progress"},
{"type": "case"} and finally {"type": "done"}, or {"type": "interrupted"} after a Ctrl-C (the
case in progress is first reported with what it measured).
`process_main(job, queue)` is the entry point of a spawned worker process.

A failure is reported by the exception's own one-line message (`error_summary`), with the
traceback beside it for whoever wants the detail.
"""

from __future__ import annotations

import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PROGRESS_EVERY_S = 0.25


def error_summary(exc: BaseException) -> str:
    """'ValueError: config: ...': the exception's type and its message's first line."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _traceback_text(exc: BaseException, limit: int = 12) -> str:
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return "\n".join("".join(lines).rstrip().splitlines()[-limit:])


def refused_by_design(exc: BaseException, roots) -> bool:
    """A ValueError raised by the submission's own code, a module in one of roots or in one of its
    packages (validation, the launchers' checks): an input or setting it refuses on purpose, which
    the message explains; errors raised inside torch, Triton or a backend's library keep their
    traceback on screen."""
    if not isinstance(exc, ValueError) or exc.__traceback__ is None:
        return False
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    path = Path(tb.tb_frame.f_code.co_filename).resolve()
    for root in roots:
        if path.parent == root:
            return True
        if path.is_relative_to(root) and (root / path.relative_to(root).parts[0] / "__init__.py").is_file():
            return True
    return False


def _error_result(exc: BaseException, context: str = "", roots=()):
    from bench.runner.evaluate import CaseResult

    return CaseResult(
        status="error",
        message=context + error_summary(exc),
        traceback=_traceback_text(exc),
        refused=refused_by_design(exc, roots),
    )


def set_seed(seed: int) -> None:
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def run_backend(job: dict, emit: Callable[[dict], None]) -> None:
    from bench.runner.backends import backend_env

    root = job["root"]
    if root not in sys.path:
        sys.path.insert(0, root)
    with backend_env(job["moe_backend"], job.get("env")):
        _run(job, emit)


@dataclass
class _Kernel:
    """The backend under test, loaded, and what its cases are run with."""

    fn: Callable
    check: Callable
    generate_input: Callable
    device: object
    roots: set  # folders whose ValueErrors are the submission's own (refused_by_design)
    choice_of: Callable | None  # the submission's selection_choice, if it has one

    def args(self, params: dict) -> tuple:
        """The leading arguments of evaluate's run_* for one case."""
        return params, self.fn, self.generate_input, self.check, self.device


def _load(job: dict, emit: Callable[[dict], None]) -> _Kernel | None:
    """The job's custom_kernel and check; None after reporting every case as an error when it fails to load."""
    from bench.runner.backends import load_custom_kernel
    from bench.runner.checks import make_check
    from bench.runner.timing import Device

    set_seed(job.get("global_seed", 42))
    from reference import generate_input

    device = Device(job["device"], job["flush"])
    emit({"type": "device", "info": device.describe()})
    roots = {Path(job["root"]).resolve(), Path(job["path"]).resolve().parent}
    try:
        kernel = load_custom_kernel(job["path"], job["root"], job["label"])
        check_implementation = make_check(job.get("check", "a4w4"))
    except Exception as exc:  # noqa: BLE001 - reported, and every case is marked
        result = _error_result(exc, f"loading {job['path']} failed: ").as_dict()
        for i in range(len(job["cases"])):
            emit({"type": "case", "index": i, "result": result})
        emit({"type": "done"})
        return None
    emit({"type": "loaded"})
    # A bundle's custom_kernel lies in the package it writes under the cache: its errors are its own too.
    if hasattr(kernel, "__code__"):
        roots.add(Path(kernel.__code__.co_filename).resolve().parent)
    # The submission's selection (submission.selection_choice), read after each case's first call.
    choice_of = getattr(sys.modules.get(kernel.__module__), "selection_choice", None)
    return _Kernel(kernel, check_implementation, generate_input, device, roots, choice_of)


def _warm_up(job: dict, k: _Kernel, emit: Callable[[dict], None]) -> bool:
    """The runner's warm-up on the first case of a timed mode; False when it was interrupted."""
    from bench.runner import evaluate
    from bench.runner.timing import Limits

    if job["mode"] not in ("benchmark", "leaderboard") or not job.get("warmup") or not job["cases"]:
        return True
    warm = Limits(**job["warmup_limits"])
    emit({"type": "warmup-start"})
    t0 = time.perf_counter()
    try:
        res = evaluate.run_timed(*k.args(job["cases"][0]["params"]), warm, recheck=False)
        status, message = res.status, res.message
    except evaluate.Interrupted:
        emit({"type": "interrupted"})
        return False
    except Exception as exc:  # noqa: BLE001
        status, message = "error", error_summary(exc)
    emit({"type": "warmup", "status": status, "message": message, "seconds": time.perf_counter() - t0})
    return True


def _progress(emit: Callable[[dict], None], index: int) -> Callable[[int], None]:
    """progress(reps) for a timed case: at most one message per PROGRESS_EVERY_S."""
    last = [0.0]

    def progress(reps: int) -> None:
        now = time.perf_counter()
        if now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            emit({"type": "progress", "index": index, "reps": reps})

    return progress


def _evaluate(job: dict, k: _Kernel, params: dict, progress: Callable[[int], None]):
    """One case in the job's mode: its CaseResult."""
    from bench.roofline import traffic
    from bench.runner import evaluate
    from bench.runner.timing import Limits

    mode = job["mode"]
    traffic_fn = traffic if job.get("roofline", True) else None
    args = k.args(params)
    if mode == "test":
        return evaluate.run_test(*args, traffic_fn)
    if mode == "host":
        return evaluate.run_host(*args, job.get("host_calls") or evaluate.HOST_CALLS)
    if mode == "profile":
        return evaluate.run_profile(
            *args,
            row_limit=job.get("profile_rows", 25),
            warmup_calls=job.get("profile_warmup", 0),
            traffic_fn=traffic_fn,
        )
    limits = Limits(**job["limits"]) if job.get("limits") else None
    return evaluate.run_timed(*args, limits, recheck=(mode == "leaderboard"), progress=progress, traffic_fn=traffic_fn)


def _run(job: dict, emit: Callable[[dict], None]) -> None:
    from bench.runner import evaluate

    k = _load(job, emit)
    if k is None or not _warm_up(job, k, emit):
        return
    from reference import make_config

    stop_rest = False
    deadline = job.get("deadline")
    for i, case in enumerate(job["cases"]):
        why = "after a failed case" if stop_rest else ""
        if not why and deadline is not None and time.time() > deadline:
            why = "--deadline passed before this case"
        if why:
            emit({"type": "case", "index": i, "result": evaluate.CaseResult(status="skipped", message=why).as_dict()})
            continue
        emit({"type": "start", "index": i})
        params = case["params"]
        try:
            res = _evaluate(job, k, params, _progress(emit, i))
        except evaluate.Interrupted as stop:
            emit({"type": "case", "index": i, "result": stop.result.as_dict()})
            emit({"type": "interrupted"})
            return
        except KeyboardInterrupt:
            # Ctrl-C in the checked call (or the generation, the check): the case in progress.
            result = evaluate.CaseResult(status="interrupted", message="interrupted (Ctrl-C) during this case")
            emit({"type": "case", "index": i, "result": result.as_dict()})
            emit({"type": "interrupted"})
            return
        except Exception as exc:  # noqa: BLE001 - a crashing kernel is a result, not the end of the run
            res = _error_result(exc, roots=k.roots)
        if k.choice_of is not None:
            res.choice = _choice(k.choice_of, params, make_config)
        emit({"type": "case", "index": i, "result": res.as_dict()})
        # The runner stops a leaderboard run at the first case that does not pass.
        if job["mode"] == "leaderboard" and res.status != "pass" and not job.get("keep_going"):
            stop_rest = True
    emit({"type": "done"})


def _choice(choice_of: Callable, params: dict, make_config: Callable) -> str | None:
    """The selection's candidate for the case's shape, or None (no selection, or it failed)."""
    shape = {k: v for k, v in params.items() if k != "seed"}
    try:
        return choice_of(make_config(**shape))
    except Exception:  # noqa: BLE001 - the report's column stays empty; the case has its own result
        return None


def _interrupt_once(signum, frame) -> None:
    """The first Ctrl-C stops the case in progress; later ones (the parent forwards its own) are
    ignored while the worker reports it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def process_main(job: dict, queue) -> None:
    """Entry point of a spawned worker: environment first (TRITON_INTERPRET must precede triton).
    A Ctrl-C outside a case ends the worker quietly: the parent reports the run as interrupted."""
    for k, v in (job.get("env") or {}).items():
        os.environ[k] = str(v)
    signal.signal(signal.SIGINT, _interrupt_once)
    try:
        run_backend(job, queue.put)
    except KeyboardInterrupt:
        queue.put({"type": "interrupted"})
    except BaseException as exc:  # noqa: BLE001 - the parent turns this into per-case errors
        queue.put({"type": "fatal", "message": error_summary(exc), "traceback": _traceback_text(exc)})
        raise
