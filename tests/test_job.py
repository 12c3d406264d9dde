"""bench/job.py, the whole leaderboard job: run directory, shared HOME, the eval's output, limits
and report. The task's eval.py needs CUDA, so a test double with its interface stands in: it reads
the case file and writes `key: value` lines to POPCORN_FD; a submission double caches a choice."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import bundle
from bench import job
from problem.cases import BENCHMARKS, TESTS

EVAL_DOUBLE = """\
import os, sys, time
from pathlib import Path
import utils

SLEEP, FAIL_TEST = {sleep!r}, {fail_test!r}
mode, cases = sys.argv[1], Path(sys.argv[2]).read_text().splitlines()
out = os.fdopen(int(os.environ["POPCORN_FD"]), "w")
log = lambda key, value: print(f"{{key}}: {{value}}", file=out, flush=True)
log("seen.home", os.environ["HOME"])
log("seen.xdg", os.environ.get("XDG_CACHE_HOME", "unset"))
log("seen.seed", os.environ.get("POPCORN_SEED", "unset"))
log("seen.files", ",".join(sorted(p.name for p in Path.cwd().glob("*.py"))))
log("seen.utils", utils.MARK)
log("seen.pid", os.getpid())
time.sleep(SLEEP.get(mode, 0))
kind = "test" if mode == "test" else "benchmark"
log(f"{{kind}}-count", len(cases))
for i, spec in enumerate(cases):
    log(f"{{kind}}.{{i}}.spec", spec)
    if i == FAIL_TEST and mode == "test":
        log("test.1.status", "fail")
        log("test.1.error", "mismatch | 3 elements")
    elif mode == "test":
        log(f"test.{{i}}.status", "pass")
    else:
        log(f"benchmark.{{i}}.runs", 10)
        log(f"benchmark.{{i}}.mean", 1000.0 * (i + 1))
failed = FAIL_TEST is not None and mode == "test"
log("check", "fail" if failed else "pass")
sys.exit(112 if failed else 0)
"""

SUBMISSION_DOUBLE = """\
import os, sys, time
from pathlib import Path

if __name__ == "__main__":
    time.sleep({sleep})
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "moe-mxfp4"
    choice = cache / "choice.json"
    if choice.exists():
        print("moe-mxfp4 select: reused " + str(choice), file=sys.stderr)
    else:
        cache.mkdir(parents=True, exist_ok=True)
        choice.write_text("{{}}")
        print("moe-mxfp4 select: H7168 bs16 -> triton (chosen)", file=sys.stderr)
    print("noise on stderr", file=sys.stderr)
"""


def task_yml(timeouts: dict) -> str:
    lines = [f"{key}: {value}" for key, value in timeouts.items()]
    lines += ["tests:", *(f"  - {json.dumps(c)}" for c in TESTS)]
    lines += ["benchmarks:", "  # TP=8", *(f"  - {json.dumps(c)}" for c in BENCHMARKS)]
    return "\n".join(["files:", '  - {"name": "eval.py", "source": "eval.py"}', *lines]) + "\n"


def make_task(tmp_path: Path, sleep=None, fail_test=None, timeouts=None, submission_sleep=0) -> tuple[Path, Path]:
    """A task folder with the eval double (utils.py one level up, as in reference-kernels) and a
    submission double."""
    task_dir = tmp_path / "problems" / "moe-mxfp4"
    task_dir.mkdir(parents=True)
    (task_dir / "eval.py").write_text(EVAL_DOUBLE.format(sleep=sleep or {}, fail_test=fail_test))
    (task_dir / "task.yml").write_text(task_yml(timeouts or {"test_timeout": 540, "ranked_timeout": 840}))
    (task_dir.parent / "utils.py").write_text("MARK = 'task utils'\n")
    submission = tmp_path / "submission_double.py"
    submission.write_text(SUBMISSION_DOUBLE.format(sleep=submission_sleep))
    return task_dir, submission


def run(tmp_path: Path, task_dir: Path, submission: Path, *extra: str) -> tuple[int, dict]:
    out = tmp_path / "out"
    rc = job.main(["--task-dir", str(task_dir), "--bundle", str(submission), "--out", str(out), *extra])
    return rc, json.loads((out / "job.json").read_text())


def test_whole_job_shares_home_and_reuses_the_choice(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "outer-cache"))
    monkeypatch.setenv("MOE_BACKEND", "reference")
    task_dir, submission = make_task(tmp_path)
    rc, report = run(tmp_path, task_dir, submission)
    assert rc == 0 and report["passed"] and report["within_cap"]
    assert [m["mode"] for m in report["modes"]] == ["test", "benchmark", "leaderboard"]
    assert report["limits_s"] == {"pre-run": 120, "test": 540, "benchmark": 180, "leaderboard": 840}
    assert report["cases_match_task_yml"] and {"XDG_CACHE_HOME", "MOE_BACKEND"} <= set(report["unset"])
    evals = [m["steps"][1]["result"] for m in report["modes"]]
    homes = {r["seen.home"] for r in evals}
    assert len(homes) == 1 and homes != {str(Path.home())}
    assert {r["seen.xdg"] for r in evals} == {"unset"} and {r["seen.seed"] for r in evals} == {"unset"}
    assert {r["seen.files"] for r in evals} == {"eval.py,reference.py,submission.py,task.py,utils.py"}
    assert {r["seen.utils"] for r in evals} == {"task utils"}
    first, *later = [s for m in report["modes"] for s in m["steps"]]
    assert not first["choice"]["existed_before"] and first["choice"]["created"] == ["choice.json"]
    assert first["select_lines"] == ["moe-mxfp4 select: H7168 bs16 -> triton (chosen)"]
    assert all(s["choice"]["reused"] for s in later)
    assert later[1]["select_lines"][0].startswith("moe-mxfp4 select: reused")
    assert (tmp_path / "out" / "choice" / "choice.json").is_file()
    test, bench, board = report["modes"]
    assert [r["status"] for r in test["cases"]] == ["pass"] * len(TESTS)
    assert test["cases"][0]["spec"] == "; ".join(f"{k}: {v}" for k, v in TESTS[0].items())
    assert [r["mean_us"] for r in board["cases"]] == [float(i + 1) for i in range(len(BENCHMARKS))]
    assert bench["geomean_us"] == pytest.approx(5040 ** (1 / 7))
    md = (tmp_path / "out" / "job.md").read_text()
    assert "of the 20-minute cap" in md and "| leaderboard | eval |" in md and "reused" in md


def test_seed_reaches_the_evals_and_the_pre_run_gets_one(tmp_path):
    task_dir, submission = make_task(tmp_path)
    rc, report = run(tmp_path, task_dir, submission, "--modes", "test", "--seed", "77")
    assert rc == 0 and report["modes"][0]["steps"][1]["result"]["seen.seed"] == "77"
    assert "--seed" not in report["modes"][0]["steps"][0]["argv"]


def test_limits_kill_the_step_and_a_failed_mode_stops_the_job(tmp_path, monkeypatch):
    monkeypatch.setattr(job, "PRERUN_LIMIT_S", 1)
    task_dir, submission = make_task(tmp_path, sleep={"test": 30}, timeouts={"test_timeout": 1}, submission_sleep=30)
    start = time.perf_counter()
    rc, report = run(tmp_path, task_dir, submission)
    assert time.perf_counter() - start < 15
    assert rc == 1 and not report["passed"] and report["skipped"] == ["benchmark", "leaderboard"]
    prerun, evaluation = report["modes"][0]["steps"]
    assert prerun["timed_out"] and evaluation["timed_out"] and evaluation["limit_s"] == 1
    assert evaluation["result"]["seen.files"].startswith("eval.py")  # the eval ran after the pre-run's timeout
    assert "TIMED OUT" in (tmp_path / "out" / "job.md").read_text()


def test_sigterm_ends_the_eval_and_still_writes_the_report(tmp_path):
    task_dir, submission = make_task(tmp_path, sleep={"benchmark": 60})
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "bench.job", "--task-dir", str(task_dir), "--bundle", str(submission)]
    proc = subprocess.Popen([*argv, "--out", str(out)], cwd=job.ROOT, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("bench.job: benchmark eval (limit"):
            break
    time.sleep(2)  # the eval double is past its `seen` lines, in its sleep
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=20)
    assert proc.returncode == 1 and "bench.job: INTERRUPTED" in rest
    report = json.loads((out / "job.json").read_text())
    assert report["interrupted"] and not report["passed"] and report["skipped"] == ["leaderboard"]
    test, bench = report["modes"]
    assert test["passed"] and not test["interrupted"] and bench["interrupted"]
    evaluation = bench["steps"][1]
    assert evaluation["interrupted"] and not evaluation["timed_out"]
    with pytest.raises(ProcessLookupError):
        os.kill(int(evaluation["result"]["seen.pid"]), 0)
    assert "INTERRUPTED" in (out / "job.md").read_text()


def test_a_failing_case_is_reported_and_the_rest_skipped(tmp_path):
    task_dir, submission = make_task(tmp_path, fail_test=1)
    rc, report = run(tmp_path, task_dir, submission)
    assert rc == 1 and report["skipped"] == ["benchmark", "leaderboard"]
    (test,) = report["modes"]
    assert not test["passed"] and test["steps"][1]["exit_code"] == 112
    assert [r["status"] for r in test["cases"]] == ["pass", "fail", "pass"]
    assert test["cases"][1]["error"] == "mismatch | 3 elements"
    assert "error: mismatch / 3 elements" in (tmp_path / "out" / "job.md").read_text()


def test_default_sources_are_the_bundles(tmp_path):
    task_dir, _ = make_task(tmp_path)
    files = job.sources(task_dir, None)
    assert files["submission.py"].startswith("#!POPCORN leaderboard amd-moe-mxfp4")
    bundle.validate(files["reference.py"], directives=False)  # imports no project module
    assert "def quantize_weight" in files["reference.py"] and "def check_implementation" in files["reference.py"]
    assert files["utils.py"] == "MARK = 'task utils'\n"


def test_the_bundles_modules_are_no_choice_files(tmp_path):
    """The bundle writes its modules under the cache's moe-mxfp4/bundles/: neither reported nor copied."""
    (tmp_path / "choices.json").write_text("{}")
    (tmp_path / "bundles" / "moe_mxfp4_0").mkdir(parents=True)
    (tmp_path / "bundles" / "moe_mxfp4_0" / "reference.py").write_text("")
    assert list(job.snapshot(tmp_path, job.NOT_CHOICES)) == ["choices.json"]
    assert len(job.snapshot(tmp_path)) == 2


@pytest.mark.parametrize(
    "missing, message",
    [("dir", "no such directory"), ("eval.py", "no eval.py"), ("utils.py", "no utils.py"), ("bundle", "--bundle")],
)
def test_missing_inputs_are_one_line_errors(tmp_path, capsys, missing, message):
    task_dir, submission = make_task(tmp_path)
    target = {"dir": task_dir, "eval.py": task_dir / "eval.py", "utils.py": task_dir.parent / "utils.py"}
    if missing == "dir":
        task_dir = tmp_path / "absent"
    elif missing == "bundle":
        submission = tmp_path / "absent.py"
    else:
        target[missing].unlink()
    rc = job.main(["--task-dir", str(task_dir), "--bundle", str(submission), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and err.count("\n") == 1


def test_case_files_and_limits_read_like_kernelbot():
    assert job.case_file([dict(a=1, seed=5), dict(b=2)]) == "a: 1; seed: 5\nb: 2\n"
    assert job.limits(textwrap.dedent("test_timeout: 7\nranked_timeout: 9\n")) == {
        "test": 7,
        "benchmark": 180,
        "leaderboard": 9,
    }
    assert job.parse_popcorn("a: 1\nspec: x: 1; y: 2\n\n") == {"a": "1", "spec": "x: 1; y: 2"}
