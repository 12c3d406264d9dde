"""The activation buffers' column order of span 128 (tiles fields slot_span1, slot_span2; docs/tiles.md): a1 and a2
hold their columns in kernels/decode.py's k_slot order of that span, which the decode and Gluon kernels' weights
take, so that a thread decodes one 32-block's four words with one scale byte. Against the reference and the span-32
layer, with a1 and a2 against a torch model of the order, the pool poisoned first (the Gluon forms on sm_90 GPUs
only: they do not run under the interpreter; tests/test_gluon_stage1.py and test_gluon_stage2.py hold their torch
models in both spans); the fields' bounds; compiled for sm_90, one scale a block cuts the K loops."""

import re

import pytest
import torch
from gluon_compile import compiled_launches
from layer_checks import GPU_CASES, ON_GPU, assert_matches_reference, assert_same_sums, k_slot, small_case
from test_overlap import SM90, overlap_tiles

import buffers
from bench.h200.gluon_check import routed_a2
from bench.runner.case_args import case_shape
from moe_triton import plan, target
from moe_triton.fused_moe import fused_moe_triton
from moe_triton.kernels.decode import FAST_EXP
from moe_triton.tiles_nvidia import static_tiles
from problem.cases import BENCHMARKS
from problem.shapes import Shape
from reference import generate_input, quant_dequant_activation

# Under the interpreter a layer takes seconds: the SMOKE case and one token there.
CASES = GPU_CASES if ON_GPU else [c for c in GPU_CASES if c.id in ("smoke0", "bs1")]
SPANS = [(128, 32), (32, 128), (128, 128)]
# test_overlap's forms of the stages: the decode kernels, the Gluon stage 1 on one, two and four warpgroups (the last
# folding tails), the Gluon stage 2
FORMS = ["decode"] + [
    pytest.param(form, marks=SM90)
    for form in ("gluon1-one-warpgroup", "gluon1-two-warpgroups", "gluon1-fold", "gluon2")
]


def layer(data, tiles):
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    return fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, tiles)


def test_the_model_of_k_slot_is_a_permutation_within_each_span():
    cols = torch.arange(512)
    for span in (32, 128):
        slots = k_slot(cols, span)
        assert torch.equal(slots.sort().values, cols) and torch.equal(slots // span, cols // span)
    assert not torch.equal(k_slot(cols, 32), k_slot(cols, 128))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(("span1", "span2"), SPANS, ids=[f"{a}-{b}" for a, b in SPANS])
@pytest.mark.parametrize("case", CASES)
def test_the_span_128_layer_gives_the_reference_with_a1_and_a2_in_its_order(case, span1, span2, form):
    data = generate_input(**case)
    before = [t.clone() for t in data[:-1]]
    hidden, w1, *_, topk_ids, _config = data
    tiles = overlap_tiles(Shape.of(hidden, w1, topk_ids), form)
    plan.clear_plans()  # a plan recorded by an earlier test would replay into scratch that the pool has since dropped
    plain = layer(data, tiles).clone()
    _, plain_a2 = routed_a2(data, tiles.block_m)
    for buf in buffers.pooled():
        buf.view(torch.uint8).fill_(0xFF)  # NaN activations and output, -1 routing
    spanned = tiles.replace(slot_span1=span1, slot_span2=span2)
    out = layer(data, spanned)
    assert_matches_reference(data, out)
    assert_same_sums(out, plain, topk_ids.shape[1])
    # a1: the hidden states quantized and dequantized (times 2^FAST_EXP on the fast path), columns in k_slot order
    scale = 2.0**FAST_EXP.value if target.fast_decode(hidden.device) else 1.0
    a1 = buffers.get_buffer("a1", tuple(hidden.shape), torch.bfloat16, hidden.device).float().cpu()
    want = (quant_dequant_activation(hidden.float()) * scale).bfloat16().float().cpu()
    cols = torch.arange(hidden.shape[1])
    assert torch.equal(a1[:, k_slot(cols, span1)], want)
    # a2: the span-32 layer's values moved to the other order's columns. Equal on the CPU, where the sums are
    # exact; on a GPU the wgmma adds the products in another order, which can move an h across a rounding
    # boundary of its MXFP4 code now and then (a wrong order would differ almost everywhere)
    real, a2 = routed_a2(data, spanned.block_m)
    inter = torch.arange(a2.shape[1])
    natural, plain_natural = a2[:, k_slot(inter, span2)].float().cpu(), plain_a2[:, k_slot(inter, 32)].float().cpu()
    assert real.numel() > 0 and natural.isfinite().all()
    same = (natural == plain_natural).float().mean()
    assert same == 1 or (ON_GPU and same > 0.99), float(same)
    for t, b in zip(data[:-1], before, strict=True):
        assert torch.equal(t.view(torch.uint8), b.view(torch.uint8))


SAYS = "must be 32 or 128, and 128 only in K steps of 256 or more (128 on the Gluon stages)"


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        (dict(slot_span1=64), f"slot_span1 {SAYS}, not 64 with block_k1 256"),
        (dict(slot_span2=128, block_k2=128), f"slot_span2 {SAYS}, not 128 with block_k2 128"),
    ],
)
def test_a_span_that_the_kernels_cannot_take_is_refused(changes, says):
    data = generate_input(**small_case())
    hidden, w1, *_, topk_ids, _config = data
    tiles = static_tiles(Shape.of(hidden, w1, topk_ids), False).replace(**changes)
    with pytest.raises(ValueError, match=f"^{re.escape(f'tiles: {says}')}$"):
        layer(data, tiles)


@pytest.mark.cpu_only
def test_one_scale_a_block_cuts_the_k_loops_on_sm90():
    # E-257 bs-512's static tiles on sm_90 (the Gluon stage 1 on one warpgroup, the decode stage 2), compiled in both
    # orders; bench/h200/decode_rate's test compiles the decode stage 1's K step in both
    case = next(c for c in BENCHMARKS if c["bs"] == 512 and c["nroutedexperts"] == 256)
    tiles = static_tiles(case_shape(case), True)
    wide = tiles.replace(slot_span1=128, slot_span2=128)
    for kernel in ("moe_gluon_stage1_kernel", "moe_stage2_kernel"):
        plain, spanned = compiled_launches([(case, tiles), (case, wide)], kernel)
        assert spanned["body_mma"] == plain["body_mma"] and spanned["body_waits"] == plain["body_waits"]
        # one scale byte for four words: the scale's byte pick, bf16 pair and NaN select once a block, not a word
        assert spanned["body"] < 0.95 * plain["body"], (kernel, plain["body"], spanned["body"])
        # no more spills (triton 3.9 spills stage 2 at its cap of 72 registers either way, 3.6 neither), no more
        # registers than the SM allocates a thread now (units of 8), so no fewer programs an SM
        assert spanned["k_loop_spills"] <= plain["k_loop_spills"] and spanned["spills"] <= plain["spills"], kernel
        assert -(-spanned["registers"] // 8) <= -(-plain["registers"] // 8), (plain, spanned)
