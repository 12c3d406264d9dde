"""reference.py: generate_input structure (SPEC 2), ref_kernel against the dense oracle (SPEC 1),
and check_implementation (SPEC 4). Runs on CUDA when present (generate_input picks the device)."""

import functools
import math

import oracle
import pytest
import torch

import reference
from bench.runner.case_args import SMOKE
from problem.cases import case_name

FP4, E8M0 = torch.float4_e2m1fn_x2, torch.float8_e8m0fnu
# Two shared experts, so "shared ids last" is more than one column.
CUSTOM = dict(dhidden=256, dexpert=256, nroutedexperts=6, nexpertspertoken=3, nsharedexperts=2, bs=4, seed=7)
CASES = SMOKE + [CUSTOM]
CASE_IDS = [case_name(c) for c in CASES]


@functools.cache
def _cached(items: tuple) -> tuple:
    return reference.generate_input(**dict(items))


def make(case: dict) -> tuple:
    """generate_input, cached per case (tests must not write into it)."""
    return _cached(tuple(sorted(case.items())))


def u8(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dtype in (FP4, E8M0) else t


def snapshot(data: tuple) -> list:
    return [u8(t).clone() if isinstance(t, torch.Tensor) else dict(t) for t in data]


def assert_same(data: tuple, snap: list) -> None:
    for i, (t, s) in enumerate(zip(data, snap, strict=True)):
        if isinstance(t, torch.Tensor):
            assert torch.equal(u8(t), s), f"input item {i} was modified"
        else:
            assert t == s, "config was modified"


# =============================================================================================
# generate_input
# =============================================================================================
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_generate_input_structure(case):
    data = make(case)
    assert len(data) == 12
    hidden, w1, w2, w1s, w2s, w1_sh, w2_sh, w1s_sh, w2s_sh, topk_weights, topk_ids, config = data
    m, h, i = case["bs"], case["dhidden"], case["dexpert"]
    n_routed, n_shared, per_token = case["nroutedexperts"], case["nsharedexperts"], case["nexpertspertoken"]
    n_experts, topk = n_routed + n_shared, per_token + n_shared
    hp, ip = -(-h // 256) * 256, -(-i // 256) * 256
    device = reference.default_device()

    assert config == {
        "d_hidden": h,
        "d_expert": i,
        "d_hidden_pad": hp,
        "d_expert_pad": ip,
        "n_routed_experts": n_routed,
        "n_shared_experts": n_shared,
        "n_experts_per_token": per_token,
        "total_top_k": topk,
        "bs": m,
    }
    expected = [
        ("hidden_states", hidden, torch.bfloat16, (m, h)),
        ("gate_up_weight", w1, FP4, (n_experts, 2 * ip, hp // 2)),
        ("down_weight", w2, FP4, (n_experts, hp, ip // 2)),
        ("gate_up_weight_scale", w1s, E8M0, (n_experts * 2 * ip, hp // 32)),
        ("down_weight_scale", w2s, E8M0, (n_experts * hp, ip // 32)),
        ("gate_up_weight_shuffled", w1_sh, FP4, (n_experts, 2 * ip, hp // 2)),
        ("down_weight_shuffled", w2_sh, FP4, (n_experts, hp, ip // 2)),
        ("gate_up_weight_scale_shuffled", w1s_sh, E8M0, (n_experts * 2 * ip, hp // 32)),
        ("down_weight_scale_shuffled", w2s_sh, E8M0, (n_experts * hp, ip // 32)),
        ("topk_weights", topk_weights, torch.float32, (m, topk)),
        ("topk_ids", topk_ids, torch.int32, (m, topk)),
    ]
    for name, t, dtype, shape in expected:
        assert t.dtype == dtype, name
        assert tuple(t.shape) == shape, name
        assert t.device.type == device.type, name
    for name, t in (("gate_up_weight_shuffled", w1_sh), ("down_weight_shuffled", w2_sh)):
        assert getattr(t, "is_shuffled", False) is True, name
    assert not getattr(w1, "is_shuffled", False) and not getattr(w2, "is_shuffled", False)

    # routing: shared experts last with weight exactly 1.0; routed ids in range and unique per row
    ids, weights = topk_ids.cpu(), topk_weights.cpu()
    shared = torch.arange(n_routed, n_experts, dtype=torch.int32).expand(m, -1)
    assert torch.equal(ids[:, per_token:], shared)
    assert (weights[:, per_token:] == 1.0).all()
    assert ((ids[:, :per_token] >= 0) & (ids[:, :per_token] < n_routed)).all()
    for row in ids.tolist():
        assert len(set(row)) == topk
    routed = weights[:, :per_token]
    assert ((routed > 0) & (routed < 1)).all() and (routed.sum(1) <= 1 + 1e-2).all()

    # the shuffled tensors are the raw ones after SPEC 3.4 / 3.5 (formulas from the oracle)
    assert torch.equal(u8(w1_sh).cpu(), oracle.spec_shuffle_weight(u8(w1)))
    assert torch.equal(u8(w2_sh).cpu(), oracle.spec_shuffle_weight(u8(w2)))
    for raw, sh in ((w1s, w1s_sh), (w2s, w2s_sh)):
        dest = oracle.spec_scale_destinations(*raw.shape)
        assert torch.equal(u8(sh).cpu().flatten()[dest.flatten()], u8(raw).cpu().flatten())

    # magnitudes: hidden ~ N(0, 1); the weights quantize N(0, 1/d_hidden) and N(0, 1/d_expert)
    assert 0.8 < hidden.float().std().item() < 1.2
    w1_deq = oracle.decode_mx(u8(w1).cpu(), u8(w1s).cpu().reshape(n_experts, 2 * ip, -1))
    w2_deq = oracle.decode_mx(u8(w2).cpu(), u8(w2s).cpu().reshape(n_experts, hp, -1))
    assert abs(w1_deq.std().item() * math.sqrt(h) - 1) < 0.15
    assert abs(w2_deq.std().item() * math.sqrt(i) - 1) < 0.15


def test_generate_input_is_deterministic_per_seed():
    case = SMOKE[0]
    first, again = reference.generate_input(**case), reference.generate_input(**case)
    for a, b in zip(first[:11], again[:11], strict=True):
        assert torch.equal(u8(a), u8(b))
    assert first[11] == again[11]
    other = reference.generate_input(**{**case, "seed": case["seed"] + 13})
    for idx in (0, 1, 2, 3, 4, 9, 10):
        assert not torch.equal(u8(first[idx]), u8(other[idx])), idx


def test_generate_input_pads_and_ref_kernel_refuses_padding():
    """Unaligned sizes pad to multiples of 256 (SPEC 2); the reference supports unpadded shapes only
    and names the offending field."""
    data = reference.generate_input(
        dhidden=384, dexpert=256, nroutedexperts=2, nexpertspertoken=1, nsharedexperts=1, bs=2, seed=0
    )
    assert data[11]["d_hidden_pad"] == 512 and data[11]["d_expert_pad"] == 256
    assert data[1].shape == (3, 512, 256) and data[3].shape == (3 * 512, 16)
    assert data[2].shape == (3, 512, 128) and data[4].shape == (3 * 512, 8)
    with pytest.raises(ValueError, match="d_hidden_pad"):
        reference.ref_kernel(data)
    data = reference.generate_input(
        dhidden=256, dexpert=128, nroutedexperts=2, nexpertspertoken=1, nsharedexperts=1, bs=2, seed=0
    )
    assert data[11]["d_expert_pad"] == 256 and data[1].shape == (3, 512, 128)
    with pytest.raises(ValueError, match="d_expert_pad"):
        reference.ref_kernel(data)
    with pytest.raises(ValueError, match="d_expert_pad"):
        reference.check_implementation(data, torch.ones((2, 256), dtype=torch.bfloat16))


# =============================================================================================
# ref_kernel against the dense oracle
# =============================================================================================
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_ref_kernel_matches_dense_oracle(case):
    data = make(case)
    snap = snapshot(data)
    out = reference.ref_kernel(data)
    assert_same(data, snap)  # the reference never writes into its inputs
    assert out.dtype == torch.bfloat16 and out.shape == (case["bs"], case["dhidden"])
    assert out.device == data[0].device

    want = oracle.dense_moe(data).float()
    got = out.cpu().float()
    assert torch.isfinite(got).all() and want.norm() > 0
    rel = ((got - want).norm() / want.norm()).item()
    assert rel < 1e-2, f"relative error {rel:.3g}"
    bad = (got - want).abs() > 5e-2 + 5e-2 * want.abs()
    assert not bad.any(), f"{int(bad.sum())} elements outside rtol = atol = 5e-2"


def test_ref_kernel_is_deterministic():
    data = make(SMOKE[0])
    assert torch.equal(reference.ref_kernel(data), reference.ref_kernel(data))


# =============================================================================================
# check_implementation
# =============================================================================================
@pytest.fixture(scope="module")
def smoke():
    data = make(SMOKE[0])
    return data, reference.ref_kernel(data)


def test_check_implementation_accepts_the_reference(smoke):
    data, out = smoke
    snap = snapshot(data)
    ok, msg = reference.check_implementation(data, out.clone())
    assert ok, msg
    assert_same(data, snap)
    ok, msg = reference.check_implementation(data, out.float())  # dtype is not checked
    assert ok, msg
    ok, msg = reference.check_implementation(data, out + 0.04)  # inside atol
    assert ok, msg


def test_check_implementation_catches_a_perturbed_output(smoke):
    data, out = smoke
    bad = out.clone()
    spots = [(0, 3), (2, 100), (7, 511)]
    for t, c in spots:
        bad[t, c] += 1.0 + 0.5 * abs(bad[t, c].item())
    ok, msg = reference.check_implementation(data, bad)
    assert not ok
    assert msg.startswith(f"3 of {out.numel()} elements mismatch"), msg
    for spot in spots:
        assert f"at {spot}" in msg, msg


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_check_implementation_catches_nan_and_inf(smoke, value):
    data, out = smoke
    bad = out.clone()
    bad[4, 17] = value
    ok, msg = reference.check_implementation(data, bad)
    assert not ok
    assert msg.startswith(f"1 of {out.numel()} elements mismatch"), msg
    assert "at (4, 17)" in msg, msg


def test_check_implementation_catches_a_wrong_shape(smoke):
    data, out = smoke
    for wrong in (out[:-1], out.T.contiguous(), out.reshape(1, *out.shape)):
        ok, msg = reference.check_implementation(data, wrong)
        assert not ok and "shape" in msg, msg
