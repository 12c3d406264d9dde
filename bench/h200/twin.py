"""The cost model's H200 twin: bench.gfx950.model with the H200's constants, fed with the decode path's
launches compiled for sm_90 on the CPU, against what the H200 measured (bench/results/h200/
calibrate-2026-12-01: ncu's per-launch durations, the leaderboard-mode call times, the bandwidth
sweep). The same model with the MI355X's constants is the gfx950 check's ESTIMATE.

  python -m bench.h200.twin [--md FILE] [--alternates FILE]
                                 predicted against measured, from the committed data (and, given the
                                 file --measure wrote, the decode path's alternate tiles: a hold-out)
  python -m bench.h200.twin --compile FILE
                                 compile the 10 official shapes' decode launches, on the table's tiles
                                 and tiles_nvidia.ALTERNATES', for sm_90 (use the H200's triton, 3.6)
  python -m bench.h200.twin --measure DIR
                                 on the H200: each official shape's call on the table's tile and on
                                 every alternate, timed the leaderboard's way, into DIR/alternates.json

What a launch is made of (the static record, per launch of one call): the grid, warps, stages, shared
memory and registers (cuobjdump), and the SASS counts (bench.h200.sass): per K-loop iteration its warp
instructions and tensor-core flops, the rest once. A GEMM program runs its K loop K steps times
(stage 1: H / BLOCK_K; stage 2: N_TILES x K_STEPS) and the rest once; a routing launch's program its path
(bench.gfx950.cfg: the shortest to an exit, its loops once).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import sys
from pathlib import Path

from bench.gfx950 import model
from bench.gfx950.estimate import FP4_BYTES, capacity, layer_bytes, stage_weight_bytes, weight_bytes

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION = ROOT / "bench/results/h200/calibrate-2026-12-01"
STATIC = ROOT / "bench/results/h200/twin-static-triton-3.6.0.json"
BF16_BYTES = 2  # the decode path's activations (a1, a2)
# The sweep kernel (bench.h200.calibrate.stream_kernel): 16 fp32 per thread and step; its SASS loop keeps
# four 16-byte loads per thread in flight (four register quads), one step.
SWEEP_BYTES_PER_WARP = 32 * 16 * 4


def static_record(launch) -> dict:
    from bench.h200 import sass

    kernel = launch.kernel
    cubin = kernel.asm["cubin"]
    split = sass.split(sass.disassemble(cubin))
    res = sass.resources(cubin)
    return {
        "kernel": launch.function,
        "grid": list(launch.grid),
        "warps": kernel.metadata.num_warps,
        "stages": kernel.metadata.num_stages,
        "shared": kernel.metadata.shared,
        "registers": res.registers,
        "local": res.local,
        "constexprs": {k: v for k, v in launch.constexprs.items() if isinstance(v, (bool, int))},
        "loop": vars(split.loop) if split.loop else None,
        "rest": vars(split.rest),
        "path": vars(split.path),
    }


def compile_static() -> dict:
    import triton

    from bench.gfx950.driver import SM90, compile_only
    from bench.h200.calibrate import stream_kernel
    from bench.h200.sm90 import decode_launches
    from problem.cases import BENCHMARKS, TESTS, case_name

    os.environ["TRITON_INTERPRET"] = "0"
    from bench.runner.case_args import case_shape
    from moe_triton.tiles_nvidia import ALTERNATES, tile_config

    cases = {}
    for params in (*TESTS, *BENCHMARKS):
        shape = case_shape(params)
        # the decode table's tile, which the twin models (on an H200 two shapes' static choice is
        # the Gluon stage 1's instead: moe_triton/tiles_nvidia.py's GLUON_TUNED)
        table = tile_config(shape)
        alternates = {
            tile: [static_record(x) for x in decode_launches(params, tiles)]
            for tile, tiles in ALTERNATES.get(shape, {}).items()
        }
        cases[case_name(params)] = {
            "params": params,
            "launches": [static_record(x) for x in decode_launches(params, table)],
            "alternates": alternates,
        }
    sweep = {}
    import torch

    x, out = torch.empty(1 << 20), torch.empty(1024)
    for warps in (4, 8, 32):
        with compile_only(SM90) as driver:
            stream_kernel[(1,)](x, out, 1 << 18, BLOCK=512 * warps, num_warps=warps)
        record = static_record(driver.launches[0])
        sweep[str(warps)] = {k: record[k] for k in ("registers", "shared", "stages")}
    return {"triton": triton.__version__, "target": "cuda sm_90", "cases": cases, "sweep": sweep}


# ---------------------------------------------------------------- the model's view of a launch


def _gemm(record: dict) -> bool:
    return "stage" in record["kernel"] and record["loop"] is not None


def _steps(record: dict, params: dict) -> int:
    c = record["constexprs"]
    if "stage1" in record["kernel"]:
        return params["dhidden"] // c["BLOCK_K"]
    return c["N_TILES"] * c["K_STEPS"]


def _programs(record: dict, params: dict) -> tuple[float, float]:
    """(mean, variance) of the programs that do work."""
    if not _gemm(record):
        return float(math.prod(record["grid"])), 0.0
    c = record["constexprs"]
    mean, variance = model.blocks_moments(
        params["bs"],
        params["nroutedexperts"],
        params["nexpertspertoken"],
        params["nsharedexperts"],
        c["BLOCK_M"],
        c["ROWS"],
        c["TAIL_M"],
    )
    share = math.prod(record["grid"]) / capacity(params, c["BLOCK_M"])
    return share * mean, share * share * variance


def _step_bytes(record: dict) -> float:
    """Weight and activation bytes of one K step of one program."""
    c = record["constexprs"]
    weight_rows = 2 * c["BLOCK_N"] if "stage1" in record["kernel"] else c["BLOCK_N"]
    return c["BLOCK_K"] * (weight_rows * FP4_BYTES + c["ROWS"] * BF16_BYTES)


def launch_works(machine: model.Machine, records: list[dict], params: dict) -> list[model.LaunchWork]:
    works, per_stage = [], {}
    for record in records:
        mean, variance = _programs(record, params)
        slots = model.programs_per_sm(record["registers"], record["shared"], record["warps"])
        rest = record["rest"]
        if _gemm(record):
            steps, loop = _steps(record, params), record["loop"]
            work = model.ProgramWork(
                issue=rest["instructions"] + steps * loop["instructions"],
                matrix=(rest["tensor_flops"] + steps * loop["tensor_flops"]) / model.H200_MMA_FLOPS_PER_SMSP_CYCLE,
                memory=steps * machine.step_latency_cycles / max(1, record["stages"] - 1),
                warps=record["warps"],
            )
            in_flight = max(1, record["stages"] - 1) * _step_bytes(record)
            stage = 1 if "stage1" in record["kernel"] else 2
            per_stage[stage] = per_stage.get(stage, 0.0) + mean
        else:
            path = record["path"]  # one program's branch, its loops once
            work = model.ProgramWork(
                issue=path["instructions"], matrix=0.0, memory=machine.step_latency_cycles, warps=record["warps"]
            )
            in_flight = 0.0
        works.append(model.LaunchWork(mean, variance, slots, work, 0.0, in_flight))
    for record, work in zip(records, works, strict=True):
        if _gemm(record):
            stage = 1 if "stage1" in record["kernel"] else 2
            work.nbytes = stage_weight_bytes(record["kernel"], params) * work.programs / per_stage[stage]
    return works


def predict_case(machine: model.Machine, case: dict) -> tuple[list[model.LaunchTime], float]:
    """Per launch its time (without the gap), and the call's time, in seconds."""
    params = case["params"]
    times = [model.launch_time(machine, work) for work in launch_works(machine, case["launches"], params)]
    total = layer_bytes(params)
    call = model.call_seconds(machine, [t.seconds for t in times], total - weight_bytes(params), total)
    return times, call


def sweep_seconds(machine: model.Machine, row: dict, sweep_static: dict) -> float:
    """The sweep's event-timed launch: one call of one launch streaming every program's bytes."""
    static = sweep_static[str(row["warps"])]
    programs, nbytes = row["programs"], row["programs"] * row["mib_per_program"] * (1 << 20)
    slots = model.programs_per_sm(static["registers"], static["shared"], row["warps"])
    streamed = model.stream_seconds(machine, nbytes, programs, slots, row["warps"] * SWEEP_BYTES_PER_WARP)
    return model.call_seconds(machine, [streamed], 0.0, nbytes)


# ---------------------------------------------------------------- what the H200 measured


def call_us(data: tuple, tiles, reps: int) -> float:
    """The median of `reps` decode-path calls on `tiles` (None: the table's), each timed by events around it
    behind the runner's 64 GiB flush (bench.h200.calibrate's launches mode: the leaderboard's way)."""
    import statistics

    import torch

    from bench.h200.calibrate import FLUSH_SHAPE
    from moe_triton.fused_moe import fused_moe_triton

    hidden, w1, w2, w1_scale, w2_scale, *_, topk_weights, topk_ids, _config = data
    args = (hidden, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids)
    for _ in range(3):
        fused_moe_triton(*args, tiles=tiles, native=False)
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        torch.randn(FLUSH_SHAPE, device="cuda")
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fused_moe_triton(*args, tiles=tiles, native=False)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def measure(out: Path, reps: int = 15) -> dict:
    """On a CUDA GPU: per official shape, the decode path's call on the table's tile and on each alternate
    (tiles_nvidia.ALTERNATES), call_us each; written to out/alternates.json."""
    import torch
    import triton

    from bench.runner.case_args import case_shape
    from moe_triton.tiles_nvidia import ALTERNATES
    from problem.cases import BENCHMARKS, TESTS, case_name
    from reference import generate_input

    found = {}
    for params in (*TESTS, *BENCHMARKS):
        data = generate_input(**params)
        row = {}
        for tile, tiles in [("table", None), *ALTERNATES.get(case_shape(params), {}).items()]:
            row[tile] = call_us(data, tiles, reps)
            print(f"{case_name(params):>30} {tile:>12}: {row[tile]:8.1f} us", flush=True)
        found[case_name(params)] = row
    result = {
        "calls": found,
        "device": torch.cuda.get_device_name(0),
        "versions": {"torch": torch.__version__, "triton": triton.__version__},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "alternates.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def read_ncu(path: Path) -> list[dict]:
    """ncu's raw CSV page: one dict per launch, in order (the first row names the metrics, the second
    their units), numbers without thousands separators."""
    rows = [r for r in csv.reader(path.read_text().splitlines()) if r]
    start = next(i for i, r in enumerate(rows) if r[0] == "ID")
    head = rows[start]
    out = []
    for r in rows[start + 2 :]:
        row = dict(zip(head, r, strict=False))
        out.append(row)
    return out


def number(row: dict, key: str) -> float:
    return float(row[key].replace(",", ""))


def read_lb(path: Path) -> dict[str, float]:
    """The runner's leaderboard-mode mean per case name."""
    found = {}
    for line in path.read_text().splitlines():
        hit = re.search(r"\s(H\S+) pass mean ([\d.]+) us", line)
        if hit:
            found[hit[1]] = float(hit[2])
    return found


def measured(folder: Path = CALIBRATION) -> dict:
    """The calibration's figures: per case the ncu launches (in order) and the leaderboard-mode time (lb.log;
    a case it lacks, bench6 cut by a timeout: launches.json's call time the leaderboard's way)."""
    launches = json.loads((folder / "launches.json").read_text())
    lb = read_lb(folder / "lb.log")
    ncu = read_ncu(folder / "ncu.csv")
    cases, at = {}, 0
    for name, entry in launches.items():
        if not isinstance(entry, dict) or "launches" not in entry:
            continue
        count = len(entry["launches"])
        cases[name] = {
            "ncu": ncu[at : at + count],
            "stream": entry["launches"],
            "call_us": lb.get(name, entry["event_us_median"]),
            "call_source": "lb.log" if name in lb else "launches.json",
        }
        at += count
    return {
        "cases": cases,
        "sweep": json.loads((folder / "sweep.json").read_text())["rows"],
        "gap": json.loads((folder / "gap.json").read_text()),
    }


# ---------------------------------------------------------------- predicted against measured


def launch_rows(machine: model.Machine, static: dict, data: dict) -> list[dict]:
    rows = []
    for name, case in static["cases"].items():
        times, _ = predict_case(machine, case)
        for record, timed, ncu in zip(case["launches"], times, data["cases"][name]["ncu"], strict=True):
            if record["kernel"] not in ncu["Kernel Name"]:
                raise ValueError(f"{name}: static launch {record['kernel']} against ncu's {ncu['Kernel Name']}")
            mean, _ = _programs(record, case["params"])
            steps = _steps(record, case["params"]) if _gemm(record) else 0
            if _gemm(record):
                per_program = record["rest"]["instructions"] + steps * record["loop"]["instructions"]
            else:
                per_program = record["path"]["instructions"]
            seconds = number(ncu, "gpu__time_duration.sum") * 1e-9
            dram = number(ncu, "dram__bytes_read.sum") + number(ncu, "dram__bytes_write.sum")
            rows.append(
                {
                    "case": name,
                    "kernel": record["kernel"],
                    "grid": "x".join(map(str, record["grid"])),
                    "gemm": _gemm(record),
                    "programs": mean,
                    "slots": model.programs_per_sm(record["registers"], record["shared"], record["warps"]),
                    "waves_per_sm": number(ncu, "launch__waves_per_multiprocessor"),
                    "instr_static": mean * record["warps"] * per_program,
                    "instr_ncu": number(ncu, "smsp__inst_executed.sum"),
                    "dram_mb": dram / 1e6,
                    "dram_tb_s": dram / seconds / 1e12,
                    "bytes_us": timed.bytes_s * 1e6,
                    "compute_us": timed.compute_s * 1e6,
                    "predicted_us": (machine.gap_s + timed.seconds) * 1e6,
                    "measured_us": seconds * 1e6,
                }
            )
    return rows


def case_rows(machine: model.Machine, static: dict, data: dict) -> list[dict]:
    rows = []
    for name, case in static["cases"].items():
        _, call = predict_case(machine, case)
        got = data["cases"][name]
        ncu_sum = sum(number(r, "gpu__time_duration.sum") for r in got["ncu"]) * 1e-3
        rows.append(
            {
                "case": name,
                "launches": len(case["launches"]),
                "predicted_us": call * 1e6,
                "measured_us": got["call_us"],
                "source": got["call_source"],
                "ncu_sum_us": ncu_sum,
            }
        )
    return rows


def sweep_rows(machine: model.Machine, static: dict, data: dict) -> list[dict]:
    return [
        {**row, "predicted_us": sweep_seconds(machine, row, static["sweep"]) * 1e6, "measured_us": row["us"]}
        for row in data["sweep"]
    ]


def alternate_rows(machine: model.Machine, static: dict, alternates: dict) -> list[dict]:
    """Per shape and tile: the predicted call against --measure's median; `rank` marks the tile the model
    and the H200 each find fastest."""
    rows = []
    for name, case in static["cases"].items():
        measured_us = alternates["calls"].get(name, {})
        tiles = {"table": case["launches"], **case.get("alternates", {})}
        predicted = {
            tile: predict_case(machine, {"params": case["params"], "launches": launches})[1] * 1e6
            for tile, launches in tiles.items()
            if tile in measured_us
        }
        if not predicted:
            continue
        best_model, best_h200 = min(predicted, key=predicted.get), min(predicted, key=measured_us.get)
        for tile, us in predicted.items():
            rows.append(
                {
                    "case": name,
                    "tile": tile,
                    "predicted_us": us,
                    "measured_us": measured_us[tile],
                    "rank": ("model" if tile == best_model else "") + (" H200" if tile == best_h200 else ""),
                }
            )
    return rows


def _error(row: dict) -> float:
    return row["predicted_us"] / row["measured_us"] - 1


def summary(rows: list[dict]) -> str:
    errors = [abs(_error(r)) for r in rows]
    rms = math.sqrt(sum(e * e for e in errors) / len(errors))
    return f"{len(rows)} rows: worst {max(errors):.1%}, rms {rms:.1%}"


def markdown(machine: model.Machine, static: dict, data: dict, alternates: dict | None = None) -> str:
    launches, cases, sweep = (
        launch_rows(machine, static, data),
        case_rows(machine, static, data),
        sweep_rows(machine, static, data),
    )
    lines = [
        "## The cost model's H200 twin: predicted against measured",
        "",
        f"`python -m bench.h200.twin --md FILE` (static counts: triton {static['triton']}, {static['target']};"
        " measured: bench/results/h200/calibrate-2026-12-01, one H200, torch 2.11, triton 3.6). Predicted"
        " figures are the model's, never a measurement.",
        "",
        f"constants: {machine.describe()}",
        "",
        "### Per shape: the call, leaderboard mode",
        "",
        "| case | launches | predicted us | measured us | error | measured in | ncu's launches summed us |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['case']} | {r['launches']} | {r['predicted_us']:.1f} | {r['measured_us']:.1f} | {_error(r):+.1%} "
        f"| {r['source']} | {r['ncu_sum_us']:.1f} |"
        for r in cases
    ]
    lines += [
        "",
        summary(cases),
        "",
        "### Per launch (ncu: serialized, caches flushed before each launch)",
        "",
        "Predicted: the launch's gap and the larger of its bytes and compute terms (averaged over the block"
        " count's spread); ncu's duration holds the launch's own start.",
        "",
    ]
    lines += [
        "| case | kernel | grid | programs | per SM | ncu waves/SM | warp instr static / ncu (M) | DRAM MB, TB/s "
        "| bytes us | compute us | predicted us | ncu us | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['case']} | {r['kernel'].removeprefix('moe_').removesuffix('_kernel')} | {r['grid']} | "
        f"{r['programs']:.0f} | {r['slots']} | {r['waves_per_sm']:.2f} | {r['instr_static'] / 1e6:.1f} / "
        f"{r['instr_ncu'] / 1e6:.1f} | {r['dram_mb']:.0f}, {r['dram_tb_s']:.2f} | {r['bytes_us']:.1f} | "
        f"{r['compute_us']:.1f} | {r['predicted_us']:.1f} | {r['measured_us']:.1f} | {_error(r):+.1%} |"
        for r in launches
    ]
    gemm = [r for r in launches if r["gemm"]]
    lines += ["", f"GEMM launches: {summary(gemm)}; all launches: {summary(launches)}", ""]
    lines += ["### The bandwidth sweep (sweep.json: each program sums its own contiguous bytes)", ""]
    lines += [
        "| warps | MiB per program | programs | predicted us | measured us | error |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['warps']} | {r['mib_per_program']:g} | {r['programs']} | {r['predicted_us']:.1f} | "
        f"{r['measured_us']:.1f} | {_error(r):+.1%} |"
        for r in sweep
    ]
    lines += ["", summary(sweep), ""]
    if alternates:
        rows = alternate_rows(machine, static, alternates)
        lines += [
            "### Hold-out: the decode path's alternate tiles (fitted on none of them)",
            "",
            f"Measured by `python -m bench.h200.twin --measure` ({alternates.get('device', '?')}, "
            f"{alternates.get('versions', {})}): the call the leaderboard's way, median.",
            "",
            "| case | tile | predicted us | measured us | error | fastest by |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['case']} | {r['tile']} | {r['predicted_us']:.1f} | {r['measured_us']:.1f} | {_error(r):+.1%} "
            f"| {r['rank'].strip() or '-'} |"
            for r in rows
        ]
        agree = sum(1 for r in rows if r["rank"].strip() == "model H200")
        cases = len({r["case"] for r in rows})
        lines += ["", f"{summary(rows)}; the model's fastest tile is the H200's in {agree} of {cases} shapes", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.h200.twin", description=__doc__.split("\n\n")[0])
    p.add_argument("--compile", type=Path, metavar="FILE", help="compile the static records into FILE and stop")
    p.add_argument("--static", type=Path, default=STATIC, help=f"the static records (default {STATIC.name})")
    p.add_argument("--md", type=Path, help="also write the tables as Markdown to this file")
    p.add_argument("--measure", type=Path, metavar="DIR", help="on the H200: time the alternates into DIR and stop")
    p.add_argument("--alternates", type=Path, metavar="FILE", help="--measure's alternates.json: add the hold-out")
    args = p.parse_args(argv)
    if args.compile:
        args.compile.write_text(json.dumps(compile_static(), indent=1) + "\n")
        print(f"wrote {args.compile}")
        return 0
    if args.measure:
        import torch

        if not torch.cuda.is_available():
            print("python -m bench.h200.twin: error: --measure needs a CUDA GPU", file=sys.stderr)
            return 2
        measure(args.measure)
        return 0
    static, data = json.loads(args.static.read_text()), measured()
    alternates = json.loads(args.alternates.read_text()) if args.alternates else None
    text = markdown(model.H200, static, data, alternates)
    print(text)
    if args.md:
        args.md.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
