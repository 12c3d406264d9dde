"""The overlap of the decode stages (tiles field overlap): stage 2 starts each routing block once
stage 1 has stored all of that block's a2 columns, counted per block, instead of waiting for all of
stage 1 (docs/triton.md, "Stage 2 block by block").

Under the interpreter stage 1 ends before stage 2 begins, so there the counts and the output are
what is checked; on a GPU the two kernels run side by side (programmatic dependent launch), and the
counts are poisoned high before a replay, so a stage 2 that did not wait for its block, or a
count that launch 1 did not zero, reads stale a2 and fails the reference. The Gluon stage 1 does not
run under the interpreter: its rule of which program computes and counts which block (the fold's
tails in one launch) is checked as a Python model on a routing with every kind of tail.
"""

import pytest
import torch
from gluon_compile import compiled_launches
from layer_checks import (
    GPU_CASES,
    ON_GPU,
    assert_matches_reference,
    assert_same_sums,
    experts_routing,
    fold_rule,
    real_blocks,
    small_case,
)
from test_gluon_stage1 import ON_SM90
from test_gluon_stage2 import stage2_variant

import buffers
from bench.runner.case_args import case_shape
from moe_triton import target
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


def overlap_tiles(shape: Shape, form: str):
    """The tiles of one form of the overlap: the decode stages, a Gluon stage 1 (one warpgroup; two MMA warpgroups;
    four with the fold of 16-row tails into 32-row blocks, in one launch) or the Gluon stage 2."""
    tiles = tile_config(shape).replace(overlap=1)
    if form == "gluon1-one-warpgroup":
        return gluon_variant(tiles, 32, stages=4, parts=2, paired=1)
    if form == "gluon1-two-warpgroups":
        return gluon_variant(tiles, 64, stages=3, parts=2)
    if form == "gluon1-fold":
        return gluon_variant(tiles.replace(block_m=32, tail_m=16), 128, stages=3, parts=2).replace(fold1=1)
    if form == "gluon2":
        return stage2_variant(tiles, shape.d_hidden, 128, stages=3, parts=2, n_tiles=2)
    return tiles


FORMS = ["decode"] + [
    pytest.param(form, marks=SM90)
    for form in ("gluon1-one-warpgroup", "gluon1-two-warpgroups", "gluon1-fold", "gluon2")
]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", CASES)
def test_stage_2_takes_each_block_once_stage_1_has_finished_it(case, form):
    data = generate_input(**case)
    before = [t.clone() for t in data[:-1]]
    hidden, w1, *_, topk_ids, _config = data
    shape = Shape.of(hidden, w1, topk_ids)
    tiles = overlap_tiles(shape, form)
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
    # every block's columns counted once: by its programs (skipped past the valid blocks too), or for a folded
    # tail by the programs of the block before it
    assert torch.equal(a2_ready.cpu(), torch.full((n_blocks,), shape.d_inter, dtype=torch.int32))
    for t, b in zip(data[:-1], before, strict=True):
        assert torch.equal(t.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        (dict(overlap=2), "not 2 with tail_m 0, fold1 0"),
        (dict(block_m=32, tail_m=16, overlap=1), "not 1 with tail_m 16, fold1 0"),
    ],
)
def test_the_overlap_is_0_or_1_and_takes_one_stage_1_launch(changes, says, monkeypatch):
    data = generate_input(**small_case())
    hidden, w1, *_, topk_ids, _config = data
    monkeypatch.setattr(target, "gluon_kernels", lambda device: True)
    tiles = tile_config(Shape.of(hidden, w1, topk_ids)).replace(**changes)
    message = "tiles: overlap must be 0 or 1, and with tail_m only where fold1 folds the tails"
    with pytest.raises(ValueError, match=f"^{message} \\(one stage-1 launch\\), {says}$"):
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
    # the Gluon stage 1 with a loader partition after its partitions' join: E-33 bs-512's four MMA warpgroups (one
    # release), I-2048's fold in one launch (two: its block and the tail it folds), the K loops as without it
    for bs, d_inter, releases in ((512, 512, 1), (512, 2048, 2)):
        case = next(c for c in BENCHMARKS if (c["nroutedexperts"], c["bs"], c["dexpert"]) == (32, bs, d_inter))
        tiles = GLUON_TUNED[case_shape(case)]
        apart, *tail, overlap = compiled_launches(
            [(case, tiles.replace(overlap=0)), (case, tiles.replace(overlap=1))], "moe_gluon_stage1_kernel"
        )
        assert len(tail) == bool(tiles.tail_m), tail  # the tail launch without the overlap only
        assert apart["releases"] == 0 and overlap["releases"] == releases, (apart, overlap)
        assert overlap["mma"] == apart["mma"] and overlap["k_loop_spills"] == 0, (apart, overlap)
        assert abs(overlap["loop"] - apart["loop"]) <= 8, (apart, overlap)


# ------------------------------------------------------------------ the Gluon stage 1's programs, in Python


def gluon_overlap_programs(routing, n_tokens: int, block_m: int, fold: int) -> list[tuple[list[int], list[int]]]:
    """moe_gluon_stage1_kernel's rule under the overlap with a loader partition, in Python (its skip, folds_tail and
    tail_folded): per routing block, the blocks its programs compute and the blocks whose columns they count."""
    folding = fold_rule(routing, n_tokens, block_m, fold)
    valid = int(routing[2][0])
    programs = []
    for b in range(len(routing[1])):
        folded_before = b > 0 and folding(b - 1)
        mine = [] if folded_before else [b] + ([b + 1] if folding(b) else [])
        programs.append(([] if b * block_m >= valid else mine, mine))
    return programs


@pytest.mark.parametrize("fold", [0, 16])
def test_a_model_of_the_gluon_stage_1_counts_every_block_once_after_computing_it(triton_device, fold):
    """Experts of 0, 5 (a tail no block folds), 16, 40 (a full block and a folded tail), 50 (a last block of more
    than 16 rows) and 64 rows, in 32-row blocks: every block with real rows is computed by one program, every
    block counted by one, and a computed block by the program that computed it."""
    routing, n_tokens = experts_routing([0, 5, 16, 40, 50, 64], 32, triton_device)
    programs = gluon_overlap_programs(routing, n_tokens, 32, fold)
    computed = [b for computes, _ in programs for b in computes]
    counted = [b for _, counts in programs for b in counts]
    assert sorted(computed) == real_blocks(routing, n_tokens, 32)  # each once, and no block of padding only
    assert sorted(counted) == list(range(len(programs)))
    assert all(set(computes) <= set(counts) for computes, counts in programs)
    folded = sum(len(computes) == 2 for computes, _ in programs)
    assert folded == (1 if fold else 0)  # the 40-row expert's tail; the 50-row one's last block has 18 rows
