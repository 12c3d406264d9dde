"""Tune the aiter override table on an MI355X: `python -m bench.tune.aiter_rows --help`.

For each chosen case, every valid row (block_m 32/64/128; moe_aiter/catalogue.py's CK stage-1
instances of that MPerBlock; as stage 2 the FlyDSL kernels of that tile_m and the CK stage-2
instances of that MPerBlock; ksplit 0) is injected in turn into aiter's table, checked against
reference.ref_kernel on two leaderboard-style seeds and timed the runner's way
(bench/tune/worker.py, one worker process, restarted after a crash or timeout). Every result is
appended to a JSON-lines file, which a later run reads back and skips (so a run can be resumed).
The fastest passing row per shape is written into shape_overrides.py (the table's data,
bundled with the submission) with its measured time, date and versions; shapes not tuned, or
where no candidate passed, keep their row. Needs a gfx950 GPU where aiter imports; elsewhere it
says why and exits 2 (`--dry-run` lists the candidates anywhere).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.runner.case_args import UsageError, select_cases  # noqa: E402
from bench.runner.preflight import UsageParser, shown  # noqa: E402
from bench.tune import write_overrides  # noqa: E402
from moe_aiter.catalogue import (  # noqa: E402
    CK_A4W4_GEMM1_INSTANCES,
    CK_A4W4_GEMM2_INSTANCES,
    ck_moe_kernel_name,
    flydsl_moe_kernel_name,
)

# FlyDSL stage 2 at aiter f3be04a (aiter/ops/flydsl/moe_kernels.py:63-92, registered at import by
# :95-102): tile_m x tile_n x tile_k x mode for fp4 weights. Its stage 1 takes no fp4 activations
# (gemm_moe_tune.py: "TODO: stage1 support fp4"), so stage 1 is always CK here.
FLYDSL_STAGE2_TILE_M = (32, 64)
FLYDSL_STAGE2_TILE_N = (128, 256)
FLYDSL_STAGE2_TILE_K = (256,)
FLYDSL_STAGE2_MODES = ("atomic", "reduce")
# The sorting block heights a row may use with quantized activations. aiter's own tuner pairs a
# block_m with the CK instances whose MPerBlock equals it and the FlyDSL kernels whose tile_m
# equals it (gemm_moe_tune.py:1676, :1728, :1825, :1876); block_m 16 is out because the activation
# quantizer needs block_m % 32 == 0 (moe_aiter/inject.py).
TUNE_BLOCK_M = (32, 64, 128)

DEFAULT_RESULTS = ROOT / "bench" / "out" / "tune_aiter.jsonl"
DEFAULT_TABLE = ROOT / "shape_overrides.py"


@dataclass(frozen=True)
class Candidate:
    """One row to try for one case."""

    case: str  # the case label, e.g. bench0
    params: tuple  # generate_input keyword arguments, as sorted items
    token: int
    model_dim: int
    inter_dim: int
    expert: int
    topk: int
    block_m: int
    kernelName1: str
    kernelName2: str

    @property
    def id(self) -> str:
        shape = f"{self.token}x{self.model_dim}x{self.inter_dim}x{self.expert}x{self.topk}"
        return f"{shape}:{self.block_m}:{self.kernelName1}:{self.kernelName2}"

    @property
    def flydsl(self) -> bool:
        return self.kernelName2.startswith("flydsl_")


def padded_tokens(m: int) -> int:
    """aiter's get_padded_M (aiter/fused_moe.py:607): the token field of the table's key."""
    if m < 1024:
        return 1 if m <= 1 else 1 << (m - 1).bit_length()
    return 1024 if m < 2048 else 2048 if m < 16384 else 16384


def stage_kernels(block_m: int) -> tuple[list[str], list[str]]:
    """(stage-1 names, stage-2 names) of one sorting block height, as aiter f3be04a names them."""
    stage1 = [ck_moe_kernel_name(1, inst) for inst in CK_A4W4_GEMM1_INSTANCES if inst[1] == block_m]
    stage2 = [
        flydsl_moe_kernel_name(2, block_m, n, k, mode)
        for n in FLYDSL_STAGE2_TILE_N
        for k in FLYDSL_STAGE2_TILE_K
        for mode in FLYDSL_STAGE2_MODES
        if block_m in FLYDSL_STAGE2_TILE_M
    ]
    stage2 += [ck_moe_kernel_name(2, inst) for inst in CK_A4W4_GEMM2_INSTANCES if inst[1] == block_m]
    return stage1, stage2


def candidates(case) -> list[Candidate]:
    p = case.params
    shape = dict(
        token=padded_tokens(p["bs"]),
        model_dim=p["dhidden"],
        inter_dim=p["dexpert"],
        expert=p["nroutedexperts"] + p["nsharedexperts"],
        topk=p["nexpertspertoken"] + p["nsharedexperts"],
    )
    out = []
    for block_m in TUNE_BLOCK_M:
        stage1, stage2 = stage_kernels(block_m)
        for name1 in stage1:
            for name2 in stage2:
                out.append(
                    Candidate(
                        case.label,
                        tuple(sorted(p.items())),
                        **shape,
                        block_m=block_m,
                        kernelName1=name1,
                        kernelName2=name2,
                    )
                )
    return out


def read_results(path: Path) -> dict[str, dict]:
    """id -> record of a results file (the last record of an id wins); {} when there is none."""
    records = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                records[rec["id"]] = rec
    return records


def fallback_for(best: dict, records: list[dict]) -> str | None:
    """The CK stage 2 that stands in for a FlyDSL winner when FlyDSL is unavailable: the fastest
    passing one measured with the same stage 1, else the first CK instance of its height."""
    if not best["kernelName2"].startswith("flydsl_"):
        return None
    ck = [
        r
        for r in records
        if r["status"] == "pass"
        and r["block_m"] == best["block_m"]
        and r["kernelName1"] == best["kernelName1"]
        and not r["kernelName2"].startswith("flydsl_")
    ]
    if ck:
        return min(ck, key=lambda r: r["us"])["kernelName2"]
    return next(n for n in stage_kernels(best["block_m"])[1] if not n.startswith("flydsl_"))


def winners(records: dict[str, dict]) -> tuple[list[dict], list[str]]:
    """(table rows of the fastest passing candidate per shape, shapes where none passed)."""
    by_shape: dict[tuple, list[dict]] = {}
    for rec in records.values():
        by_shape.setdefault(tuple(rec["shape"]), []).append(rec)
    rows, lost = [], []
    for shape, recs in sorted(by_shape.items()):
        passed = [r for r in recs if r["status"] == "pass" and r.get("us") is not None]
        if not passed:
            lost.append("x".join(map(str, shape)))
            continue
        best = min(passed, key=lambda r: r["us"])
        token, model_dim, inter_dim, expert, topk = shape
        rows.append(
            dict(
                token=token,
                model_dim=model_dim,
                inter_dim=inter_dim,
                expert=expert,
                topk=topk,
                block_m=best["block_m"],
                ksplit=0,
                kernelName1=best["kernelName1"],
                kernelName2=best["kernelName2"],
                fallback_kernelName2=fallback_for(best, recs),
                us=round(best["us"], 3),
                date=best["date"],
                versions=best["versions"],
                source=f"tuned: fastest of {len(passed)} passing candidates ({len(recs)} tried)",
            )
        )
    return rows, lost


def read_table(path: Path) -> list[dict]:
    """The rows of a data module written by bench/tune/write_overrides.py (run from its path, not
    imported as shape_overrides)."""
    import runpy

    rows = runpy.run_path(str(path)).get("OVERRIDE_ROWS")
    if rows is None:
        raise ValueError(f"{path}: no OVERRIDE_ROWS")
    return [dict(r) for r in rows]


def merge_rows(old: list[dict], new: list[dict]) -> list[dict]:
    """`old` with the rows of the shapes in `new` replaced."""

    def shape(r):
        return (r["token"], r["model_dim"], r["inter_dim"], r["expert"], r["topk"])

    fresh = {shape(r): r for r in new}
    return [r for r in old if shape(r) not in fresh] + list(fresh.values())


def write_table(path: Path, rows: list[dict]) -> Path:
    """Validate `rows` as an override table, then write them (shape_overrides reads the result)."""
    from moe_aiter.inject import table_from_rows, validate

    overrides, fallbacks = table_from_rows(rows)
    validate(overrides, fallbacks=fallbacks)
    tuned = sorted({r["date"] for r in rows if r["us"] is not None})
    how = (
        f"Rows with `us` were tuned by `python -m bench.tune.aiter_rows` ({', '.join(tuned)}); rows whose `us` is\n"
        "None were derived by hand (docs/aiter_overrides.md says how) and never timed."
    )
    return write_overrides.write(path, rows, how)


def why_cannot_run() -> str | None:
    """None on a gfx950 GPU where aiter imports, else the reason (one line)."""
    import torch

    if not torch.cuda.is_available() or torch.version.hip is None:
        return "no ROCm GPU here (the tuner times aiter's kernels on an MI355X)"
    arch = torch.cuda.get_device_properties(0).gcnArchName
    if not arch.startswith("gfx950"):
        return f"the GPU is {arch}, not gfx950 (MI355X)"
    try:
        import aiter  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - any failure to import is the reason
        return f"import aiter failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    return None


def tune(
    cands: list[Candidate],
    job: dict,
    results_path: Path,
    timeout_s: float,
    console,
    quiet: bool = False,
) -> dict[str, dict]:
    """Run every candidate not yet in results_path, appending each result; returns all records."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from bench.tune.worker import CandidateWorker

    records = read_results(results_path)
    todo = [c for c in cands if c.id not in records]
    if len(todo) < len(cands):
        console.print(f"resuming: {len(cands) - len(todo)} of {len(cands)} candidates already in {shown(results_path)}")
    results_path.parent.mkdir(parents=True, exist_ok=True)
    worker = CandidateWorker(job)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
    )
    try:
        with progress, results_path.open("a") as out:
            bar = progress.add_task("tuning", total=len(todo))
            for cand in todo:
                progress.update(bar, description=f"{cand.case} bm{cand.block_m} {_short(cand)}")
                task = {**asdict(cand), "params": dict(cand.params), "ksplit": 0}
                res = worker.run(task, timeout_s)
                rec = {
                    "id": cand.id,
                    **{k: v for k, v in asdict(cand).items() if k != "params"},
                    "shape": [cand.token, cand.model_dim, cand.inter_dim, cand.expert, cand.topk],
                    "date": time.strftime("%Y-%m-%d"),
                    **res,
                }
                out.write(json.dumps(rec) + "\n")
                out.flush()
                records[cand.id] = rec
                if rec["status"] != "pass":
                    first = (rec.get("message") or "").strip().splitlines()
                    progress.console.log(f"{cand.case} {_short(cand)}: {rec['status']} - {first[0] if first else ''}")
                progress.advance(bar)
    finally:
        worker.close()
    return records


def _short(c: Candidate) -> str:
    """e.g. '64x32x32x128 + fly t32x128x256_atomic' for the progress bar."""
    tile1 = c.kernelName1.split("_")[3]
    tile2 = "_".join(c.kernelName2.split("_")[5:]) if c.flydsl else c.kernelName2.split("_")[3]
    return f"{tile1} + {'fly' if c.flydsl else 'ck'} {tile2}"


def build_parser() -> argparse.ArgumentParser:
    p = UsageParser(
        prog="python -m bench.tune.aiter_rows",
        description="Re-derive the aiter override table (shape_overrides.py) by timing every valid row on an MI355X.",
    )
    p.add_argument("--cases", "-c", nargs="+", default=["benchmarks"], metavar="SEL", help="as python -m bench")
    p.add_argument("--dry-run", action="store_true", help="list the candidates and stop (needs no GPU)")
    p.add_argument(
        "--results",
        type=Path,
        default=DEFAULT_RESULTS,
        help=f"JSON lines, appended and resumed from (default {DEFAULT_RESULTS.relative_to(ROOT)})",
    )
    p.add_argument("--write", type=Path, default=DEFAULT_TABLE, help="the table's data module to update")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S", help="per candidate, first compile included")
    p.add_argument(
        "--max-reps", type=int, default=100, help="timed repetitions per candidate (runner's leaderboard: 100)"
    )
    p.add_argument("--max-time", type=float, default=30.0, metavar="S", help="measured seconds per candidate")
    p.add_argument("--max-wall", type=float, default=120.0, metavar="S", help="wall seconds of a timing loop")
    p.add_argument("--flush", default="official", metavar="official|l2|none|BYTES", help="as python -m bench")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    return p


def make_job(args, device: str, setup: tuple[str, dict] | None = None) -> dict:
    return {
        "root": str(ROOT),
        "device": device,
        "flush": args.flush,
        "env": {"TRITON_INTERPRET": "1"} if device == "cpu" else {},
        "limits": {"max_reps": max(1, args.max_reps), "max_time_s": args.max_time, "max_wall_s": args.max_wall},
        "setup": setup[0] if setup else None,
        "setup_kwargs": setup[1] if setup else None,
    }


def report(console, records: dict[str, dict], cands: list[Candidate]) -> None:
    ids = {c.id for c in cands}
    bad = [r for r in records.values() if r["id"] in ids and r["status"] != "pass"]
    for r in bad:
        first = (r.get("message") or "").strip().splitlines()
        console.print(f"skipped {r['case']} {r['id']}: {r['status']} - {first[0] if first else ''}")
    console.print(f"{len(ids) - len(bad)} of {len(ids)} candidates passed")


def main(argv: list[str] | None = None, setup: tuple[str, dict] | None = None, device: str | None = None) -> int:
    """The command line; `setup` ("module:function", kwargs) and `device` are for tests (the aiter
    double on the CPU)."""
    from rich.console import Console

    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console(log_path=False)
    try:
        cases = select_cases(args.cases)
    except UsageError as exc:
        parser.error(str(exc))
    cands = [c for case in cases for c in candidates(case)]
    if args.dry_run:
        for c in cands:
            console.print(
                f"{c.case} token {c.token} I{c.inter_dim} E{c.expert} block_m {c.block_m}: "
                f"{c.kernelName1} + {c.kernelName2}",
                soft_wrap=True,
            )
        console.print(f"{len(cands)} candidates for {len(cases)} cases")
        return 0
    if device is None:
        why = why_cannot_run()
        if why:
            return parser.fail(f"cannot run here: {why}")
        device = "cuda"
    records = tune(cands, make_job(args, device, setup), args.results, args.timeout, console, args.quiet)
    report(console, records, cands)
    ids = {c.id for c in cands}
    rows, lost = winners({k: v for k, v in records.items() if k in ids})
    for shape in lost:
        console.print(f"no candidate passed for {shape}: its row is kept as it was")
    if rows:
        path = write_table(args.write, merge_rows(read_table(args.write), rows))
        console.print(f"wrote {len(rows)} tuned rows into {shown(path)}")
    return 0 if rows and not lost else 1


if __name__ == "__main__":
    sys.exit(main())
