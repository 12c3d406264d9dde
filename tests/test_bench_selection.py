"""The runner and the submission's selection: `auto` (static) against `select` in one run, the
choice and first-call time per case, the rows that pin the choices, MOE_SELECT checked up front."""

import json
import re
from pathlib import Path

import pytest

from bench.runner import cli
from bench.runner.backends import check_submission_env, parse_backend
from bench.runner.case_args import UsageError
from bench.runner.pins import pin_rows, pins_text
from moe_triton.tiles_amd import NATIVE_ALTERNATES
from moe_triton.tiles_nvidia import ALTERNATES
from problem.shapes import Shape

ROOT = Path(__file__).resolve().parents[1]

FAKE_SUBMISSION = '''
import os
from reference import ref_kernel


def custom_kernel(data):
    return ref_kernel(data)


def selection_choice(config):
    """As submission.selection_choice: a name only where MOE_SELECT=1 made it select."""
    return "triton:retune" if os.environ.get("MOE_SELECT") == "1" else None
'''


def test_auto_is_the_static_choice_and_select_the_selection():
    assert parse_backend("auto", ROOT).env == {"MOE_SELECT": "0"}
    assert parse_backend("select", ROOT).env == {"MOE_SELECT": "1"}
    assert parse_backend("select", ROOT).moe_backend is None
    assert parse_backend("triton", ROOT).env == {}
    spec = parse_backend(f"{ROOT / 'submission.py'}@select", ROOT)
    assert spec.env == {"MOE_SELECT": "1"} and spec.moe_backend is None


@pytest.mark.parametrize(
    "env, needle",
    [
        ({"MOE_SELECT": "on"}, "MOE_SELECT='on': expected one of auto, 1, 0"),
        ({"MOE_SELECT_BUDGET_S": "-3"}, "MOE_SELECT_BUDGET_S='-3': expected seconds >= 0"),
        ({"MOE_SELECT_BUDGET_S": "soon"}, "MOE_SELECT_BUDGET_S='soon': expected seconds >= 0"),
        ({"MOE_TRITON_NATIVE": "2"}, "MOE_TRITON_NATIVE='2': expected 0 or 1 (or unset)"),
        ({"MOE_SELECT_CANDIDATES": "some"}, "MOE_SELECT_CANDIDATES='some': expected one of won, all"),
    ],
)
@pytest.mark.parametrize("backend", [[], ["--backend", "reference"]])
def test_bad_submission_variables_are_refused_in_one_line_before_any_case(monkeypatch, capsys, env, needle, backend):
    """Whether or not the run would read them: a named backend never selects."""
    with pytest.raises(UsageError, match=re.escape(needle)):
        check_submission_env(env)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as exc:
        cli.main(["--roofline", "off", "-q", *backend])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and len(err.strip().splitlines()) == 1 and needle in err, err


def test_the_runner_accepts_what_the_submission_accepts():
    accepted = ({}, {"MOE_SELECT": ""}, {"MOE_SELECT": "auto"}, {"MOE_SELECT": "0", "MOE_SELECT_BUDGET_S": "2.5"})
    native = ({"MOE_TRITON_NATIVE": ""}, {"MOE_TRITON_NATIVE": "0"}, {"MOE_TRITON_NATIVE": "1"})
    candidates = ({"MOE_SELECT_CANDIDATES": ""}, {"MOE_SELECT_CANDIDATES": "won"}, {"MOE_SELECT_CANDIDATES": "all"})
    for env in (*accepted, *native, *candidates):
        check_submission_env(env)


def test_the_report_shows_the_choice_and_the_first_calls_time_per_backend(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MOE_SELECT", raising=False)
    monkeypatch.setenv("COLUMNS", "250")  # the whole table, in any terminal (or none: pytest-xdist)
    sub = tmp_path / "fake_submission.py"
    sub.write_text(FAKE_SUBMISSION)
    argv = ["--backend", str(sub), f"{sub}@select", "--cases", "smoke:1", "--inline", "--roofline", "off"]
    assert cli.main([*argv, "--out", str(tmp_path / "out"), "-q"]) == 0
    rows = json.loads((tmp_path / "out" / "test.json").read_text())["rows"]
    assert [(r["backend"], r["choice"]) for r in rows] == [(str(sub), None), (f"{sub}@select", "triton:retune")]
    assert all(r["first_call_us"] > 0 for r in rows)
    out = capsys.readouterr().out
    table = out[: out.index("the selection's choices")]
    assert "triton:retune" in table and "choice" in table
    assert "no table row selects it" in (tmp_path / "out" / "test_pins.py").read_text()


def _row(shape, choice, backend="select", status="pass", mean_us=100.0):
    return {
        "backend": backend,
        "dhidden": shape.d_hidden,
        "dexpert": shape.d_inter,
        "nroutedexperts": shape.n_experts - 1,
        "nsharedexperts": 1,
        "nexpertspertoken": shape.topk - 1,
        "bs": shape.n_tokens,
        "choice": choice,
        "status": status,
        "mean_us": mean_us,
    }


def test_the_pin_rows_name_the_alternate_tile_and_what_no_table_pins():
    key, other = Shape(128, 7168, 256, 257, 9), Shape(16, 7168, 512, 33, 9)
    rows = [
        _row(key, "triton:retune"),
        _row(key, "triton", backend="later"),  # one row per shape: the first
        _row(other, "triton"),
        _row(Shape(512, 7168, 512, 33, 9), "triton:block-m-64", status="fail"),
    ]
    nvidia = pin_rows(rows, amd=False)
    assert nvidia == {"TUNED": [f"    {key}: {ALTERNATES[key]['retune']!r},  # selected by select, 100.0 us"]}
    amd = pin_rows([_row(key, "aiter"), _row(other, "aiter-fused")], amd=True)
    assert list(amd) == ["not pinnable"] and len(amd["not pinnable"]) == 1  # aiter is the static backend
    assert "aiter-fused (no table row selects it)" in amd["not pinnable"][0]
    assert "MOE_BACKEND=triton runs it" in pin_rows([_row(key, "triton")], amd=True)["not pinnable"][0]
    assert pins_text(nvidia).startswith("# rows for TUNED\n")
    assert "# choices that no table row can pin\n    # " in pins_text(amd)
    if NATIVE_ALTERNATES.get(key):
        name, tiles = next(iter(NATIVE_ALTERNATES[key].items()))
        assert pin_rows([_row(key, f"triton:{name}")], amd=True)["NATIVE_TUNED"][0].startswith(f"    {key}: {tiles!r}")


def test_seed_check_runs_custom_kernel_on_fresh_seeds_and_reports_each_case(monkeypatch, capsys):
    from bench import seed_check

    monkeypatch.setenv("MOE_SELECT", "0")
    monkeypatch.delenv("MOE_BACKEND", raising=False)
    case = "dhidden=256,dexpert=256,nroutedexperts=4,nexpertspertoken=2,nsharedexperts=1,bs=3"
    assert seed_check.main(["--cases", case, "--seeds", "2"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("custom0 H256-I256-E4+1-k2+1-bs3 shipped: 2/2 passed, worst error ")
    assert "choice static" in line


def test_seed_check_runs_each_input_on_each_path_from_a_seed_base_and_writes_json(monkeypatch, capsys, tmp_path):
    import json

    from bench import seed_check

    monkeypatch.setenv("MOE_SELECT", "0")
    monkeypatch.delenv("MOE_BACKEND", raising=False)
    case = "dhidden=256,dexpert=256,nroutedexperts=4,nexpertspertoken=2,nsharedexperts=1,bs=3"
    args = ["--cases", case, "--seeds", "2", "--seed-base", "1000", "--paths", "shipped", "decode"]
    assert seed_check.main([*args, "--json", str(tmp_path / "tail.json")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "custom0 H256-I256-E4+1-k2+1-bs3 shipped",
        "custom0 H256-I256-E4+1-k2+1-bs3 decode",
    ]
    rows = json.loads((tmp_path / "tail.json").read_text())
    assert [(r["path"], r["passed"], r["failing_seeds"], r["seed_base"]) for r in rows] == [
        ("shipped", 2, [], 1000),
        ("decode", 2, [], 1000),
    ]
    assert rows[1]["choice"] == "decode (forced)" and 0 <= rows[0]["p99"] <= rows[0]["worst"] < 1


def test_seed_check_interrupted_reports_the_seeds_done_with_status_130(monkeypatch, capsys):
    import reference
    from bench import seed_check

    monkeypatch.setenv("MOE_SELECT", "0")
    monkeypatch.delenv("MOE_BACKEND", raising=False)
    real, calls = reference.generate_input, []

    def interrupted_at_the_third(**params):
        calls.append(params["seed"])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(**params)

    monkeypatch.setattr(reference, "generate_input", interrupted_at_the_third)
    case = "dhidden=256,dexpert=256,nroutedexperts=4,nexpertspertoken=2,nsharedexperts=1,bs=3"
    assert seed_check.main(["--cases", case, "smoke:0", "--seeds", "50"]) == 130
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("custom0 H256-I256-E4+1-k2+1-bs3 shipped: 2/2 passed")
    assert lines[0].endswith("(interrupted)")


def test_seed_check_refuses_bad_options(capsys):
    from bench import seed_check

    assert seed_check.main(["--cases", "nope"]) == 2
    assert capsys.readouterr().err.startswith("python -m bench.seed_check: error: --cases: unknown case 'nope'")
    with pytest.raises(SystemExit) as exc:
        seed_check.main(["--seeds", "0"])
    assert exc.value.code == 2
