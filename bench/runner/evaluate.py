"""The per-case loops of each mode, as the leaderboard's runner runs them (SPEC 4).

Everything the loops touch is passed in (kernel, generate, check, device), so the rules can be
tested with stand-ins:
  test         generate, synchronize, one call, synchronize, check.
  benchmark    generate once; one call that must pass the check; then timed repetitions on the
               same data, no further checks, until the stop rule (bench.runner.timing.should_stop).
  leaderboard  the same first checked call; then before every timed repetition the seed grows
               by 13 and the inputs are regenerated, and every output is checked.
  profile      generate, one call under torch.profiler (then, outside the profile, the check).
  host         generate; one checked call and one more; then the host time of each of many calls
               queued behind a long GPU sleep, never synchronised: what an eager caller pays per
               layer before the GPU time (a GPU only).
The check always runs after the submission, on the very same tensors (nothing is cloned).
A Ctrl-C inside a timed case raises Interrupted, which carries the repetitions measured so far.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from bench.runner.case_args import LEADERBOARD_SEED_STEP
from bench.runner.timing import Limits, Stats, calculate_stats, should_stop


@dataclass
class CaseResult:
    status: str  # pass | fail | error | skipped | interrupted
    message: str = ""  # one line for the tables: the check's verdict or the exception's own message
    stats: Stats | None = None
    seeds: list[int] = field(default_factory=list)  # seeds of the data used, in order (first: the checked call)
    checked: int = 0  # outputs compared with the reference
    traffic: dict | None = None  # bench.roofline.traffic averaged over the timed data
    call_ns: float | None = None  # test mode: the one call (first call: compilation included); profile: its wall time
    host_ns: float | None = None  # host mode: the median host time per call (stats: all of them)
    first_call_s: float | None = None  # wall time of the case's first call, synchronized (a selection's cost)
    choice: str | None = None  # the candidate the submission's selection runs for this shape (worker)
    profile: str | None = None
    traceback: str = ""  # status error: where the exception came from
    refused: bool = False  # status error: an input the package refuses by design (its message says why)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["stats"] = self.stats.as_dict() if self.stats else None
        return d


class Interrupted(Exception):
    """Ctrl-C during a timed case; `result` holds the repetitions measured until then."""

    def __init__(self, result: CaseResult):
        super().__init__("interrupted")
        self.result = result


def _mean_traffic(items: list[dict]) -> dict | None:
    if not items:
        return None
    keys = items[0].keys()
    return {k: sum(float(t[k]) for t in items) / len(items) for k in keys}


def _single_call_result(params: dict, verdict: tuple, traffic: list[dict], **extra) -> CaseResult:
    """The result of a mode that makes one checked call (test, profile)."""
    ok, message = verdict
    return CaseResult(
        status="pass" if ok else "fail",
        message=message or "",
        seeds=[params["seed"]],
        checked=1,
        traffic=_mean_traffic(traffic),
        **extra,
    )


def _timed_call(kernel: Callable, data, device, flush: bool) -> tuple[object, float]:
    """(output, ns) of one call: synchronize (and flush the cache), timer around the call,
    synchronize."""
    device.synchronize()
    if flush:
        device.flush()
    timer = device.timer()
    timer.start()
    out = kernel(data)
    timer.stop()
    device.synchronize()
    return out, timer.elapsed_ns()


def run_test(
    params: dict, kernel: Callable, generate: Callable, check: Callable, device, traffic_fn: Callable | None = None
) -> CaseResult:
    data = generate(**params)
    traffic = [traffic_fn(data)] if traffic_fn else []
    t0 = time.perf_counter()
    out, call_ns = _timed_call(kernel, data, device, flush=False)
    first_call_s = time.perf_counter() - t0
    return _single_call_result(params, check(data, out), traffic, call_ns=call_ns, first_call_s=first_call_s)


def run_timed(
    params: dict,
    kernel: Callable,
    generate: Callable,
    check: Callable,
    device,
    limits: Limits,
    recheck: bool,
    progress: Callable[[int], None] | None = None,
    traffic_fn: Callable | None = None,
) -> CaseResult:
    """benchmark (recheck=False) or leaderboard (recheck=True) timing of one case."""
    params = dict(params)
    seeds = [params["seed"]]
    data = generate(**params)
    t_first = time.perf_counter()
    out = kernel(data)
    device.synchronize()
    first_call_s = time.perf_counter() - t_first
    ok, message = check(data, out)
    if not ok:
        return CaseResult(
            status="fail",
            message=f"first call, seed {params['seed']}: {message}",
            seeds=seeds,
            checked=1,
            first_call_s=first_call_s,
        )
    del out
    traffic = [] if recheck or not traffic_fn else [traffic_fn(data)]
    checked = 1
    durations: list[float] = []

    def so_far(status: str, message: str = "") -> CaseResult:
        """The result of the repetitions run until now."""
        stats = calculate_stats(durations) if durations else None
        return CaseResult(status, message, stats, seeds, checked, _mean_traffic(traffic), first_call_s=first_call_s)

    t0 = time.perf_counter()
    try:
        for rep in range(limits.max_reps):
            if recheck:
                params["seed"] += LEADERBOARD_SEED_STEP
                seeds.append(params["seed"])
                data = generate(**params)
                if traffic_fn:
                    traffic.append(traffic_fn(data))
            out, elapsed_ns = _timed_call(kernel, data, device, flush=True)
            if recheck:
                ok, message = check(data, out)
                checked += 1
                if not ok:
                    return so_far("fail", f"repetition {rep}, seed {params['seed']}: {message}")
            del out
            durations.append(elapsed_ns)
            if progress is not None:
                progress(len(durations))
            if should_stop(durations, time.perf_counter() - t0, limits):
                break
    except KeyboardInterrupt:
        raise Interrupted(
            so_far("interrupted", f"interrupted (Ctrl-C) after {len(durations)} timed repetitions")
        ) from None
    return so_far("pass")


HOST_CALLS = 100  # calls per host measurement: 4-6 launches each stay well inside the launch queue
HOST_BUSY_S = 0.2  # the GPU sleep queued first, longer than HOST_CALLS calls at ~1 ms of host time each


def run_host(
    params: dict, kernel: Callable, generate: Callable, check: Callable, device, calls: int = HOST_CALLS
) -> CaseResult:
    """Host time per call of `calls` calls on the same data, each timed with perf_counter_ns and
    none synchronised, behind a GPU sleep that outlasts them (so the launch queue neither drains
    nor throttles); retried with a four times longer sleep when the GPU caught up before the end."""
    data = generate(**params)
    ok, message = check(data, kernel(data))
    if not ok:
        return CaseResult(status="fail", message=f"checked call, seed {params['seed']}: {message}", checked=1)
    kernel(data)  # caches that the first call fills (compilation, buffers, plans)
    busy_s = HOST_BUSY_S
    for _ in range(3):
        device.synchronize()
        done = device.hold_busy(busy_s)
        times = []
        for _ in range(calls):
            t0 = time.perf_counter_ns()
            kernel(data)
            times.append(time.perf_counter_ns() - t0)
        caught_up = done.query()
        device.synchronize()
        if not caught_up:
            times.sort()
            return CaseResult(
                status="pass",
                message=f"median of {calls} calls behind a {busy_s:.1f} s GPU sleep",
                stats=calculate_stats(times),
                seeds=[params["seed"]],
                checked=1,
                host_ns=float(times[calls // 2]),
            )
        busy_s *= 4
    return CaseResult(status="error", message=f"the GPU caught up with {calls} calls behind a {busy_s / 4:.1f} s sleep")


def run_profile(
    params: dict,
    kernel: Callable,
    generate: Callable,
    check: Callable,
    device,
    row_limit: int = 25,
    warmup_calls: int = 0,
    traffic_fn: Callable | None = None,
) -> CaseResult:
    """One call under torch.profiler (CPU and, on a GPU, device activities); the table sorts by self
    device time on a GPU, by self CPU time otherwise. warmup_calls > 0 runs those calls first
    (the runner profiles the very first call)."""
    from torch.profiler import ProfilerActivity, profile

    data = generate(**params)
    traffic = [traffic_fn(data)] if traffic_fn else []
    for _ in range(warmup_calls):
        kernel(data)
    device.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.kind == "cuda" else [])
    t0 = time.perf_counter()
    with _kineto_lines_dropped(), profile(activities=activities) as prof:
        out = kernel(data)
        device.synchronize()
    wall_s = time.perf_counter() - t0
    sort_by = "self_device_time_total" if device.kind == "cuda" else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort_by, row_limit=row_limit)
    if device.kind != "cuda":
        table = (
            f"The call took {wall_s:.2f} s. Without a GPU, Triton's interpreter runs the kernels as Python and "
            "numpy, which torch.profiler does not see: the table holds torch's own operations only.\n" + table
        )
    return _single_call_result(params, check(data, out), traffic, profile=table, call_ns=wall_s * 1e9)


KINETO_LINE = re.compile(r"(USDT|STAGE):\d{4}-\d\d-\d\d [\d:]+ \d+:\d+ \w+\.cpp:\d+\] ")


@contextlib.contextmanager
def _kineto_lines_dropped():
    """torch.profiler's kineto writes a USDT line to the process's stderr (file descriptor 2) at
    every start and stop, whatever KINETO_LOG_LEVEL says: those lines are dropped, any other
    passes on once the profile ends."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            kept = [
                line for line in caught.read().decode(errors="replace").splitlines(True) if not KINETO_LINE.match(line)
            ]
            sys.stderr.write("".join(kept))
