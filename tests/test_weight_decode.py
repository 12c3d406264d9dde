"""The in-register MXFP4 weight decode of the Triton GEMMs against mxfp4.codec.dequantize.

Every byte value at every position of a 32-bit word, with scales from the subnormal 2^-127 to
NaN (the fast path: its documented exact range and NaN); the decoded columns come out in k_slot
order of either span. CPU: the portable path in Triton's interpreter; GPU: the path the GEMMs use there.
"""

import pytest
import torch
import triton
import triton.language as tl

from moe_triton.kernels.decode import FAST_EXP, _fp4_to_bf16, k_slot
from moe_triton.target import fast_decode
from mxfp4.codec import dequantize


@triton.jit
def _decode_kernel(
    w_ptr, s_ptr, out_ptr, ROWS: tl.constexpr, BLOCK_K: tl.constexpr, FAST: tl.constexpr, SPAN: tl.constexpr
):
    rows = tl.arange(0, ROWS)
    words = tl.load(
        w_ptr.to(tl.pointer_type(tl.int32)) + rows[:, None] * (BLOCK_K // 8) + tl.arange(0, BLOCK_K // 8)[None, :]
    )
    scales = tl.load(s_ptr + rows[:, None] * (BLOCK_K // 32) + tl.arange(0, BLOCK_K // 32)[None, :])
    values = _fp4_to_bf16(words, scales, ROWS, BLOCK_K, FAST, SPAN).to(tl.float32)
    tl.store(out_ptr + rows[:, None] * BLOCK_K + tl.arange(0, BLOCK_K)[None, :], values)


@triton.jit
def _slot_kernel(out_ptr, N: tl.constexpr, SPAN: tl.constexpr):
    cols = tl.arange(0, N)
    tl.store(out_ptr + cols, k_slot(cols, SPAN))


def slots(n: int, triton_device, span: int = 32) -> torch.Tensor:
    out = torch.empty(n, dtype=torch.int32, device=triton_device)
    _slot_kernel[(1,)](out, n, span)
    return out.long()


@pytest.mark.parametrize("span", [32, 128])
def test_k_slot_permutes_within_each_span(triton_device, span):
    got = slots(256, triton_device, span).cpu()
    assert sorted(got.tolist()) == list(range(256))
    assert torch.equal(got // span, torch.arange(256) // span)
    # the thread of a row's four that holds a slot in wgmma's register operand (slot % 8 // 2): with span 32 one
    # word of every 32-block, with span 128 every word of one 32-block of the 128 columns
    thread = got % 8 // 2
    cols = torch.arange(256)
    assert torch.equal(thread, cols % 32 // 8 if span == 32 else cols % 128 // 32)


# Scale byte 254 decodes to 6 x 2^127 in fp32, which the interpreter's numpy computes with a warning.
@pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning:triton.runtime.interpreter")
@pytest.mark.parametrize("span", [32, 128])
@pytest.mark.parametrize("scale", [0, 1, 57, 58, 100, 119, 127, 135, 191, 192, 200, 254, 255])
def test_decode_matches_dequantize(triton_device, scale, span):
    fast = fast_decode(triton_device)
    if fast and not (58 <= scale <= 191 or scale == 255):
        pytest.skip("outside the fast path's exact range of scale bytes (_fp4_to_bf16)")
    rows, block_k = 16, 128
    # Byte f of the 1024 holds (f + f // 256) % 256: all 256 values, each at every byte of a word.
    flat = torch.arange(rows * block_k // 2)
    packed = ((flat + flat // 256) % 256).to(torch.uint8).reshape(rows, block_k // 2)
    scales = torch.full((rows, block_k // 32), scale, dtype=torch.uint8)
    scales[::3, 1] = 127
    scales[1::3, 3] = 120  # each block's own scale: a thread of span 128 must not take a neighbour's
    # The fast path decodes to value * 2^-FAST_EXP (the activations carry 2^FAST_EXP).
    expected = dequantize(packed, scales) * 2.0 ** (-FAST_EXP.value if fast else 0)
    packed, scales = packed.to(triton_device), scales.to(triton_device)
    out = torch.full((rows, block_k), 12345.0, device=triton_device)
    _decode_kernel[(1,)](packed, scales, out, rows, block_k, fast, span)
    got = out[:, slots(block_k, triton_device, span)].cpu()  # actual column c was decoded into k_slot(c)
    assert torch.equal(got.isnan(), expected.isnan())
    finite = ~expected.isnan()
    assert torch.equal(got[finite], expected[finite]), (got - expected).abs()[finite].max()
