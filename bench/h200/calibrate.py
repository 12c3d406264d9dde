"""What the MI355X cost model is checked against on a GPU that can be timed (docs/gfx950.md):

  launches  the decode path's launches per official shape: kernel durations and the gaps between
            them inside a call (torch.profiler, each call behind the leaderboard's 64 GiB flush),
            each launch's grid, and the call's time the leaderboard's way (events around one call);
  sweep     a bandwidth-bound kernel whose programs each stream a fixed number of bytes, over grids
            that cross k x SMs (one, two, four programs per SM and one more), at several warp
            counts and bytes per program;
  gap       dependent tiny launches queued behind a busy GPU: the device-side cost per launch;
  target    one call per official shape between cudaProfilerStart/Stop, for ncu:
            ncu --profile-from-start off --clock-control none --section SpeedOfLight
                --section LaunchStats --section Occupancy
                --metrics dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum
                --csv --page raw python -m bench.h200.calibrate target > ncu.csv

Writes <mode>.json under --out and prints a short table. Runs on a CUDA GPU only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

FLUSH_SHAPE = (16000, 1024, 1024)  # the runner's flush: 64 GiB of fp32 randn before each timed call


def _official():
    from problem.cases import BENCHMARKS, TESTS, case_name

    return [(case_name(c), c) for c in (*TESTS, *BENCHMARKS)]


def _decode_call(data):
    from moe_triton.fused_moe import fused_moe_triton

    hidden, w1, w2, w1_scale, w2_scale, *_, topk_weights, topk_ids, _config = data
    return fused_moe_triton(hidden, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids, native=False)


def _plan_grids(data) -> list[dict]:
    """Name and grid of each launch of the decode plan that the first call of this shape recorded."""
    from moe_triton import plan as plans

    plan = plans.latest_plan()
    return [{"kernel": launch.fn.fn.__name__, "grid": list(launch.grid)} for launch in plan.launches]


def launches(reps: int) -> dict:
    from reference import generate_input

    out = {}
    for name, case in _official():
        data = generate_input(**case)
        for _ in range(3):
            _decode_call(data)
        torch.cuda.synchronize()
        grids = _plan_grids(data)
        event_us = []
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                torch.cuda.synchronize()
                torch.randn(FLUSH_SHAPE, device="cuda")
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                _decode_call(data)
                end.record()
                torch.cuda.synchronize()
                event_us.append(start.elapsed_time(end) * 1e3)
        kernels = sorted(
            (e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "moe_" in e.name),
            key=lambda e: e.time_range.start,
        )
        per_call = len(grids)
        calls = [kernels[i : i + per_call] for i in range(0, len(kernels) - per_call + 1, per_call)]
        rows = []
        for j, grid in enumerate(grids):
            durs = [c[j].time_range.elapsed_us() for c in calls]
            gaps = [c[j].time_range.start - c[j - 1].time_range.end for c in calls] if j else [0.0]
            rows.append({**grid, "us": statistics.median(durs), "gap_before_us": statistics.median(gaps)})
        span = [c[-1].time_range.end - c[0].time_range.start for c in calls]
        out[name] = {
            "case": case,
            "launches": rows,
            "event_us_median": statistics.median(event_us),
            "kernel_span_us_median": statistics.median(span),
            "calls_profiled": len(calls),
        }
        print(
            f"{name:>8}: call {out[name]['event_us_median']:8.1f} us, kernels "
            + ", ".join(f"{r['kernel'].replace('moe_', '').replace('_kernel', '')} {r['us']:.1f}" for r in rows),
            flush=True,
        )
    return out


@triton.jit
def stream_kernel(x_ptr, out_ptr, n_per_program, BLOCK: tl.constexpr):
    """Each program sums its own contiguous n_per_program fp32 values: reads only, one store."""
    base = x_ptr + tl.program_id(0).to(tl.int64) * n_per_program
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_per_program, BLOCK):
        acc += tl.load(base + start + tl.arange(0, BLOCK))
    tl.store(out_ptr + tl.program_id(0), tl.sum(acc, axis=0))


def sweep(reps: int) -> dict:
    from bench.tune.tiles import time_call

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grids = {g for k in (1, 2, 3, 4, 8) for g in (k * sms, k * sms + 1)}
    grids = sorted(grids | {sms // 2, sms + 8, 2 * sms + 7, 6 * sms})
    configs = [(warps, mib) for warps in (4, 8, 32) for mib in (1,)] + [(8, 0.25), (8, 4)]
    largest = max(grids) * 4 * (1 << 20)
    x = torch.randn(largest // 4, device="cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    out = torch.empty(max(grids), device="cuda")
    rows = []
    for warps, mib in configs:
        n = int(mib * (1 << 20) // 4)
        block = 512 * warps  # 16 fp32 (four 16-byte loads) per thread and step
        for grid in grids:
            if grid * n > x.numel():
                continue
            run = lambda: stream_kernel[(grid,)](x, out, n, BLOCK=block, num_warps=warps)  # noqa: B023
            us = statistics.median(time_call(run, reps, flush))
            rows.append(
                {
                    "warps": warps,
                    "mib_per_program": mib,
                    "programs": grid,
                    "us": us,
                    "tb_per_s": grid * n * 4 / (us * 1e-6) / 1e12,
                }
            )
            print(
                f"warps {warps:2d} {mib:5.2f} MiB x {grid:5d} programs: {us:8.1f} us {rows[-1]['tb_per_s']:.2f} TB/s",
                flush=True,
            )
    return {"sms": sms, "rows": rows}


@triton.jit
def tiny_kernel(x_ptr):
    tl.store(x_ptr, tl.load(x_ptr) + 1)


def gap(reps: int) -> dict:
    x = torch.zeros(1, device="cuda")
    tiny_kernel[(1,)](x)
    rows = []
    for n in (1, 2, 4, 8, 16, 32):
        times = []
        for _ in range(reps):
            torch.cuda.synchronize()
            torch.cuda._sleep(2_000_000)  # the host queues everything below while this runs
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(n):
                tiny_kernel[(1,)](x)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) * 1e3)
        rows.append({"launches": n, "us": statistics.median(times)})
        print(f"{n:3d} dependent tiny launches behind a busy GPU: {rows[-1]['us']:.2f} us", flush=True)
    slope = (rows[-1]["us"] - rows[0]["us"]) / (rows[-1]["launches"] - rows[0]["launches"])
    return {"rows": rows, "us_per_launch": slope}


def target() -> dict:
    from reference import generate_input

    inputs = [(name, generate_input(**case)) for name, case in _official()]
    for _, data in inputs:
        _decode_call(data)
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for _, data in inputs:
        _decode_call(data)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    return {"profiled": [name for name, _ in inputs]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.h200.calibrate", description=__doc__.split("\n\n")[0])
    p.add_argument("modes", nargs="+", choices=("launches", "sweep", "gap", "target"))
    p.add_argument("--out", default=None, help="folder for <mode>.json (default: none written)")
    p.add_argument("--reps", type=int, default=15, help="timed repetitions per point (default 15)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("python -m bench.h200.calibrate: error: needs a CUDA GPU", file=sys.stderr)
        return 2
    run = {
        "launches": lambda: launches(args.reps),
        "sweep": lambda: sweep(args.reps),
        "gap": lambda: gap(args.reps),
        "target": target,
    }
    for mode in args.modes:
        result = run[mode]()
        result["device"] = torch.cuda.get_device_name(0)
        result["versions"] = {"torch": torch.__version__, "triton": triton.__version__}
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / f"{mode}.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
