"""The overlap of the decode stages (tiles field overlap): stage 2 starts each routing block once
stage 1 has stored all of that block's a2 columns, counted per block, instead of waiting for all of
stage 1 (docs/triton.md, "Stage 2 block by block").

Under the interpreter stage 1 ends before stage 2 begins, so there the counts and the output are
what is checked; on a GPU the two kernels run side by side (programmatic dependent launch), and the
counts are poisoned high before a replay, so a stage 2 that did not wait for its block, or a
count that launch 1 did not zero, reads stale a2 and fails the reference.
"""

import pytest
import torch
from gluon_compile import compiled_launches
from layer_checks import GPU_CASES, ON_GPU, assert_matches_reference, assert_same_sums, small_case
from test_gluon_stage1 import ON_SM90
from test_gluon_stage2 import stage2_variant

import buffers
from bench.runner.case_args import case_shape
from moe_triton.fused_moe import fused_moe_triton
from moe_triton.routing import routing_capacity
from moe_triton.tiles_nvidia import GLUON_TUNED, gluon2_variant, gluon_variant, tile_config
from problem.cases import BENCHMARKS
from problem.shapes import Shape
from reference import generate_input

# Under the interpreter a layer takes seconds: the SMOKE case and two odd ones there.
CASES = GPU_CASES if ON_GPU else [c for c in GPU_CASES if c.id in ("smoke0", "bs1", "top1-no-shared")]


def layer(data, tiles):
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    return fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, tiles)


SM90 = pytest.mark.skipif(not ON_SM90, reason="the Gluon stages run on sm_90 GPUs")


@pytest.mark.parametrize(
    ("gluon1", "gluon2"), [(False, False), pytest.param(True, False, marks=SM90), pytest.param(False, True, marks=SM90)]
)
@pytest.mark.parametrize("case", CASES)
def test_stage_2_takes_each_block_once_stage_1_has_finished_it(case, gluon1, gluon2):
    data = generate_input(**case)
    before = [t.clone() for t in data[:-1]]
    hidden, w1, *_, topk_ids, _config = data
    shape = Shape.of(hidden, w1, topk_ids)
    tiles = tile_config(shape).replace(overlap=1)
    if gluon1:  # one warpgroup, the only Gluon stage 1 that counts its columns
        tiles = gluon_variant(tiles, 32, stages=4, parts=2, paired=1)
    if gluon2:
        tiles = stage2_variant(tiles, shape.d_hidden, 128, stages=3, parts=2, n_tiles=2)
    apart = layer(data, tiles.replace(overlap=0)).clone()
    layer(data, tiles)  # the first call records the plan; the second replays it
    n_blocks = routing_capacity(topk_ids.numel(), shape.n_experts, tiles.block_m)
    a2_ready = buffers.get_buffer("a2_ready", (n_blocks,), torch.int32, hidden.device)
    for buf in buffers.pooled():
        buf.view(torch.uint8).fill_(0xFF)  # NaN a2, -1 routing
    a2_ready.fill_(2**30)  # every block ready at once, if launch 1 did not zero the counts
    out = layer(data, tiles)
    assert_matches_reference(data, out)
    assert_same_sums(out, apart, topk_ids.shape[1])
    # every program of stage 1 counted its columns, the skipped blocks' programs too
    assert torch.equal(a2_ready.cpu(), torch.full((n_blocks,), shape.d_inter, dtype=torch.int32))
    for t, b in zip(data[:-1], before, strict=True):
        assert torch.equal(t.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        (dict(overlap=2), "with no tail_m and gluon1 only at block_n1 32 \\(one warpgroup\\), not 2"),
        (dict(block_m=32, tail_m=16, overlap=1), "with no tail_m .* not 1 with tail_m 16"),
    ],
)
def test_the_overlap_takes_the_decode_stages_without_tail_launches(changes, says):
    data = generate_input(**small_case())
    hidden, w1, *_, topk_ids, _config = data
    tiles = tile_config(Shape.of(hidden, w1, topk_ids)).replace(**changes)
    with pytest.raises(ValueError, match=f"tiles: overlap must be 0 or 1, {says}"):
        layer(data, tiles)


@pytest.mark.cpu_only
def test_stage_2_polls_its_block_instead_of_waiting_for_the_grid():
    """Compiled for sm_90 on the CPU: with the overlap, stage 1 counts with a release (a GPU-scope
    fence, then the add) on both of its exits, and stage 2 polls with acquire loads before its first
    copy and never executes griddepcontrol.wait (ACQBULK); without it, neither."""
    case = next(c for c in BENCHMARKS if c["nroutedexperts"] == 256 and c["bs"] == 16)
    tiles = tile_config(case_shape(case))
    pairs = [(case, tiles.replace(overlap=0)), (case, tiles.replace(overlap=1))]
    apart, overlap = compiled_launches(pairs, "moe_stage2_kernel")
    assert apart["grid_wait"] and apart["polls"] == 0, apart
    assert not overlap["grid_wait"] and overlap["polls_before_copies"], overlap
    assert overlap["loop_spills"] == 0 and overlap["registers"] <= 128, overlap
    apart, overlap = compiled_launches(pairs, "moe_stage1_kernel")
    assert apart["releases"] == 0, apart
    assert overlap["releases"] == 2 and overlap["gpu_fences"] >= 2, overlap
    assert overlap["loop_spills"] == 0 and overlap["registers"] <= 128, overlap
    # the Gluon stage 2 the same, at E-33 bs-16 (the decode stage 1 before it)
    case = next(c for c in BENCHMARKS if c["nroutedexperts"] == 32 and c["bs"] == 16)
    tiles = gluon2_variant(tile_config(case_shape(case)), 256, stages=4, parts=2, n_tiles=7)
    pairs = [(case, tiles.replace(overlap=0)), (case, tiles.replace(overlap=1))]
    apart, overlap = compiled_launches(pairs, "moe_gluon_stage2_kernel")
    assert apart["grid_wait"] and apart["polls"] == 0, apart
    assert not overlap["grid_wait"] and overlap["polls_before_copies"] and overlap["spills"] == 0, overlap
    # and the one-warpgroup Gluon stage 1 of E-257 bs-512's static tiles: one exit, one release
    case = next(c for c in BENCHMARKS if c["nroutedexperts"] == 256 and c["bs"] == 512)
    tiles = GLUON_TUNED[case_shape(case)]
    pairs = [(case, tiles.replace(overlap=0)), (case, tiles.replace(overlap=1))]
    apart, overlap = compiled_launches(pairs, "moe_gluon_stage1_kernel")
    assert apart["releases"] == 0 and overlap["releases"] == 1 and overlap["spills"] == 0, (apart, overlap)
