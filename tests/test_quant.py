"""quant.py (fused MXFP4 quant + moe-sort scale layout) bit-exact against mxfp4.codec.quantize_activation
+ the e8m0_shuffle tiling, on the CPU (Triton interpreter) and on CUDA where present."""

import struct

import pytest
import torch
from aiter_double import GARBAGE_ID, sorted_buffers
from hypothesis import given
from hypothesis import strategies as st

from buffers import get_buffer
from mxfp4.codec import quantize_activation, shuffle_scales
from quant import fused_dynamic_mxfp4_quant_moe_sort

FP4, E8M0 = torch.float4_e2m1fn_x2, torch.float8_e8m0fnu


def bf16_bits(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits << 16))[0]


def routing(tokens: int, experts: int, topk: int, block_m: int, device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(experts, generator=g)[:topk] for _ in range(tokens)]).to(torch.int32)
    weights = torch.rand(tokens, topk, generator=g)
    sorted_ids, _w, _e, num_valid = sorted_buffers(ids.to(device), weights.to(device), experts, block_m)
    return sorted_ids, num_valid


def expected(x: torch.Tensor, sorted_ids: torch.Tensor, num_valid: torch.Tensor, token_num: int, topk: int):
    """(fp4 [rows, cols/2], uint8 shuffled scales [n_sorted rounded to 32, ceil8(cols/32)]) from mxfp4."""
    packed, scales = quantize_activation(x.cpu())
    n_sorted, n_valid = sorted_ids.numel(), int(num_valid[0])
    groups = x.shape[1] // 32
    mat = torch.zeros((-(-n_sorted // 32) * 32, -(-groups // 8) * 8), dtype=torch.uint8)
    ids = sorted_ids[:n_valid].cpu().long()
    token, slot = ids & 0xFFFFFF, ids >> 24
    ok = token < token_num
    src = token if topk == 1 else token * topk + slot
    mat[torch.nonzero(ok).squeeze(1), :groups] = scales[src[ok]]
    tiled = shuffle_scales(mat).view(torch.uint8)  # pads rows to 256: compare the prefix
    return packed, tiled.reshape(-1)[: mat.numel()].reshape(mat.shape)


def check(x, sorted_ids, num_valid, token_num, topk, block_m=32, **kw):
    fp4, scales = fused_dynamic_mxfp4_quant_moe_sort(x, sorted_ids, num_valid, token_num, topk, block_m, **kw)
    want_fp4, want_scales = expected(x, sorted_ids, num_valid, token_num, topk)
    assert fp4.dtype == FP4 and scales.dtype == E8M0
    assert fp4.shape == (x.shape[0], x.shape[1] // 2)
    assert scales.shape == want_scales.shape
    got_fp4 = fp4.view(torch.uint8).cpu()
    assert torch.equal(got_fp4, want_fp4), f"fp4 differs in {int((got_fp4 != want_fp4).sum())} bytes"
    valid = -(-int(num_valid[0]) // 32) * 32  # rows of whole 32-row tiles below num_valid
    got_s = scales.view(torch.uint8).cpu()[:valid]
    assert torch.equal(got_s, want_scales[:valid]), f"scales differ in {int((got_s != want_scales[:valid]).sum())}"
    return fp4, scales


@pytest.mark.parametrize(
    "tokens, cols, experts, topk, block_m",
    [(5, 512, 6, 3, 32), (33, 768, 17, 7, 64), (4, 7168, 9, 9, 32), (16, 256, 33, 9, 32), (3, 96, 4, 2, 32)],
)
def test_stage1_input_token_rows_sorted_scales(triton_device, tokens, cols, experts, topk, block_m):
    """topk=1 call (hidden states): fp4 in token order, scales gathered per sorted id."""
    g = torch.Generator().manual_seed(tokens * cols)
    x = (torch.randn(tokens, cols, generator=g) * 2).to(torch.bfloat16).to(triton_device)
    sorted_ids, num_valid = routing(tokens, experts, topk, block_m, triton_device)
    check(x, sorted_ids, num_valid, tokens, 1, block_m)


@pytest.mark.parametrize("tokens, cols, experts, topk", [(5, 256, 6, 3), (12, 512, 9, 5), (2, 2048, 33, 9)])
def test_stage2_input_slot_rows(triton_device, tokens, cols, experts, topk):
    """topk>1 call (stage-1 output [M*topk, I]): row token*topk + slot."""
    g = torch.Generator().manual_seed(cols + topk)
    x = torch.randn(tokens * topk, cols, generator=g).to(torch.bfloat16).to(triton_device)
    sorted_ids, num_valid = routing(tokens, experts, topk, 32, triton_device, seed=1)
    check(x, sorted_ids, num_valid, tokens, topk)


def special_rows() -> torch.Tensor:
    """bf16 rows whose blocks hit every corner of SPEC 3.3 (and the documented Inf/NaN policy)."""
    rows = []
    sub = [bf16_bits(b) for b in (0x0001, 0x007F, 0x8001, 0x0040, 0x8040, 0x0080)]  # subnormals, min normal
    rows.append(sub + [0.0] * 26)  # block of subnormals only: scale byte 0, q = x * 2^127
    rows.append([0.0] * 32)  # all zero -> byte 0
    rows.append([-0.0, 1e-30, -1e-30, 3.0] + [0.0] * 28)  # -0 and tiny negatives keep the sign bit
    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -2.5, -5.0, 6.0, 0.2, 0.3]
    rows.append(ties + [1.0] * (32 - len(ties)))  # amax 6 -> s = 0: ties round away from zero
    rows.append([1.75 * 2.0**k for k in range(-4, 28)])  # significand 1.75 rounds the amax up
    rows.append([bf16_bits(0x7F7F), -bf16_bits(0x7F7F), 1.0] + [2.0**120] * 29)  # bf16 max
    rows.append([float("inf"), 1.0, -1.0] + [0.5] * 29)
    rows.append([float("-inf"), float("nan")] + [0.5] * 30)
    rows.append([float("nan"), -1.0, 3.0] + [0.5] * 29)  # a NaN leaves the others' scale (aiter's tl.max)
    rows.append([float("nan")] * 16 + [-float("nan")] * 16)  # NaNs only: byte 254
    rows.append([float("nan")] + [0.0] * 31)  # a NaN among zeros: byte 0
    rows.append([1.7 * 2.0**-126, 1.99 * 2.0**-126, 2.0**-125] + [2.0**-127] * 29)  # tiny normals
    rows.append([1.5] * 31 + [1.75])  # 1.75 -> amax 2 -> s = -1
    return torch.tensor(rows, dtype=torch.float32).to(torch.bfloat16)


def test_special_values_bit_exact(triton_device):
    x = special_rows().to(triton_device)
    tokens = x.shape[0]
    topk_ids = torch.zeros(tokens, 1, dtype=torch.int32)
    ones = torch.ones(tokens, 1, device=triton_device)
    sorted_ids, _w, _e, num_valid = sorted_buffers(topk_ids.to(triton_device), ones, 2, 32)
    check(x, sorted_ids, num_valid, tokens, 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_other_input_dtypes(triton_device, dtype):
    g = torch.Generator().manual_seed(7)
    x = (torch.randn(6, 256, generator=g) * 3).to(dtype)
    x[0, :32] = torch.tensor([2.0**-140, -(2.0**-149), 2.0**-130] + [0.0] * 29).to(dtype)
    x = x.to(triton_device)
    sorted_ids, num_valid = routing(6, 5, 2, 32, triton_device)
    check(x, sorted_ids, num_valid, 6, 1)


def test_padding_rows_zero_and_tiles_past_num_valid_untouched(triton_device):
    tokens, cols = 5, 256
    x = torch.randn(tokens, cols).to(torch.bfloat16).to(triton_device)
    sorted_ids, num_valid = routing(tokens, 6, 3, 32, triton_device)
    n_valid = int(num_valid[0])
    out_scales = torch.full((-(-sorted_ids.numel() // 32), 1, 4, 16, 4), 0xAB, dtype=torch.uint8, device=triton_device)
    _fp4, scales = fused_dynamic_mxfp4_quant_moe_sort(x, sorted_ids, num_valid, tokens, 1, 32, out_scales=out_scales)
    s = scales.view(torch.uint8).cpu()
    assert (s[n_valid:] == 0xAB).all()  # tiles at or past num_valid_ids are not written
    assert sorted_ids[n_valid] == GARBAGE_ID  # ... whatever the ids there say
    # padding entries (token == M) of the valid tiles hold byte 0
    _, want = expected(x, sorted_ids, num_valid, tokens, 1)
    assert torch.equal(s[:n_valid], want[:n_valid])
    pad_rows = torch.nonzero((sorted_ids[:n_valid].cpu() & 0xFFFFFF) == tokens).squeeze(1)
    assert pad_rows.numel() > 0
    unshuffled = s[:n_valid].reshape(-1, 1, 4, 16, 2, 2).permute(0, 5, 3, 1, 4, 2).reshape(n_valid, 8)
    assert (unshuffled[pad_rows] == 0).all()


def test_rows_outside_the_sort_are_quantized_too(triton_device):
    """As aiter's kernel: every row of x gets its fp4 bytes, referenced by the sort or not."""
    tokens, cols = 6, 128
    x = torch.randn(tokens, cols).to(torch.bfloat16).to(triton_device)
    topk_ids = torch.tensor([[0], [1], [0], [1], [0], [1]], dtype=torch.int32)
    ones = torch.ones(tokens, 1, device=triton_device)
    sorted_ids, _w, _e, num_valid = sorted_buffers(topk_ids.to(triton_device), ones, 2, 32)
    sorted_ids[sorted_ids == 3] = (1 << 24) | tokens  # drop token 3 from the sort: now padding
    out = torch.full((tokens, cols // 2), 0x5A, dtype=torch.uint8, device=triton_device)
    check(x, sorted_ids, num_valid, tokens, 1, out=out)


def test_topk1_token_in_every_slot(triton_device):
    """With topk=1 a token appears once per slot; the scales of every appearance are written."""
    tokens, cols, experts, topk = 4, 64, 5, 4
    x = torch.randn(tokens, cols).to(torch.bfloat16).to(triton_device)
    sorted_ids, num_valid = routing(tokens, experts, topk, 32, triton_device, seed=3)
    check(x, sorted_ids, num_valid, tokens, 1)


def test_buffers_reused_between_calls(triton_device):
    x = torch.randn(5, 256).to(torch.bfloat16).to(triton_device)
    sorted_ids, num_valid = routing(5, 6, 3, 32, triton_device)
    fp4_a, sc_a = fused_dynamic_mxfp4_quant_moe_sort(x, sorted_ids, num_valid, 5, 1, 32)
    fp4_b, sc_b = fused_dynamic_mxfp4_quant_moe_sort(x * 2, sorted_ids, num_valid, 5, 1, 32)
    assert fp4_a.data_ptr() == fp4_b.data_ptr() and sc_a.data_ptr() == sc_b.data_ptr()
    n_blocks = -(-sorted_ids.numel() // 32)
    cached = get_buffer("quant_scales_k1", (n_blocks, 1, 4, 16, 4), torch.uint8, x.device)
    assert cached.data_ptr() == sc_b.data_ptr()


def test_input_checks(triton_device):
    x = torch.randn(4, 64).to(torch.bfloat16).to(triton_device)
    sorted_ids, num_valid = routing(4, 3, 2, 32, triton_device)
    with pytest.raises(ValueError, match="multiple of 32"):
        fused_dynamic_mxfp4_quant_moe_sort(x, sorted_ids, num_valid, 4, 1, 16)
    with pytest.raises(ValueError, match="cols"):
        fused_dynamic_mxfp4_quant_moe_sort(x[:, :48], sorted_ids, num_valid, 4, 1, 32)
    with pytest.raises(ValueError, match="rows"):
        fused_dynamic_mxfp4_quant_moe_sort(x, sorted_ids, num_valid, 4, 2, 32)
    with pytest.raises(ValueError, match="expected bfloat16"):
        fused_dynamic_mxfp4_quant_moe_sort(x.to(torch.int32), sorted_ids, num_valid, 4, 1, 32)
    with pytest.raises(ValueError, match="sorted_ids"):
        fused_dynamic_mxfp4_quant_moe_sort(x, sorted_ids.long(), num_valid, 4, 1, 32)


@given(
    tokens=st.integers(1, 12),
    groups=st.integers(1, 12),
    experts=st.integers(1, 9),
    data=st.data(),
)
def test_property_random_routing(tokens, groups, experts, data):
    """Any routing, any width, any scale of values: bit-exact (CPU interpreter, or CUDA)."""
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    topk = data.draw(st.integers(1, experts))
    stage2 = data.draw(st.booleans())
    block_m = data.draw(st.sampled_from([32, 64]))
    exponent = data.draw(st.integers(-130, 100))
    seed = data.draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    rows = tokens * topk if stage2 else tokens
    x = (torch.randn(rows, groups * 32, generator=g, dtype=torch.float64) * 2.0**exponent).to(torch.bfloat16)
    sorted_ids, num_valid = routing(tokens, experts, topk, block_m, dev, seed=seed)
    check(x.to(dev), sorted_ids, num_valid, tokens, topk if stage2 else 1, block_m)
