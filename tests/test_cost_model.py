"""The cost model (bench.gfx950.model): its rules on small numbers, its H200 twin against the committed
H200 measurements (bench/results/h200/calibrate-2026-12-01) within the tolerances docs/gfx950.md states,
the SASS and control-flow readers on captured snippets; and bench.gfx950's CLI: the ESTIMATE table's
floor column, output paths checked before any compile, Ctrl-C, no import cycle. No compiles here."""

import ast
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.gfx950 import model

ROOT = Path(__file__).resolve().parents[1]
M = model.MI355X


# ---------------------------------------------------------------- bandwidth against bytes in flight


def test_bandwidth_is_littles_law_at_light_load_and_the_achievable_rate_at_heavy_load():
    few = model.bandwidth(M, 4, 8192)
    assert few == pytest.approx(4 * 8192 / M.latency_s, rel=1e-4)  # far below the cap: B / L0 per unit
    many = model.bandwidth(M, 256, 1 << 22)
    assert many == pytest.approx(M.bandwidth_bytes_per_s, rel=1e-3)
    rates = [model.bandwidth(M, 256, b) for b in (1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18)]
    assert rates == sorted(rates) and rates[-1] < M.bandwidth_bytes_per_s  # more in flight, more bandwidth
    assert model.bandwidth(M, 128, 1 << 14) < model.bandwidth(M, 256, 1 << 14)
    assert model.bandwidth(M, 0, 1 << 14) == 0.0


def test_a_last_partial_round_of_streaming_programs_makes_no_step():
    """The fill rule's jump (a 257th program on 256 CUs as costly as 256 more) is gone: a program past a
    multiple of the units changes the streaming time by about its share of the bytes."""
    per_program = 1 << 20
    for units_times in (1, 2, 4):
        at = units_times * M.units
        t0 = model.stream_seconds(M, at * per_program, at, 4, 1 << 14)
        t1 = model.stream_seconds(M, (at + 1) * per_program, at + 1, 4, 1 << 14)
        assert 1.0 <= t1 / t0 < 1.01
    # fewer programs than units, at light load: one unit each, so half the programs stream at half the rate
    half = model.stream_seconds(M, 128 * per_program, 128, 4, 1024)
    full = model.stream_seconds(M, 256 * per_program, 256, 4, 1024)
    assert half == pytest.approx(full, rel=0.02)


# ---------------------------------------------------------------- compute: resident programs in rounds


def test_one_program_is_issue_bound_when_many_warps_share_and_chain_bound_alone():
    work = model.ProgramWork(issue=100.0, matrix=20.0, memory=300.0, warps=4)
    alone = model.program_cycles(M, work, 1.0)
    assert alone == M.issue_latency * 100 + 20 + 300  # one warp per sub-partition: its own chain
    crowded = model.program_cycles(M, work, 8.0)
    assert crowded == 8 * 100 / M.issue_efficiency  # eight warps share the issue slots
    wide = model.ProgramWork(issue=100.0, matrix=20.0, memory=300.0, warps=8)
    assert model.program_cycles(M, wide, 1.0) == M.issue_latency * 100 + 2 * 20 + 300  # two groups take turns


def test_rounds_of_resident_programs_and_the_last_one_at_its_own_occupancy():
    work = model.ProgramWork(issue=1000.0, matrix=0.0, memory=0.0, warps=4)
    slots = 4  # programs per unit: 4 warps per sub-partition when full
    full = model.program_cycles(M, work, 4)
    assert model.launch_cycles(M, 2 * slots * M.units, slots, work) == pytest.approx(2 * full)
    # a few programs more: one more round, each program alone on its unit, at its chain
    extra = model.launch_cycles(M, 2 * slots * M.units + 10, slots, work)
    assert extra == pytest.approx(2 * full + model.program_cycles(M, work, 1))
    assert model.launch_cycles(M, 0, slots, work) == 0.0


def test_the_spread_of_the_block_count_smooths_a_round_boundary():
    work = model.ProgramWork(issue=1000.0, matrix=0.0, memory=0.0, warps=4)
    boundary = 4 * M.units

    def at(n):
        return model.launch_cycles(M, n, 4, work)

    sharp = at(boundary + 0.5) - at(boundary - 0.5)
    smooth = model.averaged(at, boundary + 0.5, 16.0) - model.averaged(at, boundary - 0.5, 16.0)
    assert sharp > 0.5 * model.program_cycles(M, work, 1) and abs(smooth) < 0.25 * sharp
    assert model.averaged(lambda x: 3 * x + 1, 10.0, 4.0) == pytest.approx(31.0)  # exact for a line
    assert model.averaged(lambda x: x * x, 10.0, 4.0) == pytest.approx(104.0, rel=0.002)  # nearly for a square


def test_block_moments_match_enumeration():
    from itertools import product

    # 3 tokens, each picks 1 of 2 experts; blocks of 2 rows. Independent per expert in the model: each
    # expert's row count is Binomial(3, 1/2).
    counts = {}
    for picks in product((0, 1), repeat=3):
        blocks = -(-picks.count(0) // 2)
        counts[blocks] = counts.get(blocks, 0) + 1 / 8
    mean = sum(b * p for b, p in counts.items())
    var = sum(b * b * p for b, p in counts.items()) - mean * mean
    got_mean, got_var = model.blocks_moments(3, 2, 1, 1, 2)
    assert got_mean == pytest.approx(2 * mean + 2)  # the shared expert's 3 rows: 2 blocks, always
    assert got_var == pytest.approx(2 * var)


# ---------------------------------------------------------------- the H200 twin against the measurements


def _twin():
    from bench.h200 import twin

    static = json.loads(twin.STATIC.read_text())
    return twin, static, twin.measured()


def test_the_h200_twin_predicts_the_leaderboard_times_within_20_percent():
    twin, static, data = _twin()
    rows = twin.case_rows(model.H200, static, data)
    assert len(rows) == 10
    errors = {r["case"]: r["predicted_us"] / r["measured_us"] - 1 for r in rows}
    assert all(abs(e) < 0.20 for e in errors.values()), errors


def test_the_h200_twin_predicts_the_bandwidth_sweep_within_10_percent():
    twin, static, data = _twin()
    rows = twin.sweep_rows(model.H200, static, data)
    assert len(rows) == 70
    worst = max(rows, key=lambda r: abs(r["predicted_us"] / r["measured_us"] - 1))
    assert abs(worst["predicted_us"] / worst["measured_us"] - 1) < 0.10, worst


def test_the_h200_twins_gemm_launches_and_instruction_counts_follow_ncu():
    twin, static, data = _twin()
    rows = [r for r in twin.launch_rows(model.H200, static, data) if r["gemm"]]
    assert len(rows) == 22
    for r in rows:  # the static SASS counts x the expected programs against ncu's smsp__inst_executed
        assert 0.85 < r["instr_static"] / r["instr_ncu"] < 1.15, r
        assert abs(r["predicted_us"] / r["measured_us"] - 1) < 0.25, r
    rms = math.sqrt(sum((r["predicted_us"] / r["measured_us"] - 1) ** 2 for r in rows) / len(rows))
    assert rms < 0.10


def test_the_h200_gap_is_the_slope_of_the_dependent_launches():
    from bench.h200.fit import fit_gap

    _, _, data = _twin()
    assert fit_gap(data["gap"]) * 1e6 == pytest.approx(model.H200.gap_s * 1e6, abs=0.005)


# ---------------------------------------------------------------- reading SASS


SASS = """\
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                   /* 0x000 */
        /*0010*/               @P0 EXIT ;                                                    /* 0x000 */
        /*0020*/                   IMAD R2, R3, R4, R5 ;                                     /* 0x000 */
        /*0030*/                   HGMMA.64x16x16.F32.BF16 R24, R32, gdesc[UR56], RZ, !UPT ;  /* 0x000 */
        /*0040*/                   LOP3.LUT R6, R6, 0xf, RZ, 0xc0, !PT ;                    /* 0x000 */
        /*0050*/              @!P4 BRA 0x20 ;                                                /* 0x000 */
        /*0060*/                   REDG.E.ADD.BF16x8.RN.STRONG.GPU desc[UR12][R22.64], R4 ;  /* 0x000 */
        /*0070*/                   EXIT ;                                                    /* 0x000 */
        /*0080*/                   BRA 0x80;                                                 /* 0x000 */
"""


def test_sass_splits_the_mma_loop_from_the_rest():
    from bench.h200 import sass

    kernel = sass.split(SASS)
    assert (kernel.loop.instructions, kernel.loop.mma) == (4, 1)
    assert kernel.loop.tensor_flops == 2 * 64 * 16 * 16 / 4  # a warpgroup's MMA, a quarter per warp
    assert kernel.rest.instructions == 5 and kernel.total.instructions == 9
    assert kernel.path.instructions == 2  # the early exit: the shortest way out
    assert (
        sass.opcode("@!P4 BRA 0x20") == "BRA"
        and sass.tensor_flops("HMMA.16816.F32.BF16 R0, R2, R4, R0") == 2 * 16 * 8 * 16
    )


NESTED = """\
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                   /* 0x000 */
        /*0010*/                   LDGSTS.E.BYPASS.128 [R2], desc[UR4][R6.64] ;              /* 0x000 */
        /*0020*/                   IMAD R2, R3, R4, R5 ;                                     /* 0x000 */
        /*0030*/                   IGMMA.64x128x32.S32.S8.S8 R24, R88, gdesc[UR8], R24 ;     /* 0x000 */
        /*0040*/                   PRMT R6, R6, 0x5410, R7 ;                                 /* 0x000 */
        /*0050*/              @!P4 BRA 0x20 ;                                                /* 0x000 */
        /*0060*/                   FFMA R8, R8, R9, R10 ;                                    /* 0x000 */
        /*0070*/              @!P5 BRA 0x10 ;                                                /* 0x000 */
        /*0080*/                   EXIT ;                                                    /* 0x000 */
"""


def test_the_k_loop_is_the_shortest_loop_holding_an_mma():
    from bench.h200 import sass

    lines = sass.instructions(NESTED)
    assert [len(body) for body in sass.loops(lines)] == [4, 7]  # the inner loop, then the one around it
    assert [sass.opcode(t) for t in sass.k_loop(lines)] == ["IMAD", "IGMMA", "PRMT", "BRA"]
    assert sass.k_loop(sass.instructions(NESTED.replace("IGMMA.64x128x32.S32.S8.S8", "IADD3"))) == []
    kernel = sass.split(NESTED)
    assert (kernel.loop.instructions, kernel.loop.mma, kernel.rest.instructions) == (4, 1, 5)
    assert kernel.loop.tensor_flops == 2 * 64 * 128 * 32 / 4  # int8 ops, a quarter per warp


def test_one_programs_path_takes_the_short_branch_and_enters_loops_once():
    from bench.gfx950.cfg import Instruction, shortest_path

    code = [
        Instruction("head"),
        Instruction("role", target=4, conditional=True),  # a few programs: the long role
        Instruction("long 1"),
        Instruction("long 2", target=7),  # then to the end
        Instruction("short"),
        Instruction("guard", target=8, conditional=True),  # jumps over the loop: never taken
        Instruction("body", target=6, conditional=True),  # the loop's backward branch: its body once
        Instruction("join"),
        Instruction("end", exit=True),
    ]
    path = shortest_path(code)
    assert path == ["head", "role", "short", "guard", "body", "join", "end"]


# ---------------------------------------------------------------- the ESTIMATE's table


def test_the_case_row_has_the_floor_at_two_launches_and_the_ratio():
    from bench.gfx950.estimate import Estimate
    from bench.gfx950.report import CASE_COLUMNS, case_row, markdown

    est = Estimate(bytes_floor_us=40.0, mfma_us=1.0, compute_us=30.0, launches=4, floor2_us=50.0)
    est.per_launch = []
    case = SimpleNamespace(label="bench9", shape="H1-I1")
    row = case_row(case, "native path", est, 100.0, "table")
    expected = 4 * M.gap_s * 1e6
    assert row["estimate_us"] == f"{expected:.1f}" and row["floor2_us"] == "50.0"
    assert row["floor_ratio"] == f"{expected / 50.0:.2f}"
    heads = [h for h, _ in CASE_COLUMNS]
    assert heads.index("floor (2) us") == heads.index("ESTIMATE us") + 1
    text = markdown("t", [], [row], "line one\nconstants: here")
    assert "| ESTIMATE us | floor (2) us | ESTIMATE / floor (2) |" in text
    assert "\n\nline one\n\nconstants: here\n" in text


def test_the_constants_line_names_every_constant_the_estimate_used():
    from bench.gfx950.estimate import assumptions

    line = assumptions(gap_us=2.5).splitlines()[-1]
    assert line.startswith("constants: MI355X:") and "gap 2.5 us" in line
    for text in ("0.95 x 8 TB/s", f"L_step {M.step_latency_cycles:g} cycles", "issue E 1, a 1"):
        assert text in line


# ---------------------------------------------------------------- bench.gfx950's CLI


def _imports(path: Path) -> set[str]:
    """Every module of bench.gfx950 a file imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "bench.gfx950":
                found |= {f"bench.gfx950.{a.name}" for a in node.names}
            elif node.module.startswith("bench.gfx950."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("bench.gfx950.")}
    return found


def test_bench_gfx950s_modules_import_each_other_in_no_circle():
    folder = ROOT / "bench/gfx950"
    graph = {f"bench.gfx950.{p.stem}": _imports(p) for p in folder.glob("*.py")}
    assert "bench.gfx950.run" in graph["bench.gfx950.__main__"]
    done, on_path = set(), []

    def visit(name):
        if name in on_path:
            raise AssertionError(" -> ".join(on_path[on_path.index(name) :] + [name]))
        if name in done or name not in graph:
            return
        on_path.append(name)
        for other in sorted(graph[name]):
            visit(other)
        on_path.pop()
        done.add(name)

    for name in sorted(graph):
        visit(name)


def _cli_error(argv, capsys) -> str:
    from bench.gfx950.run import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


def test_bad_output_paths_fail_in_one_line_before_any_compile(tmp_path, capsys, monkeypatch):
    from bench.gfx950 import run

    monkeypatch.setattr(run, "_check", lambda *a: pytest.fail("compiled before checking the paths"))
    missing = tmp_path / "no" / "x.md"
    assert _cli_error(["--md", str(missing)], capsys) == (
        f"python -m bench.gfx950: error: --md {missing}: no folder {missing.parent}"
    )
    assert _cli_error(["--ranking", str(tmp_path)], capsys) == (
        f"python -m bench.gfx950: error: --ranking {tmp_path}: is a folder"
    )
    locked = Path("/proc/version")  # exists and opens for writing for no one, root included
    assert _cli_error(["--md", str(locked)], capsys).startswith(f"python -m bench.gfx950: error: --md {locked}: ")
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    assert _cli_error(["--asm-dir", str(a_file)], capsys) == (
        f"python -m bench.gfx950: error: --asm-dir {a_file}: is not a folder"
    )
    assert _cli_error(["--asm-dir", str(a_file / "sub")], capsys).endswith(f"no folder {a_file}")
    assert not (tmp_path / "no").exists() and list(tmp_path.iterdir()) == [a_file]  # nothing left behind


def _fake_compile(monkeypatch, interrupt_at: int | None):
    """launch_case and analyse stand-ins: one kernel without MFMAs per case, a KeyboardInterrupt at the
    interrupt_at-th case."""
    from bench.gfx950 import asm, check, run

    calls = []

    def launch_case(params, path, tiles=None):
        calls.append(params)
        if len(calls) == interrupt_at:
            raise KeyboardInterrupt
        kernel = SimpleNamespace(
            asm={"amdgcn": "s_endpgm\n", "ttgir": "module {}\n"}, metadata=SimpleNamespace(hash=f"{len(calls):08x}")
        )
        return [SimpleNamespace(function="moe_fake_kernel", grid=(1, 1, 1), constexprs={}, kernel=kernel)], "fake"

    def analyse(kernel):
        res = asm.Resources(vgpr=8, agpr=0, total_vgpr=8, sgpr=8, scratch=0, vgpr_spill=0, sgpr_spill=0)
        return check.KernelReport("moe_fake_kernel", 4, 1, 0, {}, None, res, 8.0, [], 0.0)

    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the check turns it off in-process; put back afterwards
    monkeypatch.setattr(run, "launch_case", launch_case)
    monkeypatch.setattr(check, "analyse", analyse)


def test_ctrl_c_prints_one_line_exits_130_and_leaves_no_asm_folder(tmp_path, capsys, monkeypatch):
    from bench.gfx950.run import main

    _fake_compile(monkeypatch, interrupt_at=2)
    target = tmp_path / "asm"
    assert main(["--cases", "smoke:0", "smoke:1", "--variants", "table", "--asm-dir", str(target)]) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["python -m bench.gfx950: interrupted (Ctrl-C), nothing written"]
    assert list(tmp_path.iterdir()) == []  # no folder, no partial one beside it


def test_the_asm_folder_appears_whole_once_the_run_is_done(tmp_path, capsys, monkeypatch):
    from bench.gfx950.run import main

    _fake_compile(monkeypatch, interrupt_at=None)
    target = tmp_path / "asm"
    assert main(["--cases", "smoke:0", "smoke:1", "--variants", "table", "--asm-dir", str(target)]) == 0
    names = sorted(p.name for p in target.iterdir())
    assert names == sorted(
        f"smoke{i}-table-moe_fake_kernel-{i + 1:08x}.{ext}" for i in (0, 1) for ext in ("amdgcn", "ttgir")
    )
    assert list(tmp_path.iterdir()) == [target]
    capsys.readouterr()


def test_the_hold_out_compares_the_alternate_tiles_and_their_ranking():
    twin, static, data = _twin()
    name = "H7168-I256-E256+1-k8+1-bs128"
    assert set(static["cases"][name]["alternates"]) == {"retune", "regs1-128"}  # tiles_nvidia.ALTERNATES
    measured = {"calls": {name: {"table": 400.0, "retune": 300.0}}, "device": "x", "versions": {}}
    rows = twin.alternate_rows(model.H200, static, measured)
    assert [r["tile"] for r in rows] == ["table", "retune"]  # only what was measured
    assert rows[0]["rank"] == "model" and rows[1]["rank"] == " H200"  # the model prefers the table's tile
    text = twin.markdown(model.H200, static, data, measured)
    assert "the model's fastest tile is the H200's in 0 of 1 shapes" in text
