"""bench/h200/gluon_probe.py: the warp-specialized Gluon GEMM compiles for sm_90 here (the CPU) and
computes a @ b on an NVIDIA GPU."""

import pytest
import torch

from bench.h200 import gluon_probe


@pytest.mark.cpu_only
@pytest.mark.parametrize("lag", [0, 1])
def test_the_probe_compiles_for_sm90_with_every_piece_issue_33_needs(monkeypatch, lag):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # Gluon has no interpreter: compile for real
    compiled = gluon_probe.compiled_for_sm90(lag)
    assert all(compiled[name] > 0 for name in gluon_probe.SASS_MARKS), compiled
    assert compiled["warps"] >= 5  # the MMA warpgroup and the loader warp
    assert compiled["shared"] >= 3 * (128 * 64 + 64 * 128) * 2  # the ring of three slots


@pytest.mark.skipif(not torch.cuda.is_available(), reason="an NVIDIA GPU")
@pytest.mark.parametrize("lag", [0, 1])
def test_the_probe_computes_the_product_on_the_gpu(lag):
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("wgmma and setmaxnreg: sm_90")
    a, b, c = gluon_probe.inputs(256, 384, 1024, "cuda")  # C poisoned with NaN
    gluon_probe.ws_gemm(a, b, c, lag=lag)
    exact = a.float() @ b.float()
    assert not c.isnan().any()
    # fp32 sums in another order, then bf16: within one bf16 ulp of the exact product
    assert ((c.float() - exact).abs() <= exact.abs() * 2**-7 + 1e-2).all()
