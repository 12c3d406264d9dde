"""bench/h200/rivals.py on the CPU: its table, its refusals, and one shape timed with the package
beside stand-in peers (test doubles: the real peers need a CUDA GPU and .peers/)."""

import math

import pytest
import torch

from bench.h200 import rivals
from bench.runner.case_args import SMOKE
from bench.runner.timing import Device
from reference import ref_kernel


def _results():
    shapes = {
        "a": {
            "package": {"median_us": 100.0, "runs": 3, "worst": 0.2},
            "peer-x": {"median_us": 50.0, "runs": 3, "worst": 3.5, "own": 0.1, "own_bound": 1.0},
            "peer-y": {"error": "ImportError: no module named y"},
        },
        "b": {
            "package": {"median_us": 400.0, "runs": 3, "worst": 0.3},
            "peer-x": {"median_us": 200.0, "runs": 3, "worst": 0.9, "own": 1.2, "own_bound": 1.0},
            "peer-y": {"median_us": 10.0, "runs": 1, "worst": 0.0},
        },
    }
    return {"shapes": shapes}


def test_the_table_marks_failures_own_checks_and_errors_and_takes_geomeans_over_complete_rows():
    lines = rivals.table(_results())
    assert lines[0] == "| shape | package | peer-x | peer-y |"
    row_a, row_b, means, ratios = lines[2:]
    assert row_a == "| a | 100.0 | 50.0 FAIL (3.50), own 0.10 | error: ImportError: no module named y |"
    assert row_b == "| b | 400.0 | 200.0, own 1.20 ADAPTER? | 10.0 |"
    # geomean(100, 400) = 200, geomean(50, 200) = 100; peer-y ran on one shape of two: no mean
    assert means == "| geomean | 200.0 | 100.0 | nan |"
    assert ratios == "| package / this | 1.00 | 2.00 | nan |"


def test_geomean():
    assert rivals.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert math.isnan(rivals.geomean([]))


def test_every_known_peer_loads_with_its_own_model_where_its_module_has_one():
    peers = rivals.load_peers(rivals.known_peers() + ["nobody"])
    assert {"humming-w4a8", "humming-w4a16", "triton_kernels-w4a16", "triton_kernels-w4a16-bf16gu"} <= set(peers)
    assert peers["nobody"].startswith("no peer named nobody")
    prepare, run, own = peers["humming-w4a16"]
    assert callable(prepare) and callable(run) and own[0].__name__ == "w4a16_reference" and own[1] == 1
    assert peers["humming-w4a8"][2][0].__name__ == "w4a8_reference"
    assert peers["triton_kernels-w4a16-bf16gu"][2] is None


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--reps", "0"], "--reps 0: must be at least 1"),
        (["--peers", "humming-w4a8", "nobody"], "--peers nobody: unknown"),
        (["--shapes", "no-such-shape"], "--shapes no-such-shape: no benchmark shape matches"),
    ],
)
def test_bad_options_are_one_line_errors_naming_the_option(argv, needle, capsys):
    assert rivals.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needle in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a CUDA GPU")
def test_without_a_gpu_it_says_why(capsys):
    assert rivals.main(["--shapes", "bs16"]) == 2
    assert "no CUDA GPU here" in capsys.readouterr().err


def _exact(data):
    return data


def _return_reference(state):
    return ref_kernel(state)


def _poisoned(state):
    return torch.full_like(ref_kernel(state), float("nan"))


def _raises(data):
    raise RuntimeError("the peer's prepare broke\nsecond line")


def test_one_shape_times_the_package_and_the_stand_in_peers_and_checks_each():
    """Stand-ins: a peer returning ref_kernel's output (its own model ref_kernel), one returning NaN
    and one whose prepare raises; the package's custom_kernel runs for real (the interpreter)."""
    peers = {
        "exact": (_exact, _return_reference, (ref_kernel, 1.0)),
        "nan": (_exact, _poisoned, None),
        "broken": (_raises, _return_reference, None),
        "missing": "no peer named missing",
    }
    got = rivals.time_shape(SMOKE[0], peers, reps=2, device=Device("cpu", "none"), budget_s=600.0)
    assert got["package"]["runs"] == 2 and got["package"]["worst"] < 1 and got["package"]["median_us"] > 0
    assert "own" not in got["package"]
    assert got["exact"]["worst"] == 0 and got["exact"]["own"] == 0 and got["exact"]["own_bound"] == 1
    assert got["exact"]["runs"] == 2
    assert got["nan"]["worst"] == math.inf
    assert got["broken"] == {"error": "RuntimeError: the peer's prepare broke"}
    assert got["missing"] == {"error": "no peer named missing"}


def test_the_budget_stops_new_repetitions_after_the_first_timed_one():
    peers = {"exact": (_exact, _return_reference, None)}
    got = rivals.time_shape(SMOKE[1], peers, reps=5, device=Device("cpu", "none"), budget_s=0.0)
    assert got["package"]["runs"] == 1 and got["exact"]["runs"] == 1


def test_the_ncu_command_asks_for_every_counter_on_the_three_bs512_shapes():
    from bench.h200.harness import official_cases
    from problem.cases import BENCHMARKS, case_name

    command = rivals.NCU_COMMAND
    assert command.startswith("MOE_SELECT=0 ncu --profile-from-start off") and "--metrics " in command
    assert command.split("--metrics ")[1].split()[0].split(",") == list(rivals.NCU_METRICS)
    selectors = command.split("--shapes ")[1].split(">")[0].split()
    names = {case_name(c) for c in BENCHMARKS}
    assert len([n for n, _ in official_cases(selectors) if n in names]) == 3
