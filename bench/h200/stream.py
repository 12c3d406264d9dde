"""`python -m bench.h200.stream`: where one layer call's time goes on an NVIDIA GPU, launch by launch,
for the weight-bound benchmark shapes (by default the five whose floor is the expert weights' bytes
on the H200: E-257 bs-16, 128 and 512, E-33 I-512 bs-16 and 128; docs/spec.md section 6). The
package's custom_kernel runs as the leaderboard calls it, with MOE_SELECT=0 (the static tables).

Timeline (always): per shape, --reps calls on fresh leaderboard-style inputs (one more before them
compiles and records the plan), each after the runner's flush and under torch.profiler. From
kineto's device timestamps, per launch: start and end (from the call's first launch), duration,
the gap to the previous launch's end (negative where it started early: with programmatic dependent
launch a kernel's programs start and wait while its predecessor finishes) and its own time (its end
less the later of its start and the previous end), medians over the calls. Per call: the
leaderboard's time (events around the call), the delay before the first launch (from the end of the
flush and of its lead, harness.fitting_device), the launches' span, the bytes the routing makes it
read (bench/roofline.py: the experts hit, their weights and scales, and the activations) and that
floor at the copy bandwidth.

--ncu: then the tool runs itself under Nsight Compute (--clock-control none, --profile-from-start
off: one call per shape between cudaProfilerStart and Stop, --profile-call), collecting
ncu_summary.METRICS, and adds per launch its duration alone, DRAM bytes read and their rate (TB/s,
% of peak), L2 hit rate, achieved occupancy, warps per scheduler (and eligible ones), tensor pipe,
issue slots, the largest stalls and the bytes in flight per SM. ncu replays each launch alone,
caches flushed, so stage 2 reads a2 from DRAM too.

Bytes in flight per SM, by Little's law: needed = peak DRAM bandwidth x latency / SMs; achieved =
the launch's DRAM read rate (dram__bytes_read.sum.per_second) x latency / SMs; tiles = what its
tiles can have in flight: the weight bytes of one K step (fp4 codes and e8m0 scales) x the steps
its ring holds (STAGES slots in the Gluon kernels; num_stages - 1 weight buffers in the decode
kernels, as triton 3.6 and 3.9 pipeline them) x its programs resident per SM. ncu has no metric of
DRAM latency: --latency-ns (700 by default) is an assumption, the same in both, so achieved /
needed is the read rate's share of peak, and tiles / needed says whether the tiles could reach it.

Verdict per launch, the first rule that holds (RULES):
  gap      its own time under 5 us, or the idle gap before it at least its own time;
  tensor   the tensor pipe busy at least 60% of the cycles;
  DRAM     DRAM throughput at least 70% of peak;
  issue    issue slots at least 60% used;
  latency  none of these: warps wait (memory, barriers, fixed latencies); the in-flight figures
           say whether the tiles hold too few bytes in flight or the ring is not kept full.
Without --ncu only `gap` can be said ("?" otherwise).

--variant FIELD=V[,FIELD=V...]: every shape's static tiles with those flat fields (docs/tiles.md), put in the
static table that custom_kernel reads for the run (and for ncu's), so that a tile no row holds is measured
launch by launch as the leaderboard would run it; a variant the path refuses for a shape is a one-line error.

Writes under --out: stream.json (the measurements, after every shape), stream.md (the tables and
the rules) and, with --ncu, stream.ncu-rep, ncu_raw.csv, ncu_calls.json and ncu.log; prints the
short table last. --from DIR reports a finished run's folder again, on any machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NCU_PATHS = ("ncu", "/usr/local/cuda/bin/ncu")
LATENCY_NS = 700.0  # assumed DRAM latency under load: ncu has no metric of it
PEAK_TBS = 4.8  # H200 HBM3e (datasheet); ncu's own peak replaces it where a report gives one
GAP_US, TENSOR_BOUND, DRAM_BOUND, ISSUE_BOUND = 5.0, 60.0, 70.0, 60.0
RULES = (
    f"gap: own time under {GAP_US:g} us, or the idle gap before it at least its own time; "
    f"tensor: tensor pipe busy >= {TENSOR_BOUND:g}%; DRAM: DRAM throughput >= {DRAM_BOUND:g}% of peak; "
    f"issue: issue slots >= {ISSUE_BOUND:g}%; latency: none of these (first rule that holds)"
)
# The launches that stream expert weights, and how: weight rows a program decodes per K step, and the
# K steps its ring holds (the decode kernels' weight buffers are num_stages - 1 in their TTGIR,
# triton 3.6 and 3.9; the Gluon kernels' ring has STAGES slots; a warpgroup holds 64 weight rows).
WEIGHT_STREAMS = {
    "moe_stage1_kernel": (lambda c: 2 * c["BLOCK_N"], lambda c: c["num_stages"] - 1),
    "moe_stage2_kernel": (lambda c: c["BLOCK_N"], lambda c: c["num_stages"] - 1),
    "moe_gluon_stage1_kernel": (lambda c: 64 * c["NUM_WG"], lambda c: c["STAGES"]),
    "moe_gluon_stage2_kernel": (lambda c: 64 * c["NUM_WG"], lambda c: c["STAGES"]),
}


def short(kernel: str) -> str:
    return kernel.removeprefix("moe_").removesuffix("_kernel")


# ------------------------------------------------------------------------------------ timeline


def call_launches(events: list, first: str) -> tuple[list[dict], float | None]:
    """One profiled call's launches from its device events ((name, start us, end us), the flush before
    it included): per launch start and end from the first launch's start, duration, gap to the previous
    end (None for the first) and own time; and the delay from the flush's end to the first launch."""
    events = sorted(events, key=lambda e: e[1])
    at = next((i for i, e in enumerate(events) if e[0] == first), None)
    if at is None:
        raise ValueError(f"no {first} among the call's device events")
    before, call = events[:at], events[at:]
    t0 = call[0][1]
    rows, prev_end = [], None
    for name, start, end in call:
        gap = None if prev_end is None else start - prev_end
        own = max(0.0, end - (start if prev_end is None else max(start, prev_end)))
        rows.append({"kernel": name, "start": start - t0, "end": end - t0, "us": end - start, "gap": gap, "own": own})
        prev_end = end if prev_end is None else max(prev_end, end)
    return rows, (t0 - max(e[2] for e in before)) if before else None


def median_launches(calls: list[list[dict]]) -> list[dict]:
    """Per launch the median of each figure over the calls, which must launch the same kernels."""
    orders = {tuple(r["kernel"] for r in call) for call in calls}
    if len(orders) != 1:
        raise ValueError(f"the calls launched different kernels: {sorted(orders)}")
    rows = []
    for j, name in enumerate(orders.pop()):
        row: dict = {"kernel": name}
        for key in ("start", "end", "us", "gap", "own"):
            values = [call[j][key] for call in calls if call[j][key] is not None]
            row[key] = statistics.median(values) if values else None
        rows.append(row)
    return rows


def call_summary(calls: list[dict]) -> dict:
    """Medians over the calls of the leaderboard's time, the first launch's delay, the span and the idle gaps
    (the positive gaps between launches)."""

    def med(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    return {
        "event_us": med([c["event_us"] for c in calls]),
        "lead_us": med([c["lead_us"] for c in calls]),
        "span_us": med([max(r["end"] for r in c["launches"]) for c in calls]),
        "idle_us": med([sum(max(0.0, r["gap"] or 0.0) for r in c["launches"]) for c in calls]),
        "calls": len(calls),
    }


# ------------------------------------------------------------------------------- bytes in flight


def programs_per_sm(regs: int, shared_bytes: int, warps: int) -> int:
    """Programs an sm_90 SM holds: registers in units of 8 a thread on each of its four schedulers
    (16384 each), 228 KiB of shared memory with 1 KiB reserved a program, 64 warps, 32 programs (the
    occupancy limits ncu reports)."""
    by_regs = 4 * (16384 // (-(-regs // 8) * 8 * 32)) // warps
    return min(by_regs, 233472 // (shared_bytes + 1024), 64 // warps, 32)


def tile_stream(kernel: str, constexprs: dict) -> dict | None:
    """The weight bytes (codes and scales) one K step of a program loads and the steps its ring
    holds, for the launches that stream expert weights; None for the others (prep, route)."""
    if kernel not in WEIGHT_STREAMS:
        return None
    rows, slots = (f(constexprs) for f in WEIGHT_STREAMS[kernel])
    k = constexprs["BLOCK_K"]
    return {"step_bytes": rows * (k // 2 + k // 32), "slots": max(1, slots)}


def in_flight(launch: dict, latency_ns: float, peak_tbs: float, sms: int) -> dict:
    """kB per SM: needed (peak x latency / SMs), achieved (the DRAM read rate x latency / SMs; with
    ncu's figures) and tiles (step bytes x slots x programs resident: the fewer of the occupancy
    limit and the grid over the SMs); each None where its inputs are missing."""
    per_kb = latency_ns * 1e-9 / sms / 1e3
    got = {"needed_kb": peak_tbs * 1e12 * per_kb, "achieved_kb": None, "tiles_kb": None}
    ncu, plan = launch.get("ncu"), launch.get("plan") or {}
    if ncu:
        got["achieved_kb"] = ncu["dram_read_tbs"] * 1e12 * per_kb
    stream = tile_stream(plan.get("kernel", ""), plan.get("constexprs", {}))
    per_sm = ncu["per_sm"] if ncu else plan.get("per_sm")
    if stream and per_sm:
        programs = ncu["programs"] if ncu else plan["grid"][0] * plan["grid"][1]
        got["tiles_kb"] = stream["step_bytes"] * stream["slots"] * min(per_sm, programs / sms) / 1e3
    return got


def verdict(launch: dict) -> tuple[str, str]:
    """(word, why) by RULES, from the launch's timeline figures, its ncu row and in-flight figures."""
    own, gap = launch.get("own"), launch.get("gap")
    if own is not None and (own < GAP_US or (gap is not None and gap >= own)):
        return "gap", f"own {own:.1f} us" + ("" if gap is None else f", gap before {gap:.1f} us")
    ncu = launch.get("ncu")
    if not ncu:
        return "?", "no counters (run with --ncu)"
    if ncu["tensor_pipe"] >= TENSOR_BOUND:
        return "tensor", f"tensor pipe {ncu['tensor_pipe']:.0f}% >= {TENSOR_BOUND:g}"
    if ncu["dram"] >= DRAM_BOUND:
        return "DRAM", f"DRAM {ncu['dram']:.0f}% >= {DRAM_BOUND:g}"
    if ncu["issue"] >= ISSUE_BOUND:
        return "issue", f"issue slots {ncu['issue']:.0f}% >= {ISSUE_BOUND:g}"
    why = f"tensor {ncu['tensor_pipe']:.0f}%, DRAM {ncu['dram']:.0f}%, issue slots {ncu['issue']:.0f}%"
    tiles, needed = launch.get("tiles_kb"), launch.get("needed_kb")
    if tiles is not None:
        cause = "too few bytes in flight" if tiles < needed else "the ring is not kept full"
        why += f"; tiles hold {tiles:.0f} kB/SM against {needed:.0f} needed: {cause}"
    return "latency", why


# -------------------------------------------------------------------------------------- report


def split_ncu(rows: list[dict], calls: list[dict]) -> dict:
    """The ncu rows of each profiled shape, in launch order ({shape: rows or its error}), from the
    launch counts that the profiled process wrote (ncu_calls.json)."""
    out, at = {}, 0
    for call in calls:
        if "error" in call:
            out[call["shape"]] = call["error"]
            continue
        out[call["shape"]] = rows[at : at + call["launches"]]
        at += call["launches"]
    if at != len(rows):
        raise ValueError(f"ncu_raw.csv holds {len(rows)} launches, ncu_calls.json counts {at}")
    return out


def lay_over(timeline: list[dict], extra: list[dict], key: str, what: str) -> list[dict]:
    """Each timeline launch with the extra row (plan launch or ncu row) of the same kernel, in order,
    under `key`; a launch the extra rows lack (a copy, a memset) goes without. A ValueError where the
    extra rows do not follow the timeline."""
    out, j = [], 0
    for row in timeline:
        if j < len(extra) and short(extra[j]["kernel"]) == short(row["kernel"]):
            row = {**row, key: extra[j]}
            j += 1
        out.append(row)
    if j != len(extra):
        names = ", ".join(short(r["kernel"]) for r in extra)
        raise ValueError(f"{what}'s launches ({names}) do not follow the timeline's")
    return out


def analyse(shape: dict, ncu_rows, latency_ns: float, peak_tbs: float, sms: int) -> list[dict]:
    """A shape's launches: the timeline's medians with the plan's launch and ncu's row laid over them,
    the bytes in flight and the verdict."""
    launches = lay_over(median_launches([c["launches"] for c in shape["calls"]]), shape["plan"], "plan", "the plan")
    if isinstance(ncu_rows, list):
        launches = lay_over(launches, ncu_rows, "ncu", "ncu")
    for launch in launches:
        launch.update(in_flight(launch, latency_ns, peak_tbs, sms))
        launch["verdict"], launch["why"] = verdict(launch)
    return launches


def _num(value, digits: int = 1) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _flight(launch: dict) -> str:
    cells = (launch["tiles_kb"], launch["achieved_kb"], launch["needed_kb"])
    return " / ".join("-" if v is None else f"{v:.0f}" for v in cells)


CALL_HEAD = (
    "| shape | call us | span us | lead us | idle gaps us | launches | must read MB | floor us | x floor | "
    "DRAM read MB (ncu) | ncu |"
)
LAUNCH_HEAD = (
    "| shape | launch | grid | /SM | start us | end us | own us | us | gap us | ncu us | DRAM % | read % | read MB | "
    "read TB/s | "
    "L2 hit % | occupancy % | warps/sched (eligible) | in flight kB/SM: tiles / achieved / needed | tensor % | "
    "issue % | largest stalls | verdict | why |"
)
SHORT_HEAD = (
    "| shape | launch | own us | gap us | DRAM % | read TB/s | in flight kB/SM: tiles / achieved / needed | "
    "tensor % | issue % | verdict |"
)


def _rule(head: str) -> str:
    return "|---" * head.count(" | ") + "|---|"


def call_row(name: str, shape: dict, launches: list[dict], ncu_rows) -> str:
    """The per-call table's row of one shape."""
    summary, floor_us = call_summary(shape["calls"]), shape["floor_us"]
    read = sum(r["ncu"]["dram_read_mb"] for r in launches if "ncu" in r) if isinstance(ncu_rows, list) else None
    state = ncu_rows if isinstance(ncu_rows, str) else ("profiled" if ncu_rows else "not run")
    return (
        f"| {name} | {_num(summary['event_us'])} | {_num(summary['span_us'])} | {_num(summary['lead_us'])} | "
        f"{_num(summary['idle_us'])} | {len(launches)} | {shape['bytes'] / 1e6:.1f} | {floor_us:.1f} | "
        f"{summary['event_us'] / floor_us:.2f} | {_num(read)} | {state} |"
    )


def launch_lines(name: str, launch: dict) -> tuple[str, str]:
    """(the full table's row, the short table's row) of one launch."""
    n, plan = launch.get("ncu") or {}, launch.get("plan") or {}
    grid = n.get("grid") or "x".join(str(g) for g in plan.get("grid", [])[:2])
    warps = f"{n['warps_sched']:.2f} ({n['eligible']:.2f})" if n else ""
    stalls = ", ".join([x for x in n["stalls"].split(", ") if not x.startswith("selected ")][:3]) if n else ""
    kernel, flight = short(launch["kernel"]), _flight(launch)
    full = (
        f"| {name} | {kernel} | {grid} | {n.get('per_sm', plan.get('per_sm', ''))} | {_num(launch['start'])} | "
        f"{_num(launch['end'])} | {_num(launch['own'])} | "
        f"{_num(launch['us'])} | {_num(launch['gap'])} | {_num(n.get('us'))} | {_num(n.get('dram'))} | "
        f"{_num(n.get('dram_read_pct'))} | {_num(n.get('dram_read_mb'))} | {_num(n.get('dram_read_tbs'), 2)} | "
        f"{_num(n.get('l2_hit'))} | {_num(n.get('occupancy'))} | {warps} | {flight} | {_num(n.get('tensor_pipe'))} | "
        f"{_num(n.get('issue'))} | {stalls} | {launch['verdict']} | {launch['why']} |"
    )
    brief = (
        f"| {name.split('-', 1)[1]} | {kernel} | {_num(launch['own'])} | {_num(launch['gap'])} | "
        f"{_num(n.get('dram'))} | {_num(n.get('dram_read_tbs'), 2)} | {flight} | {_num(n.get('tensor_pipe'))} | "
        f"{_num(n.get('issue'))} | {launch['verdict']} |"
    )
    return full, brief


def tables(results: dict, ncu: dict, latency_ns: float, peak_tbs: float) -> tuple[list[str], list[str]]:
    """(the full report's lines, the short tables printed last)."""
    meta = results["meta"]
    calls, full, brief = (
        [CALL_HEAD, _rule(CALL_HEAD)],
        [LAUNCH_HEAD, _rule(LAUNCH_HEAD)],
        [SHORT_HEAD, _rule(SHORT_HEAD)],
    )
    for name, shape in results["shapes"].items():
        ncu_rows = ncu.get(name)  # this shape's ncu rows, the error of its profiled call, or None
        try:
            if "error" in shape:
                raise ValueError(shape["error"])
            launches = analyse(shape, ncu_rows, latency_ns, peak_tbs, meta["sms"])
        except ValueError as error:
            calls.append(f"| {name} | error: {error} |" + " |" * (CALL_HEAD.count(" | ") - 1))
            continue
        calls.append(call_row(name, shape, launches, ncu_rows))
        for launch in launches:
            row, short_row = launch_lines(name, launch)
            full.append(row)
            brief.append(short_row)
    head = [
        f"# One call, launch by launch: {meta.get('device', '?')}, torch {meta.get('torch', '?')}, "
        f"triton {meta.get('triton', '?')}, PDL {meta.get('pdl', '?')}",
        "",
        "Timeline: medians of the calls (torch.profiler's device timestamps, the runner's flush before each); "
        f"ncu: {ncu.get('status', 'not run')}. DRAM %: read and write against peak (the verdict's); read: "
        "dram__bytes_read. In flight: Little's law at "
        f"{latency_ns:g} ns (assumed) and {peak_tbs:.2f} TB/s peak over {meta['sms']} SMs. Floor: the bytes the "
        f"routing makes the call read at {meta.get('bandwidth_tbs', 0):.2f} TB/s (bench/roofline.py). "
        f"Verdict, {RULES}.",
        "",
    ]
    report = [*head, "## Per call", "", *calls, "", "## Per launch", "", *full]
    if meta.get("ncu_command"):
        report += ["", "ncu ran as: `" + " ".join(meta["ncu_command"]) + "`"]
    return [*report, ""], ["", *calls, "", *brief]


def read_ncu(folder: Path) -> dict:
    """{shape: ncu rows or error, "status": ...} from a run's ncu_raw.csv and ncu_calls.json."""
    from bench.h200 import ncu_summary

    results = json.loads((folder / "stream.json").read_text())
    status = results.get("ncu", {}).get("status", "not run")
    raw, calls = folder / "ncu_raw.csv", folder / "ncu_calls.json"
    if not (raw.is_file() and calls.is_file()):
        return {"status": status}
    try:
        frame = ncu_summary.read_raw(raw)
        rows = [ncu_summary.launch_row(row) | {"kernel": row["Kernel Name"]} for _, row in frame.iterrows()]
        got = split_ncu(rows, json.loads(calls.read_text()))
    except (ValueError, KeyError) as error:  # the timeline is still worth its report
        return {"status": f"{status}, not used: {error}"}
    return got | {"status": status}


def peak_from(ncu: dict, default: float) -> float:
    """ncu's own DRAM peak (TB/s: the read rate over its share of peak) where a launch reads enough to
    say, else the default."""
    rows = [r for v in ncu.values() if isinstance(v, list) for r in v if r["dram_read_pct"] > 5]
    return max((r["dram_read_tbs"] * 100 / r["dram_read_pct"] for r in rows), default=default)


def report(folder: Path, out: Path | None, latency_ns: float, peak_tbs: float | None) -> list[str]:
    """The tables of the run in folder; stream.md written under out (when given); the short table."""
    results = json.loads((folder / "stream.json").read_text())
    ncu = read_ncu(folder)
    peak = peak_tbs or peak_from(ncu, PEAK_TBS)
    full, brief = tables(results, ncu, latency_ns, peak)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "stream.md").write_text("\n".join(full))
    return brief


# ------------------------------------------------------------------------------- on the GPU


def plan_launches() -> list[dict]:
    """The launches of the plan last used (moe_triton.plan): kernel, grid, constexprs and launch
    options, registers, shared memory, warps and programs per SM."""
    from moe_triton import plan as plans

    plan = plans.latest_plan()
    rows = []
    for launch in plan.launches:
        compiled = launch.compiled
        meta = getattr(compiled, "metadata", None)
        regs, shared, warps = (
            getattr(compiled, "n_regs", None),
            getattr(meta, "shared", None),
            getattr(meta, "num_warps", None),
        )
        row = {
            "kernel": launch.fn.fn.__name__,
            "grid": list(launch.grid),
            "constexprs": {k: v for k, v in launch.kwargs.items() if isinstance(v, (bool, int, str))},
            "regs": regs,
            "shared": shared,
            "warps": warps,
        }
        if None not in (regs, shared, warps):
            row["per_sm"] = programs_per_sm(regs, shared, warps)
        rows.append(row)
    return rows


def measure_shape(case: dict, reps: int, device, budget_s: float) -> dict:
    """The timeline of one shape: the plan, then per call its launches, lead and time, and the bytes
    its routing makes it read."""
    import torch
    from torch.autograd import DeviceType

    from bench.h200.harness import leaderboard_input
    from bench.roofline import traffic
    from bench.runner.evaluate import _kineto_lines_dropped
    from submission import custom_kernel

    def profiled(data) -> tuple[list, float]:
        device.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with _kineto_lines_dropped(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            device.flush()
            start.record()
            custom_kernel(data)
            end.record()
            device.synchronize()
        events = [
            (e.name, e.time_range.start, e.time_range.end) for e in prof.events() if e.device_type == DeviceType.CUDA
        ]
        return events, start.elapsed_time(end) * 1e3

    data = leaderboard_input(case, 0)
    custom_kernel(data)  # compiles and records the plan
    profiled(data)  # the profiler's own first start, untimed
    plan = plan_launches()
    calls, moved = [], []
    started = time.perf_counter()
    for i in range(1, reps + 1):
        if i > 2 and time.perf_counter() - started > budget_s:
            break
        data = leaderboard_input(case, i)
        moved.append(traffic(data)["bytes"])
        events, event_us = profiled(data)
        launches, lead = call_launches(events, plan[0]["kernel"])
        calls.append({"event_us": event_us, "lead_us": lead, "launches": launches})
        del data
    return {"case": case, "plan": plan, "calls": calls, "bytes": statistics.median(moved)}


def profile_calls(cases: list, out: Path) -> None:
    """Under ncu (--profile-from-start off): per shape one call, after the first that compiles and
    records the plan, between cudaProfilerStart and Stop; each shape's launch count (or its error) into
    out/ncu_calls.json, which splits the report's rows by shape."""
    import torch

    from bench.h200.harness import leaderboard_input
    from bench.h200.rivals import _failure
    from submission import custom_kernel

    done = []
    for name, case in cases:
        try:
            data = leaderboard_input(case, 0)
            custom_kernel(data)
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            custom_kernel(data)
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            done.append({"shape": name, "launches": len(plan_launches())})
        except Exception as exc:  # reported in the table; the other shapes still run
            done.append({"shape": name, "error": _failure(exc)})
        (out / "ncu_calls.json").write_text(json.dumps(done, indent=1))
        print(name, done[-1], flush=True)


def find_ncu() -> str | None:
    return next((found for name in NCU_PATHS if (found := shutil.which(name))), None)


def ncu_command(ncu: str, out: Path, names: list[str], pdl: str, variant: str | None = None) -> list[str]:
    from bench.h200.ncu_summary import METRICS

    return [
        *(ncu, "--profile-from-start", "off", "--clock-control", "none", "--metrics", ",".join(METRICS)),
        *("--force-overwrite", "--export", str(out / "stream")),
        *(sys.executable, "-m", "bench.h200.stream", "--profile-call", "--pdl", pdl),
        *(("--variant", variant) if variant else ()),
        *("--out", str(out), "--shapes", *names),
    ]


def run_ncu(command: list[str], out: Path, timeout_s: float) -> str:
    """Run the profiled process under ncu (its own process group, killed whole past timeout_s; output
    in out/ncu.log), then export the report's raw page to out/ncu_raw.csv: "collected" or why not."""
    env = {
        **os.environ,
        "MOE_SELECT": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
    }
    with (out / "ncu.log").open("w") as log:
        proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return f"ncu ran past {timeout_s:g} s and was stopped (ncu.log)"
    if code:
        return f"ncu exited with status {code} (ncu.log)"
    export = subprocess.run(
        [command[0], "--import", str(out / "stream.ncu-rep"), "--csv", "--page", "raw"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if export.returncode:
        return f"ncu --import exited with status {export.returncode}: {export.stderr.strip()[-200:]}"
    (out / "ncu_raw.csv").write_text(export.stdout)
    return "collected"


@contextlib.contextmanager
def static_choice(pdl: str):
    """The static tables (MOE_SELECT=0) and programmatic dependent launch as asked while the tool
    measures, both as they were afterwards."""
    from moe_triton import target

    select = os.environ.get("MOE_SELECT")
    os.environ["MOE_SELECT"] = "0"
    try:
        with target.pdl_set(pdl == "on"):
            yield
    finally:
        if select is None:
            del os.environ["MOE_SELECT"]
        else:
            os.environ["MOE_SELECT"] = select


def variant_tiles(cases: list, changes: dict, device) -> dict:
    """Shape -> its static tiles with changes, for the static table this device reads; a ValueError naming the
    shape where the path refuses them."""
    from bench.h200.ab import checked_variant
    from bench.runner.case_args import case_shape
    from moe_triton import target
    from moe_triton.tiles_nvidia import static_tiles

    out = {}
    for name, case in cases:
        shape = case_shape(case)
        try:
            out[shape] = checked_variant(shape, static_tiles(shape, target.gluon_kernels(device)), changes, device)
        except ValueError as error:
            raise ValueError(f"{name}: {error}") from None
    return out


@contextlib.contextmanager
def table_rows(rows: dict, gluon: bool):
    """rows (shape -> tiles) in the static table that static_tiles reads (GLUON_TUNED with gluon, else TUNED)
    while the tool measures; the table as it was afterwards."""
    from moe_triton import tiles_nvidia

    table = tiles_nvidia.GLUON_TUNED if gluon else tiles_nvidia.TUNED
    before = {shape: table.get(shape) for shape in rows}
    table.update(rows)
    try:
        yield
    finally:
        for shape, tiles in before.items():
            if tiles is None:
                del table[shape]
            else:
                table[shape] = tiles


def measure(cases: list, args, out: Path, ncu: str | None) -> None:
    """Every shape's timeline into out/stream.json (rewritten after each), then ncu's run."""
    import torch
    import triton

    from bench.h200.harness import fitting_device
    from bench.roofline import floor_ns, load_or_measure, parse_ceilings

    ceilings = parse_ceilings(args.ceilings) if args.ceilings else load_or_measure("cuda")
    device = fitting_device()
    results = {
        "meta": {
            "device": torch.cuda.get_device_name(0),
            "sms": torch.cuda.get_device_properties(0).multi_processor_count,
            "torch": torch.__version__,
            "triton": triton.__version__,
            "pdl": args.pdl,
            "bandwidth_tbs": ceilings.bandwidth / 1e12,
            "flush": device.describe(),
            "argv": sys.argv[1:],
            "variant": args.variant,
        },
        "shapes": {},
    }
    for name, case in cases:
        try:
            shape = measure_shape(case, args.reps, device, args.budget_s)
            shape["floor_us"] = floor_ns(shape["bytes"], 0.0, ceilings)[0] / 1e3
        except Exception as exc:  # reported in the table; the other shapes still run
            from bench.h200.rivals import _failure

            shape = {"error": _failure(exc)}
        results["shapes"][name] = shape
        print(name, "error: " + shape["error"] if "error" in shape else f"{len(shape['calls'])} calls", flush=True)
        (out / "stream.json").write_text(json.dumps(results, indent=1, default=str))
    if ncu:
        names = [n for n, s in results["shapes"].items() if "error" not in s]
        command = ncu_command(ncu, out, names, args.pdl, args.variant)
        results["meta"]["ncu_command"] = command
        results["ncu"] = {"status": run_ncu(command, out, args.ncu_timeout_s) if names else "no shape to profile"}
        print("ncu:", results["ncu"]["status"], flush=True)
        (out / "stream.json").write_text(json.dumps(results, indent=1, default=str))


def main(argv: list[str] | None = None) -> int:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.runner.case_args import UsageError
    from bench.runner.preflight import check_out_dir, doc_parser, positive_float, positive_int, shown

    parser = doc_parser("python -m bench.h200.stream", __doc__)
    parser.add_argument(
        "--shapes", nargs="*", default=[], help="name substrings or indices of benchmark shapes (default: five)"
    )
    parser.add_argument("--reps", type=positive_int, default=10, help="profiled calls per shape (default 10)")
    parser.add_argument("--budget-s", type=positive_float, default=30.0, help="per shape: no new call after this")
    parser.add_argument("--pdl", choices=("on", "off"), default="on", help="programmatic dependent launch (on: as run)")
    parser.add_argument("--ncu", action="store_true", help="also run this tool under Nsight Compute for the counters")
    parser.add_argument("--ncu-timeout-s", type=positive_float, default=240.0, help="stop ncu's run after this")
    parser.add_argument("--latency-ns", type=positive_float, default=LATENCY_NS, help="DRAM latency for Little's law")
    parser.add_argument("--peak-tbs", type=positive_float, help="DRAM peak (default: ncu's, else 4.8, the H200's)")
    parser.add_argument("--ceilings", help="TBPS,TFLOPS for the floor (default: measured once, bench/roofline.py)")
    parser.add_argument("--out", help="folder for every file (default: $OUT, else bench/out/stream)")
    parser.add_argument("--from", dest="source", type=Path, help="report a finished run's folder again (no GPU)")
    parser.add_argument("--profile-call", action="store_true", help="one call per shape for ncu (what --ncu runs)")
    parser.add_argument("--variant", help="FIELD=V[,FIELD=V...]: the static tiles with those fields")
    args = parser.parse_args(argv)

    if args.profile_call and args.ncu:
        return parser.fail("--profile-call: is what runs under ncu; it takes no --ncu")
    changes = {}
    if args.variant is not None:
        from bench.h200.ab import parse_variant

        try:
            changes = parse_variant(args.variant)[1]
        except ValueError as error:
            return parser.fail(str(error))
    if args.source is not None:
        if args.ncu or args.profile_call or changes:
            return parser.fail("--from: reports a finished run; it takes neither --ncu, --profile-call nor --variant")
        if not (args.source / "stream.json").is_file():
            return parser.fail(f"--from {shown(args.source)}: no stream.json there")
        try:
            if args.out:
                check_out_dir(args.out)
            brief = report(args.source, Path(args.out) if args.out else None, args.latency_ns, args.peak_tbs)
        except (UsageError, ValueError, KeyError) as error:
            return parser.fail(f"--from {shown(args.source)}: {error}")
        print("\n".join(brief))
        return 0

    from bench.h200.harness import official_cases
    from problem.cases import BENCHMARKS, case_name

    if args.shapes:
        benchmarks = {case_name(c) for c in BENCHMARKS}
        cases = [(n, c) for n, c in official_cases(args.shapes) if n in benchmarks]
    else:
        cases = [(case_name(c), c) for c in BENCHMARKS[:5]]  # the weight-bound five (docs/spec.md section 6)
    if not cases:
        return parser.fail(f"--shapes {' '.join(args.shapes)}: no benchmark shape matches")
    if args.ceilings:
        from bench.roofline import parse_ceilings

        try:
            parse_ceilings(args.ceilings)
        except ValueError as error:
            return parser.fail(str(error))
    import torch

    if not torch.cuda.is_available() or torch.version.hip is not None:
        return parser.fail("no CUDA GPU here; it measures on an NVIDIA GPU (--from DIR reports a finished run)")
    ncu = find_ncu() if args.ncu else None
    if args.ncu and ncu is None:
        return parser.fail(f"--ncu: no Nsight Compute here ({' or '.join(NCU_PATHS)})")
    out = Path(args.out or os.environ.get("OUT") or ROOT / "bench" / "out" / "stream")
    try:
        check_out_dir(str(out))
    except UsageError as error:
        return parser.fail(str(error))
    from moe_triton import target

    device = torch.device("cuda")
    try:
        rows = variant_tiles(cases, changes, device) if changes else {}
    except ValueError as error:
        return parser.fail(f"--variant {args.variant}: {error}")
    with static_choice(args.pdl), table_rows(rows, target.gluon_kernels(device)):
        if args.profile_call:
            profile_calls(cases, out)
            return 0
        measure(cases, args, out, ncu)
    brief = report(out, out, args.latency_ns, args.peak_tbs)
    print(f"wrote {shown(out / 'stream.json')} and stream.md")
    print("\n".join(brief))
    return 0


if __name__ == "__main__":
    sys.exit(main())
