"""What the H200 tools (gluon_check, rivals, stream) share: the official shapes, leaderboard-style
inputs (generate_input with seed + 13 i), the tolerance's excess, poisoned scratch, the flush that fits
the GPU, one call timed the leaderboard's way, one call between cudaProfilerStart and Stop, the
MODE.json / MODE.md they write, and the command line of the probes that check a kernel, then time it.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 0.05  # the leaderboard's atol and rtol (SPEC 4)
SEED_STEP = 13


def official_cases(selectors: list[str]) -> list[tuple[str, dict]]:
    """(name, case) of the official shapes, TESTS then BENCHMARKS, those matching any selector
    (a substring of the name, or an index into that list); all without selectors."""
    from problem.cases import BENCHMARKS, TESTS, case_name

    cases = [(case_name(c), c) for c in (*TESTS, *BENCHMARKS)]
    if not selectors:
        return cases
    return [
        (n, c) for i, (n, c) in enumerate(cases) if any(s == str(i) or (not s.isdigit() and s in n) for s in selectors)
    ]


def table_tile(case: dict):
    """The decode table's tile of a case."""
    from bench.runner.case_args import case_shape
    from moe_triton.tiles_nvidia import tile_config

    return tile_config(case_shape(case))


def run_tiles(data, tiles):
    from moe_triton.fused_moe import fused_moe_triton

    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    return fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, tiles=tiles, native=False)


def excess(out, ref, atol: float = TOLERANCE) -> float:
    """max |out - ref| / (atol + rtol |ref|) (the check passes below 1); infinite where NaN or Inf
    positions differ or out has the wrong shape."""
    import torch

    if out.shape != ref.shape:
        return math.inf
    got, want = out.float(), ref.float()
    mismatch = (torch.isnan(got) ^ torch.isnan(want)) | (torch.isposinf(got) ^ torch.isposinf(want))
    mismatch |= torch.isneginf(got) ^ torch.isneginf(want)
    if bool(mismatch.any()):
        return math.inf
    finite = torch.isfinite(want)
    ratio = (got - want).abs() / (atol + TOLERANCE * want.abs())
    return float(ratio[finite].max()) if bool(finite.any()) else 0.0


def poison(out_shape) -> None:
    """Every scratch buffer of the pool filled with 0xFF bytes (NaN in bf16, 255 in bytes, -1 in
    ints), and a NaN tensor of the output's size freed just before the call, whose memory the
    caching allocator hands to the next output of that size: an element a kernel fails to write,
    or scratch it reads before writing, shows."""
    import torch

    import buffers

    for buf in buffers.pooled():
        buf.view(torch.uint8).fill_(0xFF)
    bait = torch.full(out_shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    del bait


def leaderboard_input(case: dict, i: int):
    from reference import generate_input

    return generate_input(**{**case, "seed": case["seed"] + SEED_STEP * i})


# GPU work queued after the small flush, so that the host has queued the call's launches when the events start,
# as behind the official flush: without it the package's host time (75-270 us a call) showed in the events
# (H100, 2026-12-06, E-257 bs-16: 192.6 us against 149.7 with a 1 ms lead; the leaderboard job: 145.5).
HOST_LEAD_S = 1e-3


def fitting_device():
    """The runner's timing Device on this GPU with the official flush (62.5 GiB in one block) where it
    fits, else twice the L2 followed by HOST_LEAD_S of GPU work: on an 80 GB H100 a later shape's
    inputs and scratch found no room beside the official flush's cached block (rivals and stream,
    2026-12-06), and twice the L2 evicts it too."""
    import torch

    from bench.runner.timing import Device

    if torch.cuda.get_device_properties(0).total_memory > (100 << 30):
        return Device("cuda", "official")
    return l2_device()


def l2_device():
    """The runner's timing Device on this GPU with twice the L2 as its flush, followed by HOST_LEAD_S of GPU work."""
    from bench.runner.timing import Device

    return Device("cuda", "l2", lead_s=HOST_LEAD_S)


def timed(device, fn) -> tuple[object, float]:
    """(output, us) of one call the leaderboard's way: synchronize, flush, events around the call."""
    device.synchronize()
    device.flush()
    timer = device.timer()
    timer.start()
    out = fn()
    timer.stop()
    device.synchronize()
    return out, timer.elapsed_ns() / 1e3


def time_candidates(case: dict, candidates: dict, reps: int, device) -> dict:
    """Median us of each candidate (name -> tiles) over reps leaderboard-style inputs (the same
    inputs for all, each call after its own flush), every output checked; the first input (i = 0)
    warms up."""
    from reference import ref_kernel

    times = {k: [] for k in candidates}
    worst = dict.fromkeys(candidates, 0.0)
    for i in range(reps + 1):
        data = leaderboard_input(case, i)
        ref = ref_kernel(data)
        for label, tiles in candidates.items():
            out, us = timed(device, lambda t=tiles, d=data: run_tiles(d, t))
            worst[label] = max(worst[label], excess(out, ref))
            if i:
                times[label].append(us)
        del data, ref
    return {k: {"median_us": statistics.median(v), "runs": len(v), "worst": worst[k]} for k, v in times.items()}


def profiled_call(data, tiles) -> None:
    """One layer call with these tiles between cudaProfilerStart and Stop (what Nsight Compute
    with --profile-from-start off profiles), after one outside them that compiles and records."""
    import torch

    run_tiles(data, tiles)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    run_tiles(data, tiles)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def write_results(out: Path, mode: str, results: dict, lines: list[str], started: float, argv) -> None:
    """MODE.json (the results and the run's device, versions, wall time and arguments) and MODE.md
    (that line and the table) under out; the table printed last."""
    import torch
    import triton

    from bench.runner.preflight import shown

    meta = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "wall_s": round(time.perf_counter() - started, 1),
        "argv": sys.argv[1:] if argv is None else argv,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{mode}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1, default=str))
    (out / f"{mode}.md").write_text("\n".join([f"{mode}: {meta}", "", *lines]) + "\n")
    print("\n".join(lines))
    print(f"wrote {shown(out / mode)}.json and .md ({meta['wall_s']} s)")


def checked_probe_main(name: str, doc: str, argv, reps: int, reps_help: str, purpose: str, run) -> int:
    """The command line of a probe that checks its kernel against a torch model on an NVIDIA GPU, then times it
    (decode_rate, row_reads): --reps and --out, a one-line refusal without such a GPU; run(reps, device) gives
    (checked, what was checked, rows, table lines); NAME.json and .md under --out; 1 where the check failed."""
    from bench.runner.preflight import doc_parser

    parser = doc_parser(f"python -m bench.h200.{name}", doc)
    parser.add_argument("--reps", type=int, default=reps, help=reps_help)
    parser.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "out")))
    args = parser.parse_args(argv)
    if args.reps < 1:
        return parser.fail(f"--reps {args.reps}: must be at least 1")
    import torch

    if not torch.cuda.is_available() or torch.version.hip:
        return parser.fail(f"no NVIDIA GPU here; {name} {purpose} on one")
    started = time.perf_counter()
    checked, what, rows, table = run(args.reps, torch.device("cuda"))
    lines = [f"{what} against the torch model: {'equal' if checked else 'DIFFERENT'}", "", *table]
    write_results(Path(args.out), name, {"checked": checked, "rows": rows}, lines, started, argv)
    return 0 if checked else 1
