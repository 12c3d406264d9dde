"""bench/h200/stream.py on the CPU: its refusals, the timeline's arithmetic on synthetic profiler
events, the bytes in flight and the verdicts, and a whole report (--from) of a synthetic run: a
stream.json, an ncu raw page and the profiled process's launch counts, written here."""

import inspect
import json
import math
import os
import re
from pathlib import Path

import pytest
import torch

from bench.h200 import ncu_summary, stream

H200_REPORT = Path(__file__).resolve().parents[1] / "bench/results/h200/ncu-decode-2026-12-03/raw.csv.gz"
SHAPE = "H7168-I256-E256+1-k8+1-bs16"
FLUSH = "distribution_elementwise_grid_stride_kernel"


def _events():
    """One call under PDL after the flush: route and the stages start before their predecessor ends."""
    return [
        ("moe_route_kernel", 105.5, 114.0),
        (FLUSH, 0.0, 100.0),
        ("moe_prep_kernel", 103.0, 106.0),
        ("moe_stage1_kernel", 108.0, 200.0),
        ("moe_stage2_kernel", 204.0, 264.0),
    ]


def test_call_launches_give_gaps_own_times_and_the_lead():
    rows, lead = stream.call_launches(_events(), "moe_prep_kernel")
    assert lead == pytest.approx(3.0)
    assert [stream.short(r["kernel"]) for r in rows] == ["prep", "route", "stage1", "stage2"]
    assert [r["gap"] for r in rows] == [None, pytest.approx(-0.5), pytest.approx(-6.0), pytest.approx(4.0)]
    assert [r["own"] for r in rows] == pytest.approx([3.0, 8.0, 86.0, 60.0])
    assert [r["us"] for r in rows] == pytest.approx([3.0, 8.5, 92.0, 60.0])
    # the span is the own times and the idle gaps together
    span = rows[-1]["end"] - rows[0]["start"]
    assert span == pytest.approx(sum(r["own"] for r in rows) + 4.0)
    summary = stream.call_summary([{"event_us": 165.0, "lead_us": lead, "launches": rows}])
    assert (summary["span_us"], summary["idle_us"], summary["calls"]) == (pytest.approx(161.0), 4.0, 1)


def test_a_call_without_its_first_kernel_and_calls_that_differ_are_errors():
    with pytest.raises(ValueError, match="no moe_prep_kernel"):
        stream.call_launches([(FLUSH, 0.0, 1.0)], "moe_prep_kernel")
    one, _ = stream.call_launches(_events(), "moe_prep_kernel")
    other, _ = stream.call_launches(_events()[:4], "moe_prep_kernel")
    with pytest.raises(ValueError, match="different kernels"):
        stream.median_launches([one, other])
    later = [{**r, "own": r["own"] + 2.0} for r in one]
    medians = stream.median_launches([one, later, later])
    assert [r["own"] for r in medians] == pytest.approx([5.0, 10.0, 88.0, 62.0])
    assert medians[0]["gap"] is None


@pytest.fixture(scope="module")
def h200_report():
    return ncu_summary.read_raw(H200_REPORT)


def test_programs_per_sm_agree_with_ncus_occupancy_limits_on_the_h200(h200_report):
    for _, row in h200_report.iterrows():
        launch = ncu_summary.launch_row(row)  # per_sm: the least of ncu's four occupancy limits
        got = stream.programs_per_sm(launch["regs"], round(1000 * launch["smem_kb"]), launch["warps"])
        assert got == launch["per_sm"], row["Kernel Name"]


def test_every_metric_asked_for_is_one_the_h200s_ncu_reported(h200_report):
    columns = set(h200_report.columns)
    assert set(ncu_summary.METRICS) <= columns
    assert {"device__attribute_multiprocessor_count", "device__attribute_display_name"} <= columns


def test_weight_streams_read_the_constexprs_their_kernels_take():
    """What tile_stream reads is what the launcher passes: kernel parameters, or num_stages."""
    from moe_triton.kernels import decode, gluon_stage1, gluon_stage2

    kernels = {
        "moe_stage1_kernel": decode.moe_stage1_kernel,
        "moe_stage2_kernel": decode.moe_stage2_kernel,
        "moe_gluon_stage1_kernel": gluon_stage1.moe_gluon_stage1_kernel,
        "moe_gluon_stage2_kernel": gluon_stage2.moe_gluon_stage2_kernel,
    }
    assert set(kernels) == set(stream.WEIGHT_STREAMS)

    class Reads(dict):
        def __init__(self):
            super().__init__(BLOCK_K=128)
            self.names = {"BLOCK_K"}

        def __missing__(self, key):
            self.names.add(key)
            return 4

    for name, kernel in kernels.items():
        reads = Reads()
        assert stream.tile_stream(name, reads)["slots"] >= 1
        params = set(inspect.signature(kernel.fn).parameters) | {"num_stages"}
        assert reads.names <= params, name


def test_tile_stream_counts_codes_and_scales_of_a_step_and_the_ring():
    # the decode stage 1 of E-257 bs-16: 64 weight rows x 256 k, two weight buffers at num_stages 3
    decode = stream.tile_stream("moe_stage1_kernel", {"BLOCK_N": 32, "BLOCK_K": 256, "num_stages": 3})
    assert decode == {"step_bytes": 64 * (128 + 8), "slots": 2}
    assert stream.tile_stream("moe_stage2_kernel", {"BLOCK_N": 64, "BLOCK_K": 256, "num_stages": 2})["slots"] == 1
    gluon = stream.tile_stream("moe_gluon_stage2_kernel", {"NUM_WG": 4, "BLOCK_K": 128, "STAGES": 4})
    assert gluon == {"step_bytes": 256 * (64 + 4), "slots": 4}
    assert stream.tile_stream("moe_prep_kernel", {}) is None


def _ncu_row(**figures) -> dict:
    base = {"tensor_pipe": 10.0, "dram": 30.0, "issue": 30.0, "dram_read_tbs": 1.0, "per_sm": 2, "programs": 1320}
    return base | figures


def test_verdicts_follow_the_rules_in_order():
    gluon = {"kernel": "moe_gluon_stage1_kernel", "constexprs": {"NUM_WG": 2, "BLOCK_K": 128, "STAGES": 4}}
    launch = {"own": 100.0, "gap": -3.0, "plan": gluon, "ncu": _ncu_row()}
    launch |= stream.in_flight(launch, latency_ns=700, peak_tbs=4.8, sms=132)
    assert launch["needed_kb"] == pytest.approx(4.8e12 * 700e-9 / 132 / 1e3)
    assert launch["achieved_kb"] == pytest.approx(launch["needed_kb"] / 4.8)
    assert launch["tiles_kb"] == pytest.approx(4 * 128 * 68 * 2 / 1e3)
    word, why = stream.verdict(launch)
    assert word == "latency" and "the ring is not kept full" in why
    thin = launch | {"tiles_kb": 10.0}
    assert "too few bytes in flight" in stream.verdict(thin)[1]
    assert stream.verdict(launch | {"ncu": _ncu_row(issue=61.0)})[0] == "issue"
    assert stream.verdict(launch | {"ncu": _ncu_row(issue=61.0, dram=70.0)})[0] == "DRAM"
    assert stream.verdict(launch | {"ncu": _ncu_row(issue=61.0, dram=70.0, tensor_pipe=60.0)})[0] == "tensor"
    assert stream.verdict(launch | {"own": 4.9})[0] == "gap"
    assert stream.verdict(launch | {"own": 6.0, "gap": 6.0})[0] == "gap"
    assert stream.verdict({"own": 50.0, "gap": 1.0}) == ("?", "no counters (run with --ncu)")
    # few programs: the grid, not the occupancy limit, sets the programs resident per SM
    few = stream.in_flight(launch | {"ncu": _ncu_row(programs=66)}, latency_ns=700, peak_tbs=4.8, sms=132)
    assert few["tiles_kb"] == pytest.approx(launch["tiles_kb"] / 4)


def test_ncu_rows_split_by_the_profiled_launch_counts():
    rows = [{"kernel": k} for k in ("a", "b", "c")]
    got = stream.split_ncu(
        rows, [{"shape": "x", "launches": 2}, {"shape": "y", "error": "E"}, {"shape": "z", "launches": 1}]
    )
    assert got == {"x": rows[:2], "y": "E", "z": rows[2:]}
    with pytest.raises(ValueError, match="holds 3 launches, ncu_calls.json counts 2"):
        stream.split_ncu(rows, [{"shape": "x", "launches": 2}])
    timeline = [{"kernel": "moe_prep_kernel"}, {"kernel": "Memset"}, {"kernel": "moe_stage1_kernel"}]
    laid = stream.lay_over(timeline, [{"kernel": "prep"}, {"kernel": "stage1"}], "ncu", "ncu")
    assert [("ncu" in r) for r in laid] == [True, False, True]
    with pytest.raises(ValueError, match="do not follow"):
        stream.lay_over(timeline, [{"kernel": "stage2"}], "ncu", "ncu")


# The units of the H200's report, with bytes in G to check their conversion to MB and TB/s.
UNITS = {
    "gpu__time_duration.sum": "us",
    "sm__cycles_elapsed.avg.per_second": "Ghz",
    "launch__shared_mem_per_block_dynamic": "Kbyte/block",
    "launch__shared_mem_per_block_static": "byte/block",
    "dram__bytes_read.sum": "Gbyte",
    "dram__bytes_read.sum.per_second": "Gbyte/s",
}
LAUNCHES = {  # kernel: (ncu us, DRAM %, issue %, tensor pipe %, DRAM GB read, regs, dynamic shared kB, grid)
    "moe_prep_kernel": (2.0, 5.0, 10.0, 0.0, 0.002, 32, 2.048, (225, 1)),
    "moe_route_kernel": (7.0, 1.0, 5.0, 0.0, 0.0001, 32, 0.256, (257, 1)),
    "moe_stage1_kernel": (80.0, 52.0, 72.0, 16.0, 0.2, 127, 41.984, (144, 8)),
    "moe_stage2_kernel": (40.0, 75.0, 50.0, 14.0, 0.1, 125, 18.944, (144, 28)),
}


def _raw_csv(path: Path) -> None:
    """An ncu raw page as `ncu --csv` prints it to stdout, its log lines first."""
    head = [
        "ID",
        "Process ID",
        "Kernel Name",
        "device__attribute_display_name",
        "device__attribute_multiprocessor_count",
    ]
    columns = head + list(ncu_summary.METRICS)
    lines = ["==PROF== Connected to process 1 (python3)", ",".join(f'"{c}"' for c in columns)]
    lines.append(",".join(f'"{UNITS.get(c, "")}"' for c in columns))
    for i, (kernel, (us, dram, issue, tensor, gb, regs, smem, grid)) in enumerate(LAUNCHES.items()):
        value = dict.fromkeys(ncu_summary.METRICS, 1.0) | dict.fromkeys(ncu_summary.STALL_METRICS, 0.1)
        value |= {
            "gpu__time_duration.sum": us,
            "sm__cycles_elapsed.avg": us * 1800,
            "sm__cycles_elapsed.avg.per_second": 1.8,
            "launch__grid_dim_x": grid[0],
            "launch__grid_dim_y": grid[1],
            "launch__grid_size": grid[0] * grid[1],
            "launch__block_size": 128,
            "launch__registers_per_thread": regs,
            "launch__shared_mem_per_block_dynamic": smem,
            "launch__shared_mem_per_block_static": 0,
            "launch__occupancy_limit_registers": stream.programs_per_sm(regs, 0, 4),
            "launch__occupancy_limit_shared_mem": 233472 // (round(smem * 1000) + 1024),
            "launch__occupancy_limit_warps": 16,
            "launch__occupancy_limit_blocks": 32,
            "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": tensor,
            "smsp__issue_active.avg.pct_of_peak_sustained_active": issue,
            "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": dram,
            "dram__bytes_read.sum": gb,
            "dram__bytes_read.sum.per_second": gb / us * 1e6,  # GB/s
            "dram__bytes_read.sum.pct_of_peak_sustained_elapsed": gb / us * 1e6 / 48,  # of 4.8 TB/s
            ncu_summary.STALL.format("long_scoreboard"): 1.5,
        }
        row = [str(i), "7", kernel, "NVIDIA H200", "132"] + [f"{value[m]:,}" for m in ncu_summary.METRICS]
        lines.append(",".join(f'"{v}"' for v in row))
    path.write_text("\n".join(lines) + "\n")


def _plan() -> list[dict]:
    tiles = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 256, "num_stages": 3}
    return [
        {"kernel": "moe_prep_kernel", "grid": [225, 1, 1], "constexprs": {}, "per_sm": 16},
        {"kernel": "moe_route_kernel", "grid": [257, 1, 1], "constexprs": {}, "per_sm": 16},
        {"kernel": "moe_stage1_kernel", "grid": [144, 8, 1], "constexprs": tiles, "per_sm": 4},
        {"kernel": "moe_stage2_kernel", "grid": [144, 28, 1], "constexprs": tiles | {"num_stages": 2, "BLOCK_N": 64}},
    ]


def _run_folder(folder: Path, ncu: bool = True) -> None:
    """A finished run of one shape: two calls whose launches start 2 us later each."""
    calls = []
    for shift in (0.0, 2.0):
        events = [(n, s + shift, e + shift) for n, s, e in _events()]
        launches, lead = stream.call_launches(events, "moe_prep_kernel")
        calls.append({"event_us": 170.0 + shift, "lead_us": lead, "launches": launches})
    shape = {"case": {}, "plan": _plan(), "calls": calls, "bytes": 300e6, "floor_us": 70.0}
    meta = {"device": "NVIDIA H200", "sms": 132, "torch": "2.11", "triton": "3.6.0", "pdl": "on", "bandwidth_tbs": 4.24}
    results = {"meta": meta, "shapes": {SHAPE: shape, "H7168-I512-E32+1-k8+1-bs16": {"error": "ValueError: x"}}}
    folder.mkdir(parents=True, exist_ok=True)
    if ncu:
        results["ncu"] = {"status": "collected"}
        _raw_csv(folder / "ncu_raw.csv")
        (folder / "ncu_calls.json").write_text(json.dumps([{"shape": SHAPE, "launches": 4}]))
    (folder / "stream.json").write_text(json.dumps(results))


def _table(text: str) -> dict:
    """The short table's rows by launch: {kernel: cells}."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 10 and cells[1] in ("prep", "route", "stage1", "stage2"):
            rows[cells[1]] = cells
    return rows


def test_a_finished_run_reports_each_launch_with_its_verdict(tmp_path, capsys):
    _run_folder(tmp_path / "run")
    assert stream.main(["--from", str(tmp_path / "run"), "--out", str(tmp_path / "md")]) == 0
    printed = capsys.readouterr().out
    rows = _table(printed)
    assert {k: r[-1] for k, r in rows.items()} == {
        "prep": "gap",
        "route": "latency",
        "stage1": "issue",
        "stage2": "DRAM",
    }
    # stage 1 reads 0.2 GB in 80 us: 2.5 TB/s (DRAM 52% busy); in flight: 64 weight rows x (128 + 8) bytes x
    # 2 buffers x 4 programs = 70 kB, 2.5 TB/s x 700 ns / 132 SMs = 13 kB, 4.8 TB/s x 700 ns / 132 = 25 kB
    assert rows["stage1"][2:7] == ["86.0", "-6.0", "52.0", "2.50", "70 / 13 / 25"]
    assert rows["stage2"][6] == "35 / 13 / 25"  # one buffer of 64 rows, 4 programs; 2.5 TB/s
    assert rows["route"][6] == "- / 0 / 25"
    call = next(line for line in printed.splitlines() if line.startswith(f"| {SHAPE} |"))
    cells = [c.strip() for c in call.strip("|").split("|")]
    # call 171 us (median of 170 and 172), span 161, lead 3, 4 us idle, 300 MB at 70 us: 2.44x, ncu read 302.1 MB
    assert cells[1:11] == ["171.0", "161.0", "3.0", "4.0", "4", "300.0", "70.0", "2.44", "302.1", "profiled"]
    assert "| H7168-I512-E32+1-k8+1-bs16 | error: ValueError: x |" in printed
    report = (tmp_path / "md" / "stream.md").read_text()
    assert "## Per launch" in report and stream.RULES in report and "long_scoreboard 1.50" in report


def test_without_counters_only_gaps_are_judged(tmp_path, capsys):
    _run_folder(tmp_path, ncu=False)
    assert stream.main(["--from", str(tmp_path)]) == 0
    rows = _table(capsys.readouterr().out)
    assert [r[-1] for r in rows.values()] == ["gap", "?", "?", "?"]
    assert rows["stage1"][6] == "70 / - / 25"
    assert not (tmp_path / "stream.md").exists()  # --from writes only where --out says


def test_read_raw_wants_the_raw_pages_header(tmp_path):
    (tmp_path / "raw.csv").write_text("==PROF== nothing profiled\n")
    with pytest.raises(ValueError, match="no ncu raw-page header"):
        ncu_summary.read_raw(tmp_path / "raw.csv")


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--reps", "0"], "argument --reps: must be at least 1"),
        (["--latency-ns", "-1"], "argument --latency-ns: must be above 0"),
        (["--shapes", "no-such-shape"], "--shapes no-such-shape: no benchmark shape matches"),
        (["--shapes", "I2048", "--ceilings", "fast"], "--ceilings expects 'TBPS,TFLOPS'"),
        (["--from", "nowhere"], "--from nowhere: no stream.json there"),
        (["--from", "nowhere", "--ncu"], "--from: reports a finished run; it takes neither --ncu"),
        (["--profile-call", "--ncu"], "--profile-call: is what runs under ncu"),
        (["--variant", "overlap"], "--variant overlap: 'overlap' is not FIELD=VALUE of a tiles field"),
        (["--from", "nowhere", "--variant", "overlap=1"], "--from: reports a finished run; it takes neither"),
    ],
)
def test_bad_options_are_one_line_errors_naming_the_option(argv, needle, capsys):
    try:
        status = stream.main(argv)
    except SystemExit as stop:  # argparse's own errors
        status = stop.code
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("python -m bench.h200.stream: error: ") and needle in err


def test_ncu_files_that_disagree_leave_the_timeline_and_say_why(tmp_path, capsys):
    _run_folder(tmp_path)
    (tmp_path / "ncu_calls.json").write_text(json.dumps([{"shape": SHAPE, "launches": 3}]))
    assert stream.main(["--from", str(tmp_path), "--out", str(tmp_path)]) == 0
    assert [r[-1] for r in _table(capsys.readouterr().out).values()] == ["gap", "?", "?", "?"]
    report = (tmp_path / "stream.md").read_text()
    assert "ncu: collected, not used: ncu_raw.csv holds 4 launches, ncu_calls.json counts 3" in report


def test_the_static_choice_is_put_back(monkeypatch):
    from moe_triton import target

    monkeypatch.delenv("MOE_SELECT", raising=False)
    with stream.static_choice("off"):
        assert os.environ["MOE_SELECT"] == "0" and target.PDL is False
    assert "MOE_SELECT" not in os.environ and target.PDL is True


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a CUDA GPU")
def test_without_a_gpu_it_says_why(tmp_path, capsys):
    assert stream.main(["--shapes", "bs16", "--out", str(tmp_path / "out")]) == 2
    assert "no CUDA GPU here" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_ncu_asked_for_where_there_is_none(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(stream, "find_ncu", lambda: None)
    assert stream.main(["--ncu", "--out", str(tmp_path / "out")]) == 2
    assert "--ncu: no Nsight Compute here" in capsys.readouterr().err


def test_the_ncu_command_profiles_one_call_per_shape_with_free_clocks(tmp_path):
    command = stream.ncu_command("ncu", tmp_path, ["a", "b"], "on")
    text = " ".join(command)
    assert "--profile-from-start off --clock-control none" in text
    assert command[command.index("--metrics") + 1] == ",".join(ncu_summary.METRICS)
    assert command[-5:] == ["--out", str(tmp_path), "--shapes", "a", "b"] and "--profile-call" in command
    assert "--variant" not in command
    # the profiled process measures the same variant
    command = stream.ncu_command("ncu", tmp_path, ["a"], "on", "block_k1=256,stages1=2")
    assert command[command.index("--variant") + 1] == "block_k1=256,stages1=2" and command[-2:] == ["--shapes", "a"]


def test_a_variant_is_each_shapes_static_tiles_with_the_fields_or_a_refusal_naming_the_shape(monkeypatch):
    from bench.runner.case_args import case_shape
    from moe_triton import target
    from moe_triton.tiles_nvidia import GLUON_TUNED, TUNED
    from problem.cases import BENCHMARKS, case_name

    monkeypatch.setattr(target, "gluon_kernels", lambda device: True)
    cases = [(case_name(c), c) for c in BENCHMARKS if c["bs"] == 512 and c["dexpert"] == 256]
    cases += [(case_name(c), c) for c in BENCHMARKS if c["bs"] == 16 and c["dexpert"] == 256]
    e257_512, e257_16 = (case_shape(c) for _, c in cases)
    rows = stream.variant_tiles(cases, {"stages1": 3}, torch.device("cuda"))
    # the Gluon row where GLUON_TUNED names the shape, the decode table's elsewhere
    assert rows == {e257_512: GLUON_TUNED[e257_512].replace(stages1=3), e257_16: TUNED[e257_16].replace(stages1=3)}
    with pytest.raises(ValueError, match="^" + re.escape(f"{cases[0][0]}: tiles: gluon1 must be 0")):
        stream.variant_tiles(cases, {"gluon1": 3}, torch.device("cuda"))


@pytest.mark.parametrize("gluon", [True, False])
def test_the_variants_rows_are_read_while_measuring_and_put_back(gluon):
    from moe_triton.tiles_nvidia import GLUON_TUNED, TUNED, static_tiles
    from problem.shapes import Shape

    table = GLUON_TUNED if gluon else TUNED
    named, unnamed = Shape(512, 7168, 256, 257, 9), Shape(16, 7168, 256, 257, 9)
    before = dict(table)
    rows = {shape: static_tiles(shape, gluon).replace(stages1=2, overlap=0) for shape in (named, unnamed)}
    with stream.table_rows(rows, gluon):
        assert all(static_tiles(shape, gluon) == tiles for shape, tiles in rows.items())
    assert table == before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="measures on an NVIDIA GPU")
def test_on_the_gpu_one_shape_is_measured_and_reported(tmp_path, capsys, monkeypatch):
    from bench.h200 import harness

    # the official 62.5 GiB flush would stay reserved in this worker
    monkeypatch.setattr(harness, "fitting_device", harness.l2_device)
    argv = ["--shapes", "I512-E32+1-k8+1-bs16", "--reps", "2", "--ceilings", "4.24,715", "--out", str(tmp_path)]
    assert stream.main(argv) == 0
    results = json.loads((tmp_path / "stream.json").read_text())
    shape = results["shapes"]["H7168-I512-E32+1-k8+1-bs16"]
    assert len(shape["calls"]) == 2 and shape["bytes"] > 190e6 and math.isfinite(shape["floor_us"])
    kernels = [stream.short(r["kernel"]) for r in shape["calls"][0]["launches"]]
    assert kernels[:2] == ["prep", "route"] and len(kernels) == len(shape["plan"])
    assert all(r["per_sm"] >= 1 for r in shape["plan"])
    assert "## Per launch" in (tmp_path / "stream.md").read_text() and "| prep |" in capsys.readouterr().out


def test_the_plan_names_each_launch_with_the_constexprs_tile_stream_reads():
    """The decode path's plan of a small case (the interpreter's on the CPU): its launches in order,
    the stages' tiles readable by tile_stream."""
    from problem.cases import TINY
    from reference import generate_input
    from selection.candidates import run_triton

    run_triton(generate_input(**TINY[0]))
    plan = stream.plan_launches()
    assert [stream.short(r["kernel"]) for r in plan] == ["prep", "route", "stage1", "stage2"]
    for launch in plan[2:]:
        got = stream.tile_stream(launch["kernel"], launch["constexprs"])
        assert got["step_bytes"] > 0 and got["slots"] >= 1 and len(launch["grid"]) == 3
