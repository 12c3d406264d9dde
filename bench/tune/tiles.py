"""Tune and check the Triton backend's tile configurations on the official shapes (needs a GPU;
elsewhere it says why and exits 2).

python -m bench.tune.tiles --cases bench --sweep --json sweep.json
    per case and routing block: time stage-1 and stage-2 tile options in one pass (per-kernel
    GPU time from torch.profiler), keep each stage's best, then check the winner against
    reference.ref_kernel and time it the runner's way; prints TUNED entries for moe_triton/tiles_nvidia.py.
python -m bench.tune.tiles --cases bench --sweep --keep-block-m --names E32+1-k8+1-bs16
    the same for the named cases only, at their configured routing block.
python -m bench.tune.tiles --cases official --seeds 20
    check the configured tiles on leaderboard-style seeds (seed + 13 i).
python -m bench.tune.tiles --variants block_n1=64,128 warps1=4,8
    time a grid of overrides of the configured tiles, the runner's way.
python -m bench.tune.tiles --cases official --native --alternates --seeds 20
    the native path (forced): check the table's tile and every moe_triton.tiles_amd.NATIVE_ALTERNATES
    entry of each case on leaderboard-style seeds, then time them (ALTERNATES without --native).
"""

import itertools
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import torch

from bench.runner.case_args import UsageError, select_cases
from bench.runner.preflight import doc_parser, non_negative_int, positive_int
from moe_triton import target
from moe_triton.fused_moe import fused_moe_triton
from moe_triton.tiles import TileConfig
from moe_triton.tiles_amd import NATIVE_ALTERNATES, native_tile_config
from moe_triton.tiles_nvidia import ALTERNATES, tile_config
from problem.cases import case_name
from problem.shapes import Shape
from reference import check_implementation, generate_input

STAGE1_OPTIONS = [
    dict(block_n1=n, block_k1=k, warps1=w, stages1=s, max_regs1=r)
    for n, k, w, s, r in (
        *itertools.product((32,), (256,), (4,), (2, 3, 4), (0, 128)),
        *itertools.product((32,), (128,), (4,), (2, 3), (0,)),
        *itertools.product((64,), (128, 256), (4,), (2, 3), (0,)),
        (64, 256, 8, 3, 0),
        (64, 128, 8, 3, 0),
    )
]
STAGE2_OPTIONS = [
    dict(block_n2=n, block_k2=k, warps2=w, stages2=s, n_tiles2=t, max_regs2=r)
    for n, k, w, s, t, r in (
        *itertools.product((64, 128), (128, 256), (4,), (2,), (1, 4, 8), (0,)),
        (128, 128, 8, 2, 1, 0),
        (128, 128, 8, 2, 4, 0),
        # Register caps that fit a fifth to seventh program per SM (bench/notes/decode-path-5-7.md, "register caps").
        *itertools.product((64,), (256,), (4,), (2,), (4, 8), (72,)),
        *itertools.product((128,), (256,), (4,), (2,), (1, 4), (88,)),
        # A tile's copy issued while the tile before it computes (bench/notes/nvidia-speed.md, "stage 2 three deep").
        *itertools.product((64,), (256,), (4,), (3,), (4, 8), (0,)),
    )
]


def run(data, tiles, native: bool = False):
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    return fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, tiles, native=native)


def shape_of(data) -> Shape:
    return Shape.of(data[0], data[5], data[10])


def case_tiles(data, native: bool = False):
    return (native_tile_config if native else tile_config)(shape_of(data))


def named_tiles(data, native: bool, alternates: bool) -> dict:
    """The table's tile ("table") and, with alternates, the selection's named alternates."""
    named = {"table": case_tiles(data, native)}
    if alternates:
        named.update((NATIVE_ALTERNATES if native else ALTERNATES).get(shape_of(data), {}))
    return named


def time_call(fn, reps: int, flush: torch.Tensor) -> list[float]:
    """Microseconds of reps calls after 3 untimed ones: L2 flush and synchronize before each,
    events around one call."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return times


def kernel_times(fn, reps: int, flush: torch.Tensor) -> dict[str, float]:
    """Mean GPU microseconds per kernel name over reps calls (each after an L2 flush), without
    programmatic dependent launch, which would count each kernel's wait for the one before."""
    with target.pdl_set(False):
        fn()
        torch.cuda.synchronize()
        totals = defaultdict(float)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(reps):
                flush.zero_()
                fn()
            torch.cuda.synchronize()
    for event in prof.key_averages():
        if event.key.startswith("moe_"):
            totals[event.key] += event.device_time_total / reps
    return dict(totals)


def block_m_candidates(n_tokens: int, n_experts: int, topk: int) -> list[int]:
    rows_per_expert = n_tokens * topk / n_experts
    return (
        [16]
        if rows_per_expert <= 8
        else [16, 32]
        if rows_per_expert <= 24
        else [32, 64]
        if rows_per_expert <= 40
        else [64, 128]
    )


def sweep_case(data, flush, reps: int, keep_block_m: bool) -> tuple[TileConfig, list[dict]]:
    """Best stage-1 and stage-2 options per routing block, then the best block."""
    n_tokens = data[0].shape[0]
    base = case_tiles(data)
    log, best_total, best = [], math.inf, None
    candidates = [base.block_m] if keep_block_m else block_m_candidates(n_tokens, data[1].shape[0], data[10].shape[1])
    for block_m in candidates:
        s1_best, s2_best = (math.inf, None), (math.inf, None)
        prep = math.inf
        for i in range(max(len(STAGE1_OPTIONS), len(STAGE2_OPTIONS))):
            s1, s2 = STAGE1_OPTIONS[i % len(STAGE1_OPTIONS)], STAGE2_OPTIONS[i % len(STAGE2_OPTIONS)]
            tiles = base.replace(block_m=block_m, **s1, **s2)
            try:
                times = kernel_times(lambda t=tiles: run(data, t), reps, flush)
            except Exception as exc:  # a tile that does not compile is a result, not a stop
                log.append(dict(tiles=tiles.as_dict(), error=f"{type(exc).__name__}: {exc}"[:300]))
                continue
            log.append(dict(tiles=tiles.as_dict(), kernel_us=times))
            route = times.get("moe_route_slots_kernel", times.get("moe_route_kernel", 0.0))
            prep = min(prep, times.get("moe_prep_kernel", math.inf) + route)
            s1_best = min(s1_best, (times["moe_stage1_kernel"], i % len(STAGE1_OPTIONS)), key=lambda x: x[0])
            s2_best = min(s2_best, (times["moe_stage2_kernel"], i % len(STAGE2_OPTIONS)), key=lambda x: x[0])
        total = prep + s1_best[0] + s2_best[0]
        print(
            f"  block_m {block_m}: prep+route {prep:.1f} + stage1 {s1_best[0]:.1f} + stage2 {s2_best[0]:.1f} us",
            flush=True,
        )
        if s1_best[1] is not None and s2_best[1] is not None and total < best_total:
            best_total = total
            best = base.replace(block_m=block_m, **STAGE1_OPTIONS[s1_best[1]], **STAGE2_OPTIONS[s2_best[1]])
    return best, log


def why_cannot_run() -> str | None:
    """None where the tuner can time kernels (a GPU, not the interpreter), else the reason (one line)."""
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no GPU here (the tuner times the Triton kernels on one)"
    if target.interpreting():
        return "TRITON_INTERPRET is set (the tuner times compiled kernels)"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = doc_parser("python -m bench.tune.tiles", __doc__)
    parser.add_argument(
        "--cases", nargs="+", default=["benchmarks"], metavar="SEL", help="case selectors as for python -m bench"
    )
    parser.add_argument("--sweep", action="store_true", help="search tiles per case (see above)")
    parser.add_argument("--keep-block-m", action="store_true", help="sweep only the configured routing block")
    parser.add_argument("--names", nargs="*", default=[], help="only cases whose name contains one of these")
    parser.add_argument("--variants", nargs="*", default=[], help="field=v1,v2 ... overrides to time")
    parser.add_argument("--seeds", type=non_negative_int, default=0, help="leaderboard-style seeds to check per case")
    parser.add_argument("--native", action="store_true", help="the native MXFP4 path (forced), its tile tables")
    parser.add_argument("--alternates", action="store_true", help="also the selection's alternates per case")
    parser.add_argument("--reps", type=positive_int, default=30)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    try:
        selected = [c.params for c in select_cases(args.cases)]
    except UsageError as exc:
        parser.error(f"--cases: {exc}")
    why = why_cannot_run()
    if why:
        return parser.fail(f"cannot run here: {why}")

    if args.names:
        selected = [c for c in selected if any(n in case_name(c) for n in args.names)]
    flush = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device="cuda")
    rows, tuned_lines = [], []
    for case in selected:
        name = case_name(case)
        for i in range(args.seeds):
            data = generate_input(**{**case, "seed": case["seed"] + 13 * i})
            for label, tiles in named_tiles(data, args.native, args.alternates).items():
                ok, msg = check_implementation(data, run(data, tiles, args.native))
                print(f"{name} {label} seed+{13 * i}: {'ok' if ok else 'FAIL'} {msg.splitlines()[0]}", flush=True)
                rows.append(dict(case=name, kind="check", tiles=label, seed=case["seed"] + 13 * i, ok=ok, message=msg))
        if not (args.sweep or args.variants or args.alternates):
            continue
        data = generate_input(**case)
        candidates = list(named_tiles(data, args.native, args.alternates).values())
        if args.sweep:
            print(f"{name}: sweep", flush=True)
            best, log = sweep_case(data, flush, reps=5, keep_block_m=args.keep_block_m)
            rows.append(dict(case=name, kind="sweep", log=log))
            candidates.append(best)
        for spec in args.variants:
            field, values = spec.split("=")
            kind = type(getattr(candidates[0], field))
            candidates = [c.replace(**{field: kind(int(v))}) for c in candidates for v in values.split(",")]
        for tiles in dict.fromkeys(candidates):
            ok, msg = check_implementation(data, run(data, tiles, args.native))
            times = time_call(lambda t=tiles, d=data: run(d, t, args.native), args.reps, flush)
            mean = sum(times) / len(times)
            print(f"{name} {tiles}: {mean:8.1f} us {'ok' if ok else 'FAIL ' + msg.splitlines()[0]}", flush=True)
            rows.append(
                dict(
                    case=name, kind="time", tiles=tiles.as_dict(), ok=ok, mean_us=mean, best_us=min(times), message=msg
                )
            )
        if args.sweep:
            tuned_lines.append(f"    {shape_of(data)!r}: {candidates[-1]!r},")
    if tuned_lines:
        print("TUNED = {\n" + "\n".join(tuned_lines) + "\n}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
