"""bench/h200/gluon_probe.py: the warp-specialized Gluon GEMM compiles for sm_90 here (the CPU) and
computes a @ b on an NVIDIA GPU."""

import pytest
import torch

from bench.h200 import gluon_probe


@pytest.mark.cpu_only
@pytest.mark.parametrize("variant", list(gluon_probe.VARIANTS))
def test_the_probe_compiles_for_sm90_with_every_piece_the_gluon_stages_need(monkeypatch, variant):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # Gluon has no interpreter: compile for real
    compiled = gluon_probe.compiled_for_sm90(variant)
    assert all(compiled[name] > 0 for name in gluon_probe.SASS_MARKS), compiled
    tiles = gluon_probe.VARIANTS[variant]
    assert compiled["warps"] >= tiles["mma_warps"] + 1  # the MMA warpgroups and the loader warp
    assert compiled["shared"] >= tiles["stages"] * (tiles["block_m"] * 64 + 64 * 128) * 2  # the ring


@pytest.mark.skipif(not torch.cuda.is_available(), reason="an NVIDIA GPU")
@pytest.mark.parametrize("variant", list(gluon_probe.VARIANTS))
def test_the_probe_computes_the_product_on_the_gpu(variant):
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("wgmma and setmaxnreg: sm_90")
    a, b, c = gluon_probe.inputs(512, 384, 1024, "cuda")  # C poisoned with NaN
    gluon_probe.ws_gemm(a, b, c, **gluon_probe.VARIANTS[variant])
    exact = a.float() @ b.float()
    assert not c.isnan().any()
    # fp32 sums in another order, then bf16: within one bf16 ulp of the exact product
    assert ((c.float() - exact).abs() <= exact.abs() * 2**-7 + 1e-2).all()
