"""Statistics, the runner's stop rules, per-call timers and the cache flush.

Timing as the leaderboard does it (SPEC 4): synchronize, flush the cache, record a start event,
call custom_kernel once, record an end event, synchronize. There is no synchronize between the
flush and the start event, so the flush kernel still runs on the GPU while Python issues the
call: host overhead up to the flush's own GPU time is hidden. The runner's flush is a
torch.randn of 16000 x 1024 x 1024 fp32 (64 GiB; ~15-25 ms of GPU time), so a call that never
waits on the GPU is timed almost at its pure GPU time, and one that synchronizes (.item(),
.tolist(), torch.unique, printing a tensor) pays all its launches. `--flush official` does the
same; `--flush l2` writes only twice the L2 and so exposes the host overhead.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

# The runner's flush: torch.randn((16000, 1024, 1024)) fp32.
OFFICIAL_FLUSH_SHAPE = (16000, 1024, 1024)
OFFICIAL_FLUSH_BYTES = 4 * 16000 * 1024 * 1024
CPU_FLUSH_BYTES = 64 << 20
# What the official flush must leave free beside it: the case's inputs and scratch, and the other processes of a
# shared card (on a 140 GiB H200 two official flushes in two pytest-xdist workers left a third without room for
# its inputs, 2026-12-07).
OFFICIAL_FLUSH_ROOM = 32 << 30


@dataclass
class Limits:
    """Repetition limits of one timed case (the runner's values by default)."""

    max_reps: int = 1000
    max_time_s: float = 50.0  # sum of measured times
    max_wall_s: float = 120.0  # wall time of the timing loop
    rel_err: float = 0.001  # stop once std/sqrt(n)/mean falls below this
    min_reps: int = 3


BENCHMARK_LIMITS = Limits(max_reps=1000, max_time_s=50.0)
LEADERBOARD_LIMITS = Limits(max_reps=100, max_time_s=30.0)
BENCHMARK_WARMUP = Limits(max_reps=100, max_time_s=0.1)
LEADERBOARD_WARMUP = Limits(max_reps=100, max_time_s=0.01)


@dataclass
class Stats:
    runs: int
    mean: float  # nanoseconds, as the runner reports them
    std: float
    err: float
    best: float
    worst: float

    def as_dict(self) -> dict:
        return asdict(self)


def calculate_stats(durations_ns: list[float]) -> Stats:
    """Mean, sample standard deviation (n-1), standard error of the mean, best and worst."""
    n = len(durations_ns)
    if n == 0:
        raise ValueError("no durations")
    mean = sum(durations_ns) / n
    var = sum((d - mean) ** 2 for d in durations_ns) / (n - 1) if n > 1 else 0.0
    std = math.sqrt(var)
    return Stats(
        runs=n,
        mean=mean,
        std=std,
        err=std / math.sqrt(n),
        best=float(min(durations_ns)),
        worst=float(max(durations_ns)),
    )


def should_stop(durations_ns: list[float], wall_elapsed_s: float, limits: Limits) -> bool:
    """The runner's rule, checked after every repetition from the third on: stop when the
    relative standard error is below limits.rel_err, or the measured total passes
    limits.max_time_s, or the loop's wall time passes limits.max_wall_s (max_reps is the loop bound)."""
    if len(durations_ns) >= limits.max_reps:
        return True
    if len(durations_ns) < limits.min_reps:
        return False
    st = calculate_stats(durations_ns)
    if st.mean > 0 and st.err / st.mean < limits.rel_err:
        return True
    return st.mean * st.runs > limits.max_time_s * 1e9 or wall_elapsed_s > limits.max_wall_s


class Device:
    """Synchronize / timer / flush for one torch device ("cuda" covers ROCm too, or "cpu")."""

    def __init__(self, kind: str, flush: str = "official", lead_s: float = 0.0):
        """lead_s: seconds of GPU work queued after each flush (hold_busy), during which the host
        queues the timed call's launches, as it does behind the official flush's milliseconds."""
        import torch

        self.torch = torch
        self.kind = kind
        self.flush_mode = flush
        self.flush_bytes = 0
        self.lead_s = lead_s if kind == "cuda" else 0.0
        self._buf = None
        self._sleep_rate = None  # torch.cuda._sleep cycles per second, once measured
        if kind == "cuda":
            l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 0)
            self.l2_bytes = l2
            free, _total = torch.cuda.mem_get_info()
            if flush == "official":
                # The runner's own allocation; falls back to a device-sized one when it cannot fit.
                if free > OFFICIAL_FLUSH_BYTES + OFFICIAL_FLUSH_ROOM:
                    self.flush_bytes = OFFICIAL_FLUSH_BYTES
                else:
                    self.flush_mode = "device"
                    self.flush_bytes = max(2 * l2, min(OFFICIAL_FLUSH_BYTES, free // 4))
            elif flush == "l2":
                self.flush_bytes = max(2 * l2, 8 << 20)
            elif flush == "none":
                self.flush_bytes = 0
            else:
                self.flush_bytes = max(2 * l2, int(flush))
                self.flush_mode = "bytes"
        else:
            self.l2_bytes = 0
            self.flush_mode = "none" if flush == "none" else "cpu"
            self.flush_bytes = 0 if flush == "none" else CPU_FLUSH_BYTES
            if self.flush_bytes:
                self._buf = torch.empty(self.flush_bytes // 4, dtype=torch.float32)

    def synchronize(self) -> None:
        if self.kind == "cuda":
            self.torch.cuda.synchronize()

    def flush(self) -> None:
        """Evict the caches the way the runner does: write (not read) a large fresh allocation."""
        if not self.flush_bytes:
            return
        torch = self.torch
        if self.kind == "cuda":
            if self.flush_mode == "official":
                dummy = torch.randn(OFFICIAL_FLUSH_SHAPE, device="cuda")
            else:
                dummy = torch.randn(self.flush_bytes // 4, device="cuda")
            del dummy
            if self.lead_s:
                self.hold_busy(self.lead_s)
        else:
            self._buf.uniform_()

    def hold_busy(self, seconds: float):
        """Queue about `seconds` of GPU work (torch.cuda._sleep, its cycles per second measured on
        the first use) and return an event recorded after it: while event.query() is False, the
        GPU had not caught up with the host (`--mode host`)."""
        torch = self.torch
        if self._sleep_rate is None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(10_000_000)
            end.record()
            end.synchronize()
            self._sleep_rate = 10_000_000 / (start.elapsed_time(end) / 1e3)
        torch.cuda._sleep(int(seconds * self._sleep_rate))
        done = torch.cuda.Event()
        done.record()
        return done

    def timer(self) -> Timer:
        return CudaTimer(self.torch) if self.kind == "cuda" else CpuTimer()

    def describe(self) -> dict:
        return {
            "kind": self.kind,
            "flush": self.flush_mode,
            "flush_bytes": self.flush_bytes,
            "l2_bytes": self.l2_bytes,
            "lead_s": self.lead_s,
        }


class Timer:
    def start(self) -> None: ...

    def stop(self) -> None: ...

    def elapsed_ns(self) -> float:  # valid after a synchronize
        raise NotImplementedError


class CudaTimer(Timer):
    """A pair of CUDA (HIP) events around one call."""

    def __init__(self, torch):
        self._s = torch.cuda.Event(enable_timing=True)
        self._e = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        self._s.record()

    def stop(self) -> None:
        self._e.record()

    def elapsed_ns(self) -> float:
        return self._s.elapsed_time(self._e) * 1e6


class CpuTimer(Timer):
    def __init__(self):
        self._t0 = self._t1 = 0

    def start(self) -> None:
        self._t0 = time.perf_counter_ns()

    def stop(self) -> None:
        self._t1 = time.perf_counter_ns()

    def elapsed_ns(self) -> float:
        return float(self._t1 - self._t0)
