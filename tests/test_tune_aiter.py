"""The aiter tuner (bench/tune/aiter_rows.py) against the aiter test double: enumeration, the worker
process (a failing candidate, a crashing one), resuming, and the written table."""

import importlib.util
import io
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from bench.runner.case_args import select_cases
from bench.tune import aiter_rows as ta
from moe_aiter import inject as so
from tests import aiter_double

ROOT = Path(__file__).resolve().parent.parent
SMOKE0 = select_cases(["smoke:0"])[0]  # H512 I256 E8+1 k4+1 bs8: padded token 8


def _double_stage2_names(dbl, block_m):
    fly = [n for n, p in dbl.moe_kernels._KERNEL_PARAMS.items() if n.startswith("flydsl_moe2_afp4_wfp4_bf16")]
    fly = [n for n in fly if dbl.moe_kernels._KERNEL_PARAMS[n]["tile_m"] == block_m]
    return fly + [n for n, m in aiter_double._dbl_ck_names(2).items() if m == block_m]


@pytest.mark.parametrize("block_m", [32, 64, 128])
def test_enumeration_is_the_doubles_aiter_names(monkeypatch, tmp_path, block_m):
    dbl = aiter_double.install(monkeypatch, tmp_path)
    stage1, stage2 = ta.stage_kernels(block_m)
    assert sorted(stage1) == sorted(n for n, m in aiter_double._dbl_ck_names(1).items() if m == block_m)
    assert sorted(stage2) == sorted(_double_stage2_names(dbl, block_m))


def test_candidates_of_a_benchmark_shape():
    case = select_cases(["bench:3"])[0]  # I512 E32+1 bs16
    cands = ta.candidates(case)
    assert len(cands) == 2 * 6 + 1 * 6 + 1 * 2
    assert {(c.token, c.model_dim, c.inter_dim, c.expert, c.topk) for c in cands} == {(16, 7168, 512, 33, 9)}
    assert len({c.id for c in cands}) == len(cands)
    for c in cands:  # every candidate is a valid row
        key = so.aiter_key(c.token, c.inter_dim, c.expert)
        row = dict(block_m=c.block_m, ksplit=0, kernelName1=c.kernelName1, kernelName2=c.kernelName2, run_1stage=False)
        assert so.row_problems(key, row, fallbacks={}) == []


def test_dry_run_lists_the_candidates_and_a_plain_run_explains_why_not(capsys):
    assert ta.main(["--dry-run", "--cases", "bench:0"]) == 0
    out = capsys.readouterr().out
    assert "20 candidates for 1 cases" in out and "flydsl_moe2_afp4_wfp4_bf16_t64x256x256_reduce" in out
    if ta.why_cannot_run() is None:
        pytest.skip("this machine can run the tuner")
    assert ta.main(["--cases", "bench:0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m bench.tune.aiter_rows: error: cannot run here: ")


def _pick(cands, block_m, name2_part, name1_part=""):
    return next(
        c for c in cands if c.block_m == block_m and name2_part in c.kernelName2 and name1_part in c.kernelName1
    )


def test_worker_skips_a_failing_and_a_crashing_candidate_and_resumes(tmp_path):
    cands = ta.candidates(SMOKE0)
    good = _pick(cands, 32, "t32x128x256_atomic", "64x32x32")
    wrong = _pick(cands, 32, "t32x256x256_atomic", "64x32x32")
    crash = _pick(cands, 64, "t64x128x256_atomic")
    after = _pick(cands, 32, "gemm2_64x32x32x128", "256x32x128")
    faults = {wrong.kernelName2: "wrong", crash.kernelName1: "crash"}
    args = ta.build_parser().parse_args(["--max-reps", "2", "--flush", "none"])
    job = ta.make_job(args, "cpu", ("tests.aiter_double:install_in_process", {"faults": faults}))
    job["env"]["MOE_AITER_QUANT"] = "aiter"  # the double's quantizer: quant.py is tested on its own
    results = tmp_path / "tune.jsonl"
    buf = io.StringIO()
    console = Console(file=buf, width=200)
    records = ta.tune([good, wrong, crash, after], job, results, 300, console, quiet=True)
    status = {c: records[c.id]["status"] for c in (good, wrong, crash, after)}
    assert status == {good: "pass", wrong: "fail", crash: "crash", after: "pass"}
    assert records[good.id]["us"] > 0 and records[good.id]["runs"] == 2
    assert records[wrong.id]["message"].startswith(f"seed {SMOKE0.params['seed'] + 13}: ")
    assert ta._short(wrong) == "64x32x32x128 + fly t32x256x256_atomic"
    ta.report(console, records, [good, wrong, crash, after])
    text = buf.getvalue()
    assert f"skipped smoke0 {wrong.id}: fail" in text and f"skipped smoke0 {crash.id}: crash" in text
    assert "2 of 4 candidates passed" in text
    assert len(results.read_text().splitlines()) == 4

    # resumed: nothing is run again (a worker would fail here: no setup for the double)
    rerun = ta.tune([good, wrong], dict(job, setup=None), results, 300, Console(file=io.StringIO()), quiet=True)
    assert rerun[good.id] == records[good.id]

    rows, lost = ta.winners(records)
    assert lost == [] and len(rows) == 1
    (row,) = rows
    assert (row["kernelName1"], row["kernelName2"]) in {
        (good.kernelName1, good.kernelName2),
        (after.kernelName1, after.kernelName2),
    }


def _fake_record(cand, status, us):
    rec = {k: getattr(cand, k) for k in ("case", "token", "model_dim", "inter_dim", "expert", "topk", "block_m")}
    rec.update(kernelName1=cand.kernelName1, kernelName2=cand.kernelName2, id=cand.id)
    rec.update(shape=[cand.token, cand.model_dim, cand.inter_dim, cand.expert, cand.topk], status=status, us=us)
    return dict(rec, date="2026-01-01", versions="torch 2.10.0+rocm7.1, aiter (double)", message="")


def test_written_table_validates_and_round_trips_through_inject(tmp_path, monkeypatch):
    cands = ta.candidates(SMOKE0)
    fly = _pick(cands, 64, "t64x256x256_reduce")
    ck_slow = _pick(cands, 64, "gemm2_256x64")
    ck_fast = _pick(cands, 64, "gemm2_64x64")
    results = tmp_path / "tune.jsonl"
    recs = [
        _fake_record(fly, "pass", 10.0),
        _fake_record(ck_slow, "pass", 30.0),
        _fake_record(ck_fast, "pass", 20.0),
        _fake_record(_pick(cands, 32, "t32x128x256_atomic", "64x32x32"), "pass", 5.0),  # faster, but wrong below
    ]
    recs[-1]["status"] = "fail"
    results.write_text("".join(json.dumps(r) + "\n" for r in recs))
    table = tmp_path / "rows.py"
    shutil.copy(ROOT / "shape_overrides.py", table)
    argv = ["--cases", "smoke:0", "--results", str(results), "--write", str(table), "-q"]
    # all 20 candidates must be recorded for nothing to run: the rest as timeouts
    done = {r["id"] for r in recs}
    with results.open("a") as f:
        for c in cands:
            if c.id not in done:
                f.write(json.dumps(_fake_record(c, "timeout", None)) + "\n")
    assert ta.main(argv, device="cpu") == 0

    spec = importlib.util.spec_from_file_location("written_rows", table)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    overrides, fallbacks = so.table_from_rows(mod.OVERRIDE_ROWS)
    so.validate(overrides, fallbacks=fallbacks)
    assert len(overrides) == len(so.OVERRIDES) + 1  # the committed rows are kept
    key = so.aiter_key(8, 256, 9, model_dim=512, topk=5)
    tuned = next(r for r in mod.OVERRIDE_ROWS if r["token"] == 8)
    assert (tuned["kernelName2"], tuned["us"]) == (fly.kernelName2, 10.0)
    assert tuned["fallback_kernelName2"] == ck_fast.kernelName2  # the fastest CK stage 2 measured
    assert tuned["versions"].startswith("torch") and tuned["date"] == "2026-01-01"
    assert all(r["us"] is None for r in mod.OVERRIDE_ROWS if r is not tuned)

    dbl = aiter_double.install(monkeypatch, tmp_path)
    live = so.inject(dbl.fused_moe, overrides=overrides, fallbacks=fallbacks)
    for k, row in overrides.items():
        assert {f: live[k][f] for f in so.OVERRIDE_ROW_FIELDS} == row
    dbl.flydsl_available = False
    live = so.inject(dbl.fused_moe, overrides=overrides, fallbacks=fallbacks)
    assert live[key]["kernelName2"] == ck_fast.kernelName2


def test_the_committed_table_is_what_the_writer_writes():
    """shape_overrides.py reads back as it was written: its rows rendered again, with its own
    account of where they come from, give the file byte for byte (so a rewrite changes rows only)."""
    from bench.tune import write_overrides
    from shape_overrides import OVERRIDE_ROWS

    text = (ROOT / "shape_overrides.py").read_text()
    how = text.split('"""')[1].split("\n\n")[1].rstrip("\n")
    assert write_overrides.render([dict(r) for r in OVERRIDE_ROWS], how) == text
    assert ta.read_table(ROOT / "shape_overrides.py") == [dict(r) for r in OVERRIDE_ROWS]
