"""`python -m bench.h200.fp8_check MODE`: the fp8 path (moe_triton/kernels/fp8.py) against the decode path on
an NVIDIA GPU (issue 25). Every mode writes MODE.json and MODE.md under --out ($OUT by default) and
prints a short table last; each invocation is meant to fit one 9-minute device call (split it
with --shapes, --seeds, --budget-s).

  check  correctness over leaderboard-style seeds (generate_input with seed + 13 i) per official
         shape (problem/cases.py TESTS + BENCHMARKS): the worst max |out - ref| / (atol + rtol |ref|)
         of the fp8 table tile and of the decode table tile against reference.ref_kernel, with
         every scratch buffer and the output's memory poisoned before each call; then crafted
         inputs that drive the fp8 path's fallback (activations and weights outside the window,
         a NaN).
  time   the official benchmarks timed the leaderboard's way (a fresh leaderboard-style input per
         repetition, the runner's 64 GiB randn flush before each call, CUDA events around one
         call, the median): the fp8 table tile, every FP8_ALTERNATES tile, the decode table tile,
         and a peer (--peer-adapter) when given; every output is checked.
  sweep  fp8 tiles per shape: stage-1 and stage-2 options timed per kernel (torch.profiler,
         dependent launches off, as bench/tune/tiles.py does), the best pair checked against
         ref_kernel and timed the leaderboard's way; prints FP8_TUNED rows with ok / FAIL.
         --stage2 fp8 / decode sweeps the tiles of that stage-2 kernel (default: the table's).
  ncu    one call of the fp8 path (and the decode path, --paths) per shape (default I-2048 bs-512
         and E-257 bs-512) between cudaProfilerStart and Stop, for Nsight Compute; `--print-ncu`
         prints the whole command line (NCU_METRICS: duration, DRAM bytes read and written and
         throughput, the tensor and FMA pipes' activity, warps, registers, grid).

The peer (--peer-adapter FILE): a Python file defining prepare(data) -> state (untimed, once per
input: layouts, routing metadata from the given topk_ids) and run(state) -> output [M, H]; OpenAI's
triton_kernels (python/triton_kernels of triton v3.6.0, carried in .peers/ and put on sys.path by
--peer-path) is the intended one. Without it the time mode says so and times the package alone.
"""

from __future__ import annotations

import argparse
import itertools
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
DEFAULT_NCU_SHAPES = ("I2048-E32+1-k8+1-bs512", "I256-E256+1-k8+1-bs512")
NCU_METRICS = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_tensor.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "launch__grid_size",
)


def ncu_command(paths: list[str]) -> str:
    """The Nsight Compute command line that profiles the ncu mode's calls into $OUT/ncu.csv."""
    return (
        "ncu --profile-from-start off --clock-control none --csv --page raw --metrics "
        + ",".join(NCU_METRICS)
        + " python -m bench.h200.fp8_check ncu --paths "
        + " ".join(paths)
        + ' > "$OUT/ncu.csv"'
    )


NO_GPU = "no CUDA GPU here; fp8_check checks and times the compiled NVIDIA paths on one"


def _setup():
    """torch, or None where no CUDA GPU runs the compiled paths (main put ROOT on sys.path)."""
    import torch

    return torch if torch.cuda.is_available() else None


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


def table_tiles(case: dict):
    """(fp8 table tile, its alternates, decode table tile) of a case."""
    from moe_triton.tiles_nvidia import FP8_ALTERNATES, fp8_tile_config, tile_config
    from problem.cases import table_key

    key = table_key(case)
    d_hidden, d_inter, n_experts, topk, n_tokens = key
    fp8 = fp8_tile_config(n_tokens, d_hidden, d_inter, n_experts, topk)
    return fp8, FP8_ALTERNATES.get(key, {}), tile_config(n_tokens, d_hidden, d_inter, n_experts, topk)


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

    from buffers import _pool

    for buf in _pool.values():
        buf.view(torch.uint8).fill_(0xFF)
    bait = torch.full(out_shape, float("nan"), dtype=torch.bfloat16, device="cuda")
    del bait


def leaderboard_input(case: dict, i: int):
    from reference import generate_input

    return generate_input(**{**case, "seed": case["seed"] + SEED_STEP * i})


# ----------------------------------------------------------------------------------------- check


def crafted_inputs(data):
    """(label, input) pairs built from one input that take the fp8 path's fallback or its edges."""
    import torch

    hidden, w1, w2, w1s, w2s, *rest = data
    n_tokens, d_hidden = hidden.shape
    hit = int(data[10][0, 0])  # an expert the first token uses
    two_inter = w1.shape[1]
    out = []
    out.append(("hidden x 2^-70 (a1 base below the window's range)", (hidden * 2.0**-70, *data[1:])))
    far = hidden.clone()
    far[0, :32] *= 2.0**-20  # one block 20 octaves below the row's others: outside a1's 15-octave window
    out.append(("one a1 block 2^-20 below its row", (far, *data[1:])))
    edge = hidden.clone()
    edge[0, :32] *= 2.0**-13  # 13 octaves below: inside the window, near its edge
    out.append(("one a1 block 2^-13 below its row (inside)", (edge, *data[1:])))
    low = w1s.view(torch.uint8).clone()
    low[hit * two_inter, :1] -= 20  # one gate row's first block 20 octaves below its others
    out.append(("w1 row with a block 20 octaves low", (hidden, w1, w2, low.view(w1s.dtype), w2s, *rest)))
    low2 = w2s.view(torch.uint8).clone()
    low2[hit * d_hidden, :1] -= 20
    out.append(("w2 row with a block 20 octaves low", (hidden, w1, w2, w1s, low2.view(w2s.dtype), *rest)))
    nan = hidden.clone()
    nan[0, 5] = float("nan")
    out.append(("a NaN in the hidden states", (nan, *data[1:])))
    return out


def mode_check(args, torch) -> dict:
    from reference import ref_kernel

    results = {}
    started = time.perf_counter()
    for name, case in official_cases(args.shapes):
        fp8, _alts, decode = table_tiles(case)
        paths = {p: t for p, t in (("fp8", fp8), ("decode", decode)) if p in (args.paths or ("fp8", "decode"))}
        rec = {p: {"worst": 0.0, "worst_seed": None, "fails": 0, "seeds": 0} for p in ("fp8", "decode")}
        for i in range(args.seeds):
            if time.perf_counter() - started > args.budget_s:
                break
            data = leaderboard_input(case, i)
            ref = ref_kernel(data)
            for path, tiles in paths.items():
                poison(ref.shape)
                e = excess(run_tiles(data, tiles), ref)
                r = rec[path]
                r["seeds"] += 1
                r["fails"] += e > 1.0
                if e > r["worst"]:
                    r["worst"], r["worst_seed"] = e, case["seed"] + SEED_STEP * i
            del data, ref
        crafted = {}
        if not args.skip_crafted and time.perf_counter() - started <= args.budget_s:
            base = leaderboard_input(case, 0)
            for label, data in crafted_inputs(base):
                ref = ref_kernel(data)
                scale = float(ref.float().abs().nan_to_num(0.0, 0.0, 0.0).max())
                # Far from one, the absolute tolerance would accept anything: scale it to the output.
                atol = TOLERANCE * scale if 0 < scale < 1 else TOLERANCE
                crafted[label] = {p: excess(run_tiles(data, t), ref, atol) for p, t in paths.items()}
            del base
        results[name] = {"tiles": {p: repr(t) for p, t in paths.items()}, "seeds": rec, "crafted": crafted}
        print(
            f"{name}: seeds {rec['fp8']['seeds']}, worst fp8 {rec['fp8']['worst']:.3f} "
            f"(seed {rec['fp8']['worst_seed']}), decode {rec['decode']['worst']:.3f}; "
            f"fails {rec['fp8']['fails']} / {rec['decode']['fails']}",
            flush=True,
        )
    return results


def check_table(results: dict) -> list[str]:
    lines = ["| shape | seeds | fp8 worst / tol | fp8 fails | decode worst / tol | decode fails | crafted fp8 (max) |"]
    lines.append("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        f, d = r["seeds"]["fp8"], r["seeds"]["decode"]
        crafted = max((v.get("fp8", float("nan")) for v in r["crafted"].values()), default=float("nan"))
        cells = (f["seeds"], f"{f['worst']:.3f}", f["fails"], f"{d['worst']:.3f}", d["fails"], f"{crafted:.3f}")
        lines.append(f"| {name} | " + " | ".join(str(c) for c in cells) + " |")
    return lines


# ------------------------------------------------------------------------------------------ time


def load_peer(path: str | None, peer_path: str | None):
    """The peer adapter's (prepare, run), or None with the reason."""
    if not path:
        return None, "no --peer-adapter given"
    if peer_path:
        sys.path.insert(0, str(Path(peer_path).resolve()))
    import importlib.util

    try:
        spec = importlib.util.spec_from_file_location("fp8_check_peer", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return (module.prepare, module.run), ""
    except Exception as exc:  # the peer is optional: its failure is reported, not fatal
        return None, f"{type(exc).__name__}: {exc}"


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


def time_candidates(case: dict, candidates: dict, reps: int, device, peer=None) -> dict:
    """Median us of each candidate over reps leaderboard-style inputs (the same inputs for all,
    each call after its own flush), every output checked; the first input (i = 0) warms up."""
    from reference import ref_kernel

    times = {k: [] for k in candidates}
    worst = dict.fromkeys(candidates, 0.0)
    if peer:
        times["peer"], worst["peer"] = [], 0.0
    for i in range(reps + 1):
        data = leaderboard_input(case, i)
        ref = ref_kernel(data)
        for label, tiles in candidates.items():
            out, us = timed(device, lambda t=tiles, d=data: run_tiles(d, t))
            worst[label] = max(worst[label], excess(out, ref))
            if i:
                times[label].append(us)
        if peer:
            state = peer[0](data)
            out, us = timed(device, lambda s=state: peer[1](s))
            worst["peer"] = max(worst["peer"], excess(out, ref))
            if i:
                times["peer"].append(us)
        del data, ref
    return {k: {"median_us": statistics.median(v), "runs": len(v), "worst": worst[k]} for k, v in times.items()}


def mode_time(args, torch) -> dict:
    from bench.runner.timing import Device
    from problem.cases import BENCHMARKS, case_name

    device = Device("cuda", "official")
    peer, why = (None, "--skip-peer") if args.skip_peer else load_peer(args.peer_adapter, args.peer_path)
    if peer is None:
        print(f"peer: not timed ({why})", flush=True)
    names = {case_name(c) for c in BENCHMARKS}
    results = {"peer": why or "timed", "flush": device.describe(), "shapes": {}}
    for name, case in official_cases(args.shapes):
        if not args.shapes and name not in names:
            continue
        fp8, alternates, decode = table_tiles(case)
        candidates = {"fp8": fp8, **{f"fp8:{k}": v for k, v in alternates.items()}, "decode": decode}
        r = time_candidates(case, candidates, args.reps, device, peer)
        results["shapes"][name] = {"tiles": {k: repr(v) for k, v in candidates.items()}, "times": r}
        print(name, "  ".join(f"{k} {v['median_us']:.1f}us{'' if v['worst'] <= 1 else ' FAIL'}" for k, v in r.items()))
    return results


def _geomean(values):
    values = [v for v in values if v and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def time_table(results: dict) -> list[str]:
    shapes = results["shapes"]
    labels = list(dict.fromkeys(k for r in shapes.values() for k in r["times"]))
    lines = ["| shape | " + " | ".join(labels) + " | best fp8 |", "|---" * (len(labels) + 2) + "|"]
    best = []
    for name, r in shapes.items():
        t = r["times"]
        ok_fp8 = [v["median_us"] for k, v in t.items() if k.startswith("fp8") and v["worst"] <= 1]
        best.append(min(ok_fp8) if ok_fp8 else float("nan"))
        cells = [f"{t[k]['median_us']:.1f}{'' if t[k]['worst'] <= 1 else ' FAIL'}" if k in t else "" for k in labels]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {best[-1]:.1f} |")
    geo = [_geomean([r["times"].get(k, {}).get("median_us") for r in shapes.values()]) for k in labels]
    lines.append("| geomean | " + " | ".join(f"{g:.1f}" for g in geo) + f" | {_geomean(best):.1f} |")
    return lines


# ----------------------------------------------------------------------------------------- sweep

STAGE1 = [
    dict(block_n1=n, block_k1=k, warps1=w, stages1=s, max_regs1=r)
    for n, k, w, s, r in (
        *itertools.product((32,), (256,), (4,), (2, 3, 4), (0, 128)),
        *itertools.product((32,), (128,), (4,), (3, 4), (0,)),
        *itertools.product((64,), (128, 256), (4, 8), (2, 3), (0,)),
    )
]
STAGE2 = [
    dict(block_n2=n, block_k2=k, warps2=w, stages2=s, n_tiles2=t, max_regs2=0)
    for n, k, w, s, t in (
        *itertools.product((64,), (128, 256), (4,), (2, 3), (1, 4, 8)),
        *itertools.product((128,), (128, 256), (4, 8), (2,), (1, 2, 4)),
    )
]


def block_m_options(case: dict) -> list[int]:
    from moe_triton.tiles import default_block_m

    per_expert = case["bs"] * (case["nexpertspertoken"] + 1) / (case["nroutedexperts"] + 1)
    base = default_block_m(case["bs"], case["nroutedexperts"] + 1, case["nexpertspertoken"] + 1)
    return sorted({base, 16 if per_expert <= 24 else 32 if per_expert <= 96 else 64, min(128, 2 * base)})


def mode_sweep(args, torch) -> dict:
    from bench.runner.timing import Device
    from bench.tune.tiles import kernel_times
    from problem.cases import table_key
    from reference import ref_kernel

    device = Device("cuda", "official")
    flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    results, rows = {}, []
    started = time.perf_counter()
    for name, case in official_cases(args.shapes):
        fp8, _alts, _decode = table_tiles(case)
        if args.stage2 != "table":
            fp8 = fp8._replace(decode_stage2=args.stage2 == "decode")
        data = leaderboard_input(case, 0)
        ref = ref_kernel(data)
        log, best = [], None
        for block_m in block_m_options(case):
            if time.perf_counter() - started > args.budget_s:
                break
            s1_best, s2_best = (math.inf, None), (math.inf, None)
            for i in range(max(len(STAGE1), len(STAGE2))):
                s1, s2 = STAGE1[i % len(STAGE1)], STAGE2[i % len(STAGE2)]
                tail = 32 if block_m >= 128 else 0
                tiles = fp8._replace(block_m=block_m, tail_m=tail, **s1, **s2)
                try:
                    k = kernel_times(lambda t=tiles, d=data: run_tiles(d, t), 3, flush)
                except Exception as exc:  # a tile that does not compile or run is a result
                    log.append({"tiles": repr(tiles), "error": f"{type(exc).__name__}: {exc}"[:200]})
                    continue
                log.append({"tiles": repr(tiles), "kernel_us": k})
                s1_best = min(s1_best, (k.get("moe_fp8_stage1_kernel", math.inf), i % len(STAGE1)), key=lambda x: x[0])
                stage2_us = k.get("moe_fp8_stage2_kernel", k.get("moe_stage2_kernel", math.inf))
                s2_best = min(s2_best, (stage2_us, i % len(STAGE2)), key=lambda x: x[0])
            if s1_best[1] is None or s2_best[1] is None:
                continue
            tiles = fp8._replace(
                block_m=block_m, tail_m=32 if block_m >= 128 else 0, **STAGE1[s1_best[1]], **STAGE2[s2_best[1]]
            )
            timing = time_candidates(case, {"sweep": tiles}, args.reps, device)["sweep"]
            ok = excess(run_tiles(data, tiles), ref) <= 1 and timing["worst"] <= 1
            log.append({"winner": repr(tiles), "median_us": timing["median_us"], "ok": ok})
            print(
                f"{name} block_m {block_m}: {tiles!r} {timing['median_us']:.1f} us {'ok' if ok else 'FAIL'}", flush=True
            )
            if ok and (best is None or timing["median_us"] < best[1]):
                best = (tiles, timing["median_us"])
        results[name] = {"log": log, "best": repr(best[0]) if best else None, "best_us": best[1] if best else None}
        if best:
            rows.append(f"    {table_key(case)}: {best[0]!r},  # {best[1]:.1f} us, ok")
        del data, ref
    results["rows"] = rows
    return results


# ------------------------------------------------------------------------------------------- ncu


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


def mode_ncu(args, torch) -> dict:
    selectors = args.shapes or list(DEFAULT_NCU_SHAPES)
    done = {}
    for name, case in official_cases(selectors):
        fp8, _alts, decode = table_tiles(case)
        data = leaderboard_input(case, 0)
        for path in args.paths:
            profiled_call(data, fp8 if path == "fp8" else decode)
            done.setdefault(name, []).append(path)
        del data
    print("profiled: " + "; ".join(f"{n}: {', '.join(p)}" for n, p in done.items()), file=sys.stderr)
    return {"profiled": done}


# ------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.runner.preflight import UsageParser

    parser = UsageParser(
        prog="python -m bench.h200.fp8_check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=["check", "time", "sweep", "ncu"])
    parser.add_argument("--shapes", nargs="*", default=[], help="name substrings or indices of official shapes")
    parser.add_argument("--seeds", type=int, default=1000, help="check: leaderboard-style seeds per shape")
    parser.add_argument("--budget-s", type=float, default=480.0, help="check, sweep: stop starting work after this")
    parser.add_argument("--skip-crafted", action="store_true", help="check: no crafted fallback inputs")
    parser.add_argument("--reps", type=int, default=10, help="time, sweep: timed repetitions per candidate")
    parser.add_argument(
        "--stage2", choices=["table", "fp8", "decode"], default="table", help="sweep: whose stage-2 kernel"
    )
    parser.add_argument("--skip-peer", action="store_true", help="time: no peer")
    parser.add_argument("--peer-adapter", default=os.environ.get("FP8_CHECK_PEER", ""), help="time: peer file")
    parser.add_argument("--peer-path", default=str(ROOT / ".peers"), help="time: put on sys.path for the peer")
    parser.add_argument("--paths", nargs="*", choices=["fp8", "decode"], help="check (both), ncu (fp8): the paths")
    parser.add_argument("--print-ncu", action="store_true", help="ncu: print the ncu command line and exit")
    parser.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "out")))
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.reps < 1:
        parser.error("--seeds and --reps must be at least 1")
    if args.mode == "ncu" and not args.paths:
        args.paths = ["fp8"]
    if args.print_ncu:
        print(ncu_command(args.paths))
        return 0
    torch = _setup()
    if torch is None:
        return parser.fail(NO_GPU)

    started = time.perf_counter()
    results = {"check": mode_check, "time": mode_time, "sweep": mode_sweep, "ncu": mode_ncu}[args.mode](args, torch)
    lines = {"check": check_table, "time": time_table}.get(args.mode, lambda r: r.get("rows", []))(results)
    write_results(Path(args.out), args.mode, results, lines, started, argv)
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
