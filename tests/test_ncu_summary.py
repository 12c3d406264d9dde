"""bench/h200/ncu_summary.py on the Nsight Compute report it was written for (H200, 2026-12-03)."""

from pathlib import Path

import pytest

from bench.h200 import ncu_summary

REPORT = Path(__file__).resolve().parents[1] / "bench/results/h200/ncu-decode-2026-12-03"
SHAPES = ["H7168-I256-E256+1-k8+1-bs128", "H7168-I512-E32+1-k8+1-bs512", "H7168-I2048-E32+1-k8+1-bs512"]


@pytest.fixture(scope="module")
def rows():
    return ncu_summary.launch_rows(ncu_summary.read_raw(REPORT / "raw.csv.gz"), SHAPES)


def test_each_shapes_launches_start_at_its_prep_kernel(rows):
    kernels = [(r["shape"], r["kernel"]) for r in rows]
    assert [k for s, k in kernels if s == SHAPES[0]] == ["prep", "route", "stage1", "stage2"]
    # I-2048 has tail tiles: each stage is launched twice
    assert [k for s, k in kernels if s == SHAPES[2]] == ["prep", "route", "stage1", "stage1", "stage2", "stage2"]


def test_tensor_use_agrees_with_ncus_own_percentage_and_units_are_converted(rows):
    frame = ncu_summary.read_raw(REPORT / "raw.csv.gz")
    own = frame[ncu_summary.FLOPS.replace(".sum", ".avg.pct_of_peak_sustained_elapsed")]
    for r, pct in zip(rows, own, strict=True):
        assert r["tensor"] == pytest.approx(pct, abs=0.2)
    main = rows[10]
    assert (main["shape"], main["kernel"], main["regs"], main["per_sm"]) == (SHAPES[2], "stage1", 232, 1)
    assert main["us"] == pytest.approx(789.06, abs=0.01)  # ncu's details page: 789.06 us
    assert main["smem_kb"] == pytest.approx(231.42, abs=0.01)  # 231424 bytes, as compiled
    assert 1000 < main["mhz"] < 2000


def test_the_report_groups_sampled_stalls_by_opcode():
    text = ncu_summary.report(REPORT, SHAPES)
    assert text.count("sampled warp states") == 8  # 4 stage-1 and 4 stage-2 launches
    block = ncu_summary.read_source(REPORT / "source_stage1.csv.gz")[2]
    lines = ncu_summary.source_table(block, top=1000)
    shares = [float(line.split("|")[2].strip().rstrip("%")) for line in lines if line.startswith("| ") and "%" in line]
    assert sum(shares) == pytest.approx(100, abs=0.5)


def test_bad_arguments_fail_in_one_line(tmp_path, capsys):
    assert ncu_summary.main([str(tmp_path), "--shapes", "x"]) == 2
    assert ncu_summary.main([str(REPORT), "--shapes", *SHAPES[:2]]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2 and all(line.startswith("python -m bench.h200.ncu_summary: error: ") for line in lines)
    assert "folder" in lines[0] and "--shapes" in lines[1]
