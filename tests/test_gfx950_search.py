"""bench.gfx950.search without compiling: the space per shape, the cheap bound that prunes it, the
branch and bound over a stage's list, and how the stages' best tiles combine and are picked."""

import math

import pytest

from bench.gfx950 import model, search
from bench.gfx950.estimate import capacity, gemm_programs
from moe_triton.tiles import NativeTileConfig, Stage
from problem.cases import BENCHMARKS

E33_BS16, E33_BS512 = BENCHMARKS[3], BENCHMARKS[5]


def test_routing_blocks_follow_the_rows_per_expert():
    assert [search.block_ms(case) for case in BENCHMARKS] == [
        [16],  # E-257 bs-16: half a row per expert
        [16],
        [16, 32],  # 16 rows per expert: 4 to 32
        [16],
        [16, 32, 64],  # 32 rows: 8 to 64
        [32, 64, 128],  # 128 rows: 32 to 256
        [32, 64, 128],
    ]
    assert {(g.block_m, g.nonkdim) for g in search.groups(BENCHMARKS[4])} == {
        (16, 16),
        (32, 16),
        (32, 32),
        (64, 16),
        (64, 32),
    }


def test_stage_tiles_divide_their_k():
    # d_inter 256 takes no 512-wide K step in stage 2; d_hidden 7168 takes all three in stage 1.
    stage2 = search.stage_tiles(2, BENCHMARKS[0])
    assert {t["block_k2"] for t in stage2} == {128, 256}
    assert {t["block_k1"] for t in search.stage_tiles(1, BENCHMARKS[0])} == {128, 256, 512}
    assert len(search.stage_tiles(1, BENCHMARKS[0])) == math.prod(map(len, search.SPACE["stage1"].values()))


def _stage1(**fields):
    return {"block_n1": 128, "block_k1": 256, "warps1": 8, "stages1": 2, **fields}


def test_the_lds_floor_drops_tiles_that_cannot_hold_two_waves_per_simd():
    # 256 weight rows x 512 of K in fp4 with scales: 69.6 KB per tile in flight, 3 in flight at
    # 4 stages: 209 KB > 160 KiB, no workgroup fits.
    big = _stage1(block_k1=512, stages1=4)
    assert search.lds_floor(1, big) == 3 * 256 * 512 * (1 / 2 + 1 / 32)
    assert search.max_waves(1, big) == 0 and search.stage_bound(1, E33_BS16, 16, big) is None
    # One tile in flight at 2 stages: 34.8 KB, 4 workgroups of 8 waves: capped at 8 per SIMD.
    assert search.max_waves(1, _stage1()) == 8


def test_the_lds_floor_holds_the_activation_tiles_as_triton_3_6_allocates_them():
    # E-33 bs-512's stage 1 as the first tile search's row had it (2026-12-02): 64 weight and 64
    # activation rows x 256 of K, 3 tiles in flight at 4 stages: 51.0 KiB, the LDS triton 3.6 gives the
    # compiled kernel for gfx950 (bench/results/gfx950/native-kernel-variants-triton-3.6.0.md), so 3
    # workgroups per CU.
    tile = _stage1(block_n1=32, warps1=4, stages1=4)
    assert search.lds_floor(1, tile, 64) == 51.0 * 1024
    assert search.max_waves(1, tile, 64) == 3 and search.max_waves(1, tile) == 6


def test_the_bound_is_the_models_launch_time_without_issue_at_the_best_occupancy():
    tile = _stage1(stages1=3)
    params, machine = E33_BS16, model.MI355X
    grid = search.stage_grid(1, params, 16, tile)
    assert grid == (capacity(params, 16), 4, 1)  # d_inter 512 over 128 columns
    mean, variance = gemm_programs(grid, {"BLOCK_M": 16}, params)
    steps = 7168 / 256
    work = model.ProgramWork(
        issue=0.0,
        matrix=steps * 2 * 256 * 16 * 256 / (8 * 4096),
        memory=steps * machine.step_latency_cycles / 2,
        warps=8,
    )
    nbytes = search.est.stage_weight_bytes("stage1", params)
    in_flight = 2 * (256 + 16) * 256 * (1 / 2 + 1 / 32)
    want = min(
        model.launch_time(machine, model.LaunchWork(mean, variance, 4 * w / 8, work, nbytes, in_flight)).seconds
        for w in range(2, search.max_waves(1, tile, 16) + 1)
    )
    assert search.stage_bound(1, params, 16, tile) == pytest.approx(want * 1e6)


def test_the_quantizing_stage_1s_bound_counts_one_convert_per_two_elements():
    # E-33 bs-512 on 64-row blocks, 4 waves: 64 of the block's elements per lane and K step.
    tile = _stage1(block_n1=64, warps1=4)
    plain = search.stage_bound(1, E33_BS512, 64, tile)
    bound = search.stage_bound(1, E33_BS512, 64, tile, quantizes=True)
    guess = search.stage_bound(1, E33_BS512, 64, tile, quantizes=True, valu_per_element=search.QUANT_VALU)
    assert plain < bound < guess


def test_deeper_pipelines_lower_the_bound_where_few_programs_stream():
    # E-33 bs-16: ~131 stage-1 programs over 256 CUs, latency-bound at 2 stages.
    two, three = (search.stage_bound(1, E33_BS16, 16, _stage1(stages1=s)) for s in (2, 3))
    assert three < two
    # Never below the weights at the achievable bandwidth.
    floor = search.est.stage_weight_bytes("stage1", E33_BS16) / model.MI355X.bandwidth_bytes_per_s * 1e6
    assert min(two, three) >= floor * 0.999


def test_branch_and_bound_stops_once_no_bound_left_is_below_the_keep_th_best():
    evaluated = []

    def evaluate(tile):
        evaluated.append(tile["id"])
        return None if tile["id"] == 1 else (tile["us"], 0.0)  # tile 1 breaks a limit

    # (bound, order, tile): evaluated in the order's order; the stop looks at every bound left.
    table = [(1, 1, 5), (2, 2, 9), (3, 3, 4), (6, 4, 6), (4, 5, 4.5), (7, 6, 1)]
    candidates = [(b, o, {"id": i, "us": us}) for i, (b, o, us) in enumerate(table)]
    best, count, exact = search.branch_and_bound(candidates, evaluate, keep=2)
    # After ids 0, 1, 2 the two best are 4 and 5, but id 4's bound (4) is below 5: on to ids 3 and 4;
    # then 4 and 4.5 are kept and the last bound, 7, reaches 4.5.
    assert [f.tile["id"] for f in best] == [2, 4] and evaluated == [0, 1, 2, 3, 4] and count == 5 and exact
    evaluated.clear()
    best, count, exact = search.branch_and_bound(candidates, evaluate, keep=2, max_compiled=2)
    assert count == 2 and not exact and [f.tile["id"] for f in best] == [0]
    # A seed goes first (the shape's table tile): here the best, so ids 0 and 2 suffice.
    evaluated.clear()
    best, count, exact = search.branch_and_bound(candidates, evaluate, keep=2, seeds=({"id": 5, "us": 1},))
    assert evaluated[0] == 5 and [f.tile["id"] for f in best] == [5, 2] and exact


def test_ties_within_a_tenth_of_a_microsecond_go_to_the_lower_compute_term():
    found = [
        search.Found(20.04, {"n": "a"}, 19.0),
        search.Found(20.01, {"n": "b"}, 12.0),
        search.Found(19.9, {"n": "c"}, 19.5),
    ]
    assert [f.tile["n"] for f in sorted(found, key=search.Found.rank)] == ["c", "b", "a"]


def test_combinations_add_the_modes_launches_and_pick_the_best_of_each_launch_count():
    plain = [search.Found(10.0, {"s1": "p"})]
    quant = [search.Found(13.0, {"s1": "q"})]
    stage2 = [search.Found(5.0, {"s2": "a"}), search.Found(6.0, {"s2": "b"})]
    fixed = {"route2": 2.0, "route1": 1.5, "quant0": 0.5}
    ranked = search.combine(fixed, {"plain": plain, "quant0": quant}, stage2, gaps_us=1.0)
    # route1: 1.5 + 3 gaps + 10 + 5; quant0: 0.5 + 2 + 13 + 5; route2: 2 + 4 + 10 + 5.
    assert [(round(t, 2), mode, s2.tile["s2"]) for t, mode, _, s2 in ranked] == [
        (19.5, "route1", "a"),
        (20.5, "quant0", "a"),
        (20.5, "route1", "b"),
        (21.0, "route2", "a"),
        (21.5, "quant0", "b"),
        (22.0, "route2", "b"),
    ]
    rows = [{"estimate_us": t, "launches": search.MODES[mode][1]} for t, mode, _, _ in ranked]
    assert [r["estimate_us"] for r in search.pick(rows, top=2)] == [19.5, 20.5, 21.0]  # + the best of 4 launches


def test_combination_names_say_what_runs():
    cfg = NativeTileConfig(
        block_m=32,
        stage1=Stage(block_n=64, block_k=256, warps=4, stages=3),
        stage2=Stage(block_n=128, block_k=256, warps=8, stages=2),
        n_tiles2=2,
        nonkdim=32,
        route_launches=1,
    )
    assert search.describe(cfg) == "r1-m32-128x256w4s3-128x256w8s2t2-nk32"
    assert search.describe(cfg.replace(route_launches=0)) == "q0-m32-128x256w4s3-128x256w8s2t2-nk32"
    # The routing launches' quant_blocks where it differs from the decode path's 16.
    assert search.describe(cfg.replace(quant_blocks=128)) == "r1-m32-128x256w4s3-128x256w8s2t2-nk32-q128"
    assert search.tiles_of(cfg, search.Group(64), "route2", {}, {}, 256).quant_blocks == 256


def test_the_best_stage_2_tiles_are_tried_at_every_chain_length():
    # Two tiles the bound ties; the chain of 7 fits the programs into one round (2.0 us here).
    us = {(128, 1): 9.0, (128, 4): 3.0, (128, 7): 2.0, (64, 4): 4.0, (64, 7): 5.0}
    candidates = [(1.0, 1.0, {"block_n2": n, "n_tiles2": t}) for n, t in us]

    def evaluate(tile):
        return us[tile["block_n2"], tile["n_tiles2"]], 0.0

    best = [search.Found(3.0, {"block_n2": 128, "n_tiles2": 4}), search.Found(4.0, {"block_n2": 64, "n_tiles2": 4})]
    found, compiled = search.chains_of(best, candidates, evaluate, compiled=2, keep=2)
    # Chains 1 and 7 of the 128-wide tile, 7 of the 64-wide one (its 1 is no candidate), each once.
    assert [(f.tile["block_n2"], f.tile["n_tiles2"], f.us) for f in found] == [(128, 7, 2.0), (128, 4, 3.0)]
    assert compiled == 5
