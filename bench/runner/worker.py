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


def _run(job: dict, emit: Callable[[dict], None]) -> None:
    from bench.roofline import traffic
    from bench.runner import evaluate
    from bench.runner.backends import load_custom_kernel
    from bench.runner.checks import make_check
    from bench.runner.timing import Device, Limits

    set_seed(job.get("global_seed", 42))
    from reference import generate_input, make_config

    device = Device(job["device"], job["flush"])
    emit({"type": "device", "info": device.describe()})
    cases = job["cases"]
    mode = job["mode"]
    traffic_fn = traffic if job.get("roofline", True) else None
    roots = {Path(job["root"]).resolve(), Path(job["path"]).resolve().parent}

    try:
        kernel = load_custom_kernel(job["path"], job["root"], job["label"])
        check_implementation = make_check(job.get("check", "a4w4"))
    except Exception as exc:  # noqa: BLE001 - reported, and every case is marked
        result = _error_result(exc, f"loading {job['path']} failed: ").as_dict()
        for i in range(len(cases)):
            emit({"type": "case", "index": i, "result": result})
        emit({"type": "done"})
        return
    emit({"type": "loaded"})
    # A bundle's custom_kernel lies in the package it writes under the cache: its errors are its own too.
    if hasattr(kernel, "__code__"):
        roots.add(Path(kernel.__code__.co_filename).resolve().parent)
    # The submission's selection (submission.selection_choice), read after each case's first call.
    choice_of = getattr(sys.modules.get(kernel.__module__), "selection_choice", None)

    limits = Limits(**job["limits"]) if job.get("limits") else None

    if mode in ("benchmark", "leaderboard") and job.get("warmup") and cases:
        warm = Limits(**job["warmup_limits"])
        emit({"type": "warmup-start"})
        t0 = time.perf_counter()
        try:
            res = evaluate.run_timed(
                cases[0]["params"], kernel, generate_input, check_implementation, device, warm, recheck=False
            )
            status, message = res.status, res.message
        except evaluate.Interrupted:
            emit({"type": "interrupted"})
            return
        except Exception as exc:  # noqa: BLE001
            status, message = "error", error_summary(exc)
        emit({"type": "warmup", "status": status, "message": message, "seconds": time.perf_counter() - t0})

    stop_rest = False
    deadline = job.get("deadline")
    for i, case in enumerate(cases):
        why = "after a failed case" if stop_rest else ""
        if not why and deadline is not None and time.time() > deadline:
            why = "--deadline passed before this case"
        if why:
            emit({"type": "case", "index": i, "result": evaluate.CaseResult(status="skipped", message=why).as_dict()})
            continue
        emit({"type": "start", "index": i})
        last = [0.0]

        def progress(reps: int, _i: int = i, _last: list = last) -> None:
            now = time.perf_counter()
            if now - _last[0] >= PROGRESS_EVERY_S:
                _last[0] = now
                emit({"type": "progress", "index": _i, "reps": reps})

        params = case["params"]
        try:
            if mode == "test":
                res = evaluate.run_test(params, kernel, generate_input, check_implementation, device, traffic_fn)
            elif mode == "host":
                calls = job.get("host_calls") or evaluate.HOST_CALLS
                res = evaluate.run_host(params, kernel, generate_input, check_implementation, device, calls)
            elif mode == "profile":
                res = evaluate.run_profile(
                    params,
                    kernel,
                    generate_input,
                    check_implementation,
                    device,
                    row_limit=job.get("profile_rows", 25),
                    warmup_calls=job.get("profile_warmup", 0),
                    traffic_fn=traffic_fn,
                )
            else:
                res = evaluate.run_timed(
                    params,
                    kernel,
                    generate_input,
                    check_implementation,
                    device,
                    limits,
                    recheck=(mode == "leaderboard"),
                    progress=progress,
                    traffic_fn=traffic_fn,
                )
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
            res = _error_result(exc, roots=roots)
        if choice_of is not None:
            res.choice = _choice(choice_of, params, make_config)
        emit({"type": "case", "index": i, "result": res.as_dict()})
        # The runner stops a leaderboard run at the first case that does not pass.
        if mode == "leaderboard" and res.status != "pass" and not job.get("keep_going"):
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
