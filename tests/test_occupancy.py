"""bench/h200/occupancy.py, the tiles screened on the CPU: the programs an sm_90 SM holds, what limits them, and
the command's table of a shape's candidates compiled for sm_90."""

import pytest
from gluon_compile import fresh_run

from bench.h200 import occupancy


@pytest.mark.parametrize(
    ("registers", "warps", "shared", "want"),
    [
        # figures of kernels compiled for sm_90 (bench/notes/nvidia-speed.md)
        (128, 4, 41984, (4, "registers")),  # the decode stage 1 at the 16-row blocks
        (64, 4, 25088, (8, "registers, shared memory")),  # the same at 64 registers, two slots
        (96, 4, 41984, (5, "registers, shared memory")),
        (127, 4, 50208, (4, "registers, shared memory")),  # 127 registers are allocated as 128
        (80, 12, 102472, (2, "registers, shared memory")),  # two MMA warpgroups and the loader's
        (168, 12, 152640, (1, "registers, shared memory")),
        (40, 4, 100000, (2, "shared memory")),
        (32, 32, 0, (2, "registers, warps")),
        (16, 1, 0, (32, "programs")),
    ],
)
def test_the_programs_an_sm_holds_and_what_limits_them(registers, warps, shared, want):
    assert occupancy.programs_per_sm(registers, warps, shared) == want


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--shapes", "bs9999", "--variant", "overlap=1"], "--shapes bs9999: no official shape matches"),
        (["--shapes", "bs16", "--variant", "colour=2"], "--variant colour=2: 'colour=2' is not FIELD=VALUE"),
    ],
)
def test_a_bad_shape_or_variant_is_one_line(argv, says, capsys):
    assert occupancy.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]


def test_a_candidate_that_does_not_compile_is_listed_with_why(monkeypatch, capsys):
    def fails(case, tiles):
        raise RuntimeError("ptxas fatal: out of registers\nthe rest of its log")

    monkeypatch.setattr(occupancy, "gemm_rows", fails)
    assert occupancy.main(["--shapes", "0", "--variant", "capped=max_regs1=64"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert [row.split("|")[2].strip() for row in rows] == [
        f"{name}: compile failed: RuntimeError: ptxas fatal: out of registers" for name in ("static", "capped")
    ]


def test_the_table_compiles_each_candidate_for_sm90_and_fits_its_programs():
    args = ["--shapes", "0", "--variant", "capped=max_regs1=64", "--variant", "wrong=gluon1=3"]
    done = fresh_run("-m", "bench.h200.occupancy", *args)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in done.stdout.splitlines()[2:]]
    launches = {(row[1], row[2]): row for row in rows if row[2]}
    assert set(launches) == {
        (name, kernel) for name in ("static", "capped") for kernel in ("moe_stage1_kernel", "moe_stage2_kernel")
    }
    for row in launches.values():
        registers, warps, shared = int(row[3]), int(row[4]), int(row[5].replace(",", ""))
        fit = occupancy.programs_per_sm(registers, warps, shared)
        assert row[6] == f"{fit.programs} ({fit.limit})"
        assert int(row[7]) > 100 and int(row[8].split(" / ")[1]) > 0  # a K loop body that issues wgmmas
    assert int(launches["capped", "moe_stage1_kernel"][3]) <= 64 < int(launches["static", "moe_stage1_kernel"][3])
    assert launches["capped", "moe_stage2_kernel"][3:] == launches["static", "moe_stage2_kernel"][3:]
    refused = [row for row in rows if row[1].startswith("wrong: tiles: gluon1 must be 0 (off), 1, 2 or 4")]
    assert len(refused) == 1
