"""The compiled code of every kernel that computes h holds the precise exp and IEEE division
(bench/numerics/rules.py), for sm_90 and gfx950, compiled here on the CPU: what the interpreter, whose
tl.exp is numpy's precise exp, can never show. The old fast spelling is shown to fail the rule."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.numerics.rules import amdgcn_silu_problems, ptx_silu_problems

pytestmark = pytest.mark.cpu_only
ROOT = Path(__file__).resolve().parents[1]


def _run(args, **env_extra):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.update(env_extra)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_every_path_computes_h_with_the_precise_exp_and_ieee_division_on_both_targets(tmp_path):
    """With a cold Triton cache, as a first run: its Gluon compile left triton 3.9's nanobind
    printing "nanobind: leaked ..." lines at exit; stderr stays empty."""
    done = _run(["-m", "bench.numerics.silu_code", "--cases", "smoke:0"], TRITON_CACHE_DIR=str(tmp_path))
    assert done.returncode == 0 and done.stderr == "", done.stdout + done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert [line.split()[1:3] for line in lines] == [
        ["sm_90", "decode"],
        ["sm_90", "gluon"],
        ["sm_90", "native"],
        ["gfx950", "native"],
        ["gfx950", "decode"],
    ]
    assert all(line.endswith(": precise exp, IEEE division") for line in lines)


FAST_KERNEL = """
import json
import torch
import triton
import triton.language as tl
from bench.gfx950.driver import SM90, TARGET, compile_only
from bench.numerics.rules import amdgcn_silu_problems, ptx_silu_problems


@triton.jit
def fast_stage1_kernel(g_ptr, h_ptr):
    offs = tl.arange(0, 256)
    g = tl.load(g_ptr + offs)
    tl.store(h_ptr + offs, g / (1.0 + tl.exp(-g)) * g)


out = {}
for target, problems, key in ((SM90, ptx_silu_problems, "ptx"), (TARGET, amdgcn_silu_problems, "amdgcn")):
    with compile_only(target) as driver:
        fast_stage1_kernel[(1,)](torch.empty(256), torch.empty(256))
    out[key] = problems(driver.launches[0].kernel.asm[key])
print(json.dumps(out))
"""


def test_the_fast_spelling_breaks_the_rule_on_both_targets(tmp_path):
    import json

    script = tmp_path / "fast_kernel.py"
    script.write_text(FAST_KERNEL)
    done = _run([str(script)])
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert any(p.startswith("fast exp in h") for p in out["ptx"])
    assert any(p.startswith("approximate division in h") for p in out["ptx"])
    assert any(p.startswith("fast exp in h") for p in out["amdgcn"])


def test_the_rule_reads_the_instruction_sequences():
    precise_ptx = "fma.rm.ftz.f32 %r1, %r2, %r3, %r4;\nex2.approx.ftz.f32 %r5, %r6;\ndiv.rn.f32 %r7, %r8, %r9;"
    assert ptx_silu_problems(precise_ptx) == []
    assert ptx_silu_problems(precise_ptx.replace("div.rn.f32", "div.rn.ftz.f32")) == [
        "1 of 1 silus without an IEEE division (div.rn.f32) in a kernel that computes h"
    ]
    assert ptx_silu_problems("div.rn.f32 %r1, %r2, %r3;") == ["no exp in a kernel that computes h"]
    # triton 3.9's precise exp and division, and triton 3.6's under FP fusion (ph - E contracted)
    exp = "v_mul_f32_e32 v4, 0xbfb8aa3b, v1\nv_rndne_f32_e32 v7, v4\n{}\nv_add_f32_e32 v4, v4, v6\nv_exp_f32_e32 v4, v4"
    division = "v_div_scale_f32 v6, s[4:5], v4, v4, 1.0\nv_rcp_f32_e32 v7, v6\nv_div_fixup_f32 v4, v6, v4, 1.0"
    precise_gcn = exp.format("v_sub_f32_e32 v4, v4, v7") + "\n" + division
    assert amdgcn_silu_problems(precise_gcn) == []
    # v_rcp_f32 of an integer division beside it is no approximate division
    assert amdgcn_silu_problems(precise_gcn + "\nv_rcp_f32_e32 v9, v8") == []
    assert amdgcn_silu_problems(exp.format("v_sub_f32_e32 v4, v4, v7") + "\nv_rcp_f32_e32 v9, v8") == [
        "approximate division in h: 1 of 1 silus without an IEEE division"
    ]
    assert amdgcn_silu_problems(exp.format("v_fma_f32 v4, -v1, s2, -v7") + "\n" + division) == [
        "contracted exp in h: 1 of 1 range reductions (x log2 e - E) fused into an FMA; launch with "
        "enable_fp_fusion=False"
    ]
    assert amdgcn_silu_problems("v_exp_f32_e32 v4, v4\n" + division) == [
        "fast exp in h: 1 of 1 v_exp_f32 without the precise range reduction"
    ]


def test_a_bad_case_is_a_one_line_error():
    done = _run(["-m", "bench.numerics.silu_code", "--cases", "nonsense"])
    assert done.returncode == 2
    assert (
        done.stderr.startswith("python -m bench.numerics.silu_code: error: --cases: unknown case")
        and "Traceback" not in done.stderr
    )


INTERRUPTED = """
import os, runpy, signal, sys, time
from bench.h200 import sm90


def interrupted(*args, **kwargs):  # the first compile, as a Ctrl-C in the terminal would find it
    signal.raise_signal(signal.SIGINT)  # to this thread: os.kill may wake another, and the sleep runs out
    time.sleep(60)


# a shell's background job starts with SIGINT ignored, and Python then installs no handler for it
signal.signal(signal.SIGINT, signal.default_int_handler)
sm90.decode_launches = interrupted
sys.argv = ["silu_code", "--cases", "smoke:0"]
runpy.run_module("bench.numerics.silu_code", run_name="__main__")
"""


def test_ctrl_c_is_one_line_and_status_130():
    """Ctrl-C printed a traceback."""
    done = _run(["-c", INTERRUPTED])
    assert done.returncode == 130, done.stderr[-3000:]
    assert done.stderr == "python -m bench.numerics.silu_code: interrupted (Ctrl-C)\n" and done.stdout == ""
