"""Command line of the local runner: `python -m bench --help` (run from the repository root).

Each backend runs in its own spawned process (as the leaderboard runs a submission in a spawned
worker), one backend after the other, every case in that one process; --inline runs them in this
process instead (module-level caches are then shared between backends).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue as queue_mod
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.runner import preflight
from bench.runner.backends import (
    NAMED_BACKENDS,
    apply_env_backend,
    backend_from_env,
    check_submission_env,
    parse_backends,
    select_notes,
)
from bench.runner.case_args import UsageError, read_cases_file, secret_seed
from bench.runner.case_args import select_cases as _select_cases
from bench.runner.checks import CHECKS
from bench.runner.pins import pin_rows, pins_text
from bench.runner.timing import BENCHMARK_LIMITS, BENCHMARK_WARMUP, LEADERBOARD_LIMITS, LEADERBOARD_WARMUP, Limits

MODES = ("test", "benchmark", "leaderboard", "profile", "host")

ROOT = Path(__file__).resolve().parents[2]

EPILOG = """
cases: tests | benchmarks | smoke | official | all | benchmarks:0,3 | bench:2-4 |
       dhidden=7168,dexpert=256,nroutedexperts=256,nexpertspertoken=8,nsharedexperts=1,bs=16,seed=1
       (default: tests in test mode, benchmarks otherwise; smoke on a machine without a GPU)
backends: auto (the package's default with its static tables, MOE_SELECT=0), select (the same
       with the first-call selection, MOE_SELECT=1), aiter, aiter-fused, triton, reference, or a
       submission file such as dist/submission.py (PATH@triton sets MOE_BACKEND for it, PATH@select
       MOE_SELECT=1); several at once are run one after the other and reported side by side.
       MOE_BACKEND, when set, stands for auto, select and files without @NAME.
exit status: 0 every case passed, 1 a case failed or errored, 2 a usage error, 130 Ctrl-C (what
       was measured until then is reported, and written to --out).
examples:
  python -m bench                                   # test mode, default backend, official tests
  python -m bench --mode benchmark --backend triton reference --out out/
  python -m bench --mode leaderboard --backend dist/submission.py triton
  python -m bench --mode test --cases smoke --backend triton   # CPU: Triton interpreter
  python -m bench --mode host --backend triton                 # GPU: host time per call
"""


def build_parser() -> argparse.ArgumentParser:
    p = preflight.UsageParser(
        prog="python -m bench",
        description="Evaluate and time custom_kernel the way the amd-moe-mxfp4 leaderboard does.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_case_options(p)
    _add_timing_options(p)
    _add_run_options(p)
    return p


def _add_case_options(p: argparse.ArgumentParser) -> None:
    """What runs: the mode, the backends, the cases and their seed, where results go, the device."""
    p.add_argument(
        "--mode",
        "-m",
        choices=MODES,
        default="test",
        help="runner mode (default: test); host: custom_kernel's host time per call on a GPU (the median of "
        "--max-reps calls, default 100, queued behind a GPU sleep and never synchronised)",
    )
    p.add_argument(
        "--backend",
        "-b",
        nargs="+",
        default=None,
        metavar="B",
        help=f"one or more of {', '.join(NAMED_BACKENDS)} or a submission .py path (default: auto)",
    )
    p.add_argument("--cases", "-c", nargs="+", default=None, metavar="SEL", help="case selectors (see below)")
    p.add_argument("--cases-file", metavar="FILE", help="cases in the runner's format, one 'key: value; ...' per line")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help="secret seed combined into every case seed (default: $POPCORN_SEED, else none)",
    )
    p.add_argument("--out", "-o", metavar="DIR", help="write <mode>.json/.csv/.md/.png (profile: .txt) there")
    p.add_argument(
        "--device",
        choices=("auto", "cuda", "cpu"),
        default="auto",
        help="auto: the GPU if torch sees one (CUDA or ROCm), else the CPU with TRITON_INTERPRET=1",
    )


def _add_timing_options(p: argparse.ArgumentParser) -> None:
    """How cases are timed: the roofline, the cache flush, the repetition limits and the warm-up."""
    p.add_argument(
        "--roofline",
        choices=("auto", "remeasure", "off"),
        default="auto",
        help="device ceilings: cached or measured once (auto), measured again, or no roofline",
    )
    p.add_argument("--ceilings", metavar="TBPS,TFLOPS", help="use these ceilings instead of measuring, e.g. 4.24,715")
    p.add_argument(
        "--flush",
        default="official",
        metavar="official|l2|none|BYTES",
        help="cache flush before each timed call: the runner's 64 GiB randn (official, default; falls "
        "back to a device-sized one), twice the L2 (l2), none, or a byte count",
    )
    p.add_argument(
        "--max-reps", type=preflight.positive_int, help="repetitions per case (runner: 1000 benchmark, 100 leaderboard)"
    )
    p.add_argument(
        "--max-time", type=preflight.positive_float, metavar="S", help="measured seconds per case (runner: 50 / 30)"
    )
    p.add_argument(
        "--max-wall",
        type=preflight.positive_float,
        metavar="S",
        help="wall seconds of a case's timing loop (runner: 120)",
    )
    p.add_argument(
        "--limit",
        action="append",
        default=[],
        metavar="B:KEY=V[,KEY=V]",
        help="per-backend limits overriding the above, KEY one of reps, time, wall; e.g. reference:reps=10,wall=15 "
        "(repeatable)",
    )
    p.add_argument("--no-warmup", action="store_true", help="skip the runner's warm-up on the first case")
    p.add_argument(
        "--keep-going",
        action="store_true",
        help="leaderboard: go on after a failing case (the runner stops at the first)",
    )


def _add_run_options(p: argparse.ArgumentParser) -> None:
    """How the run goes: in process or spawned, profiling, the deadline, the check and the output."""
    p.add_argument("--inline", action="store_true", help="run the backends in this process instead of spawning")
    p.add_argument("--profile-rows", type=preflight.positive_int, default=25, help="profile mode: rows of each table")
    p.add_argument(
        "--profile-warmup",
        type=preflight.non_negative_int,
        default=0,
        help="profile mode: calls before the profiled one (runner: 0, so compilation shows)",
    )
    p.add_argument(
        "--deadline",
        type=preflight.non_negative_float,
        metavar="S",
        help="start no case later than S seconds after launch (later ones are reported skipped), so that a "
        "time-limited machine still writes its outputs",
    )
    p.add_argument(
        "--check",
        choices=CHECKS,
        default="a4w4",
        help="what outputs are compared with: a4w4 (reference.ref_kernel, default), leaderboard (aiter's "
        "fused_moe after the submission, as the leaderboard; needs aiter) or both (flags disagreements)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help=f"run cases that Triton's CPU interpreter takes over {preflight.REFUSE_S / 60:.0f} minutes for "
        "(refused without it)",
    )
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="print the traceback of every failing case (by default inputs refused by design, a ValueError "
        "of the package's own checks, print their one-line message only)",
    )


def _git_describe() -> str | None:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        )
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True, timeout=10)
        return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def _limits(args, mode: str) -> tuple[dict, dict]:
    base = BENCHMARK_LIMITS if mode == "benchmark" else LEADERBOARD_LIMITS
    warm = BENCHMARK_WARMUP if mode == "benchmark" else LEADERBOARD_WARMUP
    lim = asdict(base)
    if args.max_reps is not None:
        lim["max_reps"] = args.max_reps
    if args.max_time is not None:
        lim["max_time_s"] = args.max_time
    if args.max_wall is not None:
        lim["max_wall_s"] = args.max_wall
    return lim, asdict(warm)


_LIMIT_KEYS = {"reps": "max_reps", "time": "max_time_s", "wall": "max_wall_s"}


def parse_limit_overrides(items: list[str], labels: list[str]) -> dict[str, dict]:
    """--limit values -> {backend label: {Limits field: value}}."""
    out: dict[str, dict] = {}
    keys = "reps=N, time=S or wall=S"
    for item in items:
        label, sep, spec = item.rpartition(":")
        if not sep or not label:
            raise UsageError(f"--limit {item!r}: expected BACKEND:KEY=V[,KEY=V], KEY one of {keys}")
        if label not in labels:
            raise UsageError(
                f"--limit {item!r}: {label!r} is not a backend of this run (--backend gives {', '.join(labels)})"
            )
        for part in spec.split(","):
            key, eq, value = part.partition("=")
            field = _LIMIT_KEYS.get(key.strip())
            if not eq or field is None:
                raise UsageError(f"--limit {item!r}: {part!r} is not {keys}")
            parse = preflight.positive_int if field == "max_reps" else preflight.positive_float
            try:
                out.setdefault(label, {})[field] = parse(value.strip())
            except argparse.ArgumentTypeError as exc:
                raise UsageError(f"--limit {item!r}: {key.strip()} {exc}") from None
    return out


def _versions() -> dict:
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for pkg in ("torch", "triton", "aiter"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def _status_line(label: str, case, res: dict) -> str:
    """The live line of a finished case: status, time, and the failure's one-line message."""
    from bench.runner.report import first_line, time_text

    st = res.get("stats")
    parts = [f"{label}: {case.label} {case.shape} {res['status']}"]
    if st:
        parts.append(f"mean {time_text(st['mean'] / 1e3)} over {st['runs']} runs")
    elif res.get("call_ns") is not None:
        parts.append(f"call {time_text(res['call_ns'] / 1e3)}")
    if res["status"] != "pass" and first_line(res.get("message")):
        parts.append(f"- {first_line(res['message'])}")
    return " ".join(parts)


def _progress(console, quiet: bool):
    """The progress bar of a run: off when quiet or when the console is a file (a log file gets the
    event lines, not the bar's redraws)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=quiet or not console.is_terminal,
        transient=False,
    )


def _logger(progress) -> Callable[..., None]:
    """log(text, style): one line per event after a time stamp (11 characters), cut to the console's
    width; printed, not console.log'ed, which pads every line to the width (200 characters in a log file)."""
    from rich.text import Text

    def log(text: str, style: str | None = None) -> None:
        line = Text(text, style=style or "")
        line.truncate(max(20, progress.console.width - 11), overflow="ellipsis")
        progress.console.print(Text(time.strftime("[%H:%M:%S] "), style="log.time") + line, soft_wrap=True)

    return log


def _event_handler(job: dict, cases, results: list, progress, task, log) -> Callable[[dict], None]:
    """handle(message) for one backend's worker: the progress bar, the event lines, its results."""
    label = job["label"]
    state = {"case": None}

    def handle(msg: dict) -> None:
        kind = msg.get("type")
        if kind == "loaded":
            progress.update(task, description=f"{label}: loaded")
        elif kind == "warmup-start":
            progress.update(task, description=f"{label}: warm-up on {cases[0].label} {cases[0].shape}")
        elif kind == "start":
            c = cases[msg["index"]]
            state["case"] = c
            job["in_progress"] = msg["index"]
            progress.update(task, description=f"{label}: {c.label} {c.shape}")
        elif kind == "progress" and state["case"] is not None:
            c = state["case"]
            progress.update(task, description=f"{label}: {c.label} {c.shape} rep {msg['reps']}")
        elif kind == "warmup":
            note = "" if msg["status"] == "pass" else f" ({msg['status']}: {msg['message']})"
            log(f"{label}: warm-up on {cases[0].label} took {msg['seconds']:.1f} s{note}")
        elif kind == "device":
            job["device_info"] = msg["info"]
        elif kind == "case":
            i, res = msg["index"], msg["result"]
            results[i] = res
            progress.advance(task)
            log(_status_line(label, cases[i], res), None if res["status"] == "pass" else "red")
        elif kind == "interrupted":
            job["interrupted"] = True
        elif kind == "fatal":
            log(f"{label}: worker failed: {msg['message']}", "red")
            job["exit_message"] = f"the worker failed before this case: {msg['message']}"
            job["exit_traceback"] = msg.get("traceback", "")

    return handle


def _run_jobs(jobs: list[dict], cases, inline: bool, console, quiet: bool) -> tuple[dict[str, list[dict]], bool]:
    """Run each backend's job: (results[label][case index] = CaseResult dict, interrupted by Ctrl-C).
    After a Ctrl-C the cases not measured are marked skipped and no further backend starts."""
    results: dict[str, list[dict | None]] = {j["label"]: [None] * len(cases) for j in jobs}
    progress = _progress(console, quiet)
    log = _logger(progress)
    interrupted = False
    with progress:
        for job in jobs:
            label = job["label"]
            task = progress.add_task(f"{label}: starting (importing torch and the submission)", total=len(cases))
            handle = _event_handler(job, cases, results[label], progress, task, log)
            try:
                if inline:
                    from bench.runner.worker import run_backend

                    run_backend(job, handle)
                else:
                    _spawn(job, handle)
            except KeyboardInterrupt:
                job["interrupted"] = True
            interrupted = interrupted or bool(job.get("interrupted"))
            progress.update(task, description=f"{label}: {'interrupted' if interrupted else 'done'}")
            if interrupted:
                break
    for job in jobs:
        _fill_missing(job, results[job["label"]], interrupted)
    return results, interrupted


def _fill_missing(job: dict, results: list, interrupted: bool) -> None:
    """A result for each case the job's worker did not report: an error when it stopped on its own,
    else interrupted (the case in progress) or skipped."""
    for i, res in enumerate(results):
        if res is not None:
            continue
        if not interrupted:
            message = job.get("exit_message") or "the worker stopped before this case"
            res = {"status": "error", "message": message, "traceback": job.get("exit_traceback", "")}
        elif i == job.get("in_progress"):  # a worker that did not report the case it was running
            res = {"status": "interrupted", "message": "interrupted (Ctrl-C) during this case"}
        else:
            res = {"status": "skipped", "message": "interrupted (Ctrl-C) before this case"}
        results[i] = res


INTERRUPT_GRACE_S = 10.0  # how long a worker gets to report the case it was timing after a Ctrl-C


def _pump(q, proc, handle, grace_s: float | None = None) -> bool:
    """Hand the worker's messages to handle until it reports done (or interrupted), exits, or
    grace_s passes; True when it reported its end."""
    end = None if grace_s is None else time.monotonic() + grace_s
    while end is None or time.monotonic() < end:
        try:
            msg = q.get(timeout=0.2)
        except queue_mod.Empty:
            if proc.is_alive():
                continue
            # Drain what the worker managed to send before it went away.
            try:
                while True:
                    msg = q.get(timeout=0.5)
                    handle(msg)
                    if msg.get("type") in ("done", "interrupted"):
                        return True
            except queue_mod.Empty:
                return False
        handle(msg)
        if msg.get("type") in ("done", "interrupted"):
            return True
    return False


def _spawn(job: dict, handle) -> None:
    import multiprocessing as mp

    from bench.runner.worker import process_main

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=process_main, args=(job, q), name=f"bench-{job['label']}")
    proc.start()
    try:
        ended = _pump(q, proc, handle)
    except KeyboardInterrupt:
        # A terminal's Ctrl-C reaches the worker too; a signal sent to this process alone does not.
        job["interrupted"] = True
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGINT)
        try:
            ended = _pump(q, proc, handle, grace_s=INTERRUPT_GRACE_S)
        except KeyboardInterrupt:
            ended = False
    proc.join(timeout=60 if ended and not job.get("interrupted") else 5)
    if proc.is_alive():
        proc.terminate()
        proc.join(timeout=10)
    if not ended and not job.get("interrupted"):
        job["exit_message"] = f"worker process exited with code {proc.exitcode} before this case"


@contextlib.contextmanager
def _environment_restored():
    """The run's changes to os.environ (TRITON_INTERPRET, CUDA_VISIBLE_DEVICES, POPCORN_SEED) end
    with it, so that a caller in the same process (the tests) keeps its own."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for key in set(os.environ) - set(saved):
            del os.environ[key]
        for key, value in saved.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


def _is_rocm() -> bool:
    import torch

    return torch.version.hip is not None


def main(argv: list[str] | None = None) -> int:
    """The command line; exit status 0 all passed, 1 a case did not, 2 usage, 130 Ctrl-C."""
    try:
        with _environment_restored():
            return _main(argv)
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C)", file=sys.stderr)
        return 130


def _backends(args) -> tuple[list, list[str]]:
    """--backend, with MOE_BACKEND standing for the default backends: (specs, notes)."""
    backends = parse_backends(args.backend or ["auto"], ROOT)
    check_submission_env()
    notes = apply_env_backend(backends, backend_from_env())
    return backends, notes + select_notes(backends, by_default=args.backend is None)


def _environment_notes(args) -> list[str]:
    """The options that override a variable the user set, besides --backend's (_backends)."""
    notes = []
    seed = os.environ.get("POPCORN_SEED", "").strip()
    if args.seed is not None and seed:
        notes.append(f"POPCORN_SEED={seed} ignored: --seed {args.seed} is the secret seed")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if args.device == "cpu" and visible:
        notes.append(f"CUDA_VISIBLE_DEVICES={visible} ignored: --device cpu hides every GPU from the run")
    return notes


def _given_cases(selectors: list[str], secret: int | None) -> list:
    """The cases of --cases and --cases-file, each shape and seed checked (case_args), before any
    other check: an impossible shape is a usage error, not a case that fails in generate_input."""
    if not selectors:
        return []
    try:
        cases = _select_cases(selectors, secret)
    except UsageError as exc:
        raise UsageError(f"--cases: {exc}") from None
    if not cases:
        raise UsageError("--cases: no cases selected")
    return cases


@dataclass
class _Setup:
    """What the command line asks for, each part checked before anything runs."""

    backends: list
    notes: list[str]
    secret: int | None
    selectors: list[str]
    cases: list
    device: str
    ceilings: object | None  # --ceilings, parsed


def _setup(parser, args) -> _Setup:
    """Every check of the command line, a usage error (exit status 2) for the first that fails."""
    try:
        backends, notes = _backends(args)
        notes += _environment_notes(args)
        secret = secret_seed(args.seed)
        selectors = list(args.cases or [])
        if args.cases_file:
            selectors += read_cases_file(args.cases_file)
        cases = _given_cases(selectors, secret)
        preflight.check_libraries()
        preflight.check_out_dir(args.out)
        device = preflight.check_device(args.device)
        if not selectors:
            default = ["smoke"] if device == "cpu" else (["tests"] if args.mode == "test" else ["benchmarks"])
            cases = _select_cases(default, secret)  # refused only for a secret seed too large for their seeds
        preflight.check_aiter(backends, device)
        preflight.check_leaderboard_check(args.check, device)
        preflight.check_mode(args.mode, device)
    except UsageError as exc:
        parser.error(str(exc))
    if args.flush not in ("official", "l2", "none") and not args.flush.isdigit():
        parser.error(f"--flush: expected official, l2, none or a byte count, got {args.flush!r}")
    ceilings = None
    if args.ceilings:
        from bench.roofline import parse_ceilings

        try:
            ceilings = parse_ceilings(args.ceilings)
        except ValueError as exc:
            parser.error(str(exc))
    return _Setup(backends, notes, secret, selectors, cases, device, ceilings)


def _console():
    from rich.console import Console

    console = Console(log_path=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(log_path=False, width=max(console.width, 200))  # a file or pipe: whole lines
    return console


def _child_env(device: str, device_option: str) -> dict[str, str]:
    """The variables the workers need, set here too (they run in this process with --inline)."""
    child_env: dict[str, str] = {}
    if device == "cpu":
        # Must be in the environment before anything imports triton (the workers are fresh processes).
        child_env["TRITON_INTERPRET"] = os.environ.get("TRITON_INTERPRET", "1")
        if device_option == "cpu":
            child_env["CUDA_VISIBLE_DEVICES"] = ""
        os.environ.update(child_env)
    return child_env


def _ceilings(given, roofline_option: str, device: str, console):
    """The device ceilings: --ceilings, else cached or measured (--roofline), else None."""
    from bench import roofline

    ceilings = given
    if ceilings is None and roofline_option != "off":
        t0 = time.perf_counter()
        ceilings = roofline.load_or_measure(device, remeasure=roofline_option == "remeasure")
        if ceilings.source == "measured":
            console.print(f"measured ceilings of {ceilings.device} in {time.perf_counter() - t0:.1f} s")
    if ceilings is not None:
        console.print(
            f"roofline: {ceilings.bandwidth / 1e12:.3g} TB/s copy, {ceilings.matmul / 1e12:.3g} TFLOP/s "
            f"bf16 ({ceilings.source})"
        )
    return ceilings


def _job(b, args, setup: _Setup, child_env: dict, limits: dict, warm: dict, deadline: float | None) -> dict:
    """What a worker needs to run one backend over the cases."""
    return {
        "label": b.label,
        "path": str(b.path),
        "moe_backend": b.moe_backend,
        "root": str(ROOT),
        "mode": args.mode,
        "device": setup.device,
        "flush": args.flush,
        "env": {**child_env, **b.env},
        "global_seed": setup.secret if setup.secret is not None else 42,
        "cases": [{"params": c.params, "label": c.label} for c in setup.cases],
        "limits": limits,
        "warmup_limits": warm,
        "warmup": not args.no_warmup,
        "keep_going": args.keep_going,
        "roofline": True,
        "profile_rows": args.profile_rows,
        "profile_warmup": args.profile_warmup,
        "deadline": deadline,
        "check": args.check,
        "host_calls": args.max_reps if args.mode == "host" else None,
    }


def _meta(args, argv, setup: _Setup, jobs, ceilings, device_name, limits, warm, overrides, t_start, interrupted):
    """The run's description in the outputs: where, when, what with, under which limits."""
    from bench.runner import report

    mode = args.mode
    timed = mode in report.TIMED_MODES
    dev_info = next((j.get("device_info") for j in jobs if j.get("device_info")), {})
    return {
        "mode": mode,
        "device": device_name,
        "device_kind": setup.device,
        "date": time.strftime("%Y-%m-%d %H:%M", time.localtime(t_start)),
        "seconds": round(time.time() - t_start, 1),
        "git": _git_describe(),
        "versions": _versions(),
        "backends": [
            {"label": j["label"], "path": j["path"], "moe_backend": j["moe_backend"], "env": j["env"]} for j in jobs
        ],
        "seed": setup.secret,
        "check": args.check,
        "flush": f"{dev_info.get('flush')} ({dev_info.get('flush_bytes', 0) / 2**30:.2f} GiB)" if dev_info else None,
        "limits": limits if timed else None,
        "limit_overrides": overrides or None,
        "warmup": (warm if not args.no_warmup else None) if timed else None,
        "ceilings": ceilings.as_dict() if ceilings else None,
        "ceilings_text": (
            f"{ceilings.bandwidth / 1e12:.3g} TB/s, {ceilings.matmul / 1e12:.3g} TFLOP/s bf16" if ceilings else None
        ),
        "argv": sys.argv[1:] if argv is None else list(argv),
        "interrupted": interrupted,
    }


def _rows(mode: str, cases, jobs, results, ceilings) -> tuple[list[dict], dict[str, str]]:
    """The report's rows, case by case and backend by backend, and the profiles by row title."""
    from bench.runner import report

    aiter = report.aiter_times()
    rows, profiles = [], {}
    for i, c in enumerate(cases):
        for j in jobs:
            res = results[j["label"]][i]
            rows.append(report.build_row(mode, j["label"], c, res, ceilings, aiter))
            if res.get("profile"):
                profiles[f"{j['label']} {c.label} {c.shape}"] = res["profile"]
    return rows, profiles


def _write_pins(console, rows, mode: str, out: str | None, amd: bool) -> None:
    """Print the selection's choices as table rows that pin them, and write them beside the outputs."""
    pins = pin_rows(rows, amd=amd)
    pins_path = Path(out) / f"{mode}_pins.py" if out else None
    if pins:
        console.print("the selection's choices, as table rows that pin them:\n" + pins_text(pins), markup=False)
        if pins_path:
            pins_path.write_text(pins_text(pins))
            console.print(f"wrote {preflight.shown(pins_path)}")
    elif pins_path:
        pins_path.unlink(missing_ok=True)  # an earlier run's, which this one does not support


def _main(argv: list[str] | None) -> int:
    t_launch = time.time()
    parser = build_parser()
    args = parser.parse_args(argv)
    mode = args.mode
    setup = _setup(parser, args)
    device, cases = setup.device, setup.cases

    # The runner removes the secret from the environment before the submission runs.
    os.environ.pop("POPCORN_SEED", None)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    console = _console()
    for note in setup.notes:
        print(f"{parser.prog}: note: {note}", file=sys.stderr)
    child_env = _child_env(device, args.device)
    if not setup.selectors and device == "cpu":
        console.print("no GPU: running the SMOKE cases (give --cases to choose)")
    limits, warm = _limits(args, mode)
    try:
        overrides = parse_limit_overrides(args.limit, [b.label for b in setup.backends])
        warmup = None if args.no_warmup else Limits(**warm)
        run_time = preflight.check_run_time(setup.backends, device, cases, mode, Limits(**limits), warmup, args.force)
    except UsageError as exc:
        parser.error(str(exc))
    if run_time:
        console.print(run_time)

    from bench import roofline
    from bench.runner import report

    ceilings = _ceilings(setup.ceilings, args.roofline, device, console)
    deadline = None if args.deadline is None else t_launch + args.deadline
    jobs = [
        _job(b, args, setup, child_env, {**limits, **overrides.get(b.label, {})}, warm, deadline)
        for b in setup.backends
    ]

    t_start = time.time()
    results, interrupted = _run_jobs(jobs, cases, args.inline, console, args.quiet)

    rows, profiles = _rows(mode, cases, jobs, results, ceilings)
    summary = report.summarize(rows, [j["label"] for j in jobs])
    device_name = ceilings.device if ceilings is not None and ceilings.source != "given" else None
    if device_name is None:
        device_name = roofline.device_key(device)
    meta = _meta(args, argv, setup, jobs, ceilings, device_name, limits, warm, overrides, t_start, interrupted)
    if mode == "profile" and not args.out:
        for k, v in profiles.items():
            console.print(f"== {k}\n{v}")
    report.print_tables(
        console, rows, summary, mode, title=f"{mode} on {device_name}", verbose=args.verbose, cpu=device == "cpu"
    )
    written = report.write_outputs(Path(args.out), mode, rows, summary, meta, profiles) if args.out else []
    if written:
        console.print("wrote " + ", ".join(preflight.shown(p) for p in written))
    _write_pins(console, rows, mode, args.out, amd=device == "cuda" and _is_rocm())
    if interrupted:
        measured = sum(r["status"] not in ("skipped", "interrupted") or r["runs"] is not None for r in rows)
        where = f"; written to {args.out}" if written else ""
        print(f"interrupted (Ctrl-C): {measured} of {len(rows)} results measured{where}", file=sys.stderr)
        return 130
    return 0 if all(r["status"] == "pass" for r in rows) else 1
