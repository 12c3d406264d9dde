"""bench/speed_chart.py: its data file is the run bench/results/nvidia-speed.md records, the chart
is drawn from it, the MI355X times keep their own panel, and bad data is one line."""

import itertools
import json
import re
from pathlib import Path

import pytest

from bench import speed_chart
from bench.runner.report import geomean
from problem.cases import BENCHMARKS, case_name

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "bench" / "results" / "nvidia-speed.md"


def _recorded_table() -> dict[str, dict[str, str]]:
    """The rivals table of nvidia-speed.md's entry that the data file names: row -> column -> cell."""
    data = json.loads(speed_chart.DATA.read_text())
    heading = data["record"].split(", ", 1)[1].split(": ", 1)[1]
    entry = RECORD.read_text().split(heading, 1)[1]
    after = entry.split("**The run**", 1)[1].splitlines()
    first = next(i for i, line in enumerate(after) if line.startswith("|"))
    lines = list(itertools.takewhile(lambda line: line.startswith("|"), after[first:]))
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(header, cells, strict=True))
    return rows


def _number(cell: str) -> float:
    return float(re.match(r"\**([\d.]+)", cell).group(1))


def test_the_data_file_holds_the_recorded_run():
    data = speed_chart.load(speed_chart.DATA)
    table = _recorded_table()
    assert data["cases"] == [case_name(c) for c in BENCHMARKS]
    assert data["date"] in data["record"] and data["commit"] in RECORD.read_text()
    for s in data["series"]:
        assert s["us"] == [_number(table[shape][s["column"]]) for shape in data["shapes"]], s["column"]
        assert round(geomean(s["us"]), 1) == _number(table["geomean"][s["column"]]), s["column"]


def test_the_chart_is_drawn_with_the_mi355x_times_in_their_own_panel(tmp_path):
    out = tmp_path / "chart.png"
    assert speed_chart.main(["--data", str(speed_chart.DATA), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000
    fig = speed_chart.figure(speed_chart.load(speed_chart.DATA))
    run, mi355x = fig.axes
    assert "H200" in run.get_title() and "MI355X" in mi355x.get_title() and "not measured" in mi355x.get_title()
    assert all("lower is better" in ax.get_ylabel() for ax in fig.axes)
    assert "2026-12-04" in fig.get_suptitle() and "triton 3.6.0" in fig.get_suptitle()
    heights = sorted(round(p.get_height(), 1) for p in mi355x.patches)
    assert heights == sorted(speed_chart.mi355x_times(speed_chart.load(speed_chart.DATA)["cases"]))


def test_without_an_mi355x_entry_one_panel(tmp_path):
    data = json.loads(speed_chart.DATA.read_text())
    del data["mi355x"]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    assert len(speed_chart.figure(speed_chart.load(path)).axes) == 1
    assert speed_chart.main(["--data", str(path)]) == 0
    assert (tmp_path / "run.png").is_file()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["series"][0]["us"].pop(), "needs 7 positive times"),
        (lambda d: d.pop("date"), "lacks date"),
        (lambda d: d["cases"].__setitem__(0, "H1-I1-E1+1-k1+1-bs1"), "no MI355X time listed for H1-I1-E1+1-k1+1-bs1"),
    ],
)
def test_bad_data_is_one_line_naming_the_option(tmp_path, capsys, change, message):
    data = json.loads(speed_chart.DATA.read_text())
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    assert speed_chart.main(["--data", str(path), "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m bench.speed_chart: error: --data: ") and message in err
    assert not (tmp_path / "x.png").exists()


def test_a_missing_data_file_is_one_line(tmp_path, capsys):
    assert speed_chart.main(["--data", str(tmp_path / "none.json")]) == 2
    assert capsys.readouterr().err.strip().endswith("none.json does not exist")
