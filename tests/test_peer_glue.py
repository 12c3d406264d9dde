"""bench/h200/peers/glue.py, the SwiGLU and top-k sum kernels around the peers' GEMMs, against
plain torch: on the CPU under Triton's interpreter, on a CUDA GPU for real (where the SwiGLU must
be reference.silu_and_mul bit for bit: its exp is libdevice's, as torch's)."""

import pytest
import torch

from bench.h200.peers.glue import swiglu, topk_sum
from reference import default_device, silu_and_mul

DEVICE = default_device()


def _gate_up(rows, inter, dtype, seed):
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    return (torch.randn((rows, 2 * inter), generator=gen, device=DEVICE) * 6).to(dtype)


@pytest.mark.parametrize("rows, inter", [(7, 256), (33, 1536), (5, 96)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_swiglu_is_reference_silu_and_mul(rows, inter, dtype):
    gate_up = _gate_up(rows, inter, dtype, rows + inter)
    before = gate_up.clone()
    got = swiglu(gate_up, inter)
    want = silu_and_mul(gate_up[:, :inter].float(), gate_up[:, inter:].float())
    assert got.dtype == torch.bfloat16 and got.shape == (rows, inter)
    if DEVICE.type == "cuda":
        assert torch.equal(got, want)
    else:  # the interpreter's exp is numpy's in float64, torch's CPU one another: an ulp, rarely
        assert (got == want).float().mean() > 0.999 and torch.allclose(got.float(), want.float(), rtol=2**-7)
    assert torch.equal(gate_up, before)


def test_swiglu_refuses_a_gate_up_of_another_width():
    with pytest.raises(ValueError, match="gate_up: expected"):
        swiglu(_gate_up(4, 64, torch.bfloat16, 1), 32)


@pytest.mark.parametrize("n_tokens, topk, width", [(19, 9, 7168), (1, 1, 40), (64, 6, 1030)])
def test_topk_sum_sums_the_weighted_slots_in_fp32(n_tokens, topk, width):
    gen = torch.Generator(device=DEVICE).manual_seed(n_tokens * topk)
    y = torch.randn((n_tokens * topk, width), generator=gen, device=DEVICE).to(torch.bfloat16)
    weights = torch.rand((n_tokens, topk), generator=gen, device=DEVICE)
    out = topk_sum(y, weights)
    terms = y.double().view(n_tokens, topk, width) * weights.double()[..., None]
    exact = terms.sum(1)
    assert out.dtype == torch.bfloat16 and out.shape == (n_tokens, width) and not out.isnan().any()
    # one bf16 rounding, and the fp32 sum's own error where the terms cancel
    assert ((out.double() - exact).abs() <= exact.abs() * 2**-8 + terms.abs().sum(1) * 2**-22).all()
    assert (out == exact.to(torch.bfloat16)).float().mean() > 0.99


def test_topk_sum_refuses_slots_that_do_not_fit_the_weights():
    with pytest.raises(ValueError, match="y: expected"):
        topk_sum(torch.zeros((10, 8), dtype=torch.bfloat16), torch.ones((3, 3)))
