"""The offline gfx950 check (bench.gfx950): its parsers on captured AMDGCN / TTGIR snippets, its
occupancy and routing formulas, and real compiles (in fresh processes, since this one has Triton's
interpreter on): a scaled-dot toy GEMM passes, today's decode path fails."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gfx950 import asm, model
from bench.gfx950.check import k_steps

ROOT = Path(__file__).resolve().parents[1]

# The offline check compiles for gfx950 on the CPU; on a GPU machine it repeats what CI runs.
pytestmark = pytest.mark.cpu_only

# Shapes of real triton 3.9 output for gfx950 (aiter's mxfp4 kernel, our stage 2), cut down.
LOOP_ASM = """\
\ts_branch .LBB0_0
.LBB0_0:
\tv_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[40:43], v[32:35], v[0:3], v28, v16 op_sel_hi:[0,0,0] cbsz:4 blgp:4
.LBB0_22:                                ; =>This Inner Loop Header: Depth=1
\t.loc\t1 355 26
\tbuffer_load_dwordx4 v[10:13], v2, s[8:11], 0 offen
\tv_add_u32_e32 v1, 64, v1
\tv_accvgpr_read_b32 v3, a0 ; moves count as VALU
\tds_read_b128 v[50:53], v9
\ts_waitcnt lgkmcnt(0)
\tv_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[50:53], v[42:45], v[0:3], v33, v32 op_sel_hi:[0,0,0] cbsz:4 blgp:4
\tv_mfma_scale_f32_16x16x128_f8f6f4 v[4:7], v[54:57], v[42:45], v[4:7], v33, v32 op_sel:[1,0,0] cbsz:4 blgp:4
\ts_add_i32 s4, s4, -1
\ts_cmp_lg_u32 s4, 0
\ts_cbranch_scc1 .LBB0_22
.LBB0_24:
\tv_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[40:43], v[32:35], v[0:3], v28, v16 op_sel_hi:[0,0,0] cbsz:4 blgp:4
\ts_endpgm
"""

BACKWARD_S_BRANCH = """\
.LBB0_10:                               ; =>This Inner Loop Header: Depth=1
\tv_mfma_f32_16x16x32_bf16 a[0:3], v[36:39], v[40:43], a[0:3]
\tv_and_b32_e32 v5, 15, v5
\ts_cbranch_scc1 .LBB0_12
\tglobal_atomic_pk_add_bf16 v[0:1], v2, off
.LBB0_12:                               ;   in Loop: Header=BB0_10 Depth=1
\ts_cbranch_scc0 .LBB0_14
\ts_branch .LBB0_10
.LBB0_14:
\ts_endpgm
"""

KERNEL_INFO = """\
; Kernel info:
; TotalNumSgprs: 98
; NumVgprs: 207
; NumAgprs: 4
; TotalNumVgprs: 212
; ScratchSize: 120
    .private_segment_fixed_size: 120
    .sgpr_spill_count: 0
    .vgpr_spill_count: 39
"""

TTGIR = """\
#mma = #ttg.amd_mfma<{version = 4, warpsPerCTA = [2, 4], instrShape = [32, 32, 64], isTransposed = true}>
module {
  tt.func public @k() {
    %r:2 = scf.for %i = %c0 to %n step %c256 iter_args(%acc = %cst) -> (tensor<128x32xf32, #mma>) : i32 {
      %d = tt.dot_scaled %a scale %sa, %b scale %sb, %acc lhs = e2m1 rhs = e2m1 {fastMath = false} : \
tensor<128x128xi8, #ttg.dot_op<{opIdx = 0, parent = #mma, kWidth = 16}>>, tensor<128x8xi8, #linear> * \
tensor<128x32xi8, #ttg.dot_op<{opIdx = 1, parent = #mma, kWidth = 16}>>, tensor<32x8xi8, #linear1> -> \
tensor<128x32xf32, #mma> loc(#loc1)
      scf.yield %d : tensor<128x32xf32, #mma>
    } loc(#loc2)
    %e = tt.dot %x, %y, %r#0 : tensor<128x64xbf16, #ttg.dot_op<{opIdx = 0, parent = #mma, kWidth = 8}>> * \
tensor<64x32xbf16, #ttg.dot_op<{opIdx = 1, parent = #mma, kWidth = 8}>> -> tensor<128x32xf32, #mma>
    tt.return
  }
}
""".replace("\\\n", "")


def test_k_loop_counts_one_iteration_of_the_loop_holding_mfmas():
    loop = asm.k_loop(LOOP_ASM)
    assert (loop.instructions, loop.mfma, loop.valu) == (10, 2, 2)  # directives, labels, comments dropped
    assert all(asm.is_scaled_mfma(asm.mnemonic(line)) for line in loop.mfma_lines)


def test_k_loop_follows_an_unconditional_backward_branch_and_its_inner_blocks():
    loop = asm.k_loop(BACKWARD_S_BRANCH)
    assert (loop.instructions, loop.mfma, loop.valu) == (6, 1, 1)


def test_no_loop_holding_mfmas_gives_none_and_the_whole_kernel_fallback():
    straight = "\n".join(line for line in LOOP_ASM.splitlines() if "s_cbranch" not in line)
    assert asm.k_loop(straight) is None
    whole = asm.whole_kernel(straight)
    assert whole.whole_kernel and whole.mfma == 4
    assert whole.per_step(2).mfma == 2 and whole.per_step(2).steps == 2


def test_instruction_classes_and_mfma_shapes():
    assert asm.is_mfma("v_mfma_f32_32x32x16_bf16") and not asm.is_valu("v_mfma_f32_32x32x16_bf16")
    assert asm.is_valu("v_accvgpr_write_b32") and not asm.is_valu("s_add_i32")
    assert asm.is_scaled_mfma("v_mfma_scale_f32_32x32x64_f8f6f4") and not asm.is_scaled_mfma("v_mfma_f32_16x16x32_bf16")
    assert asm.mfma_shape("v_mfma_scale_f32_16x16x128_f8f6f4") == (16, 16, 128)
    assert asm.operand_formats(
        "v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:7], v[8:11], v[0:3], v1, v2 cbsz:4 blgp:4"
    ) == ("fp4", "fp4")
    assert asm.operand_formats("v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:11], v[8:15], v[0:3], v1, v2") == (
        "fp8",
        "fp8",
    )
    assert asm.mfma_counts(LOOP_ASM) == {"v_mfma_scale_f32_16x16x128_f8f6f4": 4}


def test_resources_read_registers_scratch_and_spills():
    res = asm.resources(KERNEL_INFO)
    assert (res.vgpr, res.agpr, res.total_vgpr, res.sgpr) == (207, 4, 212, 98)
    assert (res.scratch, res.vgpr_spill, res.sgpr_spill) == (120, 39, 0)


def test_loop_dots_read_the_tile_and_layout_inside_the_loop_only():
    dots, in_loop = asm.loop_dots(TTGIR)
    assert in_loop and len(dots) == 1  # the dot after the loop (a peeled copy) is left out
    dot = dots[0]
    assert (dot.m, dot.n, dot.k, dot.scaled) == (128, 32, 256, True)  # e2m1: two codes per byte along K
    assert (dot.warps, dot.instr) == ((2, 4), (32, 32))
    assert dot.replication == 4  # 4 warps x 32 columns over a 32-column tile


def test_loop_dots_take_the_innermost_loop_where_an_outer_loop_holds_a_peeled_copy():
    # Stage 2 at d_inter 512 and more: its loop over output tiles holds the K loop and the
    # pipeliner's peeled last step, a dot of the same tile; the K steps are the inner loop's.
    lines = TTGIR.splitlines()
    start = next(i for i, line in enumerate(lines) if "scf.for" in line)
    end = next(i for i, line in enumerate(lines) if line.strip().startswith("} loc(#loc2)"))
    inner = ["  " + line for line in lines[start : end + 1]]
    peeled = "  " + lines[start + 1].replace("%d =", "%p =")
    nested = [
        *lines[:start],
        "    scf.for %t = %c0 to %m step %c1 : i32 {",
        *inner,
        peeled,
        "    } loc(#loc3)",
        *lines[end + 1 :],
    ]
    dots, in_loop = asm.loop_dots("\n".join(nested))
    assert in_loop and len(dots) == 1 and (dots[0].m, dots[0].n, dots[0].k) == (128, 32, 256)


def test_k_steps_tell_an_unrolled_body_from_replicated_work():
    body = LOOP_ASM.replace("\ts_cbranch_scc1 .LBB0_22\n", "").splitlines()
    loop = asm._counts(asm.instructions("\n".join(body)))  # 4 MFMAs of 16x16x128 per wave
    one_step = [asm.Dot(m=64, n=64, k=128, warps=(2, 2), instr=(16, 16), scaled=True)]
    assert k_steps(loop, one_step, num_warps=4) == 1  # 16 MFMAs needed, 16 issued
    small = [asm.Dot(m=32, n=32, k=128, warps=(2, 2), instr=(16, 16), scaled=True)]
    assert k_steps(loop, small, num_warps=4) == 4  # 4 needed, 16 issued, no replication: 4 steps
    replicated = [asm.Dot(m=16, n=32, k=128, warps=(2, 2), instr=(16, 16), scaled=True)]
    assert replicated[0].replication == 2
    assert k_steps(loop, replicated, num_warps=4) == 4  # 2 needed, 16 issued, each twice: 4 steps


@pytest.mark.parametrize(
    "vgpr, lds, warps, waves",
    [
        (213, 56 << 10, 4, 2),  # VGPR-bound: 216 -> 2
        (68, 35 << 10, 4, 4),  # LDS-bound: 160 / 35 KiB -> 4 workgroups of 4 waves
        (128, 0, 8, 4),  # 8-wave workgroups, 4 waves per SIMD by VGPR
        (256, 192 << 10, 8, 0),  # over the LDS: cannot launch
        (22, 0, 4, 8),  # the 8-wave cap
    ],
)
def test_waves_per_simd(vgpr, lds, warps, waves):
    assert model.waves_per_simd(vgpr, lds, warps) == waves


def test_expected_blocks_match_enumeration():
    # 3 tokens, each picks 1 of 2 experts uniformly; blocks of 2 rows; one shared expert (3 rows: 2 blocks).
    from itertools import product

    brute = 0.0
    for picks in product((0, 1), repeat=3):
        counts = [picks.count(e) for e in (0, 1)]
        brute += sum(-(-c // 2) for c in counts) / 8
    assert model.blocks_moments(3, 2, 1, 1, 2)[0] == pytest.approx(brute + 2)
    # Split at tail 1: the full launch takes blocks with 2 rows, the tail launch those with 1.
    full = model.blocks_moments(3, 2, 1, 0, 2, rows=2, tail_m=1)[0]
    tail = model.blocks_moments(3, 2, 1, 0, 2, rows=1, tail_m=1)[0]
    assert full + tail == pytest.approx(brute)
    assert model.expected_experts_hit(3, 2, 1, 1) == pytest.approx(2 * (1 - 0.5**3) + 1)


def test_mfma_cycles_follow_the_datasheet_rates():
    assert model.mfma_cycles((16, 16, 128), "fp4") == 16
    assert model.mfma_cycles((32, 32, 64), "fp4") == 32
    assert model.mfma_cycles((32, 32, 16), "bf16") == 32


def _run(args, columns=None, **kwargs):
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "COLUMNS", "TRITON_DEFAULT_FP_FUSION")}
    if columns:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, **kwargs
    )


TOY_GEMM = """
import triton
import triton.language as tl


@triton.jit
def toy_stage1_kernel(a_ptr, as_ptr, b_ptr, bs_ptr, c_ptr, K, M: tl.constexpr, N: tl.constexpr, BK: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    acc = tl.zeros((M, N), tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rm[:, None] * (K // 2) + (k0 // 2 + tl.arange(0, BK // 2))[None, :])
        sa = tl.load(as_ptr + rm[:, None] * (K // 32) + (k0 // 32 + tl.arange(0, BK // 32))[None, :])
        b = tl.load(b_ptr + rn[None, :] * (K // 2) + (k0 // 2 + tl.arange(0, BK // 2))[:, None])
        sb = tl.load(bs_ptr + rn[:, None] * (K // 32) + (k0 // 32 + tl.arange(0, BK // 32))[None, :])
        acc = tl.dot_scaled(a, sa, "e2m1", b, sb, "e2m1", acc)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)
"""

TOY_DRIVER = """
import json, sys
import torch
from triton.runtime.driver import driver as config
from bench.gfx950.check import analyse
from bench.gfx950.driver import compile_only_gfx950
sys.path.insert(0, sys.argv[1])
from toy import toy_stage1_kernel

before = config._active
u8 = dict(dtype=torch.uint8)
K = 1024
with compile_only_gfx950() as driver:
    a, a_scale = torch.empty(32, K // 2, **u8), torch.empty(32, K // 32, **u8)
    w, w_scale = torch.empty(128, K // 2, **u8), torch.empty(128, K // 32, **u8)
    toy_stage1_kernel[(1,)](a, a_scale, w, w_scale, torch.empty(32, 128), K, M=32, N=128, BK=256, num_warps=4)
launch = driver.launches[0]
rep = analyse(launch.kernel)
print(json.dumps({"mfma": rep.mfma, "violations": rep.violations, "per_step": rep.loop.mfma,
                  "restored": config._active is before, "grid": launch.grid, "constexprs": sorted(launch.constexprs)}))
"""


def test_a_scaled_dot_gemm_compiles_to_native_mfmas_and_passes(tmp_path):
    (tmp_path / "toy.py").write_text(TOY_GEMM)
    done = _run(["-c", TOY_DRIVER, str(tmp_path)])
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(out["mfma"]) == {"v_mfma_scale_f32_32x32x64_f8f6f4"}
    assert out["per_step"] == 4  # a 32x128x256 step is 16 MFMAs of 32x32x64, 4 per wave
    assert out["violations"] == [] and out["restored"] and out["grid"] == [1, 1, 1]
    assert out["constexprs"] == ["BK", "M", "N"]


def test_todays_decode_path_fails_the_check(tmp_path):
    md = tmp_path / "check.md"
    done = _run(["-m", "bench.gfx950", "--cases", "smoke:0", "--path", "decode", "--md", str(md)], columns=100)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "GEMM with non-scaled MFMAs (v_mfma_f32_16x16x32_bf16)" in done.stdout
    # the tables fit COLUMNS by leaving columns out (the Markdown has them all), and no Triton warning
    # the console's per-launch table holds the two stages that break the limits (prep and route do not)
    rows = [line for line in done.stdout.splitlines() if line.startswith(" smoke0 ")]
    assert len(rows) == 3 and sum(row.rstrip().endswith("FAIL") for row in rows) == 2
    assert max(map(len, done.stdout.splitlines())) <= 100
    assert "not shown at 100 columns: replication, AGPR" in done.stdout
    assert "Warning" not in done.stderr, done.stderr
    text = md.read_text()
    assert "| smoke0 | table | stage1 |" in text and "| smoke0 | table | stage2 |" in text and "ESTIMATE" in text


def test_a_passing_check_fits_100_columns_and_shows_every_launch_on_request():
    """The test command's log: lines of at most 100 columns, the per-launch table one line when
    every launch is within the limits; --launches all prints it."""
    argv = ["-m", "bench.gfx950", "--cases", "smoke:0", "--variants", "table"]
    done = _run(argv)  # no COLUMNS, stdout a pipe: as in CI
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert max(map(len, lines)) <= 100 and lines[-1].startswith("PASS: 4 launches")
    assert "per launch: all 4 launches within the limits (--launches all shows them)" in lines
    assert not [line for line in lines if "native_stage1" in line]
    every = _run([*argv, "--launches", "all"], columns=100).stdout.splitlines()
    assert len([line for line in every if line.startswith(" smoke0 ") and "native_" in line]) >= 3


def test_the_help_says_the_decode_path_is_expected_to_fail(capsys):
    from bench.gfx950.run import parse_args

    with pytest.raises(SystemExit):
        parse_args(["--help"])
    assert "decode path, which is expected to fail" in " ".join(capsys.readouterr().out.split())


def test_bad_case_selector_is_a_one_line_error():
    done = _run(["-m", "bench.gfx950", "--cases", "nonsense"])
    assert done.returncode == 2
    err = done.stderr.strip()
    assert err.startswith("python -m bench.gfx950: error: --cases: unknown case 'nonsense'") and "Traceback" not in err


@pytest.mark.parametrize(
    "option, value", [("--hbm-fraction", "0"), ("--hbm-fraction", "1.5"), ("--gap-us", "-1"), ("--gap-us", "nan")]
)
def test_the_estimates_parameters_are_checked(option, value):
    done = _run(["-m", "bench.gfx950", option, value])
    assert done.returncode == 2 and f"argument {option}" in done.stderr and "Traceback" not in done.stderr


def test_the_check_refuses_kernels_built_for_the_interpreter():
    from bench.gfx950.run import launch_case
    from bench.runner.case_args import SMOKE
    from moe_triton.target import interpreting

    if not interpreting():
        pytest.skip("this run compiles kernels for a GPU, not for the interpreter")
    with pytest.raises(RuntimeError, match="fresh process"):
        launch_case(SMOKE[0], "native")
    assert interpreting()  # the run's setting is left as it was


# ---------------------------------------------------------------- variants and the ESTIMATE


def _report(name, warps=4, waves=2.0, mfma_cycles=0.0, gemm=True, instructions=0, valu=0):
    """A KernelReport by hand: a GEMM's K loop of `instructions` per step (valu of them VALU, one MFMA
    when mfma_cycles), or a kernel without MFMAs whose one program runs `instructions`."""
    from bench.gfx950.check import KernelReport

    dots = [asm.Dot(m=16, n=16, k=128, warps=(1, 1), instr=(16, 16), scaled=True)] if gemm else []
    mfma = 1 if mfma_cycles else 0
    counts = asm.LoopCounts(instructions=instructions, mfma=mfma, valu=valu)
    return KernelReport(
        name=name,
        num_warps=warps,
        num_stages=2,
        lds=0,
        mfma={},
        loop=counts if gemm else None,
        res=asm.Resources(vgpr=32, agpr=0, total_vgpr=32, sgpr=32, scratch=0, vgpr_spill=0, sgpr_spill=0),
        waves=waves,
        dots=dots,
        loop_mfma_cycles=mfma_cycles,
        path=None if gemm else counts,
    )


def test_estimate_adds_gaps_streamed_weights_compute_rounds_and_activations():
    """One token, one expert (hit for sure: no spread), H 1024, I 512, block_m 16: every term by hand."""
    from types import SimpleNamespace

    from bench.gfx950.estimate import estimate

    params = dict(dhidden=1024, dexpert=512, nroutedexperts=1, nexpertspertoken=1, nsharedexperts=0, bs=1)
    block = {"BLOCK_M": 16}
    launches = [
        (
            _report("moe_native_prep_kernel", gemm=False, waves=8, instructions=30, valu=10),
            SimpleNamespace(grid=(1, 1, 1), constexprs={}),
        ),
        (_report("moe_native_stage1_kernel"), SimpleNamespace(grid=(1, 8, 1), constexprs=block)),
        (
            _report("moe_native_stage2_kernel", mfma_cycles=1024, instructions=11, valu=5),
            SimpleNamespace(grid=(1, 4, 1), constexprs=block),
        ),
    ]
    m = model.MI355X
    est = estimate(params, launches, gap_us=2.0, fraction=0.5)
    w1, w2 = 2 * 512 * 1024 * 17 / 32, 1024 * 512 * 17 / 32  # fp4 bytes and one scale byte per 32
    activations = 1024 * 2 * 2 + 1 * (4 + 4)  # hidden in, output out, one id and weight
    assert est.bytes_floor_us == pytest.approx((w1 + w2 + activations) / 8e12 * 1e6)
    cycle_us = 1e6 / m.clock_hz
    # Prep: one program, its path (10 VALU x 4 + 20 other) and one exposed load.
    assert est.per_launch[0].us == pytest.approx((40 + 20 + m.step_latency_cycles) * cycle_us)
    # Stage 1: 8 programs on 8 CUs, each with one K step (16 x 128 weights, 16 x 128 activations, fp4) in
    # flight: Little's law, far below the bandwidth; 32 K steps of nothing but the exposed latency.
    in_flight = 2 * 16 * 128 * 17 / 32
    streamed = 8 * in_flight / m.latency_s
    rate = (streamed**-m.knee + (0.5 * 8e12) ** -m.knee) ** (-1 / m.knee)
    assert est.per_launch[1].bytes_us == pytest.approx(w1 / rate * 1e6)
    steps1 = 16 * 1024 * 1024 / (16 * 16 * 128) / 8  # rows x 2I x H over the dot, per program
    assert est.per_launch[1].compute_us == pytest.approx(steps1 * m.step_latency_cycles * cycle_us)
    assert est.per_launch[1].us == pytest.approx(max(est.per_launch[1].bytes_us, est.per_launch[1].compute_us))
    # Stage 2: 4 programs, each 128 steps (16 rows x 1024 x 512 over the dot, over 4 programs) of one MFMA
    # (1024 cycles), 5 VALU and 5 other, one load's latency: the chain of a program alone on its SIMDs.
    steps2 = 16 * 1024 * 512 / (16 * 16 * 128) / 4
    chain = steps2 * (1024 + 4 * 5 + 5 + m.step_latency_cycles)
    assert est.per_launch[2].compute_us == pytest.approx(chain * cycle_us)
    assert est.launches == 3 and est.gap_us == 2.0
    expected = 3 * 2.0 + sum(x.us for x in est.per_launch) + activations / 4e12 * 1e6
    assert est.estimate_us == pytest.approx(expected)
    assert est.floor2_us == pytest.approx(2 * 2.0 + (w1 + w2 + activations) / 4e12 * 1e6)
    assert est.floor_ratio == pytest.approx(est.estimate_us / est.floor2_us)


def test_gemm_programs_are_the_grid_times_the_expected_share_of_its_blocks():
    from bench.gfx950.estimate import programs

    # 2 tokens, each to 1 of 2 experts: an expert is hit with probability 3/4, so 1.5 blocks of 16 are
    # expected out of the 2 the grid is sized for; 3 column tiles each, in a 2-D or a flattened grid.
    params = dict(dhidden=1024, dexpert=512, nroutedexperts=2, nexpertspertoken=1, nsharedexperts=0, bs=2)
    rep = _report("moe_native_stage1_kernel")
    assert programs(rep, (2, 3, 1), {"BLOCK_M": 16}, params) == pytest.approx(4.5)
    assert programs(rep, (6, 1, 1), {"BLOCK_M": 16}, params) == pytest.approx(4.5)


def test_a_stage_in_two_launches_shares_its_weights_by_programs():
    from types import SimpleNamespace

    from bench.gfx950.estimate import estimate

    params = dict(dhidden=1024, dexpert=512, nroutedexperts=1, nexpertspertoken=1, nsharedexperts=0, bs=1)
    block = {"BLOCK_M": 16}
    one = estimate(params, [(_report("s_stage1"), SimpleNamespace(grid=(1, 256, 1), constexprs=block))], 0, 1)
    two = estimate(
        params,
        [
            (_report("s_stage1"), SimpleNamespace(grid=(1, 192, 1), constexprs=block)),
            (_report("s_stage1"), SimpleNamespace(grid=(1, 64, 1), constexprs=block)),
        ],
        0,
        1,
    )
    w1 = 2 * 512 * 1024 * 17 / 32
    in_flight = 2 * 16 * 128 * 17 / 32  # one K step of weights and activations per program
    m = model.MI355X.with_options(0, 1)
    assert one.per_launch[0].bytes_us == pytest.approx(model.stream_seconds(m, w1, 256, 2.0, in_flight) * 1e6)
    assert two.per_launch[0].bytes_us == pytest.approx(model.stream_seconds(m, w1 * 0.75, 192, 2.0, in_flight) * 1e6)
    assert two.per_launch[1].bytes_us == pytest.approx(model.stream_seconds(m, w1 * 0.25, 64, 2.0, in_flight) * 1e6)


def test_variants_are_the_table_tile_then_the_shapes_alternates(monkeypatch):
    from bench.gfx950.variants import variants
    from bench.runner.case_args import SMOKE, case_shape
    from moe_triton import tiles_amd, tiles_nvidia
    from problem.shapes import Shape

    params = SMOKE[0]
    key = case_shape(params)
    assert key == Shape(8, 512, 256, 9, 5)  # shared experts counted in E and topk, as the launcher reads them
    table = tiles_amd.native_tile_config(key)
    monkeypatch.setattr(tiles_amd, "NATIVE_ALTERNATES", {})
    assert variants(params) == [("table", table)]
    wide = table.replace(block_n1=64, warps1=4)
    deep = table.replace(stages2=3)
    monkeypatch.setattr(tiles_amd, "NATIVE_ALTERNATES", {key: {"wide": wide, "deep": deep}, Shape(1, 2, 3, 4, 5): {}})
    assert variants(params) == [("table", table), ("wide", wide), ("deep", deep)]
    assert variants(SMOKE[1]) == [("table", tiles_amd.native_tile_config(Shape(5, 256, 512, 5, 3)))]
    decode = tiles_nvidia.tile_config(key)
    monkeypatch.setattr(tiles_nvidia, "ALTERNATES", {key: {"n64": decode.replace(block_n1=64)}})
    assert variants(params, "decode") == [("table", decode), ("n64", decode.replace(block_n1=64))]
    monkeypatch.setattr(tiles_amd, "NATIVE_ALTERNATES", {key: {"table": wide}})
    with pytest.raises(ValueError, match="table named twice"):
        variants(params)
    monkeypatch.setattr(tiles_amd, "NATIVE_ALTERNATES", {key: {"wide": wide}})
    assert variants(params, extra={"deep": {"stages2": 3}}) == [("table", table), ("wide", wide), ("deep", deep)]
    with pytest.raises(ValueError, match="wide named twice"):
        variants(params, extra={"wide": {"stages2": 3}})


# Test-only alternates for smoke:0 (the native default tile there is 16 x 128 over 8 warps), given as
# field overrides of the table's tile: one that passes, one that replicates MFMA work (32x32 MFMAs on
# 16-row tiles).
TEST_ALTERNATES = json.dumps({"n64": {"block_n1": 64, "warps1": 4}, "nk32": {"nonkdim": 32}})
ALTERNATES_DRIVER = """
import json, sys
from moe_triton import tiles_amd

from problem.shapes import Shape

table = tiles_amd.native_tile_config(Shape(8, 512, 256, 9, 5))
tiles_amd.NATIVE_ALTERNATES[Shape(8, 512, 256, 9, 5)] = {
    name: table.replace(**fields) for name, fields in json.loads(sys.argv[1]).items()
}
if sys.argv[2] == "rank":
    from bench.runner.case_args import SMOKE
    from bench.gfx950.run import rank_variants
    print(json.dumps(rank_variants(SMOKE[0], gap_us=1.0)))
else:
    from bench.gfx950.run import main
    sys.exit(main(sys.argv[2:]))
"""


def test_the_check_compiles_and_checks_every_variant(tmp_path):
    md, ranking = tmp_path / "check.md", tmp_path / "ranking.json"
    done = _run(
        ["-c", ALTERNATES_DRIVER, TEST_ALTERNATES, "--cases", "smoke:0", "--md", str(md), "--ranking", str(ranking)]
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    text = md.read_text()
    for name in ("table", "n64", "nk32"):
        kernels = [line for line in text.splitlines() if line.startswith(f"| smoke0 | {name} | ")]
        # One row per launch of the call (prep, route, stage 1, stage 2) and the case row.
        assert len(kernels) == 4 + 1, (name, kernels)
        assert any(" | 4 | " in line and "H512-I256" in line for line in kernels)
    assert "(smoke0/nk32)" in done.stdout and "smoke0/table" not in done.stdout and "smoke0/n64" not in done.stdout
    assert "moe_native_stage1_kernel: replicated MFMA work x16" in done.stdout
    assert "ESTIMATE (static, not a time) = launches x gap" in text
    assert f"constants: {model.MI355X.describe()}" in text
    order = json.loads(ranking.read_text())["cases"]["smoke0"]
    assert order["shape"] == dict(n_tokens=8, d_hidden=512, d_inter=256, n_experts=9, topk=5)
    assert order["broken"] == ["nk32"]
    assert sorted(name for name, _ in order["variants"]) == ["n64", "table"]
    assert [us for _, us in order["variants"]] == sorted(us for _, us in order["variants"])

    only = _run(
        ["-c", ALTERNATES_DRIVER, TEST_ALTERNATES, "--cases", "smoke:0", "--variants", "table", "--md", str(md)]
    )
    assert only.returncode == 0, only.stdout[-3000:] + only.stderr[-3000:]
    assert "| smoke0 | table |" in md.read_text() and "| smoke0 | n64 |" not in md.read_text()


def test_rank_variants_orders_every_variant_by_its_estimate():
    done = _run(["-c", ALTERNATES_DRIVER, TEST_ALTERNATES, "rank"])
    assert done.returncode == 0, done.stderr[-3000:]
    ranked = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(name for name, _ in ranked) == ["n64", "table"]  # nk32 breaks a limit: no candidate
    assert [us for _, us in ranked] == sorted(us for _, us in ranked) and all(us > 4 * 1.0 for _, us in ranked)


def test_the_estimates_capacity_is_the_launchers():
    from bench.gfx950.estimate import capacity
    from moe_triton.routing import routing_capacity

    for bs, routed, per_token, shared, block_m in [(16, 256, 8, 1, 16), (5, 4, 2, 1, 32), (512, 32, 8, 1, 64)]:
        params = dict(bs=bs, nroutedexperts=routed, nexpertspertoken=per_token, nsharedexperts=shared)
        assert capacity(params, block_m) == routing_capacity(bs * (per_token + shared), routed + shared, block_m)


def test_the_launches_per_call_are_the_drivers_count_for_each_kernel_variant(tmp_path):
    """The launches of one native call (the routing's, then stage 1 and stage 2) against those the check
    saw, for variants given as --extra-variants."""
    from moe_triton import tiles_amd
    from problem.shapes import Shape

    kernel_variants = {
        "xcd": {"xcds": 8},
        "cg": {"weight_cache": ".cg"},
        "route1": {"route_launches": 1},
        "fused": {"fused_quant": True},
        "fused-route0": {"fused_quant": True, "route_launches": 0},
    }
    md, extra = tmp_path / "check.md", tmp_path / "variants.json"
    extra.write_text(json.dumps(kernel_variants))
    done = _run(["-m", "bench.gfx950", "--cases", "smoke:0", "--extra-variants", str(extra), "--md", str(md)])
    assert done.returncode in (0, 1) and "0 variants failed" in done.stdout or "PASS" in done.stdout, done.stdout[
        -3000:
    ]
    table = tiles_amd.native_tile_config(Shape(8, 512, 256, 9, 5))
    rows = {line.split(" | ")[1]: line for line in md.read_text().splitlines() if "| H512-I256" in line}
    for name, fields in {"table": {}, **kernel_variants}.items():
        launches = table.replace(**fields).route_launches + 2
        assert f" | {launches} | " in rows[name], (name, rows[name])
        kernels = [line for line in md.read_text().splitlines() if line.startswith(f"| smoke0 | {name} | ")]
        assert len(kernels) == launches + 1  # its launches and its case row
    assert {table.replace(**f).route_launches + 2 for f in kernel_variants.values()} == {2, 3, 4}


def test_extra_variants_name_only_tile_fields(tmp_path):
    extra = tmp_path / "variants.json"
    extra.write_text(json.dumps({"x": {"bogus": 1}}))
    done = _run(["-m", "bench.gfx950", "--cases", "smoke:0", "--extra-variants", str(extra)])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    prefix = f"python -m bench.gfx950: error: --extra-variants: {extra}: x: no tile field bogus (fields: block_m,"
    assert done.stderr.startswith(prefix)
    extra.write_text("[1]")
    done = _run(["-m", "bench.gfx950", "--cases", "smoke:0", "--extra-variants", str(extra)])
    assert done.returncode == 2 and "expected an object of name -> {field: value}" in done.stderr
    extra.write_text(json.dumps({"table": {"stages2": 3}}))
    done = _run(["-m", "bench.gfx950", "--cases", "smoke:0", "--extra-variants", str(extra)])
    assert done.returncode == 2 and done.stderr.strip().endswith("table named twice (the table tile is 'table')")


def test_the_kernel_options_file_names_no_alternate_of_tile_configs():
    from moe_triton import tiles_amd

    names = set(json.loads((ROOT / "bench/gfx950/kernel_variants.json").read_text()))
    assert not names & {name for named in tiles_amd.NATIVE_ALTERNATES.values() for name in named}


def test_the_kernel_variants_file_names_tile_fields():
    from moe_triton import tiles

    found = json.loads((ROOT / "bench/gfx950/kernel_variants.json").read_text())
    assert found and all(set(fields) <= set(tiles.NativeTileConfig.field_names()) for fields in found.values())


def test_the_summary_takes_the_table_tiles_and_the_lowest_variant_within_the_limits():
    from bench.gfx950.report import summary

    def row(case, variant, us, broken=False):
        ratio = us / 20.0
        return {
            "case": case,
            "variant": variant,
            "_estimate": us,
            "_floor_ratio": ratio,
            "_aiter": 100.0,
            "_broken": broken,
        }

    rows = [row("b0", "table", 40.0), row("b0", "fast", 10.0), row("b1", "table", 90.0), row("b1", "x", 1.0, True)]
    line = summary(rows)
    assert "ESTIMATE 60.0 us on the table's tiles" in line  # sqrt(40 x 90)
    assert "30.0 us on each case's lowest-ESTIMATE variant within the limits" in line  # sqrt(10 x 90)
    assert "aiter 100.0 us" in line
    assert "lowest variant's ESTIMATE / floor (2): b0 0.50, b1 4.50" in line
