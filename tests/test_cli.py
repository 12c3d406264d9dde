"""What a user of `python -m bench` sees: one-line errors naming the option (exit 2), failures
summarised by the exception's own message, MOE_BACKEND, Ctrl-C, the interpreter's estimate,
80-column tables and the chart's layout."""

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console

from bench import roofline
from bench.runner import cli, evaluate, interpreter_time, preflight, report
from bench.runner.backends import BackendSpec, apply_env_backend, backend_from_env, select_notes
from bench.runner.case_args import UsageError, read_cases_file, select_cases
from bench.runner.timing import BENCHMARK_LIMITS, Limits
from problem.cases import TINY

ROOT = Path(__file__).resolve().parents[1]
# A submission that hands the package's checks a padded config: an input refused by design, as a
# ValueError of the package's own (the runner refuses impossible shapes before any case runs).
PADDED_SUBMISSION = """from problem.validation import validate_inputs
from reference import ref_kernel


def custom_kernel(data):
    *tensors, config = data
    if config["bs"] == 8:  # smoke:0; the other cases pass
        validate_inputs((*tensors, {**config, "d_hidden_pad": config["d_hidden"] + 256}))
    return ref_kernel(data)
"""
PADDED_MESSAGE = "ValueError: config: d_hidden_pad (768) != d_hidden (512); padded shapes are not supported"


@pytest.fixture
def padded(tmp_path, monkeypatch) -> str:
    """The backend `padded.py`, so named in the tables (the current folder is tmp_path)."""
    (tmp_path / "padded.py").write_text(PADDED_SUBMISSION)
    monkeypatch.chdir(tmp_path)
    return "padded.py"


ON_CPU = not torch.cuda.is_available()
TINY_CASE = ",".join(f"{k}={v}" for k, v in TINY[0].items())


def usage_error(argv, capsys) -> str:
    """stderr of a run that must stop with exit status 2 before any case; exactly one line."""
    with pytest.raises(SystemExit) as exc:
        cli.main(argv + ["--roofline", "off", "-q"])
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


# ---------------------------------------------------------------- options


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--max-reps", "-5"], "argument --max-reps: must be at least 1, got -5"),
        (["--max-reps", "2.5"], "argument --max-reps: expected an integer, got '2.5'"),
        (["--max-time", "0"], "argument --max-time: must be above 0, got 0"),
        (["--max-wall", "nan"], "argument --max-wall: must be above 0, got nan"),
        (["--deadline", "-1"], "argument --deadline: must be at least 0, got -1"),
        (["--profile-rows", "0"], "argument --profile-rows: must be at least 1"),
        (["--limit", "reference:foo=3"], "'reference' is not a backend of this run (--backend gives auto)"),
        (["--backend", "reference", "--limit", "reference:foo=3"], "'foo=3' is not reps=N, time=S or wall=S"),
        (["--backend", "reference", "--limit", "reference:reps=0"], "reps must be at least 1, got 0"),
        (["--backend", "reference", "--limit", "reference:wall=-2"], "wall must be above 0, got -2"),
        (["--backend", "fastest"], "unknown backend 'fastest'"),
        (["--mode", "race"], "invalid choice: 'race'"),
        (["--flush", "lots"], "--flush"),
        (["--ceilings", "4.2"], "--ceilings"),
    ],
)
def test_bad_option_values_are_one_line_usage_errors(argv, needle, capsys):
    assert needle in usage_error(argv, capsys)


def test_an_out_folder_that_cannot_be_written_is_refused_before_the_run(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    err = usage_error(["--out", str(blocker / "out")], capsys)
    assert f"--out {blocker / 'out'}: cannot create it" in err


@pytest.mark.skipif(not ON_CPU, reason="a GPU is present")
def test_device_cuda_without_a_gpu_is_a_usage_error(capsys):
    err = usage_error(["--device", "cuda"], capsys)
    assert "--device cuda: torch" in err and "sees no GPU" in err and "--device cpu" in err


@pytest.mark.parametrize("check", ["leaderboard", "both"])
def test_the_leaderboards_check_without_aiter_is_refused_up_front(check, capsys):
    if "aiter" in sys.modules or preflight._aiter_missing("cuda" if not ON_CPU else "cpu") is None:
        pytest.skip("aiter can run here")
    err = usage_error(["--check", check, "--cases", "smoke:0"], capsys)
    assert err.startswith(f"python -m bench: error: --check {check}: ") and "--check a4w4" in err


def test_the_tile_tuner_without_a_gpu_says_why_and_exits_2(capsys):
    from bench.tune import tiles

    if tiles.why_cannot_run() is None:
        pytest.skip("this machine can run the tuner")
    assert tiles.main(["--cases", "bench", "--sweep"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m bench.tune.tiles: error: cannot run here: ")


def test_aiter_backends_without_rocm_say_what_to_run_instead(capsys):
    for backend in ("aiter", "aiter-fused"):
        err = usage_error(["--backend", backend, "triton"], capsys)
        assert f"--backend {backend}:" in err
        assert "ROCm on an MI355X (gfx950)" in err and "--backend triton" in err


@pytest.mark.skipif(not ON_CPU, reason="a GPU is present")
def test_host_mode_without_a_gpu_is_a_usage_error(capsys):
    err = usage_error(["--mode", "host"], capsys)
    assert "--mode host: measures custom_kernel's enqueue time on a GPU" in err and "--mode test" in err


def test_host_mode_times_calls_queued_behind_a_sleep_and_retries_when_the_gpu_caught_up():
    class Device:
        kind = "cuda"

        def __init__(self):
            self.sleeps, self.synced = [], 0

        def synchronize(self):
            self.synced += 1

        def hold_busy(self, seconds):
            self.sleeps.append(seconds)
            caught_up = len(self.sleeps) == 1  # the first sleep ends before the calls do

            class Event:
                def query(self):
                    return caught_up

            return Event()

    calls = []
    device = Device()
    res = evaluate.run_host({"seed": 3}, calls.append, lambda seed: seed, lambda data, out: (True, ""), device, 7)
    assert len(calls) == 2 + 7 + 7 and device.sleeps == [evaluate.HOST_BUSY_S, 4 * evaluate.HOST_BUSY_S]
    assert res.status == "pass" and res.stats.runs == 7 and res.host_ns is not None
    assert res.stats.best <= res.host_ns <= res.stats.worst and "median of 7 calls behind a 0.8 s" in res.message
    failing = evaluate.run_host({"seed": 3}, calls.append, lambda seed: seed, lambda data, out: (False, "bad"), device)
    assert (failing.status, failing.message) == ("fail", "checked call, seed 3: bad")


# ---------------------------------------------------------------- every tool's usage errors


def _tool_error(main, argv, capsys) -> str:
    """stderr of a tool's main() that refuses argv: status 2 (returned or raised), one line."""
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_every_tool_says_error_the_same_way(tmp_path, capsys):
    import bundle
    from bench import job, seed_check
    from bench.gfx950 import run as gfx950_run
    from bench.tune import aiter_rows, tiles

    unknown = "unknown case 'nope': use tests, benchmarks, smoke, official, all"
    interpret = os.environ.get("TRITON_INTERPRET")
    for main, argv, line in (
        (cli.main, ["--cases", "nope"], f"python -m bench: error: --cases: {unknown}"),
        (seed_check.main, ["--cases", "nope"], f"python -m bench.seed_check: error: --cases: {unknown}"),
        (seed_check.main, ["--seeds", "0"], "python -m bench.seed_check: error: argument --seeds: must be at least 1"),
        (tiles.main, ["--cases", "nope"], f"python -m bench.tune.tiles: error: --cases: {unknown}"),
        (tiles.main, ["--reps", "0"], "python -m bench.tune.tiles: error: argument --reps: must be at least 1"),
        (aiter_rows.main, ["--cases", "nope"], f"python -m bench.tune.aiter_rows: error: {unknown}"),
        (job.main, ["--task-dir", str(tmp_path / "none")], "python -m bench.job: error: --task-dir"),
        (bundle.main, ["-o", str(tmp_path)], f"bundle.py: error: -o {tmp_path}: a folder;"),
        (gfx950_run.main, ["--cases", "nope"], f"python -m bench.gfx950: error: --cases: {unknown}"),
    ):
        assert _tool_error(main, argv, capsys).startswith(line), (main.__module__, argv)
        # bench.gfx950 compiles with the interpreter off: the caller's setting comes back after it
        assert os.environ.get("TRITON_INTERPRET") == interpret, (main.__module__, argv)


def test_a_reversed_range_and_an_empty_out_folder_are_named(capsys):
    """bench:4-2 selected nothing, and -o '' wrote nothing, silently."""
    err = usage_error(["--cases", "bench:4-2"], capsys)
    assert (
        err.strip() == "python -m bench: error: --cases: case selector 'bench:4-2': range 4-2 is reversed; write it 2-4"
    )
    err = usage_error(["-o", ""], capsys)
    assert err.startswith("python -m bench: error: --out: empty folder name; ")


@pytest.mark.parametrize("backend", ["aiter", "aiter-fused"])
def test_an_aiter_moe_backend_from_the_environment_is_named_as_such(backend, monkeypatch, capsys):
    """MOE_BACKEND=aiter on a machine without aiter names MOE_BACKEND, not a --backend never given."""
    if preflight._aiter_missing("cuda" if not ON_CPU else "cpu") is None:
        pytest.skip("aiter can run here")
    monkeypatch.setenv("MOE_BACKEND", backend)
    err = usage_error(["--cases", "smoke:0"], capsys)
    assert err.startswith(f"python -m bench: error: MOE_BACKEND={backend} (from the environment): ")
    assert "--backend" not in err and "unset MOE_BACKEND" in err
    err = usage_error(["--cases", "smoke:0", "--backend", backend], capsys)  # the command line's is named so
    assert err.startswith(f"python -m bench: error: --backend {backend}: ")


@pytest.mark.skipif(not ON_CPU, reason="a GPU is present")
def test_the_gpu_tools_refuse_a_machine_without_one_in_one_line():
    """seed_check gave a 71-line InterpreterError traceback."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    for tool, argv, line in (
        (
            "bench.seed_check",
            [],
            "python -m bench.seed_check: error: no CUDA or ROCm GPU here; seed_check runs the kernels on a GPU",
        ),
        (
            "bench.h200.gluon_check",
            ["smoke"],
            "python -m bench.h200.gluon_check: error: no sm_90 GPU here; gluon_check runs the Gluon stages",
        ),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", tool, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        err = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(err) == 1 and err[0].startswith(line), proc.stderr


def test_argparse_errors_of_the_tools_are_one_line_without_the_usage():
    """bench.gfx950 printed argparse's usage lines before its error (bundle.py's in test_bundle)."""
    for command, line in (
        (["-m", "bench.gfx950", "--bogus"], "python -m bench.gfx950: error: unrecognized arguments: --bogus"),
        (
            ["-m", "bench.gfx950", "--gap-us", "x"],
            "python -m bench.gfx950: error: argument --gap-us: 'x' is not a number",
        ),
        (
            ["-m", "bench.h200.gluon_check", "nope"],
            "python -m bench.h200.gluon_check: error: argument mode: invalid choice",
        ),
    ):
        proc = subprocess.run([sys.executable, *command], cwd=ROOT, capture_output=True, text=True, timeout=300)
        err = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(err) == 1 and err[0].startswith(line), proc.stderr


def test_the_tile_tuner_takes_the_runners_cases(capsys):
    """One case syntax for the runner and the tuner (bench.runner.case_args): lists with indices,
    inline shapes; on a machine that cannot time it gets as far as saying so."""
    from bench.tune import tiles

    if tiles.why_cannot_run() is None:
        pytest.skip("this machine can run the tuner")
    for cases in (["bench:0,3"], ["smoke", "official"], [",".join(f"{k}={v}" for k, v in SHAPE.items())]):
        err = _tool_error(tiles.main, ["--cases", *cases], capsys)
        assert err.startswith("python -m bench.tune.tiles: error: cannot run here: "), cases


def test_profile_mode_on_the_cpu_says_why_the_table_is_short():
    class Device:
        kind = "cpu"

        def synchronize(self):
            pass

    res = evaluate.run_profile({"seed": 1}, torch.neg, lambda seed: torch.ones(4), lambda d, o: (True, ""), Device())
    first = res.profile.splitlines()[0]
    assert first.startswith("The call took ") and "torch.profiler does not see" in first and res.status == "pass"


def test_profile_mode_prints_no_profiler_lines_and_times_the_call(capfd):
    """kineto's USDT lines at the profile's start and stop are dropped from stderr; the kernel's
    own output to stderr is kept; the call column has the profiled call's wall time."""

    class Device:
        kind = "cpu"

        def synchronize(self):
            pass

    def kernel(x):
        os.write(2, b"the kernel's own line\n")
        return torch.neg(x)

    res = evaluate.run_profile({"seed": 1}, kernel, lambda seed: torch.ones(4), lambda d, o: (True, ""), Device())
    err = capfd.readouterr().err
    assert "USDT:" not in err and "STAGE:" not in err and "the kernel's own line" in err
    assert res.call_ns > 0 and res.status == "pass"


# ---------------------------------------------------------------- --cases-file


FILE_CASE = "dhidden: 256; dexpert: 512; nroutedexperts: 4; nexpertspertoken: 2; nsharedexperts: 1; bs: 5; seed: 2"


@pytest.mark.parametrize(
    "content, needle",
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "not a text file (byte 0 is not UTF-8)"),
        (b"dhidden: 1\x00\n", "not a text file (it holds NUL bytes)"),
        (b"", "no cases in it"),
        (b"# only a comment\n\n   \n", "no cases in it"),
        (FILE_CASE.encode() + b"\n# fine\ndhidden: 512; dexpert 256\n", "cases.txt:3: cannot read 'dexpert 256'"),
        (b"dhidden: 512; colour: 3\n", "cases.txt:1: unknown key 'colour'"),
        (b"dhidden: 512\n", "cases.txt:1: missing dexpert"),
    ],
)
def test_cases_file_errors_name_the_file_line_and_format(tmp_path, content, needle, capsys):
    path = tmp_path / "cases.txt"
    path.write_bytes(content)
    err = usage_error(["--cases-file", str(path)], capsys)
    assert needle in err and "--cases-file" in err
    assert "one case per line, e.g. 'dhidden: 7168; dexpert: 256;" in err


SHAPE = dict(dhidden=512, dexpert=256, nroutedexperts=8, nexpertspertoken=4, nsharedexperts=1, bs=8)


@pytest.mark.parametrize(
    "changes, needle",
    [
        # torch.topk raised "selected index k out of range" in the worker
        (dict(nexpertspertoken=9), "nexpertspertoken (9) must be at most nroutedexperts (8)"),
        (dict(nexpertspertoken=0), "nexpertspertoken must be at least 1, got 0"),
        (dict(nroutedexperts=0), "nroutedexperts must be at least 1, got 0"),
        (dict(nsharedexperts=-1), "nsharedexperts must be at least 0, got -1"),
        (dict(bs=0), "bs must be at least 1, got 0"),
        (dict(dhidden=-512), "dhidden must be at least 1, got -512"),
        (dict(dexpert=0), "dexpert must be at least 1, got 0"),
        # generate_input pads them to 256, which custom_kernel refuses
        (dict(dhidden=500), "dhidden (500) must be a multiple of 256"),
        (dict(dexpert=384), "dexpert (384) must be a multiple of 256"),
        (dict(seed=-1), "seed must be 0 .. 2**63-1"),
        (
            dict(seed=2**63),
            f"seed must be 0 .. 2**63-1 (torch's seeds, with room for the leaderboard's steps), got {2**63}",
        ),
    ],
)
def test_impossible_shapes_are_refused_before_the_run(changes, needle, tmp_path, capsys):
    case = {**SHAPE, **changes}
    spec = ",".join(f"{k}={v}" for k, v in case.items())
    err = usage_error(["--cases", "smoke:0", spec], capsys)
    assert err.startswith(f"python -m bench: error: --cases: case '{spec}': {needle}"), err
    path = tmp_path / "cases.txt"
    path.write_text("; ".join(f"{k}: {v}" for k, v in case.items()) + "\n")
    err = usage_error(["--cases-file", str(path)], capsys)
    assert err.startswith(f"python -m bench: error: --cases-file {path}:1: {needle}"), err


def test_the_smallest_shapes_and_no_shared_expert_are_possible():
    """The rules refuse what cannot run, nothing else: k = routed experts, no shared expert, one token."""
    case = {**SHAPE, "dhidden": 256, "nroutedexperts": 4, "nexpertspertoken": 4, "nsharedexperts": 0, "bs": 1}
    (custom,) = select_cases([",".join(f"{k}={v}" for k, v in case.items())])
    assert custom.shape == "H256-I256-E4-k4-bs1"


def test_cases_file_missing_and_valid(tmp_path, capsys):
    err = usage_error(["--cases-file", str(tmp_path / "none.txt")], capsys)
    assert "none.txt: cannot read it" in err
    path = tmp_path / "cases.txt"
    path.write_text(f"# the runner's format\n{FILE_CASE}\n\n{FILE_CASE.replace('bs: 5', 'bs: 7')}\n")
    cases = select_cases(read_cases_file(path))
    assert [(c.label, c.params["bs"], c.params["seed"]) for c in cases] == [("custom0", 5, 2), ("custom1", 7, 2)]


# ---------------------------------------------------------------- MOE_BACKEND


def test_moe_backend_stands_for_the_default_backends(tmp_path):
    sub = tmp_path / "sub.py"
    sub.write_text("def custom_kernel(data):\n    return data\n")
    specs = [BackendSpec("auto", ROOT / "submission.py"), BackendSpec(str(sub), sub)]
    assert apply_env_backend(specs, "reference") == []
    assert [(s.label, s.moe_backend) for s in specs] == [("reference", "reference"), (f"{sub}@reference", "reference")]
    named = [BackendSpec("triton", ROOT / "submission.py", "triton")]
    assert apply_env_backend(named, "reference") == ["MOE_BACKEND=reference ignored for --backend triton"]
    assert named[0].moe_backend == "triton"
    with pytest.raises(UsageError, match="given twice"):
        apply_env_backend([BackendSpec("auto", sub), BackendSpec("triton", sub, "triton")], "triton")
    assert backend_from_env({"MOE_BACKEND": ""}) is None and backend_from_env({}) is None


def test_unknown_moe_backend_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setenv("MOE_BACKEND", "bogus")
    err = usage_error([], capsys)
    assert "MOE_BACKEND='bogus' is not a backend" in err and "--backend" in err


def test_an_option_that_overrides_a_variable_says_so(monkeypatch):
    specs = [
        BackendSpec("auto", ROOT / "submission.py", env={"MOE_SELECT": "0"}),
        BackendSpec("select", ROOT / "submission.py", env={"MOE_SELECT": "1"}),
        BackendSpec("triton", ROOT / "submission.py", "triton"),
        BackendSpec("reference", ROOT / "submission.py", "reference", from_env=True),
    ]
    assert select_notes(specs, by_default=False, environ={}) == []
    assert select_notes(specs, by_default=False, environ={"MOE_SELECT": "1"}) == [
        "MOE_SELECT=1 ignored for --backend auto, which sets MOE_SELECT=0 (--backend select selects)",
        "MOE_SELECT=1 ignored for --backend triton: MOE_BACKEND=triton runs it alone",
    ]
    assert select_notes(specs[:3], by_default=False, environ={"MOE_SELECT": "0"}) == [
        "MOE_SELECT=0 ignored for --backend select, which sets MOE_SELECT=1 (--backend auto keeps the static tables)"
    ]
    assert select_notes(specs[:1], by_default=True, environ={"MOE_SELECT": "auto"}) == [
        "MOE_SELECT=auto ignored for --backend auto (the default), which sets MOE_SELECT=0 (--backend select selects)"
    ]


def test_the_notes_come_on_stderr_before_the_run(monkeypatch, capfd):
    """MOE_SELECT=1 python -m bench selected nothing (--backend auto sets MOE_SELECT=0), silently."""
    monkeypatch.setenv("MOE_SELECT", "1")
    monkeypatch.setenv("POPCORN_SEED", "7")
    argv = ["--backend", "reference", "--cases", "smoke:1", "--seed", "3", "--inline", "--roofline", "off", "-q"]
    assert cli.main(argv) == 0
    err = capfd.readouterr().err.splitlines()
    assert err[:2] == [
        "python -m bench: note: MOE_SELECT=1 ignored for --backend reference: MOE_BACKEND=reference runs it alone",
        "python -m bench: note: POPCORN_SEED=7 ignored: --seed 3 is the secret seed",
    ]


def test_moe_backend_is_honoured_and_recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("MOE_BACKEND", "reference")
    argv = ["--cases", "smoke:1", "--inline", "--roofline", "off", "--out", str(tmp_path), "-q"]
    assert cli.main(argv) == 0
    doc = json.loads((tmp_path / "test.json").read_text())
    assert doc["meta"]["backends"][0]["moe_backend"] == "reference"
    assert [(r["backend"], r["status"]) for r in doc["rows"]] == [("reference", "pass")]
    assert os.environ["MOE_BACKEND"] == "reference"


def test_a_run_on_the_cpu_leaves_the_callers_environment_as_it_was(monkeypatch):
    """--device cpu sets TRITON_INTERPRET and CUDA_VISIBLE_DEVICES for the run only: left in the
    caller's environment, later tests on a GPU machine would take themselves for interpreted."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("POPCORN_SEED", "5")
    argv = ["--backend", "reference", "--cases", "smoke:1", "--device", "cpu", "--inline", "--roofline", "off", "-q"]
    assert cli.main(argv) == 0
    assert "TRITON_INTERPRET" not in os.environ and "CUDA_VISIBLE_DEVICES" not in os.environ
    assert os.environ["POPCORN_SEED"] == "5"


# ---------------------------------------------------------------- failures


def test_a_failing_case_is_summarised_by_the_exceptions_message(tmp_path, capsys, monkeypatch, padded):
    monkeypatch.setenv("COLUMNS", "250")  # the whole table, in any terminal (or none: pytest-xdist)
    argv = ["--backend", padded, "--cases", "smoke:0", "--inline", "--roofline", "off", "--out", str(tmp_path)]
    assert cli.main(argv + ["-q"]) == 1
    row = json.loads((tmp_path / "test.json").read_text())["rows"][0]
    message = PADDED_MESSAGE
    assert row["status"] == "error" and row["message"] == message
    assert "problem/validation.py" in row["traceback"] and "raise ValueError" in row["traceback"]
    assert row["refused"] is True
    out = capsys.readouterr().out
    table_row = next(line for line in out.splitlines() if line.lstrip().startswith("smoke0"))
    assert "ERROR" in table_row and message in table_row and "_timed_call" not in table_row
    assert f"padded.py smoke0 (H512-I256-E8+1-k4+1-bs8) ERROR: {message}" in out
    # the event line, whole and not padded to the 200 columns a pipe gets
    assert f"] padded.py: smoke0 H512-I256-E8+1-k4+1-bs8 error - {message}\n" in out
    # refused by design: the line says it all; the traceback is in the JSON and behind --verbose
    assert "raise ValueError" not in out and "problem/validation.py" not in out
    assert cli.main(argv + ["-q", "--verbose"]) == 1
    assert "raise ValueError" in capsys.readouterr().out


def test_a_failure_inside_a_library_keeps_its_traceback(tmp_path, capsys):
    sub = tmp_path / "sub.py"
    sub.write_text("import fractions\n\n\ndef custom_kernel(data):\n    return fractions.Fraction('x')\n")
    argv = ["--backend", str(sub), "--cases", "smoke:1", "--inline", "--roofline", "off", "--out", str(tmp_path)]
    assert cli.main(argv + ["-q"]) == 1
    row = json.loads((tmp_path / "test.json").read_text())["rows"][0]
    assert row["status"] == "error" and row["refused"] is False
    assert row["message"] == "ValueError: Invalid literal for Fraction: 'x'"
    assert "fractions.py" in capsys.readouterr().out


def test_a_setting_refused_anywhere_in_the_package_prints_its_line_only():
    """A ValueError from a package module (moe_triton/env.py) is refused by design, as one from a
    root module is; one from the standard library keeps its traceback."""
    import fractions

    from bench.runner import worker
    from moe_triton.env import native_forced

    with pytest.raises(ValueError) as own:
        native_forced({"MOE_TRITON_NATIVE": "2"})
    with pytest.raises(ValueError) as library:
        fractions.Fraction("x")
    assert worker.refused_by_design(own.value, {ROOT})
    assert not worker.refused_by_design(library.value, {ROOT})


@pytest.mark.parametrize(
    "source, needle",
    [
        (
            None,
            "backend 'bundle.py': not a submission file (it defines no custom_kernel); `python bundle.py` writes one",
        ),
        ("def custom_kernel(:\n", "not a submission file (it does not compile, line 1: invalid syntax)"),
        ("import torch\n\ncustom = 1\n", "not a submission file (it defines no custom_kernel)"),
    ],
)
def test_a_backend_file_without_custom_kernel_is_refused_before_the_run(tmp_path, capsys, source, needle):
    if source is None:
        backend = "bundle.py"  # the package's own bundler, found at the repository root
    else:
        backend = str(tmp_path / "sub.py")
        (tmp_path / "sub.py").write_text(source)
    assert needle in usage_error(["--backend", backend], capsys)


def test_a_submission_file_may_bind_custom_kernel_any_way(tmp_path):
    from bench.runner.backends import not_a_submission

    for source in (
        "from elsewhere import custom_kernel\n",
        "import os\nif os.environ:\n    custom_kernel = print\nelse:\n    def custom_kernel(data):\n        pass\n",
        "try:\n    from a import k as custom_kernel\nexcept ImportError:\n    custom_kernel = None\n",
    ):
        (tmp_path / "s.py").write_text(source)
        assert not_a_submission(tmp_path / "s.py") is None, source
    assert not_a_submission(ROOT / "submission.py") is None


def test_leaderboard_mode_stops_after_an_erroring_case(tmp_path, padded):
    argv = ["--mode", "leaderboard", "--backend", padded, "--cases", "smoke:0", "smoke:1", "--no-warmup"]
    # Twice the L2: the official 62.5 GiB flush would stay reserved in this worker and starve the others on 80 GB.
    argv += ["--flush", "l2", "--max-reps", "2", "--inline", "--roofline", "off", "--out", str(tmp_path), "-q"]
    assert cli.main(argv) == 1
    rows = json.loads((tmp_path / "leaderboard.json").read_text())["rows"]
    assert [(r["status"], r["message"][:10]) for r in rows] == [("error", "ValueError"), ("skipped", "after a fa")]


def test_a_run_in_80_columns_prints_whole_lines_of_at_most_80(tmp_path, monkeypatch, capsys, padded):
    monkeypatch.setenv("COLUMNS", "80")
    argv = ["--backend", padded, "--cases", "smoke:0", "smoke:1", "--inline", "--roofline", "off"]
    assert cli.main(argv) == 1
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) <= 80
    error_line = next(line for line in lines if "smoke0 H512-I256-E8+1-k4+1-bs8 error" in line)
    assert error_line.endswith("\u2026") and "error - ValueError: con" in error_line
    assert any(line.split()[:3] == ["smoke1", "H256-I512-E4+1-k2+1-bs5", "pass"] for line in lines)


def test_the_live_line_carries_the_message():
    case = select_cases(["smoke:0"])[0]
    res = {"status": "error", "message": "ValueError: config: bad\nmore", "traceback": "File x\n  raise"}
    assert cli._status_line("ref", case, res) == "ref: smoke0 H512-I256-E8+1-k4+1-bs8 error - ValueError: config: bad"
    res = {"status": "pass", "message": "max abs error 0", "call_ns": 7.25e9}
    assert cli._status_line("ref", case, res) == "ref: smoke0 H512-I256-E8+1-k4+1-bs8 pass call 7.25 s"


# ---------------------------------------------------------------- Ctrl-C


def test_ctrl_c_in_a_timed_case_keeps_the_repetitions_measured():
    calls = []

    def kernel(data):
        calls.append(data)
        if len(calls) == 5:  # the checked call, then three timed ones, then the Ctrl-C
            raise KeyboardInterrupt
        return data

    class Device:
        kind = "cpu"

        def synchronize(self):
            pass

        def flush(self):
            pass

        def timer(self):
            from bench.runner.timing import CpuTimer

            return CpuTimer()

    limits = Limits(max_reps=100, max_time_s=1e9, max_wall_s=1e9, rel_err=0.0)
    with pytest.raises(evaluate.Interrupted) as stop:
        evaluate.run_timed(
            {"seed": 1}, kernel, lambda seed: seed, lambda data, out: (True, ""), Device(), limits, recheck=False
        )
    res = stop.value.result
    assert res.status == "interrupted" and res.stats.runs == 3 and "after 3 timed repetitions" in res.message


@pytest.mark.skipif(not ON_CPU, reason="times the CPU interpreter")
def test_ctrl_c_writes_what_was_measured_and_exits_130(tmp_path):
    """A real run in its own process group, interrupted as a terminal does once the first case is done."""
    out_dir = tmp_path / "out"
    # problem.cases.TINY first (a second's work), then a SMOKE case long enough to be interrupted in
    cmd = [sys.executable, "-m", "bench", "--backend", "triton", "--cases", TINY_CASE, "smoke:1", "--roofline", "off"]
    proc = subprocess.Popen(
        cmd + ["--out", str(out_dir)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        for line in proc.stdout:
            if "custom0" in line and " pass " in line:
                break
        time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr + stdout
    assert stderr.strip().splitlines() == [f"interrupted (Ctrl-C): 1 of 2 results measured; written to {out_dir}"]
    rows = json.loads((out_dir / "test.json").read_text())["rows"]
    # the Ctrl-C came half a second into smoke1's checked call
    assert [r["status"] for r in rows] == ["pass", "interrupted"] and "during this case" in rows[1]["message"]


def test_ctrl_c_in_a_checked_call_marks_that_case_interrupted(tmp_path, capsys):
    sub = tmp_path / "sub.py"
    sub.write_text("def custom_kernel(data):\n    raise KeyboardInterrupt\n")
    out = tmp_path / "out"
    out.mkdir()
    for earlier in ("test.png", "test_pins.py", "test.json"):  # an earlier run's outputs
        (out / earlier).write_text("an earlier run's")
    argv = ["--backend", str(sub), "--cases", "smoke:1", "smoke:2", "--inline", "--roofline", "off", "-q"]
    assert cli.main(argv + ["--out", str(out)]) == 130
    rows = json.loads((out / "test.json").read_text())["rows"]
    assert [(r["status"], r["message"]) for r in rows] == [
        ("interrupted", "interrupted (Ctrl-C) during this case"),
        ("skipped", "interrupted (Ctrl-C) before this case"),
    ]
    assert capsys.readouterr().err.strip().splitlines() == [
        f"interrupted (Ctrl-C): 0 of 2 results measured; written to {out}"
    ]
    # nothing measured, no chart and no pins: the earlier run's are gone, not left beside the new tables
    assert sorted(p.name for p in out.iterdir()) == ["test.csv", "test.json", "test.md"]


# ---------------------------------------------------------------- the interpreter's estimate


def test_expected_blocks_match_random_routing():
    gen = torch.Generator().manual_seed(0)
    for tokens, routed, per_token, block_m in ((16, 256, 8, 16), (33, 16, 6, 16), (512, 32, 8, 64), (8, 4, 4, 16)):
        trials = []
        for _ in range(200):
            ids = torch.rand(tokens, routed, generator=gen).argsort(dim=1)[:, :per_token]
            counts = torch.bincount(ids.flatten(), minlength=routed)
            trials.append(int(((counts + block_m - 1) // block_m).sum()))
        want = sum(trials) / len(trials) + -(-tokens // block_m)
        got = interpreter_time.expected_blocks(tokens, routed, per_token, 1, block_m)
        assert abs(got - want) <= 0.03 * want, (tokens, routed, got, want)


def test_smoke_is_run_and_official_shapes_are_refused_without_force(capsys):
    smoke = select_cases(["smoke"])
    triton = [BackendSpec("triton", ROOT / "submission.py", "triton")]
    reference = [BackendSpec("reference", ROOT / "submission.py", "reference")]
    assert preflight.check_run_time(triton, "cpu", smoke, "test", None, None, force=False) is None
    note = preflight.check_run_time(triton, "cpu", smoke, "benchmark", BENCHMARK_LIMITS, None, force=False)
    assert note.startswith("this run takes about") and "min under Triton's CPU interpreter" in note
    official = select_cases(["tests:0"])
    assert preflight.check_run_time(reference, "cpu", official, "test", None, None, force=False) is None
    assert preflight.check_run_time(triton, "cuda", official, "test", None, None, force=False) is None
    assert "min" in preflight.check_run_time(triton, "cpu", official, "test", None, None, force=True)
    if ON_CPU:
        err = usage_error(["--cases", "tests:0"], capsys)
        assert "this run takes about" in err and "pass --force" in err and "--cases smoke" in err


# ---------------------------------------------------------------- tables


def _rows(mode, backends):
    cases = select_cases(["smoke", "bench:0"])
    rows = []
    for i, c in enumerate(cases):
        for b in backends:
            st = {"runs": 7, "mean": 9409110.2e3 / (i + 1), "std": 1.2e6, "err": 1e5, "best": 9.1e9, "worst": 9.9e9}
            res = {
                "status": "fail" if i == 1 else "pass",
                "message": "first call, seed 2: 12 of 32 elements mismatch" if i == 1 else "max abs error 0",
                "stats": st if mode == "benchmark" else None,
                "call_ns": 7.2e9,
                "traffic": {"experts_hit": 9, "bytes": 3e6, "flops": 1e9},
                "seeds": [1],
                "checked": 1,
            }
            ceil = roofline.Ceilings(bandwidth=1e11, matmul=1e12, device="cpu", source="given")
            rows.append(report.build_row(mode, b, c, res, ceil, report.aiter_times()))
    return rows


@pytest.mark.parametrize("mode", ["benchmark", "test"])
@pytest.mark.parametrize("backends", [["triton"], ["triton", "reference", "dist/submission.py@triton"]])
def test_tables_fit_80_columns_without_broken_cells(mode, backends):
    rows = _rows(mode, backends)
    console = Console(width=80, file=io.StringIO(), color_system=None)
    report.print_tables(console, rows, report.summarize(rows, backends), mode, "benchmark on cpu AMD EPYC (2 threads)")
    text = console.file.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    words = " ".join(text.split())
    assert "not shown at 80 columns:" in words and "(see --out's .md and .csv)" in words
    _, dropped = report.fit_case_table(console, rows, mode, "t")
    shown = words.split("not shown at 80 columns:")[0]
    # A cell is whole or its column is left out, never folded; only the message may end in an ellipsis.
    for r in rows:
        assert r["case"] in shown and r["backend"] in shown and ("shape" in dropped or r["shape"] in shown)
    if mode == "benchmark":
        assert "\u2026" not in text
    assert ("9.41 s" if mode == "benchmark" else "7.20 s") in text and "9409110" not in text


def test_on_a_cpu_the_floors_are_labelled_as_the_cpus(tmp_path):
    rows = _rows("benchmark", ["triton"])
    console = Console(width=200, file=io.StringIO(), color_system=None)
    report.print_tables(console, rows, report.summarize(rows, ["triton"]), "benchmark", "t", cpu=True)
    heads = console.file.getvalue()
    assert heads.count("x CPU floor") == 2 and heads.count("CPU floor") == 4
    meta = {"device": "cpu AMD EPYC", "device_kind": "cpu"}
    report.write_outputs(tmp_path, "benchmark", rows, report.summarize(rows, ["triton"]), meta)
    assert "| CPU floor | x CPU floor |" in (tmp_path / "benchmark.md").read_text()


def test_files_keep_every_column(tmp_path):
    rows = _rows("benchmark", ["triton"])
    report.write_outputs(tmp_path, "benchmark", rows, report.summarize(rows, ["triton"]), {"device": "cpu"})
    header = (tmp_path / "benchmark.md").read_text().splitlines()[2]
    assert all(f" {head} " in header for head, _ in report.table_columns("benchmark"))
    assert "9.41 s" in (tmp_path / "benchmark.md").read_text()
    csv = (tmp_path / "benchmark.csv").read_text().splitlines()
    assert "mean_us" in csv[0] and "9409110.2" in csv[1]


def test_time_units_scale():
    assert [report.time_text(v) for v in (0.25, 305.44, 12_300.0, 9_409_110.2, None)] == [
        "250 ns",
        "305.4 us",
        "12.30 ms",
        "9.41 s",
        "-",
    ]


# ---------------------------------------------------------------- the chart


def test_chart_uses_the_width_and_keeps_labels_inside_the_frame():
    rows = _rows("benchmark", ["triton", "reference"])
    for r in rows:
        r["status"] = "pass"
    fig = report.chart_figure(rows, "benchmark", "benchmark on cpu")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    frame = ax.get_window_extent(renderer)
    assert frame.width >= 0.8 * fig.bbox.width
    labels = [t for t in ax.texts if t.get_text()]
    assert len(labels) == len(rows)
    for t in labels:
        box = t.get_window_extent(renderer)
        assert box.y1 < frame.y1 - 2 and box.x0 >= frame.x0 and box.x1 <= frame.x1, t.get_text()
    legend = fig.legends[0].get_window_extent(renderer)
    assert legend.y1 <= frame.y0 and legend.x0 >= 0 and legend.x1 <= fig.bbox.width
