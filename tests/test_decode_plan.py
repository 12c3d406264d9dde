"""The decode path's per-shape plans (moe_triton.plan.Plan): later calls of a shape replay the
first call's recorded launches with their own tensors; on the NVIDIA path through the compiled
kernels' launchers, with the JIT launch as the fallback."""

import gc
import inspect

import pytest
import torch
import triton
from layer_checks import assert_matches_reference, go_direct, small_case

from moe_triton import plan as plans
from moe_triton.fused_moe import fused_moe_triton
from moe_triton.tiles_amd import native_tile_config
from moe_triton.tiles_nvidia import tile_config
from problem.shapes import Shape
from reference import generate_input


def run(data):
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    return fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, native=False)


# Few experts: a plan is recorded and replayed the same way for any shape, and each call here
# costs a third of small_case's under the interpreter.
PLAN_CASE = small_case(nroutedexperts=2, nexpertspertoken=1, bs=5)


@pytest.fixture
def plan(monkeypatch):
    """The plan of a small shape after its first call, and that call's data."""
    monkeypatch.setattr(plans, "_plans", type(plans._plans)())
    data = generate_input(**{**PLAN_CASE, "seed": 5})
    run(data)
    (plan,) = plans._plans.values()
    return plan, data


def test_later_calls_replay_the_plan_with_their_own_tensors(plan):
    plan, first = plan
    names = [launch.fn.fn.__name__ for launch in plan.launches]
    assert names == ["moe_prep_kernel", "moe_route_kernel", "moe_stage1_kernel", "moe_stage2_kernel"]
    other = generate_input(**{**PLAN_CASE, "seed": 6})
    assert_matches_reference(other, run(other))
    assert_matches_reference(first, run(first))
    assert list(plans._plans.values()) == [plan]


@pytest.mark.parametrize("overlap", [0, 1])
def test_one_routing_launch_makes_a_plan_of_three(monkeypatch, overlap):
    monkeypatch.setattr(plans, "_plans", type(plans._plans)())
    data = generate_input(**{**PLAN_CASE, "seed": 7})
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    tiles = tile_config(Shape.of(hidden, w1, topk_ids)).replace(route_launches=1, overlap=overlap)
    layer = (hidden, w1, w2, w1s, w2s, topk_weights, topk_ids)
    assert_matches_reference(data, fused_moe_triton(*layer, tiles=tiles, native=False))
    (plan,) = plans._plans.values()
    names = [launch.fn.fn.__name__ for launch in plan.launches]
    assert names == ["moe_route_prep_kernel", "moe_stage1_kernel", "moe_stage2_kernel"]
    other = generate_input(**{**PLAN_CASE, "seed": 8})
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = other
    out = fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, tiles=tiles, native=False)
    assert_matches_reference(other, out)
    assert list(plans._plans.values()) == [plan]


@pytest.mark.parametrize("launches", [0, 3])
def test_routing_takes_one_or_two_launches(launches):
    data = generate_input(**PLAN_CASE)
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    tiles = tile_config(Shape.of(hidden, w1, topk_ids)).replace(route_launches=launches)
    with pytest.raises(
        ValueError, match=f"^tiles: route_launches must be 1 or 2 \\(launches before stage 1\\), not {launches}$"
    ):
        fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, tiles=tiles, native=False)


@pytest.mark.parametrize("field", ["block_m", "quant_blocks"])
@pytest.mark.parametrize("native", [False, True])
def test_a_routing_block_no_kernel_takes_is_refused_before_any_launch(native, field):
    data = generate_input(**PLAN_CASE)
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    table = native_tile_config if native else tile_config
    tiles = table(Shape.of(hidden, w1, topk_ids)).replace(**{field: 48})
    with pytest.raises(ValueError, match=f"^tiles: {field} must be a power of two, not 48$"):
        fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, tiles=tiles, native=native)


@pytest.mark.parametrize("launches", [1, 2])
def test_the_quantizing_programs_take_quant_blocks_32_element_blocks_each(monkeypatch, launches):
    # 5 tokens of 256: 40 blocks of 32, so 64 a program is one program with 24 blocks masked off, 8 a program five.
    data = generate_input(**{**PLAN_CASE, "seed": 9})
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    layer = (hidden, w1, w2, w1s, w2s, topk_weights, topk_ids)
    tiles = tile_config(Shape.of(hidden, w1, topk_ids)).replace(route_launches=launches)
    grids = {}
    for quant_blocks in (64, 8):
        monkeypatch.setattr(plans, "_plans", type(plans._plans)())
        out = fused_moe_triton(*layer, tiles=tiles.replace(quant_blocks=quant_blocks), native=False)
        assert_matches_reference(data, out)
        (recorded,) = plans._plans.values()
        grids[quant_blocks] = recorded.launches[0].grid[0]
    assert grids[8] - grids[64] == 5 - 1


@pytest.mark.parametrize("amd", [False, True])
def test_a_direct_launch_passes_every_parameter_in_signature_order(plan, monkeypatch, amd):
    plan, data = plan
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    monkeypatch.setattr(plan, "amd", amd)  # as recorded for AMD: storages' sizes in the specialisation
    raw = (hidden, w1, w2, w1s, w2s, topk_weights, topk_ids)
    monkeypatch.setattr(plan, "specialised", plans.specialisation(raw, amd))
    fakes = go_direct(monkeypatch, plan)
    out = plan.run(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids)
    for launch, fake in zip(plan.launches, fakes, strict=True):
        (call,) = fake.calls
        grid, (stream, function, metadata, launch_metadata, enter, leave), params = call[:3], call[3:9], call[9:]
        assert grid == launch.grid and len(grid) == 3 and stream == 1234
        signature = inspect.signature(launch.fn.fn).parameters
        assert (function, metadata) == ("function", "metadata")
        if amd:  # what JITFunction.run passes: the kernel's launch metadata for the grid as given, the hook chains
            assert launch_metadata == ("launch metadata", launch.grid_arg, 1234, len(signature))
            assert enter is triton.knobs.runtime.launch_enter_hook and leave is triton.knobs.runtime.launch_exit_hook
        else:  # NVIDIA: no launch metadata (its host cost), the same effect with no hook registered
            assert (launch_metadata, enter, leave) == (None, None, None)
        assert len(params) == len(signature)
        named = dict(zip(signature, params, strict=True))
        for k, v in launch.kwargs.items():  # the constexprs, and scratch passed by keyword (a2_ready)
            if k in signature:
                assert named[k] is v if isinstance(v, torch.Tensor) else named[k] == v
        if "topk_ids_ptr" in named:
            assert named["topk_ids_ptr"] is topk_ids  # the call's own tensors, as given
    stage2_names = inspect.signature(plan.launches[-1].fn.fn).parameters
    stage2 = dict(zip(stage2_names, fakes[-1].calls[0][9:], strict=True))
    assert stage2["out_ptr"] is out and stage2["w2_ptr"] is w2


def test_a_first_direct_launch_that_raises_falls_back_to_the_jit_for_good(plan, monkeypatch):
    plan, data = plan
    go_direct(monkeypatch, plan, fail=True)
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    out = plan.run(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids)
    assert plan.direct is False
    assert_matches_reference(data, out if out.dtype == torch.bfloat16 else out.to(torch.bfloat16))


def test_an_input_off_16_bytes_takes_the_jit_launch(plan, monkeypatch):
    plan, data = plan
    fakes = go_direct(monkeypatch, plan)
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    shifted = torch.empty(hidden.numel() + 1, dtype=hidden.dtype, device=hidden.device)[1:].view(hidden.shape)
    shifted.copy_(hidden)
    out = plan.run(shifted, w1, w2, w1s, w2s, topk_weights, topk_ids)
    assert all(not fake.calls for fake in fakes) and plan.direct is True
    assert_matches_reference(data, out if out.dtype == torch.bfloat16 else out.to(torch.bfloat16))


def test_the_plan_tells_inputs_that_the_jit_would_specialise_otherwise(plan):
    # dtype and 16-byte alignment everywhere; on AMD also a storage over 2^31 - 1 bytes, where
    # the HIP backend drops its 32-bit buffer offsets. Such inputs take the JIT launch (run).
    plan, data = plan
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    raw = (hidden, w1, w2, w1s, w2s, topk_weights, topk_ids)
    assert plan.amd is False and plans.specialisation(raw, False) == plan.specialised
    n = topk_weights.numel()
    shifted = torch.empty(n + 1, dtype=topk_weights.dtype)[1:].view(topk_weights.shape)
    big = torch.empty(2**29 + n, dtype=topk_weights.dtype)[2**29 :].view(topk_weights.shape)  # 2 GiB, never touched
    for weights in (topk_weights.double(), shifted):
        assert plans.specialisation((*raw[:5], weights, topk_ids), False) != plan.specialised
    assert plans.specialisation((*raw[:5], big, topk_ids), False) == plan.specialised
    assert plans.specialisation((*raw[:5], big, topk_ids), True) != plans.specialisation(raw, True)


def test_tools_read_and_clear_plans_switch_pdl_and_see_the_pool_through_functions(plan):
    import buffers
    from moe_triton import target

    plan, _data = plan
    assert plans.latest_plan() is plan
    plans.clear_plans()
    assert plans.latest_plan() is None
    before = target.pdl_enabled()
    with pytest.raises(RuntimeError), target.pdl_set(not before):
        assert target.pdl_enabled() is (not before)
        raise RuntimeError  # put back all the same
    assert target.pdl_enabled() is before
    pooled = buffers.pooled()
    assert pooled and all(isinstance(b, torch.Tensor) for b in pooled)


def test_a_shapes_first_call_freezes_what_is_alive_and_its_replays_do_not(monkeypatch):
    monkeypatch.setattr(plans, "_plans", type(plans._plans)())
    data = generate_input(**{**PLAN_CASE, "seed": 7})
    gc.unfreeze()
    run(data)
    assert gc.get_freeze_count() > 0  # the first call's objects, out of later full collections
    gc.unfreeze()
    run(data)
    assert gc.get_freeze_count() == 0
