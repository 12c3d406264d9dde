"""aiter_backend against the aiter test double (tests/aiter_double.py): end to end against
reference.ref_kernel on the SMOKE cases, the branch per official shape, buffer reuse, and the
exact arguments handed to moe_sorting, the quantizer and each stage."""

import os
import subprocess
import sys

import aiter_double
import aiter_names as names
import pytest
import torch
import torch.nn.functional as F

import buffers
from bench.runner.case_args import SMOKE
from moe_aiter import backend as ab
from moe_aiter import catalogue
from moe_aiter import inject as so
from moe_triton.target import interpreting
from mxfp4.codec import dequantize
from problem.cases import BENCHMARKS
from reference import compare, generate_input, ref_kernel

FP4, E8M0 = aiter_double.FP4, aiter_double.E8M0
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INTERPRETING = interpreting()
if not INTERPRETING and not torch.cuda.is_available():
    pytest.skip("the project quantizer needs CUDA or TRITON_INTERPRET=1", allow_module_level=True)
DEVICE = torch.device("cpu" if INTERPRETING else "cuda")  # the double is plain torch: any device


@pytest.fixture
def dbl(monkeypatch, tmp_path):
    aiter_double.reset_backend()
    monkeypatch.delenv(ab.AITER_QUANT_ENV, raising=False)
    double = aiter_double.install(monkeypatch, tmp_path)
    yield double
    aiter_double.reset_backend()


@pytest.fixture(scope="module")
def smoke_data():
    """SMOKE inputs and references on DEVICE."""
    out = []
    for case in SMOKE:
        data = generate_input(**case)
        data = tuple(t.to(DEVICE) if isinstance(t, torch.Tensor) else t for t in data)
        for i in (5, 6):  # a move to another device drops the attribute
            data[i].is_shuffled = True
        out.append((data, ref_kernel(data)))
    return out


def smoke_key(data, token=None, cu_num=256):
    hidden, *_rest, topk_ids, config = data
    m, topk = topk_ids.shape
    return so.aiter_key(
        token or (1 << (m - 1).bit_length()),
        config["d_expert"],
        config["n_routed_experts"] + config["n_shared_experts"],
        cu_num=cu_num,
        model_dim=config["d_hidden"],
        topk=topk,
    )


def add_override(monkeypatch, data, block_m, ksplit=0, name1=None, name2=None, fallback=None):
    key = smoke_key(data)
    if ksplit > 1:
        row = dict(block_m=16, ksplit=ksplit, kernelName1="", kernelName2="", run_1stage=False)
    else:
        name1 = catalogue.ck_moe_kernel_name(
            1, next(i for i in catalogue.CK_A4W4_GEMM1_INSTANCES if i[1] == block_m and i[0] == 256)
        )
        name2 = name2 or catalogue.flydsl_moe_kernel_name(2, block_m, 128, 256)
        row = dict(block_m=block_m, ksplit=ksplit, kernelName1=name1, kernelName2=name2, run_1stage=False)
        fallback = catalogue.ck_moe_kernel_name(
            2, next(i for i in catalogue.CK_A4W4_GEMM2_INSTANCES if i[1] == block_m)
        )
        monkeypatch.setitem(so.FLYDSL_FALLBACK_KERNEL2, key, fallback)
    monkeypatch.setitem(so.OVERRIDES, key, row)
    return key, row


def snapshot(data):
    return [t.clone() if isinstance(t, torch.Tensor) else dict(t) for t in data]


def assert_unchanged(data, before):
    for t, b in zip(data, before, strict=True):
        if isinstance(t, torch.Tensor):
            assert t.dtype == b.dtype and torch.equal(t.view(torch.uint8), b.view(torch.uint8))
        else:
            assert t == b


# ---------------------------------------------------------------------------------------------
def test_modules_import_without_aiter():
    code = (
        "import sys; import shape_overrides, quant, moe_aiter.backend, moe_aiter.inject; "
        "assert not any(m == 'aiter' or m.startswith('aiter.') for m in sys.modules), 'aiter imported'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env={**os.environ, "PYTHONPATH": ROOT})


@pytest.mark.parametrize("case", range(len(SMOKE)))
def test_matches_reference_default_config(dbl, smoke_data, case):
    """No override row for these shapes: aiter's heuristics (CK stages, block_m 32/64/128)."""
    data, ref = smoke_data[case]
    before = snapshot(data)
    out = ab.fused_moe_aiter(data)
    ok, msg = compare(out, ref)
    assert ok, msg
    assert_unchanged(data, before)
    assert "ck_moe_stage1_fwd" in dbl.names() and "ck_moe_stage2_fwd" in dbl.names()


@pytest.mark.parametrize("case", range(len(SMOKE)))
@pytest.mark.parametrize("block_m", [32, 64])
def test_matches_reference_with_override_rows(dbl, smoke_data, monkeypatch, case, block_m):
    """Rows of the table's kinds on SMOKE keys: CK stage 1 + FlyDSL stage 2 with tile_m = block_m."""
    data, ref = smoke_data[case]
    add_override(monkeypatch, data, block_m)
    out = ab.fused_moe_aiter(data)
    ok, msg = compare(out, ref)
    assert ok, msg
    assert dbl.last("flydsl_moe_stage2")["tile_m"] == block_m
    assert dbl.last("ck_moe_stage1_fwd")["block_m"] == block_m


def test_flydsl_unavailable_falls_back_to_ck(dbl, smoke_data, monkeypatch):
    data, ref = smoke_data[0]
    key, _row = add_override(monkeypatch, data, 32)
    dbl.flydsl_available = False
    ok, msg = compare(ab.fused_moe_aiter(data), ref)
    assert ok, msg
    assert "flydsl_moe_stage2" not in dbl.names()
    assert dbl.last("ck_moe_stage2_fwd")["kernelName"] == so.FLYDSL_FALLBACK_KERNEL2[key]


def ref_bf16_activations(data) -> torch.Tensor:
    """The layer with MXFP4 weights but bf16 activations (what the cktile stages compute)."""
    hidden, w1, w2, s1, s2, *_rest, topk_weights, topk_ids, _config = data
    n_exp, two_i, _ = w1.shape
    i, h = two_i // 2, hidden.shape[1]
    s1, s2 = s1.reshape(n_exp, two_i, h // 32), s2.reshape(n_exp, h, i // 32)
    out = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
    for e in torch.unique(topk_ids).tolist():
        t, j = torch.nonzero(topk_ids == e, as_tuple=True)
        gu = hidden[t].float() @ dequantize(w1[e], s1[e]).T
        act = (F.silu(gu[:, :i]) * gu[:, i:]).to(torch.bfloat16).float()
        out.index_add_(0, t, (act @ dequantize(w2[e], s2[e]).T) * topk_weights[t, j, None])
    return out.to(torch.bfloat16)


@pytest.mark.parametrize("case", range(len(SMOKE)))
def test_ksplit_rows_run_bf16_activations(dbl, smoke_data, monkeypatch, case):
    """ksplit > 1 (allowed only on request): cktile stages on bf16 activations, no activation
    quantization -- right for that math, and outside the tolerance of the judged a4w4 reference."""
    data, ref = smoke_data[case]
    monkeypatch.setattr(so, "OVERRIDE_ALLOW_BF16_ACTIVATIONS", True)
    add_override(monkeypatch, data, 16, ksplit=2)
    out = ab.fused_moe_aiter(data)
    ok, msg = compare(out, ref_bf16_activations(data))
    assert ok, msg
    assert not compare(out, ref)[0]  # why shape_overrides rejects such rows by default
    g1 = dbl.last("moe_cktile2stages_gemm1")
    assert g1["XQ"] is data[0] and g1["x_scale"] is None and g1["block_m"] == 16 and g1["split_k"] == 2
    g2 = dbl.last("moe_cktile2stages_gemm2")
    assert g2["XQ"].dtype == torch.bfloat16 and g2["x_scale"] is None
    assert not any(n.endswith("quant_moe_sort") for n in dbl.names())


def test_aiter_quantizer_option(dbl, smoke_data, monkeypatch):
    data, ref = smoke_data[2]
    monkeypatch.setenv(ab.AITER_QUANT_ENV, "aiter")
    ok, msg = compare(ab.fused_moe_aiter(data), ref)
    assert ok, msg
    calls = [a for n, a in dbl.calls if n == "aiter.fused_dynamic_mxfp4_quant_moe_sort"]
    assert [c["topk"] for c in calls] == [1, data[10].shape[1]]
    monkeypatch.setenv(ab.AITER_QUANT_ENV, "bogus")
    aiter_double.reset_backend()
    with pytest.raises(ValueError, match=ab.AITER_QUANT_ENV):
        ab.fused_moe_aiter(data)


def test_project_and_aiter_quantizers_agree(dbl, smoke_data):
    """quant.py and the double's aiter quantizer (SPEC 3.3 in torch) give the same bytes."""
    data, _ref = smoke_data[2]
    hidden, topk_ids, topk_weights = data[0], data[10], data[9]
    ids, _w, _e, num_valid = aiter_double.sorted_buffers(topk_ids, topk_weights, 17, 32)
    from quant import fused_dynamic_mxfp4_quant_moe_sort as project

    aiter_quant = dbl.modules["aiter.ops.triton.quant.fused_mxfp4_quant"].fused_dynamic_mxfp4_quant_moe_sort
    p_fp4, p_sc = project(hidden, ids, num_valid, hidden.shape[0], 1, 32)
    a_fp4, a_sc = aiter_quant(hidden, ids, num_valid, hidden.shape[0], 1, 32)
    valid = int(num_valid[0])
    assert torch.equal(p_fp4.view(torch.uint8), a_fp4.view(torch.uint8))
    assert torch.equal(p_sc.view(torch.uint8)[:valid], a_sc.view(torch.uint8)[:valid])


def test_template_backend_matches_reference(dbl, smoke_data):
    data, ref = smoke_data[1]
    ok, msg = compare(ab.fused_moe_aiter_template(data), ref)
    assert ok, msg
    call = dbl.last("fused_moe")
    assert call["w1"] is data[5] and call["w2"] is data[6] and call["w1_scale"] is data[7]
    assert (
        call["quant_type"] == aiter_double.QuantType.per_1x32 and call["activation"] == aiter_double.ActivationType.Silu
    )
    assert call["hidden_pad"] == 0 and call["intermediate_pad"] == 0 and call["expert_mask"] is None
    assert so.aiter_key(1, 256, 257) in dbl.fused_moe.cfg_2stages  # loaded by aiter, nothing injected
    assert all(k not in dbl.fused_moe.cfg_2stages for k in so.OVERRIDES if k != so.aiter_key(128, 256, 257))


def test_lost_is_shuffled_is_restored_on_a_view(dbl, smoke_data):
    data, ref = smoke_data[0]
    cloned = list(data)
    cloned[5], cloned[6] = data[5].clone(), data[6].clone()  # .clone() drops is_shuffled
    assert not hasattr(cloned[5], "is_shuffled")
    ok, msg = compare(ab.fused_moe_aiter(tuple(cloned)), ref)
    assert ok, msg
    assert not hasattr(cloned[5], "is_shuffled") and not hasattr(cloned[6], "is_shuffled")
    assert getattr(dbl.last("ck_moe_stage1_fwd")["w1"], "is_shuffled", False)
    # the double reproduces aiter issue 2194: without the attribute the template is wrong
    ok, _ = compare(ab.fused_moe_aiter_template(tuple(cloned)), ref)
    assert not ok


def test_mismatched_row_is_wrong_in_the_double(dbl, smoke_data):
    """What validation prevents: a 128-row CK stage 1 on a 32-row sort computes garbage."""
    data, ref = smoke_data[2]
    fm = dbl.fused_moe
    ab.ensure_overrides()
    key = smoke_key(data)
    fm.cfg_2stages[key] = dict(block_m=32, ksplit=0, kernelName1=names.CK_S1_128, kernelName2="", run_1stage=False)
    fm.get_2stage_cfgs.cache_clear()
    ok, _ = compare(ab.fused_moe_aiter(data), ref)
    assert not ok


# ---------------------------------------------------------------------------------------------
def test_exact_arguments(dbl, smoke_data, monkeypatch):
    data, _ref = smoke_data[2]
    hidden, _w1r, _w2r, _s1r, _s2r, w1, w2, s1, s2, topk_weights, topk_ids, config = data
    m, topk = topk_ids.shape
    n_exp, h, i = w1.shape[0], config["d_hidden"], config["d_expert"]
    add_override(monkeypatch, data, 32)
    out = ab.fused_moe_aiter(data)

    cfg = dbl.last("get_2stage_cfgs")
    assert cfg == dict(
        token=64,
        model_dim=h,
        inter_dim=i,
        expert=n_exp,
        topk=topk,
        dtype=torch.bfloat16,
        q_dtype_a=FP4,
        q_dtype_w=FP4,
        q_type=aiter_double.QuantType.per_1x32,
        use_g1u1=True,
        activation=aiter_double.ActivationType.Silu,
        doweight_stage1=False,
        hidden_pad=0,
        intermediate_pad=0,
        is_shuffled=True,
    )
    max_padded = m * topk + n_exp * 32 - topk
    srt = dbl.last("moe_sorting_fwd")
    assert srt["topk_ids"] is topk_ids and srt["topk_weights"] is topk_weights
    assert (srt["num_experts"], srt["unit_size"]) == (n_exp, 32)
    assert srt["local_expert_mask"] is None and srt["num_local_tokens"] is None and srt["dispatch_policy"] == 0
    assert srt["sorted_token_ids"].shape == (max_padded,) and srt["sorted_token_ids"].dtype == torch.int32
    assert srt["sorted_weights"].shape == (max_padded,) and srt["sorted_weights"].dtype == torch.float32
    assert srt["sorted_expert_ids"].shape == (-(-max_padded // 32),)
    assert srt["num_valid_ids"].shape == (2,) and srt["moe_buf"] is out

    s1c = dbl.last("ck_moe_stage1_fwd")
    assert s1c["kernelName"] == names.CK_S1_32 and s1c["block_m"] == 32 and s1c["topk"] == topk
    assert s1c["hidden_states"].dtype == FP4 and s1c["hidden_states"].shape == (m, h // 2)
    assert s1c["a1_scale"].dtype == E8M0 and s1c["a1_scale"].shape[1] == -(-(h // 32) // 8) * 8
    assert s1c["w1_scale"].dtype == E8M0 and s1c["w1_scale"].data_ptr() == s1.data_ptr()
    assert s1c["w1"] is w1 and s1c["w2"] is w2
    assert s1c["sorted_weights"] is None and s1c["splitk"] == 0
    assert s1c["quant_type"] == aiter_double.QuantType.per_1x32
    assert s1c["activation"] == aiter_double.ActivationType.Silu
    assert s1c["out"].shape == (m, topk, i) and s1c["out"].dtype == torch.bfloat16
    for name in ("sorted_token_ids", "sorted_expert_ids", "num_valid_ids"):
        assert s1c[name] is srt[name]

    s2c = dbl.last("flydsl_moe_stage2")
    assert (s2c["tile_m"], s2c["tile_n"], s2c["tile_k"], s2c["mode"]) == (32, 128, 256, "atomic")
    assert (s2c["a_dtype"], s2c["b_dtype"], s2c["out_dtype"]) == ("fp4", "fp4", "bf16")
    assert s2c["inter_states"].dtype == FP4 and s2c["inter_states"].shape == (m, topk, i // 2)
    assert s2c["a2_scale"].dtype == E8M0 and s2c["a2_scale"].shape[1] == -(-(i // 32) // 8) * 8
    assert s2c["w2_scale"].data_ptr() == s2.data_ptr() and s2c["w2"] is w2
    assert s2c["sorted_weights"] is srt["sorted_weights"] and s2c["out"] is out and s2c["topk"] == topk
    assert s2c["sorted_token_ids"] is srt["sorted_token_ids"]


def test_buffers_and_plan_reused(dbl, smoke_data):
    data, ref = smoke_data[0]
    out1 = ab.fused_moe_aiter(data)
    ptrs = [a.data_ptr() for a in dbl.last("moe_sorting_fwd").values() if isinstance(a, torch.Tensor)]
    n_pool = len(buffers._pool)
    n_cfg = dbl.names().count("get_2stage_cfgs")
    out2 = ab.fused_moe_aiter(data)
    assert out2 is out1
    ok, msg = compare(out2, ref)
    assert ok, msg
    assert len(buffers._pool) == n_pool
    assert dbl.names().count("get_2stage_cfgs") == n_cfg  # metadata cached in the plan
    assert [a.data_ptr() for a in dbl.last("moe_sorting_fwd").values() if isinstance(a, torch.Tensor)] == ptrs
    # the overrides were injected once; a table swapped in by aiter gets them again
    table = dbl.fused_moe.cfg_2stages
    assert all(k in table for k in so.OVERRIDES)
    dbl.fused_moe.cfg_2stages = None
    ab.fused_moe_aiter(data)
    assert dbl.fused_moe.cfg_2stages is not table and all(k in dbl.fused_moe.cfg_2stages for k in so.OVERRIDES)


@pytest.mark.parametrize("flydsl", [True, False])
def test_branch_per_official_shape(monkeypatch, tmp_path, flydsl):
    """Plans for the seven benchmark shapes (no math): which stages, block_m, quantized or not."""
    aiter_double.reset_backend()
    aiter_double.install(monkeypatch, tmp_path, flydsl_available=flydsl)
    try:
        for c in BENCHMARKS:
            e, topk, h, i = c["nroutedexperts"] + 1, c["nexpertspertoken"] + 1, c["dhidden"], c["dexpert"]
            plan = ab.aiter_plan(c["bs"], topk, (e, 2 * i, h // 2), (e, h, i // 2), DEVICE)
            key = so.aiter_key(c["bs"], i, e)
            row = so.OVERRIDES[key]
            md = plan.metadata
            assert row["ksplit"] <= 1
            assert plan.quantized and plan.block_m == row["block_m"]
            assert md.stage1.func.__name__ == "ck_moe_stage1"
            assert md.stage1.keywords["kernelName"] == row["kernelName1"]
            want2 = row["kernelName2"] if flydsl else so.FLYDSL_FALLBACK_KERNEL2[key]
            assert md.stage2.keywords["kernelName"] == want2
            assert plan.a1_out["out"].shape == (c["bs"], h // 2)
            assert plan.a2_out["out"].shape == (c["bs"] * topk, i // 2)
            assert plan.out.shape == (c["bs"], h) and plan.stage1_out.shape == (c["bs"], topk, i)
            assert plan.sorted_ids.numel() == c["bs"] * topk + e * plan.block_m - topk
    finally:
        aiter_double.reset_backend()
