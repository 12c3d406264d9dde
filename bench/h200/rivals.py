"""`python -m bench.h200.rivals`: the package beside other MoE kernels on an NVIDIA GPU, in one run.
Per official benchmark shape, every repetition draws a fresh leaderboard-style
input (generate_input with seed + 13 i) and times, the leaderboard's way (synchronize, the
runner's flush, or on a card under 100 GB twice the L2 and harness.HOST_LEAD_S of queued GPU work, CUDA
events around one call, the median over --reps; the first input warms up):

  package  submission.custom_kernel, as the leaderboard calls it (its first call per shape runs
           the first-call selection, untimed here since i = 0 only warms up);
  peers    each --peers name from bench/h200/peers/ (humming.py: vLLM's humming kernels W4A8 and
           W4A16; triton_kernels.py: OpenAI's triton_kernels): prepare(input) untimed (weights
           into the peer's layouts, its routing metadata from the input's topk_ids), then
           run(state) timed: the peer's two GEMMs with SwiGLU and the top-k sum between and
           after them (bench/h200/peers/glue.py, one Triton kernel each).

Every output is compared with reference.ref_kernel: "worst" is the largest max |out - ref| / (atol +
rtol |ref|) over the repetitions, above 1 the check fails (the peers compute other numerics, W4A8 /
W4A16, and are expected to). A peer whose module has a torch model of what it computes
(OWN_REFERENCES: the model and a bound) is also compared with that ("own"): above the bound the
adapter, not the numerics, is wrong and its time means nothing ("ADAPTER?"). A peer that cannot
import, prepare or run is reported with its error and the run goes on. --peer-path goes on sys.path
first (.peers/: where triton_kernels' source is carried to a machine without internet). Writes
rivals.json and rivals.md under --out ($OUT by default) after every shape and prints the table.
With --ncu nothing is timed: one call of each candidate per shape runs between cudaProfilerStart and
Stop, for Nsight Compute (NCU_COMMAND below: the bs-512 shapes, the package's static table)."""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "package"


PEER_MODULES = ("humming", "triton_kernels")
# --ncu's counters: each kernel's time, tensor pipe, issue slots, DRAM, occupancy and launch
NCU_METRICS = (
    "gpu__time_duration.sum",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "smsp__issue_active.avg.pct_of_peak_sustained_active",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "launch__grid_size",
    "launch__block_size",
)
NCU_COMMAND = (
    "MOE_SELECT=0 ncu --profile-from-start off --clock-control none --csv --page raw --metrics "
    + ",".join(NCU_METRICS)
    + " python -m bench.h200.rivals --ncu --shapes bs512 > ncu.csv"
)


def _peer_modules() -> list:
    import importlib

    return [importlib.import_module(f"bench.h200.peers.{m}") for m in PEER_MODULES]


def known_peers() -> list[str]:
    return [n for m in _peer_modules() for n in m.PEERS]


def load_peers(names: list[str]) -> dict:
    """name -> (prepare, run, (own model, bound) or None) of every peer module's PEERS, or name ->
    the reason it is missing."""
    found: dict = {}
    for module in _peer_modules():
        own = getattr(module, "OWN_REFERENCES", {})
        found.update({n: (*pr, own.get(n)) for n, pr in module.PEERS.items()})
    return {n: found.get(n, f"no peer named {n} (known: {', '.join(sorted(found))})") for n in names}


def _with_package(peers: dict) -> dict:
    """The package's custom_kernel first, as a candidate with no prepare and no model, then the peers."""
    from submission import custom_kernel

    return {PACKAGE: (None, custom_kernel, None), **peers}


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


def time_shape(case: dict, peers: dict, reps: int, device, budget_s: float) -> dict:
    """{candidate: {median_us, runs, worst[, own, own_bound]}} (or {"error": ...}) over one shape's repetitions."""
    from bench.h200.harness import excess, leaderboard_input, timed
    from reference import ref_kernel

    candidates = {n: p for n, p in _with_package(peers).items() if not isinstance(p, str)}
    errors = {n: p for n, p in peers.items() if isinstance(p, str)}
    times = {k: [] for k in candidates}
    worst = dict.fromkeys(candidates, 0.0)
    own = {k: 0.0 for k, (_, _, model) in candidates.items() if model is not None}
    started = time.perf_counter()
    for i in range(reps + 1):
        if i > 1 and time.perf_counter() - started > budget_s:
            break
        data = leaderboard_input(case, i)
        ref = ref_kernel(data)
        for name, (prepare, run, model) in candidates.items():
            if name in errors:
                continue
            try:
                state = data if prepare is None else prepare(data)
                out, us = timed(device, lambda r=run, s=state: r(s))
                if model is not None:
                    own[name] = max(own[name], excess(out, model[0](data)))
            except Exception as exc:  # reported per candidate, the package's failure too; the run goes on
                errors[name] = _failure(exc)
                continue
            worst[name] = max(worst[name], excess(out, ref))
            if i:
                times[name].append(us)
            del state, out
        del data, ref
    results = {n: {"error": e} for n, e in errors.items()}
    for name, values in times.items():
        if name not in errors and values:
            got = {"median_us": statistics.median(values), "runs": len(values), "worst": worst[name]}
            if name in own:
                got |= {"own": own[name], "own_bound": candidates[name][2][1]}
            results[name] = got
    return results


def profile_shape(case: dict, peers: dict) -> dict:
    """One untimed call of each candidate on one input between cudaProfilerStart and Stop (the
    package's first call, its selection, before that): {candidate: "profiled" or the error}."""
    import torch

    from bench.h200.harness import leaderboard_input

    candidates = _with_package(peers)
    data = leaderboard_input(case, 0)
    _, custom_kernel, _ = candidates[PACKAGE]
    custom_kernel(data)  # the first call per shape, its selection, outside the profiled range
    done = {}
    for name, peer in candidates.items():
        if isinstance(peer, str):
            done[name] = peer
            continue
        prepare, run, _model = peer
        try:
            state = data if prepare is None else prepare(data)
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            run(state)
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            done[name] = "profiled"
        except Exception as exc:  # reported, the other candidates still run
            done[name] = _failure(exc)
    return done


def geomean(values: list[float]) -> float:
    import math

    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def table(results: dict) -> list[str]:
    """Per shape and candidate the median us ("FAIL (worst)" where the check against ref_kernel
    fails, "own" the worst against the peer's own model, "ADAPTER?" above its bound, the error
    where it did not run), the geomean of each candidate that ran on every shape, and the
    package's time over each."""
    shapes = results["shapes"]
    labels = list(dict.fromkeys(k for r in shapes.values() for k in r))
    lines = ["| shape | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for name, r in shapes.items():
        cells = []
        for label in labels:
            got = r.get(label, {})
            if "error" in got:
                cells.append(f"error: {got['error']}")
            elif got:
                cell = f"{got['median_us']:.1f}" + ("" if got["worst"] <= 1 else f" FAIL ({got['worst']:.2f})")
                if "own" in got:
                    cell += f", own {got['own']:.2f}" + (" ADAPTER?" if got["own"] > got["own_bound"] else "")
                cells.append(cell)
            else:
                cells.append("")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    means = {}
    for label in labels:
        values = [r[label]["median_us"] for r in shapes.values() if "median_us" in r.get(label, {})]
        means[label] = geomean(values) if len(values) == len(shapes) else float("nan")
    lines.append("| geomean | " + " | ".join(f"{means[k]:.1f}" for k in labels) + " |")
    ours = means.get(PACKAGE, float("nan"))
    lines.append("| package / this | " + " | ".join(f"{ours / means[k]:.2f}" for k in labels) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.runner.preflight import doc_parser

    parser = doc_parser("python -m bench.h200.rivals", __doc__)
    parser.add_argument("--peers", nargs="*", default=None, help="peer names (default: every known peer)")
    parser.add_argument("--shapes", nargs="*", default=[], help="name substrings or indices of benchmark shapes")
    parser.add_argument("--reps", type=int, default=10, help="timed repetitions per candidate and shape")
    parser.add_argument("--budget-s", type=float, default=60.0, help="per shape: stop starting repetitions after this")
    parser.add_argument("--peer-path", default=str(ROOT / ".peers"), help="put on sys.path first (carried peers)")
    parser.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "out")))
    parser.add_argument("--ncu", action="store_true", help="no timing: one call per candidate for NCU_COMMAND")
    args = parser.parse_args(argv)
    if args.reps < 1:
        return parser.fail(f"--reps {args.reps}: must be at least 1")
    known = known_peers()
    names = known if args.peers is None else args.peers
    unknown = [n for n in names if n not in known]
    if unknown:
        return parser.fail(f"--peers {' '.join(unknown)}: unknown; known: {', '.join(known)}")
    from bench.h200.harness import official_cases
    from problem.cases import BENCHMARKS, case_name

    benchmarks = {case_name(c) for c in BENCHMARKS}
    cases = [(n, c) for n, c in official_cases(args.shapes) if n in benchmarks]
    if not cases:
        return parser.fail(f"--shapes {' '.join(args.shapes)}: no benchmark shape matches")
    import torch

    if not torch.cuda.is_available():
        return parser.fail("no CUDA GPU here; rivals times the package beside other kernels on an NVIDIA GPU")
    if args.peer_path:
        sys.path.insert(0, str(Path(args.peer_path).resolve()))
    peers = load_peers(names)
    if args.ncu:
        for name, case in cases:
            print(name, profile_shape(case, peers), flush=True)
        return 0
    from bench.h200.harness import fitting_device, write_results

    started = time.perf_counter()
    device = fitting_device()
    results = {"flush": device.describe(), "shapes": {}}
    for name, case in cases:
        results["shapes"][name] = time_shape(case, peers, args.reps, device, args.budget_s)
        print(name, results["shapes"][name], flush=True)
        # rewritten after every shape: a run cut off by a time limit keeps the shapes it finished
        write_results(Path(args.out), "rivals", results, table(results), started, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
