"""The tuner's worker: candidates of bench/tune/aiter_rows.py evaluated one by one in a spawned process.

`CandidateWorker.run(task, timeout_s)` sends one candidate to the worker and waits for its
result. A candidate that crashes the process (a GPU fault takes the whole process down) or
outlives the timeout costs that candidate only: the worker is killed if need be, the candidate
is reported as "crash" or "timeout", and the next one starts a fresh worker. In the worker a
candidate is injected (moe_aiter.backend.install_overrides, which clears get_2stage_cfgs' cache),
checked against reference.ref_kernel on the case seed + 13 and then timed by
bench.runner.evaluate.run_timed, whose first call is checked on the case seed: two leaderboard-style
seeds, timing as the runner times.
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import queue as queue_mod
import sys
import time

from bench.runner.worker import error_summary, set_seed

POLL_S = 0.2


def _call_setup(spec: str | None, kwargs: dict | None) -> None:
    """job["setup"], "module:function", called with job["setup_kwargs"] before anything else
    (the tests install the aiter double this way)."""
    if spec:
        module, _, fn = spec.partition(":")
        getattr(importlib.import_module(module), fn)(**(kwargs or {}))


def _versions() -> str:
    from importlib import metadata

    import torch

    parts = []
    for pkg in ("torch", "triton", "aiter"):
        try:
            parts.append(f"{pkg} {metadata.version(pkg)}")
        except metadata.PackageNotFoundError:
            pass
    parts.append(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu")
    return ", ".join(parts)


class _Evaluator:
    """Everything a worker keeps between candidates: the kernel, the device, the versions."""

    def __init__(self, job: dict):
        root = job["root"]
        if root not in sys.path:
            sys.path.insert(0, root)
        os.environ["MOE_BACKEND"] = "aiter"
        _call_setup(job.get("setup"), job.get("setup_kwargs"))
        set_seed(42)
        from bench.runner.backends import load_custom_kernel
        from bench.runner.timing import Device, Limits

        self.kernel = load_custom_kernel(os.path.join(root, "submission.py"), root, "tune")
        self.device = Device(job["device"], job["flush"])
        self.limits = Limits(**job["limits"])
        self.versions = _versions()

    def evaluate(self, task: dict) -> dict:
        from bench.runner import evaluate
        from bench.runner.case_args import LEADERBOARD_SEED_STEP
        from moe_aiter import backend as aiter_backend
        from moe_aiter.inject import aiter_key
        from reference import check_implementation, generate_input

        key = aiter_key(
            task["token"], task["inter_dim"], task["expert"], model_dim=task["model_dim"], topk=task["topk"]
        )
        row = {f: task[f] for f in ("block_m", "ksplit", "kernelName1", "kernelName2")}
        row["run_1stage"] = False
        fm = importlib.import_module("aiter.fused_moe")
        if row["kernelName2"].startswith("flydsl_") and not fm.is_flydsl_available():
            return {"status": "skipped", "message": "FlyDSL is unavailable here", "versions": self.versions}
        aiter_backend.install_overrides({key: row}, {})
        params = dict(task["params"])
        extra = dict(params, seed=params["seed"] + LEADERBOARD_SEED_STEP)
        data = generate_input(**extra)
        ok, message = check_implementation(data, self.kernel(data))
        if not ok:
            return {"status": "fail", "message": f"seed {extra['seed']}: {message}", "versions": self.versions}
        del data
        res = evaluate.run_timed(
            params, self.kernel, generate_input, check_implementation, self.device, self.limits, recheck=False
        )
        out = {"status": res.status, "message": res.message, "versions": self.versions}
        if res.stats is not None:
            out.update(us=res.stats.mean / 1e3, err_us=res.stats.err / 1e3, runs=res.stats.runs)
        return out


def worker_main(job: dict, tasks, results) -> None:
    """Entry point of the spawned worker: environment first (TRITON_INTERPRET must precede triton)."""
    for k, v in (job.get("env") or {}).items():
        os.environ[k] = str(v)
    try:
        evaluator = _Evaluator(job)
    except BaseException as exc:  # noqa: BLE001 - reported as the candidate's error
        results.put({"status": "error", "message": f"worker setup failed: {error_summary(exc)}"})
        return
    while (task := tasks.get()) is not None:
        t0 = time.perf_counter()
        try:
            res = evaluator.evaluate(task)
        except Exception as exc:  # noqa: BLE001 - a failing candidate is a result
            res = {"status": "error", "message": error_summary(exc), "versions": evaluator.versions}
        res["seconds"] = round(time.perf_counter() - t0, 2)
        results.put(res)


class CandidateWorker:
    """A spawned worker process, started on demand and replaced after a crash or a timeout."""

    def __init__(self, job: dict):
        self.job = job
        self.ctx = mp.get_context("spawn")
        self.proc = None

    def _start(self) -> None:
        self.tasks, self.results = self.ctx.Queue(), self.ctx.Queue()
        self.proc = self.ctx.Process(target=worker_main, args=(self.job, self.tasks, self.results), name="tune-aiter")
        self.proc.start()

    def _kill(self) -> None:
        if self.proc is not None and self.proc.pid is not None:
            self.proc.kill()
            self.proc.join(timeout=10)
        self.proc = None

    def run(self, task: dict, timeout_s: float) -> dict:
        if self.proc is None or not self.proc.is_alive():
            self._start()
        self.tasks.put(task)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                res = self.results.get(timeout=POLL_S)
            except queue_mod.Empty:
                if not self.proc.is_alive():
                    code = self.proc.exitcode
                    self._kill()
                    return {"status": "crash", "message": f"the worker process died (exit code {code})"}
                if time.monotonic() > deadline:
                    self._kill()
                    return {"status": "timeout", "message": f"no result within {timeout_s:g} s; worker killed"}
                continue
            if res.get("message", "").startswith("worker setup failed"):
                self._kill()
            return res

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.tasks.put(None)
            self.proc.join(timeout=30)
        self._kill()
