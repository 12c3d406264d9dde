"""The local runner (bench/): case and backend selection, seeds, the runner's loops and stop
rules, the roofline, the outputs, and end-to-end runs on a SMOKE case with the reference backend."""

import json
import math
import sys
from pathlib import Path

import pytest
import torch

from bench import roofline
from bench.runner import cli, evaluate, report
from bench.runner.backends import backend_env, load_custom_kernel, parse_backend, parse_backends
from bench.runner.case_args import Case, UsageError, combine_seed, parse_case_spec, secret_seed, select_cases
from bench.runner.timing import Device, Limits, calculate_stats, should_stop

ROOT = Path(__file__).resolve().parents[1]

LISTS = {
    "tests": [dict(dhidden=64, dexpert=32, nroutedexperts=4, nexpertspertoken=2, nsharedexperts=1, bs=3, seed=7)],
    "benchmarks": [
        dict(dhidden=64, dexpert=32, nroutedexperts=4, nexpertspertoken=2, nsharedexperts=1, bs=bs, seed=s)
        for bs, s in ((1, 10), (2, 20), (3, 30))
    ],
    "smoke": [dict(dhidden=32, dexpert=32, nroutedexperts=2, nexpertspertoken=1, nsharedexperts=1, bs=1, seed=1)],
}


# ---------------------------------------------------------------- seeds


def test_combine_seed_is_the_runners_cantor_pairing():
    for a, b in ((9371, 0), (9371, 123456789), (0, 5), (81934, 2**31 - 1)):
        assert combine_seed(a, b) == a + (a + b) * (a + b + 1) // 2
    assert combine_seed(2291, 7) == 2291 + 2298 * 2299 // 2


def test_secret_seed_from_cli_or_environment():
    assert secret_seed(None, {}) is None
    assert secret_seed(None, {"POPCORN_SEED": ""}) is None
    assert secret_seed(None, {"POPCORN_SEED": "77"}) == 77
    assert secret_seed(5, {"POPCORN_SEED": "77"}) == 5
    with pytest.raises(UsageError, match="POPCORN_SEED"):
        secret_seed(None, {"POPCORN_SEED": "abc"})
    with pytest.raises(UsageError, match="^POPCORN_SEED must be 0 .. 2\\*\\*63-1 .*, got -4$"):
        secret_seed(None, {"POPCORN_SEED": "-4"})
    with pytest.raises(UsageError, match=f"^--seed must be 0 .. 2\\*\\*63-1 .*, got {2**63}$"):
        secret_seed(2**63, {})


def test_case_seeds_are_combined_with_the_secret():
    plain = select_cases(["benchmarks"], None, LISTS)
    secret = select_cases(["benchmarks"], 1000, LISTS)
    assert [c.params["seed"] for c in plain] == [10, 20, 30]
    assert [c.params["seed"] for c in secret] == [combine_seed(s, 1000) for s in (10, 20, 30)]
    # The lists themselves are not modified.
    assert LISTS["benchmarks"][0]["seed"] == 10
    # torch takes seeds up to 2**64-1, and the leaderboard mode adds 13 per repetition
    big = 2**62
    with pytest.raises(UsageError, match=f"^case bench0: seed 10 combined with the secret seed {big} must be 0 .."):
        select_cases(["bench:0"], big, LISTS)


# ---------------------------------------------------------------- selection


def test_select_cases_groups_indices_and_custom():
    cases = select_cases(["tests", "bench:0,2", "benchmarks:1-2", "smoke"], None, LISTS)
    assert [c.label for c in cases] == ["test0", "bench0", "bench2", "bench1", "bench2", "smoke0"]
    official = select_cases(["official"], None, LISTS)
    assert [c.group for c in official] == ["tests"] + ["benchmarks"] * 3
    custom = select_cases(
        ["dhidden=7168,dexpert=256,nroutedexperts=256,nexpertspertoken=8,nsharedexperts=1,bs=16"], None, LISTS
    )
    assert custom[0].label == "custom0"
    assert custom[0].shape == "H7168-I256-E256+1-k8+1-bs16"
    assert custom[0].params["seed"] == 42
    runner_form = parse_case_spec(
        "dhidden: 256; dexpert: 512; nroutedexperts: 4; nexpertspertoken: 2; nsharedexperts: 1; bs: 3; seed: 9"
    )
    assert runner_form["seed"] == 9 and runner_form["bs"] == 3


def test_the_real_case_lists_load():
    cases = select_cases(["official", "smoke"])
    assert len(cases) == 10 + len(select_cases(["smoke"]))
    assert cases[3].shape == "H7168-I256-E256+1-k8+1-bs16" and cases[3].params["seed"] == 9371


@pytest.mark.parametrize("bad", ["nope", "benchmarks:9", "bench:x", "dhidden=1,dexpert=2", "dhidden=1,colour=3"])
def test_unknown_case_is_a_clear_error(bad):
    with pytest.raises(UsageError) as exc:
        select_cases([bad], None, LISTS)
    assert bad.split(":")[0].split("=")[0] in str(exc.value) or "case" in str(exc.value)


def test_backend_names_and_files(tmp_path):
    spec = parse_backend("triton", ROOT)
    assert spec.path == ROOT / "submission.py" and spec.moe_backend == "triton"
    assert parse_backend("auto", ROOT).moe_backend is None
    f = tmp_path / "sub.py"
    f.write_text("def custom_kernel(data):\n    return data\n")
    assert parse_backend(str(f), ROOT).moe_backend is None
    assert parse_backend(f"{f}@reference", ROOT).moe_backend == "reference"
    assert [s.label for s in parse_backends(["triton,reference", str(f)], ROOT)] == ["triton", "reference", str(f)]
    with pytest.raises(UsageError, match="unknown backend 'fastest'"):
        parse_backend("fastest", ROOT)
    with pytest.raises(UsageError, match="no such file"):
        parse_backend(str(tmp_path / "missing.py"), ROOT)
    with pytest.raises(UsageError, match="after @"):
        parse_backend(f"{f}@warp", ROOT)
    with pytest.raises(UsageError, match="twice"):
        parse_backends(["triton", "triton"], ROOT)


def test_per_backend_limits():
    got = cli.parse_limit_overrides(["reference:reps=10,wall=15", "triton:time=2"], ["triton", "reference"])
    assert got == {"reference": {"max_reps": 10, "max_wall_s": 15.0}, "triton": {"max_time_s": 2.0}}
    for bad in ("aiter:reps=1", "reference:speed=3", "reference:reps=x", "reps=3"):
        with pytest.raises(UsageError, match="--limit"):
            cli.parse_limit_overrides([bad], ["triton", "reference"])


# ---------------------------------------------------------------- the runner's loops


class FakeTimer:
    def __init__(self, log, durations):
        self.log, self.durations = log, durations

    def start(self):
        self.log.append("start")

    def stop(self):
        self.log.append("stop")

    def elapsed_ns(self):
        return self.durations.pop(0) if self.durations else 1000.0


class FakeDevice:
    kind = "cpu"

    def __init__(self, durations=None):
        self.log = []
        self.durations = list(durations or [])

    def synchronize(self):
        self.log.append("sync")

    def flush(self):
        self.log.append("flush")

    def timer(self):
        return FakeTimer(self.log, self.durations)


def test_a_lead_after_the_flush_queues_gpu_work_before_the_timed_call(monkeypatch):
    # The device's calls recorded instead of run (no GPU here): the small flush, then lead_s of GPU work, so that
    # the host queues the call's launches while the GPU is still busy, as behind the official flush.
    device = Device("cpu", "none", lead_s=1e-3)
    assert device.lead_s == 0.0  # only a CUDA device has a GPU to hold
    calls = []

    class Torch:
        @staticmethod
        def randn(n, device):
            calls.append(("flush", n * 4))

    device.kind, device.flush_mode, device.flush_bytes, device.lead_s, device.torch = "cuda", "l2", 1 << 26, 1e-3, Torch
    monkeypatch.setattr(device, "hold_busy", lambda seconds: calls.append(("lead", seconds)))
    device.flush()
    assert calls == [("flush", 1 << 26), ("lead", 1e-3)]
    device.lead_s = 0.0
    device.flush()
    assert calls[2:] == [("flush", 1 << 26)]


class Recorder:
    """generate / kernel / check stand-ins that log what they see."""

    def __init__(self, fail_at_seed=None):
        self.seeds, self.events, self.fail_at_seed = [], [], fail_at_seed

    def generate(self, **params):
        self.seeds.append(params["seed"])
        data = {"seed": params["seed"], "id": len(self.seeds)}
        self.events.append(("gen", data["id"]))
        return data

    def kernel(self, data):
        self.events.append(("kernel", data["id"]))
        return ("out", data["id"])

    def check(self, data, out):
        self.events.append(("check", data["id"]))
        assert out == ("out", data["id"]), "the check must see the output of the same data"
        ok = data["seed"] != self.fail_at_seed
        return ok, "" if ok else "mismatch"


PARAMS = dict(LISTS["smoke"][0], seed=500)


def test_leaderboard_regenerates_inputs_with_seed_plus_13_and_checks_every_output():
    rec = Recorder()
    limits = Limits(max_reps=5, max_time_s=1e9, max_wall_s=1e9, rel_err=0.0)
    res = evaluate.run_timed(
        PARAMS, rec.kernel, rec.generate, rec.check, FakeDevice([5.0, 7.0] * 10), limits, recheck=True
    )
    assert res.status == "pass"
    assert rec.seeds == [500, 513, 526, 539, 552, 565]
    assert res.seeds == rec.seeds
    assert res.checked == 6 and res.stats.runs == 5
    # every repetition: generate, kernel, then the check of that very output
    kinds = [k for k, _ in rec.events]
    assert kinds == ["gen", "kernel", "check"] * 6
    assert PARAMS["seed"] == 500  # the caller's params are not changed


def test_leaderboard_stops_at_the_first_wrong_output():
    rec = Recorder(fail_at_seed=526)
    res = evaluate.run_timed(
        PARAMS, rec.kernel, rec.generate, rec.check, FakeDevice(), Limits(max_reps=50), recheck=True
    )
    assert res.status == "fail" and "seed 526" in res.message
    assert rec.seeds == [500, 513, 526]


def test_benchmark_generates_once_checks_once_and_flushes_before_each_timed_call():
    rec = Recorder()
    dev = FakeDevice()
    limits = Limits(max_reps=4, max_time_s=1e9, max_wall_s=1e9, rel_err=0.0)
    res = evaluate.run_timed(PARAMS, rec.kernel, rec.generate, rec.check, dev, limits, recheck=False)
    assert rec.seeds == [500]
    assert [k for k, _ in rec.events] == ["gen", "kernel", "check"] + ["kernel"] * 4
    assert res.stats.runs == 4 and res.checked == 1
    # The first call is synchronized so that its wall time (a selection's cost) is all of it.
    assert dev.log == ["sync"] + ["sync", "flush", "start", "stop", "sync"] * 4
    assert res.first_call_s is not None and res.first_call_s >= 0


def test_first_call_failure_is_reported_before_timing():
    rec = Recorder(fail_at_seed=500)
    res = evaluate.run_timed(PARAMS, rec.kernel, rec.generate, rec.check, FakeDevice(), Limits(), recheck=False)
    assert res.status == "fail" and res.stats is None and "first call" in res.message


def test_test_mode_checks_after_the_call_on_the_same_data():
    rec = Recorder()
    res = evaluate.run_test(PARAMS, rec.kernel, rec.generate, rec.check, FakeDevice())
    assert res.status == "pass"
    assert rec.events == [("gen", 1), ("kernel", 1), ("check", 1)]


def test_stop_rules():
    lim = Limits(max_reps=1000, max_time_s=50.0, max_wall_s=120.0)
    assert not should_stop([100.0, 100.0], 0.0, lim)  # never before the third repetition
    assert should_stop([100.0, 100.0, 100.0], 0.0, lim)  # relative error 0 < 0.001
    noisy = [100.0, 200.0, 150.0, 120.0]
    assert not should_stop(noisy, 0.0, lim)
    assert should_stop(noisy, 121.0, lim)  # wall clock
    assert should_stop([20e9, 10e9, 30e9], 0.0, lim)  # 60 s measured > 50 s
    assert should_stop(noisy, 0.0, Limits(max_reps=4))
    # alternating 90/110 would need n > 10^4 for a relative error under 0.001: max_reps ends it
    durations = []
    while not should_stop(durations, 0.0, lim):
        durations.append(90.0 if len(durations) % 2 else 110.0)
    assert len(durations) == lim.max_reps


def test_calculate_stats_matches_the_runner():
    st = calculate_stats([1.0, 2.0, 3.0, 4.0])
    assert st.runs == 4 and st.mean == 2.5 and st.best == 1.0 and st.worst == 4.0
    assert math.isclose(st.std, math.sqrt(5 / 3)) and math.isclose(st.err, st.std / 2)


# ---------------------------------------------------------------- roofline and outputs


def _fake_data(m, h, i, e, topk_ids):
    cfg = dict(
        d_hidden=h,
        d_expert=i,
        d_hidden_pad=h,
        d_expert_pad=i,
        n_routed_experts=e - 1,
        n_shared_experts=1,
        n_experts_per_token=topk_ids.shape[1] - 1,
        total_top_k=topk_ids.shape[1],
        bs=m,
    )
    hidden = torch.zeros(m, h, dtype=torch.bfloat16)
    weights = torch.ones(topk_ids.shape, dtype=torch.float32)
    return (hidden,) + (None,) * 8 + (weights, topk_ids.to(torch.int32), cfg)


def test_traffic_counts_distinct_experts_bytes_and_flops():
    ids = torch.tensor([[0, 2, 4], [2, 1, 4]])  # experts 0, 1, 2 routed, 4 shared: 4 distinct
    t = roofline.traffic(_fake_data(2, 512, 256, 5, ids))
    per_expert = 3 * 256 * 512 * (0.5 + 1 / 32)
    assert t["experts_hit"] == 4
    assert t["weight_bytes"] == 4 * per_expert
    assert t["act_bytes"] == 2 * 512 * 2 * 2 + 6 * 4 * 2
    assert t["flops"] == 2 * 2 * 3 * 3 * 256 * 512


def test_floor_is_the_slower_of_bytes_and_flops():
    c = roofline.Ceilings(bandwidth=4.24e12, matmul=715e12, device="x", source="given")
    ns, bound = roofline.floor_ns(4.24e6, 1.0, c)
    assert math.isclose(ns, 1000.0) and bound == "memory"
    ns, bound = roofline.floor_ns(1.0, 715e6, c)
    assert math.isclose(ns, 1000.0) and bound == "compute"
    # SPEC 6: bs-16 E-257 case with uniform routing (~103 experts hit) is ~71 us on the H200.
    bytes_ = 103 * roofline.expert_bytes(7168, 256)
    assert 65 < roofline.floor_ns(bytes_, 2 * 16 * 9 * 3 * 256 * 7168, c)[0] / 1e3 < 76


def test_ceilings_are_cached_per_device(tmp_path, monkeypatch):
    calls = []

    def fake_measure(kind):
        calls.append(kind)
        return roofline.Ceilings(bandwidth=1e11, matmul=1e12, device=roofline.device_key(kind), source="measured")

    monkeypatch.setattr(roofline, "measure", fake_measure)
    path = tmp_path / "c.json"
    first = roofline.load_or_measure("cpu", path=path)
    second = roofline.load_or_measure("cpu", path=path)
    assert calls == ["cpu"] and first.source == "measured" and second.source == "cache"
    assert second.bandwidth == 1e11 and json.loads(path.read_text())
    roofline.load_or_measure("cpu", remeasure=True, path=path)
    assert calls == ["cpu", "cpu"]
    assert roofline.parse_ceilings("4.24,715").bandwidth == 4.24e12


def test_report_rows_summary_and_files(tmp_path):
    cases = [
        Case(
            "benchmarks",
            0,
            dict(dhidden=7168, dexpert=256, nroutedexperts=256, nexpertspertoken=8, nsharedexperts=1, bs=16, seed=9371),
        ),
        Case("smoke", 1, dict(LISTS["smoke"][0])),
    ]
    ceil = roofline.Ceilings(bandwidth=4e12, matmul=700e12, device="dev", source="given")
    traffic = {"experts_hit": 100, "weight_bytes": 3e8, "act_bytes": 5e5, "bytes": 3.005e8, "flops": 1e9}
    good = {
        "status": "pass",
        "message": "",
        "stats": {"runs": 10, "mean": 305.4e3, "std": 1e3, "err": 3e2, "best": 300e3, "worst": 310e3},
        "traffic": traffic,
        "seeds": [9371],
        "checked": 1,
    }
    bad = {
        "status": "fail",
        "message": "12 of 32 elements mismatch\n  at (0, 1)",
        "stats": None,
        "traffic": None,
        "seeds": [1],
        "checked": 1,
    }
    aiter = report.aiter_times()
    rows = [
        report.build_row("benchmark", "b1", cases[0], good, ceil, aiter),
        report.build_row("benchmark", "b1", cases[1], bad, ceil, aiter),
    ]
    assert rows[0]["aiter_us"] == 152.7 and math.isclose(rows[0]["x_aiter"], 2.0)
    assert math.isclose(rows[0]["floor_us"], 3.005e8 / 4e12 * 1e6) and rows[0]["bound"] == "memory"
    assert rows[1]["x_floor"] is None
    summary = report.summarize(rows, ["b1"])
    assert summary[0]["passed"] == 1 and not summary[0]["complete"]
    assert math.isclose(summary[0]["geomean_us"], 305.4)
    written = report.write_outputs(tmp_path, "benchmark", rows, summary, {"device": "dev"})
    names = sorted(p.name for p in written)
    assert names == ["benchmark.csv", "benchmark.json", "benchmark.md", "benchmark.png"]
    assert (tmp_path / "benchmark.png").stat().st_size > 1000
    doc = json.loads((tmp_path / "benchmark.json").read_text())
    assert doc["rows"][1]["status"] == "fail" and doc["summary"][0]["backend"] == "b1"
    assert "| bench0 |" in (tmp_path / "benchmark.md").read_text()


def test_geomean():
    assert math.isclose(report.geomean([2.0, 8.0]), 4.0)
    assert report.geomean([None]) is None


# ---------------------------------------------------------------- backends


def test_two_submission_files_load_as_separate_modules(tmp_path, monkeypatch):
    # load_module puts each file's folder first on sys.path: restored after, or a later test's
    # `from submission import ...` would find these files (seen under pytest-xdist)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name, value in (("a", 1), ("b", 2)):
        d = tmp_path / name
        d.mkdir()
        (d / "submission.py").write_text(f"STATE = {{}}\n\ndef custom_kernel(data):\n    return {value}\n")
    ka = load_custom_kernel(tmp_path / "a" / "submission.py", ROOT, "a")
    kb = load_custom_kernel(tmp_path / "b" / "submission.py", ROOT, "b")
    assert (ka(None), kb(None)) == (1, 2)
    assert ka.__module__ != kb.__module__ and ka.__module__ in sys.modules and kb.__module__ in sys.modules


def test_backend_env_sets_and_restores(monkeypatch):
    import os

    monkeypatch.setenv("MOE_BACKEND", "aiter")
    with backend_env("triton"):
        assert os.environ["MOE_BACKEND"] == "triton"
    assert os.environ["MOE_BACKEND"] == "aiter"
    with backend_env(None):
        assert "MOE_BACKEND" not in os.environ
    assert os.environ["MOE_BACKEND"] == "aiter"


# ---------------------------------------------------------------- end to end (CPU)


def run_quietly(out, options: str) -> int:
    """cli.main with these options (split at spaces), writing to `out`, without a progress bar."""
    return cli.main([*options.split(), "--out", str(out), "-q"])


def test_test_mode_on_a_smoke_case_with_the_reference_backend_passes(tmp_path):
    """A spawned worker, as a real run: test mode, reference backend, one SMOKE case."""
    rc = run_quietly(tmp_path, "--mode test --backend reference --cases smoke:1 --roofline off")
    assert rc == 0
    doc = json.loads((tmp_path / "test.json").read_text())
    assert [(r["backend"], r["case"], r["status"]) for r in doc["rows"]] == [("reference", "smoke1", "pass")]


def test_deadline_skips_the_cases_not_started_in_time(tmp_path):
    options = "--mode test --backend reference --cases smoke:1 smoke:1 --roofline off --deadline 0 --inline"
    rc = run_quietly(tmp_path, options)
    assert rc == 1
    rows = json.loads((tmp_path / "test.json").read_text())["rows"]
    assert [r["status"] for r in rows] == ["skipped", "skipped"] and "deadline" in rows[0]["message"]


def test_leaderboard_mode_end_to_end_inline(tmp_path, monkeypatch):
    """Leaderboard mode in this process with a secret seed: every output checked, seeds step by 13."""
    monkeypatch.setenv("POPCORN_SEED", "3")
    options = "--mode leaderboard --backend reference --cases smoke:1 --ceilings 0.01,0.1 --max-reps 3 --no-warmup"
    rc = run_quietly(tmp_path, options + " --inline")
    assert rc == 0
    row = json.loads((tmp_path / "leaderboard.json").read_text())["rows"][0]
    from bench.runner.case_args import SMOKE

    seed = combine_seed(SMOKE[1]["seed"], 3)
    assert row["seed"] == seed and row["last_seed"] == seed + 3 * 13
    assert row["status"] == "pass" and row["runs"] == 3 and row["checked"] == 4
    assert row["floor_us"] > 0 and row["experts_hit"] >= 1
