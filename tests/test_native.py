"""The native MXFP4 path (moe_native_kernels: tl.dot_scaled on packed operands, gfx950's scaled
MFMAs) against reference.ref_kernel and mxfp4.codec.quantize_activation.

Under the CPU interpreter (triton 3.9; 3.6's interpreter has no dot_scaled) Triton emulates
dot_scaled in fp32 and the layer agrees with ref_kernel bit for bit; on an NVIDIA GPU Triton
emulates it with bf16 MMAs and stage 2 adds bf16 atomically, so there the check is the
leaderboard's tolerance.
"""

import inspect

import pytest
import torch
import triton
import triton.language as tl
from aiter_double import sorted_buffers
from layer_checks import HAS_DOT_SCALED, ODD_SHAPES, assert_matches_reference, assert_same_sums, go_direct, small_case
from test_routing import skewed_topk_ids

import buffers
from bench.runner.case_args import SMOKE, case_shape
from moe_triton import plan as plans
from moe_triton.fused_moe import fused_moe_triton
from moe_triton.kernels.native import xcd_program
from moe_triton.routing import mxfp4_buffers, route_native
from moe_triton.target import native_default
from moe_triton.tiles import NativeTileConfig, Stage
from moe_triton.tiles_amd import (
    NATIVE_ALTERNATES,
    NATIVE_TUNED,
    NATIVE_VARIANTS,
    native_default_config,
    native_tile_config,
)
from moe_triton.tiles_nvidia import default_config
from mxfp4.codec import quantize_activation
from problem.shapes import Shape
from reference import generate_input

needs_dot_scaled = pytest.mark.skipif(not HAS_DOT_SCALED, reason="this Triton's interpreter has no dot_scaled")


def run_native(data, tiles=None):
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    return fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, tiles, native=True)


def table_tiles(data):
    return native_tile_config(Shape.of(data[0], data[1], data[-2]))


# The kernel variants' fields, combined so that four runs per case reach every code path: the XCD
# remap and streaming weight loads (neither changes a value) with the one-launch routing that
# quantizes a1; stage 1 quantizing behind the two routing launches, behind the one, and routing
# its own block (at 32 rows too: test_stage1_routing_its_own_block_writes_the_aiter_layout).
VARIANTS = {
    "xcd8-cg-route1": dict(xcds=8, weight_cache=".cg", route_launches=1),
    "quant": dict(fused_quant=True),
    "quant-route1": dict(fused_quant=True, route_launches=1),
    "quant-route0-xcd8": dict(fused_quant=True, route_launches=0, xcds=8),
}
# SMOKE's cases, the third (768 hidden columns, 33 tokens: three 16-row blocks of the shared
# expert) with 4 routed experts of 2 per token instead of 16 of 6: the same table tile and blocks
# as full, at half the interpreter's time; SMOKE[2] itself runs at its table tile above.
VARIANT_CASES = {
    "bs8-E8": SMOKE[0],
    "bs5-E4": SMOKE[1],
    "bs33-H768-E4": small_case(dhidden=768, bs=33, nroutedexperts=4, nexpertspertoken=2),
} | {name: small_case(**overrides) for name, overrides in ODD_SHAPES.items()}


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
@pytest.mark.parametrize("variant", VARIANTS.values(), ids=VARIANTS.keys())
@pytest.mark.parametrize("case", VARIANT_CASES.values(), ids=VARIANT_CASES.keys())
def test_kernel_variants_match_reference(case, variant):
    data = generate_input(**case)
    assert_matches_reference(data, run_native(data, table_tiles(data).replace(**variant)))


# 5 tokens of 2 experts of 4 and a shared one, at H-512.
SMALL_CASE = small_case(dhidden=512, bs=5, nroutedexperts=4, nexpertspertoken=2)


def _poison(data) -> None:
    """Garbage in every scratch buffer of the pool, and a NaN tensor of the output's size freed, so
    that an element a call leaves unwritten shows."""
    for buf in buffers._pool.values():
        buf.fill_(0x77 if buf.dtype == torch.uint8 else -7 if not buf.is_floating_point() else float("nan"))
    torch.full(data[0].shape, float("nan"), dtype=torch.float32)


# The routing launches' quantizing programs at more 32-blocks each (NativeTileConfig.quant_blocks:
# 256 of them cover all of H-768 bs-5's 120 blocks in one masked program) and stage 2 chaining 7
# column tiles (d_hidden 768 over 64 columns: 12 tiles, the second program's chain 5 long).
QUANT_AND_CHAINS = {
    "q64-route1": (VARIANT_CASES["bs33-H768-E4"], dict(quant_blocks=64, route_launches=1)),
    "q256-route2-t7": (
        small_case(dhidden=768, bs=5, nroutedexperts=4, nexpertspertoken=2),
        dict(quant_blocks=256, block_n2=64, n_tiles2=7),
    ),
}


@needs_dot_scaled
@pytest.mark.parametrize(("case", "variant"), QUANT_AND_CHAINS.values(), ids=QUANT_AND_CHAINS.keys())
def test_longer_quantizing_programs_and_chains_match_the_table_tile_and_reference(case, variant):
    data = generate_input(**case)
    _poison(data)
    out = run_native(data, table_tiles(data).replace(**variant))
    assert_matches_reference(data, out)
    _poison(data)
    assert_same_sums(out, run_native(data, table_tiles(data)), data[-1]["total_top_k"])


# One variant of each launch structure: two routing launches and a1, one routing launch, stage 1
# quantizing and routing itself.
PLAN_VARIANTS = {
    "route2": dict(),
    "route1-q64": dict(route_launches=1, quant_blocks=64),
    "route0": dict(fused_quant=True, route_launches=0),
}


@needs_dot_scaled
@pytest.mark.parametrize("variant", PLAN_VARIANTS.values(), ids=PLAN_VARIANTS.keys())
def test_later_native_calls_replay_the_plan_with_their_own_tensors(monkeypatch, variant):
    monkeypatch.setattr(plans, "_plans", type(plans._plans)())
    first, other = (generate_input(**{**SMALL_CASE, "seed": seed}) for seed in (5, 6))
    tiles = table_tiles(first).replace(**variant)
    assert_matches_reference(first, run_native(first, tiles))
    (plan,) = plans._plans.values()
    assert plan.bits and len(plan.launches) == tiles.route_launches + 2
    _poison(other)
    assert_matches_reference(other, run_native(other, tiles))
    assert_matches_reference(first, run_native(first, tiles))
    assert list(plans._plans.values()) == [plan]


@needs_dot_scaled
def test_a_direct_native_launch_takes_the_hidden_states_for_their_int32_view(monkeypatch):
    # Stage 1 quantizing its rows reads the hidden states as int32 pairs: a direct launch passes
    # the call's hidden states there (a pointer either way), never the first call's view.
    monkeypatch.setattr(plans, "_plans", type(plans._plans)())
    first, other = (generate_input(**{**SMALL_CASE, "seed": seed}) for seed in (5, 6))
    tiles = table_tiles(first).replace(fused_quant=True, route_launches=0)
    run_native(first, tiles)
    (plan,) = plans._plans.values()
    (fake,) = go_direct(monkeypatch, plan)[:1]
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = other
    plan.run(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids)
    stage1 = plan.launches[0]
    named = dict(zip(inspect.signature(stage1.fn.fn).parameters, fake.calls[0][9:], strict=True))
    assert stage1.fn.fn.__name__ == "moe_native_stage1_kernel"
    assert named["a1_ptr"] is hidden and named["a1_scale_ptr"] is hidden
    assert named["w1_ptr"] is w1 and named["topk_ids_ptr"] is topk_ids


@needs_dot_scaled
def test_128_row_blocks_match_reference():
    # The E-33 bs-512 rows' routing blocks (tiles_amd), one block per expert here.
    data = generate_input(**SMALL_CASE)
    assert_matches_reference(data, run_native(data, table_tiles(data).replace(block_m=128, route_launches=1)))


def test_tile_fields_are_checked():
    data = generate_input(**small_case())
    tiles = table_tiles(data)
    for bad, message in [
        (dict(block_k1=512), "block_k1 512 and block_k2 256 must divide d_hidden 256 and d_inter 256"),
        (dict(quant_blocks=48), "quant_blocks must be a power of two, not 48"),
        (dict(quant_blocks=0), "quant_blocks must be a power of two, not 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            run_native(data, tiles.replace(**bad))


@triton.jit
def _xcd_table(out_ptr, grid, XCDS: tl.constexpr, SIZE: tl.constexpr):
    linear = tl.arange(0, SIZE)
    tl.store(out_ptr + linear, xcd_program(linear, grid, XCDS), mask=linear < grid)


@pytest.mark.parametrize("xcds", [8, 3, 1])
def test_the_xcd_remap_is_a_permutation_with_one_run_per_die(triton_device, xcds):
    # Every grid up to 300 (most not divisible by 8) and a few of the official launches' sizes.
    for grid in [*range(1, 301), 144 * 14, 257 * 2, 1777]:
        table = torch.full((2048,), -1, dtype=torch.int32, device=triton_device)
        _xcd_table[(1,)](table, grid, XCDS=xcds, SIZE=2048)
        logical = table[:grid].cpu().long()
        assert torch.equal(logical.sort().values, torch.arange(grid)), grid
        # Die d runs hardware programs d, d + xcds, ...: one contiguous, ascending run of logical ids.
        for die in range(min(xcds, grid)):
            run = logical[die::xcds]
            assert torch.equal(run, torch.arange(int(run[0]), int(run[0]) + len(run))), (grid, die)


@pytest.mark.parametrize(("n_tokens", "topk", "n_experts", "block_m"), [(5, 3, 4, 16), (700, 7, 40, 32)])
def test_one_routing_launch_writes_the_aiter_layout(triton_device, n_tokens, topk, n_experts, block_m):
    # 4900 slots: the histogram and placement loops take two steps of 4096.
    topk_ids = skewed_topk_ids(n_tokens, topk, n_experts, seed=n_tokens).to(triton_device)
    hidden = torch.randn(n_tokens, 64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    out = torch.full((n_tokens, 64), float("nan"), device=triton_device)
    routing = route_native(hidden.to(triton_device), topk_ids, n_experts, block_m, out, launches=1)
    sorted_ids, sorted_experts, num_valid = routing
    want_ids, _, want_experts, want_valid = sorted_buffers(
        topk_ids.cpu().long(), torch.ones(topk_ids.shape), n_experts, block_m
    )
    total = int(want_valid[0])
    assert num_valid.cpu().tolist() == [total, n_tokens]
    assert torch.equal(sorted_ids[:total].cpu(), want_ids[:total])
    assert torch.equal(sorted_experts[: total // block_m].cpu(), want_experts[: total // block_m])
    assert torch.equal(out.cpu(), torch.zeros(n_tokens, 64))


@needs_dot_scaled
@pytest.mark.parametrize(
    "rows", [dict(), dict(block_m=32, block_n1=64, weight_cache=".cg")], ids=["16-rows", "32-rows-cg"]
)
def test_stage1_routing_its_own_block_writes_the_aiter_layout(rows):
    # 280 slots: the rank match takes two steps of 256 at 16-row blocks, three of 128 at 32 (the
    # quant0 variants of the 32-row shapes); several blocks per expert.
    data = generate_input(**small_case(bs=70))
    tiles = table_tiles(data).replace(fused_quant=True, route_launches=0, **rows)
    for key, buf in list(buffers._pool.items()):
        if key[0] in ("sorted_ids", "sorted_expert_ids", "num_valid_ids"):
            buf.fill_(-7)
    assert_matches_reference(data, run_native(data, tiles))
    topk_ids, block_m = data[-2], tiles.block_m
    n_experts = data[1].shape[0]
    want_ids, _, want_experts, want_valid = sorted_buffers(
        topk_ids.cpu().long(), torch.ones(topk_ids.shape), n_experts, block_m
    )
    total = int(want_valid[0])
    pool = {key[0]: buf for key, buf in buffers._pool.items()}
    assert pool["num_valid_ids"].cpu().tolist() == [total, topk_ids.shape[0]]
    assert torch.equal(pool["sorted_ids"][:total].cpu(), want_ids[:total])
    assert torch.equal(pool["sorted_expert_ids"][: total // block_m].cpu(), want_experts[: total // block_m])


def test_variant_tiles_are_checked():
    data = generate_input(**small_case())
    tiles = table_tiles(data)
    with pytest.raises(ValueError, match="route_launches 0 .* needs fused_quant"):
        run_native(data, tiles.replace(route_launches=0))
    with pytest.raises(ValueError, match="route_launches must be 0, 1 or 2"):
        run_native(data, tiles.replace(route_launches=3))


@needs_dot_scaled
def test_tiles_that_do_not_divide_the_shape_and_poisoned_scratch():
    # d_hidden 768 is 1.5 stage-2 tiles of 512: with 3 tiles per program the third lies past the
    # end and must add nothing. 32-row blocks over 5 tokens are mostly padding. The activation
    # buffers start poisoned (0x77: finite codes, scale 2^-8) and the output must not depend on it.
    # Two routed experts of one per token (and the shared one): three blocks instead of seven.
    data = generate_input(**small_case(dhidden=768, dexpert=512, bs=5, nroutedexperts=2, nexpertspertoken=1))
    tiles = NativeTileConfig(
        block_m=32,
        stage1=Stage(block_n=64, block_k=256, warps=4, stages=2),
        stage2=Stage(block_n=512, block_k=256, warps=4, stages=2),
        n_tiles2=3,
    )
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
    fp4, scales = a1 = mxfp4_buffers("a1", *hidden.shape, hidden.device)
    assert (fp4.shape, scales.shape) == ((6, 256), (6, 16))
    for buf in a1:
        buf.fill_(0xAB)
    before = hidden.clone()
    route_native(hidden, topk_ids, 2, 16, out, a1)
    ref_fp4, ref_scales = quantize_activation(hidden)
    assert torch.equal(hidden.view(torch.int16), before.view(torch.int16))
    assert torch.equal(fp4, ref_fp4)
    assert torch.equal(scales, ref_scales)
    # aiter's rule (mxfp4/codec.py): a NaN leaves its block's scale to the other elements; Inf gives 254.
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
    tiles = default_config(Shape.of(data[0], data[1], data[-2]))  # the decode path's rule
    with pytest.raises(ValueError, match="tiles: the native path takes a NativeTileConfig"):
        run_native(data, tiles)


def test_native_tiles_cover_every_official_shape():
    from problem.cases import BENCHMARKS, TESTS

    for case in TESTS + BENCHMARKS:
        key = case_shape(case)
        assert key in NATIVE_TUNED
        cfg = native_tile_config(key)
        assert cfg.block_m in (16, 32, 64, 128) and cfg.block_n1 % 32 == 0
        # The selection's candidates: kernel variants of the row, each with its launch count.
        for name, alt in NATIVE_ALTERNATES[key].items():
            assert alt != cfg and alt.replace(**NATIVE_VARIANTS[name]) == alt, name
            assert alt.nonkdim == 16 or alt.block_m >= 32, name
    # Two launches for every official shape, three at most for each: the routing's, then
    # stage 1 and stage 2.
    fewest = {key: 2 + min(a.route_launches for a in alts.values()) for key, alts in NATIVE_ALTERNATES.items()}
    benchmarks = [case_shape(case) for case in BENCHMARKS]
    assert all(fewest[key] == 2 for key in benchmarks) and max(fewest.values()) <= 3
    # The default rule: routing blocks by rows per expert, at most 64.
    assert native_default_config(Shape(16, 7168, 256, 257, 9)).block_m == 16
    assert native_default_config(Shape(4096, 7168, 256, 8, 9)).block_m == 64


@needs_dot_scaled
def test_the_h200_native_check_runs_and_writes_its_table(tmp_path):
    # bench/h200/native_check.py under the interpreter on a small shape: the table tile, one seed.
    import json

    from bench.h200.native_check import main

    assert main(["--shapes", "smoke:1", "--seeds", "1", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "native_check.json").read_text())["rows"]
    assert [(r["variant"], r["passed"], r["launches"]) for r in rows] == [("table", 1, 4)]
    assert "| smoke1 | H256-I512-E4+1-k2+1-bs5 | table | 4 | 1/1 |" in (tmp_path / "native_check.md").read_text()


@needs_dot_scaled
def test_the_h200_native_check_takes_extra_variants_of_the_table_tile(tmp_path, capsys):
    # Kernel variants of the table tile (as bench/h200/native_extra_bs512_triton39.json's) on a small shape.
    import json

    from bench.h200.native_check import main

    extra = tmp_path / "extra.json"
    variants = {"route1-q64": {"route_launches": 1, "quant_blocks": 64}, "fused-quant": {"fused_quant": True}}
    extra.write_text(json.dumps(variants))
    args = ["--shapes", "smoke:1", "--seeds", "1", "--variants", "route1-q64", "fused-quant", "--out", str(tmp_path)]
    assert main([*args, "--extra-variants", str(extra)]) == 0
    rows = json.loads((tmp_path / "native_check.json").read_text())["rows"]
    assert [(r["variant"], r["passed"], r["launches"]) for r in rows] == [("route1-q64", 1, 3), ("fused-quant", 1, 4)]
    extra.write_text(json.dumps({"x": {"bogus": 1}}))
    capsys.readouterr()
    assert main([*args, "--extra-variants", str(extra)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--extra-variants: " in err and "x: no tile field bogus" in err
