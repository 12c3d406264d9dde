"""`python -m bench.h200.fit`: the H200 constants of bench.gfx950.model fitted on the calibration data
(bench/results/h200/calibrate-2026-12-01) with the committed static SASS counts, in three steps, each
on its own data and never per shape:

  gap        the slope of gap.json (dependent tiny launches behind a busy GPU), least squares;
  bandwidth  L0, the achievable fraction of 4.8 TB/s, the knee k, the flush's dirty bytes and the call's
             start, on sweep.json's 70 event-timed launches (minimising the sum of |log error|^8, which
             keeps the worst point low), the gap fixed;
  compute    E, a and L_step on ncu.csv's 22 GEMM launches, each its gap and its time (least squares of
             log error), the rest fixed.

It prints the constants (bench/gfx950/model.py holds them as printed) and the residuals' summary; the
per-row tables are `python -m bench.h200.twin`'s.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace

from bench.gfx950 import model
from bench.h200 import twin

# Where the fits start (L0 us, fraction, k, dirty MB, call us; E, a, L_step cycles): round guesses, so that
# the fit does not depend on the constants it replaces.
BANDWIDTH_START = [0.5, 0.9, 3.0, 40.0, 3.0]
COMPUTE_START = [0.65, 3.0, 2000.0]


def nelder_mead(f, x0: list[float], step: list[float], iterations: int = 3000) -> tuple[list[float], float]:
    """Minimise f from x0 (Nelder and Mead's simplex: reflect, expand, contract, shrink)."""
    n = len(x0)
    points = [list(x0)] + [[x + (step[i] if j == i else 0.0) for j, x in enumerate(x0)] for i in range(n)]
    values = [f(p) for p in points]
    for _ in range(iterations):
        order = sorted(range(n + 1), key=values.__getitem__)
        points, values = [points[i] for i in order], [values[i] for i in order]
        if abs(values[-1] - values[0]) <= 1e-12 * (1 + abs(values[0])):
            break
        centre = [sum(p[j] for p in points[:-1]) / n for j in range(n)]
        reflected = [c + (c - w) for c, w in zip(centre, points[-1], strict=True)]
        fr = f(reflected)
        if fr < values[0]:
            expanded = [c + 2 * (c - w) for c, w in zip(centre, points[-1], strict=True)]
            fe = f(expanded)
            points[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            points[-1], values[-1] = reflected, fr
        else:
            contracted = [c + 0.5 * (w - c) for c, w in zip(centre, points[-1], strict=True)]
            fc = f(contracted)
            if fc < values[-1]:
                points[-1], values[-1] = contracted, fc
            else:
                best = points[0]
                points = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, p, strict=True)] for p in points[1:]]
                values = [values[0]] + [f(p) for p in points[1:]]
    i = min(range(n + 1), key=values.__getitem__)
    return points[i], values[i]


def fit_gap(gap: dict) -> float:
    """Seconds per dependent launch: the least-squares slope of the call times over the launch counts."""
    xs = [r["launches"] for r in gap["rows"]]
    ys = [r["us"] * 1e-6 for r in gap["rows"]]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def _bandwidth_machine(base: model.Machine, p: list[float]) -> model.Machine:
    latency_us, fraction, knee, dirty_mb, call_us = p
    return replace(
        base,
        latency_s=latency_us * 1e-6,
        achievable_fraction=fraction,
        knee=knee,
        dirty_bytes=dirty_mb * 1e6,
        call_s=call_us * 1e-6,
    )


def fit_bandwidth(base: model.Machine, static: dict, sweep: list[dict]) -> model.Machine:
    def loss(p):
        if min(p) <= 0 or p[1] > 1:
            return math.inf
        m = _bandwidth_machine(base, p)
        return sum(abs(math.log(twin.sweep_seconds(m, r, static["sweep"]) * 1e6 / r["us"])) ** 8 for r in sweep)

    best, _ = nelder_mead(loss, BANDWIDTH_START, [0.1, 0.05, 0.5, 10, 1])
    best, _ = nelder_mead(loss, best, [0.02, 0.01, 0.1, 2, 0.3])
    return _bandwidth_machine(base, best)


def _compute_machine(base: model.Machine, p: list[float]) -> model.Machine:
    efficiency, latency, step = p
    return replace(base, issue_efficiency=efficiency, issue_latency=latency, step_latency_cycles=step)


def gemm_launches(static: dict, data: dict) -> list[tuple[dict, list[tuple[int, float]]]]:
    """Per case: the case, and (index, ncu seconds) of each of its GEMM launches."""
    out = []
    for name, case in static["cases"].items():
        timed = [
            (i, twin.number(ncu, "gpu__time_duration.sum") * 1e-9)
            for i, (record, ncu) in enumerate(zip(case["launches"], data["cases"][name]["ncu"], strict=True))
            if "stage" in record["kernel"]
        ]
        out.append((case, timed))
    return out


def fit_compute(base: model.Machine, static: dict, data: dict) -> model.Machine:
    launches = gemm_launches(static, data)

    def loss(p):
        if min(p) <= 0 or p[0] > 1:
            return math.inf
        m = _compute_machine(base, p)
        total = 0.0
        for case, timed in launches:
            works = twin.launch_works(m, case["launches"], case["params"])
            for i, seconds in timed:
                total += math.log((m.gap_s + model.launch_time(m, works[i]).seconds) / seconds) ** 2
        return total

    best, _ = nelder_mead(loss, COMPUTE_START, [0.1, 1.0, 500])
    best, _ = nelder_mead(loss, best, [0.02, 0.2, 100])
    return _compute_machine(base, best)


def fit(static: dict, data: dict) -> model.Machine:
    machine = replace(model.H200, gap_s=fit_gap(data["gap"]))
    machine = fit_bandwidth(machine, static, data["sweep"])
    return fit_compute(machine, static, data)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.h200.fit", description=__doc__.split("\n\n")[0])
    p.add_argument("--static", default=str(twin.STATIC), help="the static records (bench.h200.twin --compile)")
    args = p.parse_args(argv)
    static, data = json.loads(open(args.static).read()), twin.measured()
    machine = fit(static, data)
    print(f"fitted: {machine.describe()}")
    print(
        "model.H200 fields: "
        f"achievable_fraction={machine.achievable_fraction:.4g}, latency_s={machine.latency_s:.4g}, "
        f"knee={machine.knee:.4g}, gap_s={machine.gap_s:.4g}, call_s={machine.call_s:.4g}, "
        f"dirty_bytes={machine.dirty_bytes:.4g}, issue_efficiency={machine.issue_efficiency:.4g}, "
        f"issue_latency={machine.issue_latency:.4g}, step_latency_cycles={machine.step_latency_cycles:.4g}"
    )
    print("sweep:", twin.summary(twin.sweep_rows(machine, static, data)))
    rows = twin.launch_rows(machine, static, data)
    print("GEMM launches:", twin.summary([r for r in rows if r["gemm"]]), "; all launches:", twin.summary(rows))
    print("per shape:", twin.summary(twin.case_rows(machine, static, data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
