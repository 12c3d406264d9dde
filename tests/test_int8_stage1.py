"""bench/h200/int8_stage1.py: the int8 activations against SPEC 3.3's a1, the window counts, and the probe
compiled for sm_90 here (the CPU)."""

import pytest
import torch
from gluon_compile import compiled_by

from bench.h200 import int8_stage1
from bench.h200.int8_probe import kernel_order
from mxfp4.codec import dequantize, quantize_activation


def _physical(a: torch.Tensor) -> torch.Tensor:
    """kernel_order undone."""
    rows, k = a.shape
    where = kernel_order(torch.arange(k).reshape(1, k))[0]
    out = torch.empty_like(a)
    out[:, where] = a
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_int8_activations_times_their_chunk_scales_are_a1_exactly(seed):
    g = torch.Generator().manual_seed(seed)
    hidden = (torch.randn(7, 1024, generator=g) * 3).to(torch.bfloat16)
    a, a_scale, wide = int8_stage1.int8_activations(hidden)
    assert a.dtype == torch.int8 and a.shape == hidden.shape and a_scale.shape == (7, 1024 // 256)
    assert wide == 0 and int(a.abs().max()) <= 96
    packed, scales = quantize_activation(hidden)
    want = dequantize(packed, scales).double()
    got = _physical(a).double() * a_scale.double().repeat_interleave(256, dim=1)
    assert torch.equal(got, want)


def test_a_chunk_wider_than_four_binades_is_counted():
    hidden = torch.ones(2, 512, dtype=torch.bfloat16)
    hidden[1, 32:64] = 2.0**5  # a block 5 binades above the rest of its chunk
    assert int8_stage1.int8_activations(hidden)[2] == 1
    scales = torch.full((3, 4, 16), 120, dtype=torch.uint8)
    scales[2, 1, 9] = 124  # the second chunk of row (2, 1): 4 binades
    scales[0, 3, 0] = 123
    assert int8_stage1.weight_windows(scales) == 1


@pytest.mark.cpu_only
def test_the_probe_compiles_for_sm90_with_register_a_int8_wgmmas_and_no_spills():
    compiled = compiled_by("bench.h200.int8_stage1", "compiled_for_sm90", "E256+1-k8+1-bs16")
    assert compiled["mma_kinds"] == {"IGMMA.64x16x32.S8.S8": 8}, compiled  # 4 a K step, one loop of two steps
    ops = compiled["loop_ops"]
    # 16 words a thread a chunk, 4 byte permutes each; the promotion two fused multiply-adds an element
    assert ops["IGMMA"] == 8 and ops["PRMT"] >= 64 and ops["FFMA"] == 16, compiled
    assert compiled["local"] == 0 and compiled["registers"] <= 128, compiled
