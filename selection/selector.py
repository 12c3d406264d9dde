"""The selection at the first call per shape: candidates checked against reference.ref_kernel, timed as
the runner times, the survivors run fastest first (docs/selection.md, "What happens at the first call of
a shape"); timer, clock and store injectable for the tests."""

import hashlib
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from problem.cases import case_name
from problem.shapes import SIZES, Shape
from reference import ATOL, RTOL, compare, ref_kernel
from selection.candidates import Candidate

SELECT_ENV = "MOE_SELECT"
SELECT_VALUES = ("auto", "1", "0")
BUDGET_ENV = "MOE_SELECT_BUDGET_S"
DEFAULT_BUDGET_S = 20.0
CANDIDATES_ENV = "MOE_SELECT_CANDIDATES"
CANDIDATES_VALUES = ("won", "all")
# A candidate's worst error may not pass max(MIN_MARGIN, the incumbent's), against unseen seeds.
MIN_MARGIN = 0.5
GPU_REPS = 5
CPU_REPS = 1
# The cache flush before each timed call, larger than the last-level cache (docs/selection.md).
FLUSH_BYTES = 512 << 20
FLUSH_PASSES = 8


def _one_of(environ, name: str, values: tuple[str, ...]) -> str:
    """The variable's value, values[0] when unset or empty (as an empty MOE_BACKEND is no backend)."""
    value = (os.environ if environ is None else environ).get(name) or values[0]
    if value not in values:
        raise ValueError(f"{name}: expected one of {', '.join(values)}, got {value!r}")
    return value


def select_mode(environ=None) -> str:
    """MOE_SELECT: auto (default), 1 or 0."""
    return _one_of(environ, SELECT_ENV, SELECT_VALUES)


def budget_s(environ=None) -> float:
    """MOE_SELECT_BUDGET_S (seconds per shape, compiles included), default 20."""
    text = (os.environ if environ is None else environ).get(BUDGET_ENV, "")
    try:
        value = float(text or DEFAULT_BUDGET_S)
    except ValueError:
        value = math.nan
    if not value >= 0:
        raise ValueError(f"{BUDGET_ENV}: expected seconds >= 0, got {text!r}")
    return value


def candidate_set(environ=None) -> str:
    """MOE_SELECT_CANDIDATES: "won" (default: the candidates that have won a shape in a measurement) or "all"."""
    return _one_of(environ, CANDIDATES_ENV, CANDIDATES_VALUES)


def shape_name(config: dict) -> str:
    """problem.cases.case_name's label of a call's config."""
    return case_name({key.replace("_", ""): config[key] for key in SIZES})


def candidates_digest(candidates: list[Candidate]) -> str:
    text = "|".join(f"{c.name}={c.detail}" for c in candidates)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def worst_error(output: torch.Tensor, expected: torch.Tensor) -> float:
    """max |out - ref| / (atol + rtol |ref|) over the elements where both are finite (the check
    has matched the rest already): 1 is the edge of the leaderboard's tolerance."""
    got, ref = output.float(), expected.float()
    ratio = (got - ref).abs() / (ATOL + RTOL * ref.abs())
    finite = torch.isfinite(ratio)
    return float(ratio[finite].max()) if finite.any() else 0.0


def graph_capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def measure_cuda(run: Callable, data, reps: int) -> list[float]:
    """Seconds per call: synchronize, flush, event, call, event, synchronize (the runner's way)."""
    scratch = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device=data[0].device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        for _ in range(FLUSH_PASSES):
            scratch.fill_(1.0)
        start.record()
        run(data)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return times


def measure_cpu(run: Callable, data, reps: int) -> list[float]:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        run(data)
        times.append(time.perf_counter() - t0)
    return times


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 0.1 else f"{seconds:.3g} s"


def _trial(cand: Candidate, data, expected, margin: float | None, measure: Callable, reps: int):
    """(median s, error) of a candidate that passes, or (None, why it is dropped); margin None
    for the incumbent, which no margin drops."""
    try:
        output = cand.run(data)
        ok, message = compare(output, expected)
        error = worst_error(output, expected) if ok else math.inf
    except Exception as exc:  # noqa: BLE001 - a candidate that raises is dropped, its message kept
        return None, f"raised {_first_line(exc)}"
    if not ok:
        return None, f"wrong ({message.splitlines()[0]})"
    if margin is not None and error > margin:
        return None, f"error {error:.2f} of tolerance > margin {margin:.2f}"
    try:
        return statistics.median(measure(cand.run, data, reps)), error
    except Exception as exc:  # noqa: BLE001
        return None, f"raised while timed {_first_line(exc)}"


def select(candidates: list[Candidate], data, measure: Callable, reps: int, clock: Callable, budget: float):
    """(survivors fastest first, {name: median s}, {name: why dropped}); the incumbent (candidates[0]) always
    tried, each other one while the budget still holds the costliest candidate so far, compiles included."""
    start = clock()
    expected = ref_kernel(data)
    margin = MIN_MARGIN
    medians, dropped = {}, {}
    longest = 0.0  # the costliest candidate so far (compile, check, timing): the next one's estimate
    for index, cand in enumerate(candidates):
        began = clock()
        if index and began - start + longest > budget:
            dropped[cand.name] = "skipped (budget)"
            continue
        median, error = _trial(cand, data, expected, margin if index else None, measure, reps)
        longest = max(longest, clock() - began)
        if median is None:
            dropped[cand.name] = error
            continue
        if not index:
            margin = max(MIN_MARGIN, error)
        medians[cand.name] = median
    order = sorted((cand for cand in candidates if cand.name in medians), key=lambda cand: medians[cand.name])
    return order, medians, dropped


@dataclass(eq=False)
class Selector:
    """Per-shape choices of one process: selected at the first call, or read from the store."""

    candidates_fn: Callable[[dict], list[Candidate]]
    store: object = None
    measure: Callable | None = None
    reps: int | None = None
    clock: Callable[[], float] = time.perf_counter
    capturing: Callable[[], bool] = graph_capturing
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)
    _choices: dict[Shape, list[Candidate]] = field(default_factory=dict, init=False)

    def choice(self, config: dict) -> str | None:
        """The name of the candidate the shape of config runs now (None before its first call)."""
        order = self._choices.get(Shape.of_config(config))
        return order[0].name if order else None

    def known(self, config: dict) -> tuple[str, str] | None:
        """(name, why) of what the shape of config runs without selecting on data: its only
        candidate, or the store's choice; None where it needs a selection."""
        candidates = self.candidates_fn(config)
        if len(candidates) == 1:
            return candidates[0].name, "the only candidate"
        stored = self._stored(Shape.of_config(config), candidates)
        return (stored[0].name, "stored") if stored else None

    def _stored(self, shape: Shape, candidates: list[Candidate]) -> list[Candidate] | None:
        """The store's order of shape's candidates, if it was chosen among these candidates."""
        names = self.store.get(shape, candidates_digest(candidates)) if self.store is not None else None
        by_name = {c.name: c for c in candidates}
        return [by_name[name] for name in names] if names and set(names) <= set(by_name) else None

    def __call__(self, data):
        shape = Shape.of_config(data[-1])
        order = self._choices.get(shape)
        if order is None:
            if self.capturing():
                return self.candidates_fn(data[-1])[0].run(data)  # no selection inside a graph
            order = self.prepare(data)
        return self._run(shape, order, data)

    def _run(self, shape: Shape, order: list[Candidate], data):
        """The first candidate's output; one that raises is dropped for this shape from now on."""
        while True:
            try:
                return order[0].run(data)
            except Exception as exc:
                if len(order) == 1:
                    raise
                failed = order.pop(0)
                self.log(
                    f"moe-mxfp4 select {shape_name(data[-1])}: {failed.name} raised {_first_line(exc)}; "
                    f"falling back to {order[0].name}"
                )

    def prepare(self, data, budget: float | None = None) -> list[Candidate]:
        """The shape's survivors, fastest first: from the store, else selected on data (and stored)."""
        shape = Shape.of_config(data[-1])
        candidates = self.candidates_fn(data[-1])
        if len(candidates) == 1:
            order = candidates  # nothing to choose between: no reference, no timing
            self.log(f"moe-mxfp4 select {shape_name(data[-1])}: {candidates[0].name} (the only candidate)")
        elif stored := self._stored(shape, candidates):
            order = stored
            self.log(f"moe-mxfp4 select {shape_name(data[-1])}: {order[0].name} (stored in {self.store.path})")
        else:
            order = self._select(shape, candidates, candidates_digest(candidates), data, budget)
        self._choices[shape] = order
        return order

    def _select(self, shape, candidates, digest, data, budget) -> list[Candidate]:
        on_gpu = data[0].device.type == "cuda"
        measure = self.measure or (measure_cuda if on_gpu else measure_cpu)
        reps = self.reps or (GPU_REPS if on_gpu else CPU_REPS)
        t0 = self.clock()
        budget = budget_s() if budget is None else budget
        name = shape_name(data[-1])
        try:
            order, medians, dropped = select(candidates, data, measure, reps, self.clock, budget)
        except Exception as exc:  # noqa: BLE001 - the reference itself failed: no check, so no selection
            self.log(f"moe-mxfp4 select {name}: not selected ({_first_line(exc)}) -> {candidates[0].name}")
            return [candidates[0]]
        parts = [f"{c.name} {_us(medians[c.name]) if c.name in medians else dropped[c.name]}" for c in candidates]
        if order:
            chosen = order[0].name
        else:
            order = [candidates[0]]  # nothing passed: the static choice, as without selection
            chosen = f"{candidates[0].name} (none passed)"
        self.log(f"moe-mxfp4 select {name}: {', '.join(parts)} -> {chosen} in {self.clock() - t0:.1f} s")
        if self.store is not None and medians:
            self.store.put(shape, digest, [c.name for c in order], {n: round(m * 1e6, 1) for n, m in medians.items()})
        return order
