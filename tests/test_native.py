"""The native MXFP4 path (moe_native_kernels: tl.dot_scaled on packed operands, gfx950's scaled
MFMAs) against reference.ref_kernel and mxfp4.quantize_activation.

Under the CPU interpreter (triton 3.9; 3.6's interpreter has no dot_scaled) Triton emulates
dot_scaled in fp32 and the layer agrees with ref_kernel bit for bit; on an NVIDIA GPU Triton
emulates it with bf16 MMAs and stage 2 adds bf16 atomically, so there the check is the
leaderboard's tolerance.
"""

import pytest
import torch
from layer_checks import HAS_DOT_SCALED, ODD_SHAPES, assert_matches_reference, small_case

import buffers
from cases import SMOKE
from moe_triton import fused_moe_triton, native_default, route_and_quantize
from mxfp4 import quantize_activation
from reference import generate_input
from tile_configs import NATIVE_TUNED, NativeTileConfig, TileConfig, native_default_config, native_tile_config

needs_dot_scaled = pytest.mark.skipif(not HAS_DOT_SCALED, reason="this Triton's interpreter has no dot_scaled")


def run_native(data, tiles=None):
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, config = data
    return fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, config, tiles, native=True)


@needs_dot_scaled
@pytest.mark.parametrize("case", SMOKE, ids=lambda c: f"bs{c['bs']}-E{c['nroutedexperts']}")
def test_smoke_cases_match_reference(case):
    data = generate_input(**case)
    assert_matches_reference(data, run_native(data))


@needs_dot_scaled
@pytest.mark.parametrize("overrides", ODD_SHAPES.values(), ids=ODD_SHAPES.keys())
def test_odd_shapes(overrides):
    data = generate_input(**small_case(**overrides))
    assert_matches_reference(data, run_native(data))


@needs_dot_scaled
def test_tiles_that_do_not_divide_the_shape_and_poisoned_scratch():
    # d_hidden 768 is 1.5 stage-2 tiles of 512: with 3 tiles per program the third lies past the
    # end and must add nothing. 32-row blocks over 5 tokens are mostly padding. The activation
    # buffers start poisoned (0x77: finite codes, scale 2^-8) and the output must not depend on it.
    data = generate_input(**small_case(dhidden=768, dexpert=512, bs=5))
    tiles = NativeTileConfig(32, 64, 256, 4, 2, 512, 256, 4, 2, 3)
    run_native(data, tiles)
    for key, buf in list(buffers._pool.items()):
        if key[0] in ("a1_fp4", "a1_scale", "a2_fp4", "a2_scale"):
            buf.fill_(0x77)
    assert_matches_reference(data, run_native(data, tiles))


@needs_dot_scaled
def test_packed_activations_are_the_reference_quantizer_bit_for_bit(triton_device):
    # Specials: -0, subnormals, a tie of every rounding midpoint, Inf, a NaN among finite values.
    torch.manual_seed(0)
    hidden = torch.randn(6, 512).to(torch.bfloat16)
    hidden[0, :8] = torch.tensor([-0.0, 1e-40, -1e-40, 0.25, 0.75, 1.25, 2.5, 5.0])
    hidden[1, 32:40] = torch.tensor([3.5, 1.75, -6.0, 7.0, 1e30, -1e-30, 0.0, 1.0])
    hidden[2, 64] = float("inf")
    hidden[3, 100] = float("nan")
    hidden[4] *= 2.0**-126
    hidden = hidden.to(torch.bfloat16).to(triton_device)
    topk_ids = torch.tensor([[0, 1]] * 6, dtype=torch.int32, device=triton_device)
    out = torch.empty_like(hidden, dtype=torch.float32)
    for name, shape in (("a1_fp4", (6, 256)), ("a1_scale", (6, 16))):
        buffers.get_buffer(name, shape, torch.uint8, hidden.device).fill_(0xAB)
    before = hidden.clone()
    *_, (fp4, scales) = route_and_quantize(hidden, topk_ids, 2, 16, out, native=True)
    ref_fp4, ref_scales = quantize_activation(hidden)
    assert torch.equal(hidden.view(torch.int16), before.view(torch.int16))
    assert torch.equal(fp4, ref_fp4)
    assert torch.equal(scales, ref_scales)
    # aiter's rule (mxfp4.py): a NaN leaves its block's scale to the other elements; Inf gives 254.
    assert scales[3, 3] != 255 and scales[2, 2] == 254


def test_the_environment_chooses_and_bad_values_are_refused(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.delenv("MOE_TRITON_NATIVE", raising=False)
    assert native_default(cpu) is False
    monkeypatch.setenv("MOE_TRITON_NATIVE", "1")
    assert native_default(cpu) is True
    monkeypatch.setenv("MOE_TRITON_NATIVE", "yes")
    with pytest.raises(ValueError, match="MOE_TRITON_NATIVE: expected 0 or 1"):
        native_default(cpu)


def test_shapes_past_32_bit_offsets_are_refused():
    # Metadata only: the check comes before any buffer or launch, so empty tensors do.
    n_tokens, d_hidden, d_inter, n_experts, topk = 300_000, 7168, 256, 9, 2
    hidden = torch.empty((n_tokens, d_hidden), dtype=torch.bfloat16, device="meta")
    w1 = torch.empty((n_experts, 2 * d_inter, d_hidden // 2), dtype=torch.uint8, device="meta")
    w2 = torch.empty((n_experts, d_hidden, d_inter // 2), dtype=torch.uint8, device="meta")
    ids = torch.empty((n_tokens, topk), dtype=torch.int32, device="meta")
    with pytest.raises(ValueError, match="hidden_states: 300000 tokens of this shape exceed"):
        fused_moe_triton(hidden, w1, w2, None, None, None, ids, native=True)


def test_the_native_path_refuses_decode_tiles():
    data = generate_input(**small_case())
    tiles = TileConfig(16, 32, 256, 4, 2, 64, 256, 4, 2, 1)
    with pytest.raises(ValueError, match="tiles: the native path takes a NativeTileConfig"):
        run_native(data, tiles)


def test_native_tiles_cover_every_official_shape():
    from cases import BENCHMARKS, TESTS

    for case in TESTS + BENCHMARKS:
        experts = case["nroutedexperts"] + case["nsharedexperts"]
        topk = case["nexpertspertoken"] + case["nsharedexperts"]
        key = (case["dhidden"], case["dexpert"], experts, topk, case["bs"])
        assert key in NATIVE_TUNED
        cfg = native_tile_config(case["bs"], case["dhidden"], case["dexpert"], experts, topk)
        assert cfg.block_m in (16, 32, 64) and cfg.block_n1 % 32 == 0
    # The default rule: routing blocks by rows per expert, at most 64.
    assert native_default_config(16, 7168, 256, 257, 9).block_m == 16
    assert native_default_config(4096, 7168, 256, 8, 9).block_m == 64
