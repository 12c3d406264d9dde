"""`python -m bench.h200.gluon_check MODE`: the Gluon stages (moe_triton/kernels/gluon_stage1.py and
gluon_stage2.py, tiles with gluon1 / gluon2) against the decode path's on an H100 / H200.
The stage-1 variants are every combination of --block-ns (h columns per program; 32 is one warpgroup
that loads its own ring), --stages (ring slots), --splits (parts per K step), --regs (registers a
thread at launch: 0 for one program an SM, 80 for two), --paired (1: one wgmma wait every two K steps)
and --block-ks (K steps of 128, 256 in two or four parts, or 512 in four on one warpgroup), stage 2
the decode one; each --stage2 N-S-P-T[-R] adds a variant with stage 2 on the Gluon kernel (N output
columns a tile, S ring slots, P parts per K step, T tiles a program, R registers a thread at launch)
after the static sm_90 tile's stage 1 (static_tiles: the Gluon one where GLUON_TUNED names the
shape), or with --combine after each stage-1 variant instead; --stage1-variants 0 leaves the
stage-1 ones out, --fold has them fold each expert's tail block into its last full block's program
(fold1; 32-row blocks with 16-row tails where the tile has no tails).
--block-m M --tail-m T give every variant routing blocks of M rows and tail tiles of T (0: none),
the decode and static tiles keeping the table's. Every mode writes MODE.json and MODE.md under
--out ($OUT by default) and prints its table last.

  smoke  one small odd input (37 tokens, 9 experts, d_hidden 768, d_inter 256) and one official
         shape's first input: a2 of each variant bit for bit against the decode stage 1's on
         every real row, the output against reference.ref_kernel; meant to run under `timeout`
         first, so that a hang costs a minute, not a device call.
  check  leaderboard-style seeds per official shape (generate_input with seed + 13 i): every
         scratch buffer and the output poisoned before each call, a2 compared bit for bit with
         the decode stage 1's, the worst max |out - ref| / (atol + rtol |ref|).
  time   per official benchmark shape, the decode table tile and each variant: the leaderboard's
         timing (fresh input per repetition, the runner's flush, events around one call, the
         median; outputs checked) and GPU time per kernel (torch.profiler, dependent launches
         off, as bench/tune/tiles.py does).
  ncu    one call per shape (default I-2048 bs-512) with the first variant between
         cudaProfilerStart and Stop, for Nsight Compute (--profile-from-start off).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SMOKE_CASE = dict(dhidden=768, dexpert=256, nroutedexperts=8, nexpertspertoken=4, nsharedexperts=1, bs=37, seed=1234)


def routed_a2(data, block_m: int):
    """(the sorted rows of real tokens, a2 on them) after the last call whose routing blocks have
    block_m rows (the pool's buffers of that size)."""
    import torch

    from buffers import get_buffer
    from moe_triton.routing import routing_buffers, routing_capacity

    hidden, w1, topk_ids = data[0], data[1], data[10]
    n_slots, n_experts = topk_ids.numel(), w1.shape[0]
    sorted_ids, _, num_valid_ids = routing_buffers(n_slots, n_experts, block_m, hidden.device)
    n_rows = routing_capacity(n_slots, n_experts, block_m) * block_m
    a2 = get_buffer("a2", (n_rows, w1.shape[1] // 2), torch.bfloat16, hidden.device)
    n_valid = int(num_valid_ids[0])
    real = torch.nonzero((sorted_ids[:n_valid] & 0xFFFFFF) < hidden.shape[0]).flatten()
    return real, a2[real].clone()


def base_tiles(case: dict):
    """(the decode table's tile, the static sm_90 tile) of an official case."""
    from bench.h200.harness import table_tile
    from bench.runner.case_args import case_shape
    from moe_triton.tiles_nvidia import GLUON_TUNED

    decode = table_tile(case)
    return decode, GLUON_TUNED.get(case_shape(case), decode)


def variants(args, decode, static, d_hidden: int = 7168) -> dict:
    """The variants named on the command line over a shape's decode and static tiles: name ->
    tiles (a stage-2 variant's tiles a program cut to divide d_hidden's tiles, and K steps that do not divide
    d_hidden left out, for odd shapes)."""
    from math import gcd

    from moe_triton.decode import gluon_block_ks
    from moe_triton.tiles_nvidia import gluon2_variant, gluon_variant

    routing = {} if args.block_m is None else {"block_m": args.block_m, "tail_m": args.tail_m}
    fold = {}
    if args.fold:
        # a fold needs tail tiles: 32-row blocks with 16-row tails where the tile has none (odd shapes)
        fold = {"fold1": 1} if routing.get("tail_m", decode.tail_m) else {"fold1": 1, "block_m": 32, "tail_m": 16}
    stage1 = {}
    for n in args.block_ns:
        for s in args.stages:
            for p, r, w, bk in itertools.product(args.splits, args.regs, args.paired, args.block_ks):
                if bk not in gluon_block_ks(1, n == 32, p) or d_hidden % bk:
                    continue
                name = f"gluon-n{n}-s{s}-p{p}{f'-r{r}' if r else ''}"
                name += ("-fold" if args.fold else "") + ("-paired" if w else "") + (f"-k{bk}" if bk > 128 else "")
                stage1[name] = gluon_variant(decode, n, s, p, r, w, bk).replace(**{**routing, **fold})
    named = dict(stage1) if args.stage1_variants else {}
    bases = {f"{k}+": v for k, v in stage1.items()} if args.combine else {"": static.replace(**routing)}
    for spec in args.stage2:
        n, stages, parts, n_tiles, regs = stage2_fields(spec)
        for prefix, base in bases.items():
            named[f"{prefix}g2-{spec}"] = gluon2_variant(base, n, stages, parts, gcd(n_tiles, d_hidden // n), regs)
    return named


def stage2_fields(spec: str) -> tuple[int, int, int, int, int]:
    """N-S-P-T[-R] -> (block_n2, stages2, gluon2, n_tiles2, max_regs2) for gluon2_variant."""
    fields = [int(x) for x in spec.split("-")]
    if len(fields) not in (4, 5):
        raise ValueError(spec)
    n, s, p, t, r = fields + [0] * (5 - len(fields))
    return n, s, p, t, r


def compare(data, tiles, ref, named: dict) -> dict:
    """The decode path and each named variant on one input, pool and output poisoned before each:
    the output's excess over the tolerance, and whether a2 matches the decode path's bit for bit
    on every real row."""
    import torch

    from bench.h200.harness import excess, poison, run_tiles

    poison(ref.shape)
    results = {"decode": {"excess": excess(run_tiles(data, tiles), ref)}}
    want = routed_a2(data, tiles.block_m)[1].view(torch.int16)
    for name, variant in named.items():
        poison(ref.shape)
        e = excess(run_tiles(data, variant), ref)
        # the real rows' a2 in sorted order, the same for every routing block size
        got = routed_a2(data, variant.block_m)[1].view(torch.int16)
        off = int((got != want).sum()) if got.shape == want.shape else got.numel()
        results[name] = {"excess": e, "a2_identical": off == 0, "a2_elements_off": off}
    return results


def mode_smoke(args, torch) -> dict:
    from bench.h200.harness import leaderboard_input, official_cases, table_tile
    from bench.tune.tiles import case_tiles
    from reference import generate_input, ref_kernel

    data = generate_input(**SMOKE_CASE)
    tiles = case_tiles(data)
    odd = variants(args, tiles, tiles, data[0].shape[1])
    results = {"odd": compare(data, tiles, ref_kernel(data), odd)}
    print("odd", results["odd"], flush=True)
    for name, case in official_cases(args.shapes or ["I2048"]):
        data = leaderboard_input(case, 0)
        results[name] = compare(data, table_tile(case), ref_kernel(data), variants(args, *base_tiles(case)))
        print(name, results[name], flush=True)
    return results


def mode_check(args, torch) -> dict:
    from bench.h200.harness import leaderboard_input, official_cases, table_tile
    from reference import ref_kernel

    results, started = {}, time.perf_counter()
    for name, case in official_cases(args.shapes):
        named = variants(args, *base_tiles(case))
        rec = {k: {"seeds": 0, "a2_differs": 0, "fails": 0, "worst": 0.0} for k in ("decode", *named)}
        for i in range(args.seeds):
            if time.perf_counter() - started > args.budget_s:
                break
            data = leaderboard_input(case, i)
            for k, r in compare(data, table_tile(case), ref_kernel(data), named).items():
                rec[k]["seeds"] += 1
                rec[k]["a2_differs"] += not r.get("a2_identical", True)
                rec[k]["fails"] += r["excess"] > 1
                rec[k]["worst"] = max(rec[k]["worst"], r["excess"])
            del data
        results[name] = rec
        print(name, rec, flush=True)
    return results


def mode_time(args, torch) -> dict:
    from bench.h200.harness import leaderboard_input, official_cases, run_tiles, time_candidates
    from bench.runner.timing import Device
    from bench.tune.tiles import kernel_times
    from problem.cases import BENCHMARKS, case_name

    device = Device("cuda", "official")
    flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    names = {case_name(c) for c in BENCHMARKS}
    results = {}
    for name, case in official_cases(args.shapes):
        if not args.shapes and name not in names:
            continue
        decode, static = base_tiles(case)
        candidates = {"decode": decode, **({"static": static} if args.stage2 and static != decode else {})}
        candidates.update(variants(args, decode, static))
        data = leaderboard_input(case, 0)
        kernels, errors = {}, {}
        for k, t in list(candidates.items()):
            try:
                kernels[k] = kernel_times(lambda t=t, d=data: run_tiles(d, t), 5, flush)
            except ValueError as exc:  # a ring that does not fit this shape's shared memory
                errors[k] = str(exc)
                del candidates[k]
        del data
        timing = time_candidates(case, candidates, args.reps, device)
        results[name] = {
            "tiles": {k: repr(v) for k, v in candidates.items()},
            "times": timing,
            "kernels": kernels,
            "errors": errors,
        }
        print(name, {k: (round(v["median_us"], 1), round(v["worst"], 3)) for k, v in timing.items()}, flush=True)
        print("  kernels", {k: {n: round(us, 1) for n, us in v.items()} for k, v in kernels.items()}, flush=True)
    return results


def mode_ncu(args, torch) -> dict:
    from bench.h200.harness import leaderboard_input, official_cases, profiled_call

    done = []
    for name, case in official_cases(args.shapes or ["I2048-E32+1-k8+1-bs512"]):
        data = leaderboard_input(case, 0)
        profiled_call(data, next(iter(variants(args, *base_tiles(case)).values())))
        done.append(name)
        del data
    return {"profiled": done}


def table(mode: str, results: dict) -> list[str]:
    if mode == "time":
        lines = [
            "| shape | candidate | median us | worst / tol | stage 1 us | stage 2 us |",
            "|---|---|---|---|---|---|",
        ]
        for name, r in results.items():
            for k, t in r["times"].items():
                kern = r["kernels"][k]
                s1 = sum(v for n, v in kern.items() if "stage1" in n)
                s2 = sum(v for n, v in kern.items() if "stage2" in n)
                lines.append(f"| {name} | {k} | {t['median_us']:.1f} | {t['worst']:.3f} | {s1:.1f} | {s2:.1f} |")
        return lines
    return [f"{name}: {json.dumps(r)}" for name, r in results.items()]


def main(argv: list[str] | None = None) -> int:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.runner.preflight import doc_parser

    parser = doc_parser("python -m bench.h200.gluon_check", __doc__)
    parser.add_argument("mode", choices=["smoke", "check", "time", "ncu"])
    parser.add_argument("--shapes", nargs="*", default=[], help="name substrings or indices of official shapes")
    parser.add_argument("--seeds", type=int, default=20, help="check: leaderboard-style seeds per shape")
    parser.add_argument("--budget-s", type=float, default=300.0, help="check: stop starting seeds after this")
    parser.add_argument("--reps", type=int, default=10, help="time: timed repetitions per candidate")
    parser.add_argument("--stages", type=int, nargs="*", default=[4], help="ring slots of the gluon1 variants")
    parser.add_argument("--splits", type=int, nargs="*", default=[4], help="parts per K step (gluon1)")
    parser.add_argument("--block-ns", type=int, nargs="*", default=[64], help="h columns per program (block_n1)")
    parser.add_argument(
        "--regs",
        type=int,
        nargs="*",
        default=[0],
        help="registers a thread at launch (max_regs1; 0: one program an SM)",
    )
    parser.add_argument("--stage1-variants", type=int, choices=[0, 1], default=1, help="0: no stage-1 variants")
    parser.add_argument("--stage2", nargs="*", default=[], metavar="N-S-P-T[-R]", help="Gluon stage-2 variants")
    parser.add_argument("--combine", action="store_true", help="stage-2 variants after each stage-1 variant")
    parser.add_argument("--fold", action="store_true", help="stage-1 variants fold tails (fold1; needs tail tiles)")
    parser.add_argument(
        "--paired", type=int, nargs="*", choices=[0, 1], default=[0], help="gluon1 variants' paired1 (a wait two steps)"
    )
    parser.add_argument(
        "--block-ks",
        type=int,
        nargs="*",
        choices=[128, 256, 512],
        default=[128],
        help="K step of the gluon1 variants (256: in two or four parts; 512: in four, one warpgroup)",
    )
    parser.add_argument("--block-m", type=int, choices=[16, 32, 64, 128], help="every variant's routing blocks")
    parser.add_argument("--tail-m", type=int, default=0, help="with --block-m: tail tiles of this many rows (0: none)")
    parser.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "out")))
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.reps < 1:
        return parser.fail("--seeds and --reps must be at least 1")
    for option, values, allowed in (("--block-ns", args.block_ns, {32, 64, 128}), ("--splits", args.splits, {1, 2, 4})):
        if not values or not set(values) <= allowed:
            return parser.fail(f"{option} {values}: each must be one of {sorted(allowed)}")
    if not args.regs or any(r and not (56 <= r <= 168 and r % 8 == 0) for r in args.regs):
        return parser.fail(f"--regs {args.regs}: each must be 0 or a multiple of 8 from 56 to 168")
    if max(args.regs) > 96 and 128 in args.block_ns:
        return parser.fail(f"--regs {max(args.regs)}: --block-ns 128 (four MMA warpgroups) takes at most 96")
    if 32 in args.block_ns and args.fold:
        return parser.fail("--block-ns 32 (one warpgroup) takes no --fold")
    if not args.paired or (max(args.paired) and args.fold):
        return parser.fail(f"--paired {args.paired}: 0 or 1, and 0 with --fold")
    if not args.stages or min(args.stages) < 2:
        return parser.fail(f"--stages {args.stages}: ring slots must be at least 2")
    for spec in args.stage2:
        try:
            n, stages, parts, tiles, regs = stage2_fields(spec)
        except ValueError:
            return parser.fail(f"--stage2 {spec}: expected N-S-P-T or N-S-P-T-R, four or five integers")
        if n not in (128, 256) or parts not in (1, 2, 4) or stages < 2 or tiles < 1 or 7168 % (n * tiles):
            return parser.fail(f"--stage2 {spec}: N must be 128 or 256, S at least 2, P 1, 2 or 4, T divide 7168 / N")
        if regs and not (56 <= regs <= (168 if n == 128 else 96) and regs % 8 == 0):
            return parser.fail(f"--stage2 {spec}: R must be 0 or a multiple of 8 from 56 to 168 (N 128) or 96 (N 256)")
    if not args.stage1_variants and not args.stage2:
        return parser.fail("--stage1-variants 0 needs --stage2 variants")
    if args.combine and not args.stage2:
        return parser.fail("--combine needs --stage2 variants")
    tail = args.tail_m
    if tail and (args.block_m is None or not 16 <= tail < args.block_m or tail & (tail - 1)):
        return parser.fail(f"--tail-m {args.tail_m}: needs --block-m and a power of two from 16 to below it")
    import torch

    if not (torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)):
        return parser.fail("no sm_90 GPU here; gluon_check runs the Gluon stages on an H100 / H200")
    from bench.h200.harness import write_results

    started = time.perf_counter()
    modes = {"smoke": mode_smoke, "check": mode_check, "time": mode_time, "ncu": mode_ncu}
    results = modes[args.mode](args, torch)
    write_results(Path(args.out), args.mode, results, table(args.mode, results), started, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
