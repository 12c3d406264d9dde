"""The whole leaderboard job on this machine: `python -m bench.job --task-dir DIR` (docs/runner.md).

A leaderboard submission is one GitHub Actions job (20-minute cap) that runs test, benchmark and
leaderboard mode one after the other, each only if the one before passed (kernelbot's
run_evaluation). Per mode kernelbot writes the task's files into its working directory, runs
`python3 submission.py` (120 s, result ignored), then `python3 eval.py MODE CASEFILE` (the mode's
limit from task.yml) with a pipe in POPCORN_FD for the eval's `key: value` lines, and removes the
files again; every process shares one home directory, so caches under it persist from mode to mode.

This reproduces that in a fresh temporary directory: the bundle as submission.py, the task's own
eval.py and utils.py (copied from --task-dir at run time), and this package's reference.py
(bundled into one file) and task.py standing in for the task's, whose reference calls aiter. It
records each step's wall time, its `moe-mxfp4 select` stderr lines, the eval's results per case,
the files under ~/.cache/moe-mxfp4 (the submission's cached choices; the bundle's modules, which
it writes to bundles/ there, left out) before and after each step, and the whole job's time
against the cap, as job.md and job.json under --out.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import bundle
from bench.runner.preflight import UsageParser, shown
from problem.cases import BENCHMARKS, TESTS

ROOT = Path(__file__).resolve().parent.parent
MODES = ("test", "benchmark", "leaderboard")
PRERUN_LIMIT_S = 120  # kernelbot consts.Timeout.COMPILE
DEFAULT_LIMIT_S = 180  # kernelbot's Timeout.TEST / BENCHMARK / RANKED, where task.yml gives none
LIMIT_KEYS = {"test": "test_timeout", "benchmark": "benchmark_timeout", "leaderboard": "ranked_timeout"}
PRERUN_SEED = "1"  # kernelbot runs the pre-run with POPCORN_SEED=1
JOB_CAP_S = 20 * 60  # kernelbot .github/workflows/amd_workflow.yml: timeout-minutes: 20
SELECT_PREFIX = "moe-mxfp4 select"
CHOICE_DIR = Path(".cache") / "moe-mxfp4"  # under HOME, XDG_CACHE_HOME being unset
NOT_CHOICES = (bundle.BUNDLES_DIR,)  # the bundle's modules, written there beside the choices
TRITON_CACHE = Path(".triton") / "cache"  # Triton's default cache, under HOME
# Not set on the runner: they would move the caches out of the shared home or steer the submission.
UNSET_NAMES = ("XDG_CACHE_HOME", "TRITON_CACHE_DIR", "TRITON_HOME")
UNSET_PREFIXES = ("MOE_", "POPCORN_")
TAIL_LINES = 20


class JobError(Exception):
    pass


class Interrupted(Exception):
    """SIGTERM or Ctrl-C: the step in flight ends as a timeout does (its process group killed, so no
    eval is left holding the GPU) and the report is written with what finished."""


def _interrupt(signum, frame):
    raise Interrupted


def utils_path(task_dir: Path) -> Path:
    """utils.py beside eval.py, or one level up as in reference-kernels (task.yml: ../utils.py)."""
    for path in (task_dir / "utils.py", task_dir.parent / "utils.py"):
        if path.is_file():
            return path
    raise JobError(f"--task-dir {task_dir}: no utils.py in it or its parent")


def check_task_dir(task_dir: Path) -> None:
    if not task_dir.is_dir():
        raise JobError(f"--task-dir {task_dir}: no such directory")
    for name in ("eval.py", "task.yml"):
        if not (task_dir / name).is_file():
            raise JobError(f"--task-dir {task_dir}: no {name} in it (the task's own, from reference-kernels)")
    utils_path(task_dir)


def limits(task_yml: str) -> dict[str, int]:
    """Each mode's limit in seconds, as task.yml sets it (kernelbot's default where it does not)."""
    found = dict(re.findall(r"^(\w+_timeout):\s*(\d+)\s*$", task_yml, flags=re.M))
    return {mode: int(found.get(key, DEFAULT_LIMIT_S)) for mode, key in LIMIT_KEYS.items()}


def task_yml_cases(task_yml: str) -> dict[str, list[dict]]:
    """The `tests:` and `benchmarks:` lists of task.yml (one JSON mapping per `- {...}` line)."""
    lists, current = {"tests": [], "benchmarks": []}, None
    for line in task_yml.splitlines():
        if re.match(r"^\S", line):
            current = line.split(":")[0] if line.split(":")[0] in lists else None
        elif current and line.strip().startswith("- {"):
            lists[current].append(json.loads(line.strip()[2:]))
    return lists


def case_file(cases: list[dict]) -> str:
    """kernelbot's build_test_string: one `key: value; ...` line per case."""
    return "".join("; ".join(f"{k}: {v}" for k, v in case.items()) + "\n" for case in cases)


def sources(task_dir: Path, bundle_file: Path | None) -> dict[str, str]:
    """The files task.yml's `files:` puts in the working directory, this package's reference and
    task standing in for the task's (the task's reference.py imports aiter)."""
    return {
        "submission.py": bundle_file.read_text() if bundle_file else bundle.bundle(ROOT),
        "task.py": (ROOT / "task.py").read_text(),
        "utils.py": utils_path(task_dir).read_text(),
        "reference.py": bundle.bundle(ROOT, entry="reference", directives=False),
        "eval.py": (task_dir / "eval.py").read_text(),
    }


def job_env(home: Path) -> tuple[dict[str, str], list[str]]:
    """This environment with HOME the job's own and the runner's unset names removed; also the
    names removed."""
    drop = sorted(k for k in os.environ if k in UNSET_NAMES or k.startswith(UNSET_PREFIXES))
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["HOME"] = str(home)
    return env, drop


def snapshot(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, list[int]]:
    """Size and mtime (ns) of every file under `folder` but its subfolders `skip`: tells a reused
    file from a rewritten one."""
    if not folder.is_dir():
        return {}
    files = (p for p in sorted(folder.rglob("*")) if p.is_file() and p.relative_to(folder).parts[0] not in skip)
    return {str(p.relative_to(folder)): [p.stat().st_size, p.stat().st_mtime_ns] for p in files}


def choice_change(before: dict, after: dict) -> dict:
    created = sorted(set(after) - set(before))
    rewritten = sorted(f for f in before if f in after and after[f] != before[f])
    removed = sorted(set(before) - set(after))
    return {
        "before": before,
        "after": after,
        "existed_before": bool(before),
        "created": created,
        "rewritten": rewritten,
        "removed": removed,
        "reused": bool(before) and not (created or rewritten or removed),
    }


def parse_popcorn(text: str) -> dict[str, str]:
    """kernelbot's reading of the POPCORN_FD pipe: `key: value` per line, split at the first colon."""
    result = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key or value:
            result[key.strip()] = value.strip()
    return result


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_step(argv: list[str], cwd: Path, env: dict[str, str], limit_s: float) -> dict:
    """One process as kernelbot's run_program runs it (POPCORN_FD pipe, output captured, killed at
    the limit); its own process group, so that a timeout also ends the eval's pool worker."""
    read_fd, write_fd = os.pipe()
    popcorn = []
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env={**env, "POPCORN_FD": str(write_fd)},
        pass_fds=[write_fd],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        encoding="utf-8",
        errors="replace",
        start_new_session=True,
    )
    os.close(write_fd)
    reader = threading.Thread(target=lambda: popcorn.append(os.fdopen(read_fd, errors="replace").read()), daemon=True)
    reader.start()
    timed_out = interrupted = False
    try:
        out, err = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    except (Interrupted, KeyboardInterrupt):
        interrupted = True
    finally:
        _kill_group(proc.pid)
    if timed_out or interrupted:
        out, err = proc.communicate()
    wall = time.perf_counter() - start
    reader.join(timeout=5)
    return {
        "argv": argv,
        "limit_s": limit_s,
        "wall_s": wall,
        "exit_code": proc.returncode,
        "timed_out": timed_out,
        "interrupted": interrupted,
        "select_lines": [line for line in err.splitlines() if line.startswith(SELECT_PREFIX)],
        "stdout_tail": out.splitlines()[-TAIL_LINES:],
        "stderr_tail": err.splitlines()[-TAIL_LINES:],
        "result": parse_popcorn("".join(popcorn)),
    }


def case_rows(mode: str, result: dict[str, str]) -> list[dict]:
    """Per case of the eval's output: spec, status (pass, fail, or not run), mean and runs."""
    prefix = "test" if mode == "test" else "benchmark"
    rows = []
    for i in range(int(result.get(f"{prefix}-count") or 0)):
        key = f"{prefix}.{i}."
        got = {k[len(key) :]: v for k, v in result.items() if k.startswith(key)}
        if got.get("status") == "fail":
            status = "fail"
        elif got.get("status") == "pass" or "mean" in got:
            status = "pass"
        else:
            status = "not run"
        rows.append(
            {
                "index": i,
                "spec": got.get("spec"),
                "status": status,
                "mean_us": float(got["mean"]) / 1e3 if "mean" in got else None,
                "runs": int(got["runs"]) if "runs" in got else None,
                "error": got.get("error"),
            }
        )
    return rows


def geomean_us(rows: list[dict]) -> float | None:
    means = [r["mean_us"] for r in rows]
    if not means or None in means:
        return None
    return math.exp(sum(math.log(m) for m in means) / len(means))


def run_mode(
    mode: str,
    files: dict[str, str],
    run_dir: Path,
    home: Path,
    env: dict,
    case_path: Path,
    limit_s: int,
    seed: int | None,
) -> dict:
    """One mode as kernelbot runs it: write the files, the pre-run, the eval, remove the files."""
    for name, text in files.items():
        (run_dir / name).write_text(text)
    steps = []
    try:
        for name, argv, limit, popcorn_seed in (
            ("pre-run", [sys.executable, "submission.py"], PRERUN_LIMIT_S, PRERUN_SEED),
            ("eval", [sys.executable, "eval.py", mode, str(case_path)], limit_s, seed),
        ):
            step_env = {**env, "POPCORN_SEED": str(popcorn_seed)} if popcorn_seed is not None else env
            choices, triton = snapshot(home / CHOICE_DIR, NOT_CHOICES), len(snapshot(home / TRITON_CACHE))
            print(f"bench.job: {mode} {name} (limit {limit} s) ...", flush=True)
            step = {"step": name, **run_step(argv, run_dir, step_env, limit)}
            step["choice"] = choice_change(choices, snapshot(home / CHOICE_DIR, NOT_CHOICES))
            step["triton_cache_files"] = [triton, len(snapshot(home / TRITON_CACHE))]
            print(f"bench.job: {mode} {name}: {_step_summary(step)}", flush=True)
            steps.append(step)
            if step["interrupted"]:
                break
    finally:
        for name in files:
            (run_dir / name).unlink(missing_ok=True)
    result = steps[-1]["result"]
    rows = case_rows(mode, result)
    return {
        "mode": mode,
        "passed": result.get("check") == "pass",
        "steps": steps,
        "cases": rows,
        "geomean_us": geomean_us(rows) if mode != "test" else None,
        "interrupted": steps[-1]["interrupted"],
    }


def _step_end(step: dict) -> str:
    if step["interrupted"]:
        return "INTERRUPTED"
    return "TIMED OUT" if step["timed_out"] else f"exit {step['exit_code']}"


def _step_summary(step: dict) -> str:
    end = _step_end(step).lower()
    check = step["result"].get("check")
    return f"{step['wall_s']:.1f} s, {end}" + (f", check {check}" if check else "")


def _choice_cell(choice: dict) -> str:
    if choice["reused"]:
        return "reused"
    if not choice["after"]:
        return "none"
    parts = [f"{what} {', '.join(choice[what])}" for what in ("created", "rewritten", "removed") if choice[what]]
    return "; ".join(parts)


def markdown(job: dict) -> str:
    lines = [
        "# The leaderboard job, reproduced (bench/job.py)",
        "",
        f"- submission.py: {job['bundle']} (sha256 {job['bundle_sha256'][:12]})",
        f"- eval.py and utils.py: the task's own, from {job['task_dir']} (eval.py sha256 {job['eval_sha256'][:12]})",
        "- reference.py and task.py: this package's (reference bundled into one file), standing in for the "
        "task's aiter reference",
        f"- POPCORN_SEED for the evals: {job['seed'] if job['seed'] is not None else 'unset (the public run)'}; "
        f"pre-runs: {PRERUN_SEED}",
        f"- one HOME for every step; unset: {', '.join(job['unset']) or 'nothing to unset'}",
        f"- case files from problem/cases.py; the same as task.yml's lists: "
        f"{'yes' if job['cases_match_task_yml'] else 'NO'}",
        f"- python: {job['python']}",
        "",
        f"**Total {job['total_s']:.1f} s of the {JOB_CAP_S // 60}-minute cap ({job['total_s'] / JOB_CAP_S:.0%})"
        f"{'' if job['within_cap'] else ': OVER THE CAP'}{': INTERRUPTED' if job['interrupted'] else ''}**; "
        "the real job also checks out and installs kernelbot.",
        "",
        "| mode | step | limit | wall | end | check | choice files | Triton cache files |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for mode in job["modes"]:
        for s in mode["steps"]:
            end = _step_end(s)
            before, after = s["triton_cache_files"]
            lines.append(
                f"| {mode['mode']} | {s['step']} | {s['limit_s']} s | {s['wall_s']:.1f} s | {end} | "
                f"{s['result'].get('check', '')} | {_choice_cell(s['choice'])} | {before} -> {after} |"
            )
    for mode in job["skipped"]:
        lines.append(f"| {mode} | skipped (a mode before it did not pass) | | | | | | |")
    for mode in job["modes"]:
        lines += ["", f"## {mode['mode']}: {'passed' if mode['passed'] else 'NOT PASSED'}", ""]
        if mode["cases"]:
            lines += ["| # | case | status | mean | runs |", "|---|---|---|---|---|"]
            for r in mode["cases"]:
                mean = f"{r['mean_us']:.1f} us" if r["mean_us"] is not None else ""
                lines.append(f"| {r['index']} | {r['spec']} | {r['status']} | {mean} | {r['runs'] or ''} |")
                if r["error"]:
                    lines.append(f"| | error: {r['error'][:300].replace('|', '/')} | | | |")
        if mode["geomean_us"] is not None:
            lines += ["", f"Geomean {mode['geomean_us']:.1f} us."]
        for s in mode["steps"]:
            lines += ["", f"{s['step']}: `moe-mxfp4 select` lines ({len(s['select_lines'])}):", ""]
            lines += ["```", *(s["select_lines"] or ["(none)"]), "```"]
            if s["timed_out"] or s["interrupted"] or s["exit_code"] not in (0, 112):
                lines += ["", f"{s['step']}: last lines of stderr:", "", "```", *s["stderr_tail"], "```"]
    return "\n".join(lines) + "\n"


def run_job(task_dir: Path, bundle_file: Path | None, modes: list[str], out: Path, seed: int | None) -> dict:
    check_task_dir(task_dir)
    if bundle_file is not None and not bundle_file.is_file():
        raise JobError(f"--bundle {bundle_file}: no such file")
    task_yml = (task_dir / "task.yml").read_text()
    try:
        files = sources(task_dir, bundle_file)
    except bundle.BundleError as exc:
        raise JobError(f"bundle: {exc}") from None
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise JobError(f"--out {out}: cannot create it ({exc.strerror or exc})") from None
    mode_limits = limits(task_yml)
    case_files = {"test": case_file(TESTS), "benchmark": case_file(BENCHMARKS), "leaderboard": case_file(BENCHMARKS)}
    tmp = Path(tempfile.mkdtemp(prefix="moe-mxfp4-job-"))
    try:
        home, run_dir, case_dir = tmp / "home", tmp / "run", tmp / "cases"
        for folder in (home, run_dir, case_dir):
            folder.mkdir()
        env, unset = job_env(home)
        job = {
            "task_dir": str(task_dir),
            "eval_sha256": hashlib.sha256(files["eval.py"].encode()).hexdigest(),
            "bundle": str(bundle_file) if bundle_file else f"bundle.py's bundle of {ROOT}",
            "bundle_sha256": hashlib.sha256(files["submission.py"].encode()).hexdigest(),
            "seed": seed,
            "unset": unset,
            "python": sys.executable,
            "limits_s": {"pre-run": PRERUN_LIMIT_S, **mode_limits},
            "case_files": {mode: case_files[mode] for mode in modes},
            "cases_match_task_yml": task_yml_cases(task_yml) == {"tests": TESTS, "benchmarks": BENCHMARKS},
            "modes": [],
            "skipped": [],
        }
        start = time.perf_counter()
        for mode in modes:
            if job["modes"] and not job["modes"][-1]["passed"]:
                job["skipped"].append(mode)
                continue
            case_path = case_dir / f"{mode}.txt"
            case_path.write_text(case_files[mode])
            job["modes"].append(run_mode(mode, files, run_dir, home, env, case_path, mode_limits[mode], seed))
        job["total_s"] = time.perf_counter() - start
        job["interrupted"] = any(m["interrupted"] for m in job["modes"])
        job["within_cap"] = job["total_s"] <= JOB_CAP_S
        finished = not job["skipped"] and not job["interrupted"]
        job["passed"] = finished and all(m["passed"] for m in job["modes"]) and job["within_cap"]
        shutil.rmtree(out / "choice", ignore_errors=True)
        if (home / CHOICE_DIR).is_dir():
            shutil.copytree(
                home / CHOICE_DIR, out / "choice", ignore=shutil.ignore_patterns(*NOT_CHOICES), dirs_exist_ok=True
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (out / "job.json").write_text(json.dumps(job, indent=1) + "\n")
    (out / "job.md").write_text(markdown(job))
    return job


def main(argv: list[str] | None = None) -> int:
    p = UsageParser(prog="python -m bench.job", description=__doc__.split("\n\n")[0])
    p.add_argument("--task-dir", required=True, type=Path, help="the task's folder: eval.py, task.yml, utils.py")
    p.add_argument("--bundle", type=Path, help="the submission file (default: bundle.py's bundle of this package)")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="default: all three, in order")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "job", help="report folder")
    p.add_argument("--seed", type=int, help="POPCORN_SEED for the evals (the secret run's; default: unset)")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        job = run_job(args.task_dir.resolve(), args.bundle, args.modes, args.out, args.seed)
    except JobError as exc:
        return p.fail(str(exc))
    verdict = "passed" if job["passed"] else "INTERRUPTED" if job["interrupted"] else "NOT PASSED"
    print(f"bench.job: {verdict}, {job['total_s']:.1f} s of {JOB_CAP_S} s; report {shown(args.out / 'job.md')}")
    return 0 if job["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
