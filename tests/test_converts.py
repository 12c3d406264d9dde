"""gfx950's fp4 convert (mxfp4/convert.py): the convert against SPEC 3.3 on every bf16 bit
pattern, the whole quantizer against mxfp4.codec.quantize_activation, and the instruction in the
native kernels compiled for gfx950 (in a fresh process: the others run under the interpreter).

The kernels run where Triton runs (triton_device): the emulation under the interpreter and on an
NVIDIA GPU, the instruction itself on a gfx950 device (gfx950_converts), where only finite inputs
are compared (a NaN's code is not known for the hardware). The element rule below is SPEC 3.3's,
written from its text: q = x * 2^-s exactly (float64), rounded to the E2M1 grid with ties away
from zero, saturating at 6, the sign bit kept.
"""

import contextlib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from moe_triton.target import gfx950_converts, interpreting
from mxfp4.codec import quantize_activation
from mxfp4.convert import fp4_pair, mx_convert_bf16_pairs, mx_convert_pairs

ROOT = Path(__file__).resolve().parents[1]
MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
SCALES = np.arange(-127, 128)  # every s of SPEC 3.3's clamp


def every_bf16() -> np.ndarray:
    """All 65536 bf16 bit patterns (uint16 as int32), NaNs and infinities included."""
    return np.arange(1 << 16, dtype=np.int32)


def bf16_values(patterns: np.ndarray) -> np.ndarray:
    """The patterns' values as float64. Among them are signalling NaNs, whose cast quiets them and
    raises the invalid flag: numpy's warning about it is expected here, not a fault, so it is off."""
    with np.errstate(invalid="ignore"):
        return (patterns.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def spec_codes(patterns: np.ndarray, s: int) -> np.ndarray:
    """SPEC 3.3's E2M1 codes (sign in bit 3) of bf16 patterns at scale exponent s."""
    q = np.abs(bf16_values(patterns) * 2.0 ** (-s))
    code = sum((q >= mid).astype(np.int8) for mid in MIDPOINTS)
    code = np.where(np.isnan(q), 7, code).astype(np.int8)
    return code | (((patterns >> 15) & 1) << 3).astype(np.int8)


def finite(patterns: np.ndarray) -> np.ndarray:
    return (patterns & 0x7F80) != 0x7F80


@triton.jit
def _convert_kernel(
    even_ptr, odd_ptr, scale_ptr, out_ptr, n, NUDGE: tl.constexpr, BLOCK: tl.constexpr, GFX950: tl.constexpr
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    even = tl.load(even_ptr + offs, mask=mask)
    odd = tl.load(odd_ptr + offs, mask=mask)
    scale = tl.load(scale_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, fp4_pair(even | NUDGE, odd | NUDGE, scale, GFX950), mask=mask)


def convert_codes(patterns: np.ndarray, scale_bytes: np.ndarray, nudge: bool, device) -> np.ndarray:
    """The convert's code of each bf16 pattern widened to fp32 at its scale byte (flat arrays of
    one even length): elements 2i and 2i+1 are converted as a pair and share a scale."""
    assert len(patterns) % 2 == 0 and np.array_equal(scale_bytes[0::2], scale_bytes[1::2])
    bits = (patterns.astype(np.uint32) << 16).view(np.int32)
    even, odd = (torch.from_numpy(bits[i::2].copy()).to(device) for i in (0, 1))
    scale = torch.from_numpy(scale_bytes[0::2].astype(np.int32)).to(device)
    out = torch.empty(even.shape, dtype=torch.uint8, device=device)
    # The interpreter runs a program as numpy arrays: few large ones. A GPU compiles a program's
    # whole tile: 1024 pairs.
    block = min(1 << 20 if interpreting() else 1024, triton.next_power_of_2(len(out)))
    grid = (triton.cdiv(len(out), block),)
    _convert_kernel[grid](even, odd, scale, out, len(out), NUDGE=int(nudge), BLOCK=block, GFX950=gfx950_converts())
    out = out.cpu().numpy().astype(np.int8)
    return np.stack([out & 0xF, (out >> 4) & 0xF], axis=1).reshape(-1)


def spec_codes_at(patterns: np.ndarray, s: np.ndarray) -> np.ndarray:
    """spec_codes element by element at scale exponents s (flat arrays of one length)."""
    out = np.empty(len(patterns), dtype=np.int8)
    for value in np.unique(s):
        at = s == value
        out[at] = spec_codes(patterns[at], int(value))
    return out


def test_the_nudged_convert_is_spec_3_3_on_every_bf16_pattern_at_every_scale(triton_device):
    patterns = np.tile(every_bf16(), len(SCALES))
    s = np.repeat(SCALES, 1 << 16)
    spec, nudged = spec_codes_at(patterns, s), convert_codes(patterns, s + 127, True, triton_device)
    bad = np.flatnonzero((nudged != spec) & (finite(patterns) | (not gfx950_converts())))
    assert len(bad) == 0, [(hex(patterns[i]), s[i], spec[i], nudged[i]) for i in bad[:10]]


def test_without_the_nudge_only_the_exact_ties_below_an_even_code_differ(triton_device):
    # RNE against ties away: 0.25, 1.25, 2.5 and 5 (times 2^s, either sign) round down, where
    # SPEC rounds up. 4 ties x 2 signs x 255 scales, less the 3 x 2 above bf16's largest value.
    # At every scale the patterns within 2^4 of it (all ties lie there), at three every pattern.
    patterns = every_bf16()
    exponent = np.maximum((patterns >> 7) & 0xFF, 1)
    near = [patterns[np.abs(exponent - (s + 127)) <= 4] for s in SCALES]
    x = np.concatenate(near)
    s = np.repeat(SCALES, [len(n) for n in near])
    spec, plain = spec_codes_at(x, s), convert_codes(x, s + 127, False, triton_device)
    differ = np.flatnonzero(plain != spec)
    assert len(differ) == 2034
    q = np.abs(bf16_values(x[differ]) * np.exp2(-s[differ].astype(np.float64)))
    assert set(q.tolist()) == {0.25, 1.25, 2.5, 5.0}
    assert np.array_equal(plain[differ] & 7, (spec[differ] & 7) - 1)
    for scale in (-127, 0, 100):
        far = (np.abs(exponent - (scale + 127)) > 4) & finite(patterns)
        plain = convert_codes(patterns, np.full(1 << 16, scale + 127), False, triton_device)
        assert np.array_equal(plain[far], spec_codes(patterns, scale)[far])


def test_the_convert_saturates_infinities_and_nans_keep_their_sign(triton_device):
    # HIP's emulation: NaN and Inf give 6 with their sign (SPEC 3.3's code 7 for both).
    if gfx950_converts():
        pytest.skip("the hardware's code for NaN is not known (docs/gfx950.md)")
    patterns = np.array([0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x7F81, 0x0000, 0x8000, 0x8001], dtype=np.int32)
    for nudge in (True, False):
        for s in (0, -127, 127):
            codes = convert_codes(patterns, np.full(len(patterns), s + 127), nudge, triton_device)
            assert codes.tolist() == [7, 15, 7, 15, 7, 0, 8, 8], (nudge, s, codes)


@triton.jit
def _quantize_kernel(pairs_ptr, fp4_ptr, scale_ptr, BLOCKS: tl.constexpr, JOINED: tl.constexpr, GFX950: tl.constexpr):
    blocks = tl.program_id(0) * BLOCKS + tl.arange(0, BLOCKS)
    offs = blocks[:, None] * 16 + tl.arange(0, 16)[None, :]
    pairs = tl.reshape(tl.load(pairs_ptr + offs), (BLOCKS, 1, 16))
    if JOINED:  # the K loop's and the a1 launches' form
        fp4, scale = mx_convert_bf16_pairs(pairs, GFX950)
    else:  # stage 1's epilogue's: fp32 bit patterns, the pairs' maximum first
        fp4, scale = mx_convert_pairs(pairs << 16, pairs & -0x10000, GFX950)
    tl.store(fp4_ptr + offs, tl.reshape(fp4, (BLOCKS, 16)))
    tl.store(scale_ptr + blocks, tl.reshape(scale, (BLOCKS,)))


@triton.jit
def _maximum_kernel(x_ptr, out_ptr):
    x = tl.load(x_ptr + tl.arange(0, 2))
    tl.store(out_ptr + tl.arange(0, 2), tl.maximum(x, tl.flip(x, 0)))


def maximum_leaves_nans_out(device) -> bool:
    """Whether this Triton's tl.maximum ignores a NaN operand here (not under 3.6's interpreter)."""
    out = torch.empty(2, device=device)
    _maximum_kernel[(1,)](torch.tensor([1.0, float("nan")], device=device), out)
    return bool((out == 1.0).all())


@contextlib.contextmanager
def nan_inputs_quietly():
    """The inputs hold NaNs and infinities on purpose. Under the interpreter a kernel's arithmetic
    is numpy's, which warns of them (`invalid value encountered in multiply` on the special
    operands, `All-NaN slice` for a block of NaNs) where a GPU computes silently: numpy's
    invalid-value warnings and that All-NaN one are off for the launch, every other warning stays."""
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "All-NaN slice encountered", RuntimeWarning)
        yield


def assert_quantizes_like_the_codec(x: torch.Tensor, joined: bool, device) -> torch.Tensor:
    """mx_convert_pairs on bf16 rows of 32 against quantize_activation, bit for bit (on gfx950
    the rows of finite values only); returns the scale bytes."""
    if not joined and not maximum_leaves_nans_out(device):
        pytest.skip("this Triton's interpreter propagates NaN through tl.maximum")
    blocks = x.shape[0]
    fp4 = torch.empty((blocks, 16), dtype=torch.uint8, device=device)
    scales = torch.empty((blocks,), dtype=torch.uint8, device=device)
    pairs = x.contiguous().view(torch.int32).to(device)
    per = 1024 if interpreting() else 32  # 32-blocks per program (few large programs for the interpreter)
    with nan_inputs_quietly():
        _quantize_kernel[(blocks // per,)](pairs, fp4, scales, BLOCKS=per, JOINED=joined, GFX950=gfx950_converts())
    fp4, scales = fp4.cpu(), scales.cpu()
    want_fp4, want_scales = quantize_activation(x)
    rows = torch.isfinite(x.float()).all(dim=1) if gfx950_converts() else torch.ones(blocks, dtype=torch.bool)
    assert torch.equal(fp4[rows], want_fp4[rows]) and torch.equal(scales[rows], want_scales.reshape(-1)[rows])
    return scales


def anchor(s: int) -> int:
    """The largest bf16 pattern whose block amax gives SPEC 3.3 scale s (s != 126: no amax does)."""
    return 0x7F7F if s == 127 else ((s + 129) << 7) | 0x5F


def blocks_of(patterns: np.ndarray, first: int | None) -> torch.Tensor:
    """The patterns in bf16 blocks of 32, each led by `first` (None: 32 patterns a block), padded
    with zeros to a multiple of 1024 blocks."""
    per = 32 if first is None else 31
    rows = -(-len(patterns) // per)
    rows = -(-rows // 1024) * 1024
    body = np.zeros(rows * per, dtype=np.int32)
    body[: len(patterns)] = patterns
    body = body.reshape(rows, per)
    if first is not None:
        body = np.concatenate([np.full((rows, 1), first, dtype=np.int32), body], axis=1)
    return torch.from_numpy(body.astype(np.uint16).view(np.int16)).view(torch.bfloat16)


FORMS = pytest.mark.parametrize("joined", [True, False], ids=["joined", "pairwise"])


@FORMS
@pytest.mark.parametrize("s", [-127, -126, -100, -3, -1, 0, 1, 2, 5, 60, 124, 125, 127])
def test_the_quantizer_is_quantize_activation_on_every_bf16_pattern_at_a_scale(triton_device, s, joined):
    x = blocks_of(every_bf16(), anchor(s))
    scales = assert_quantizes_like_the_codec(x, joined, triton_device)
    # The blocks of patterns no larger than the anchor take its scale.
    small = (x.view(torch.int16).int() & 0x7FFF).amax(dim=1) <= anchor(s)
    assert small.sum() >= 20 and (scales[small] == s + 127).all()


@FORMS
def test_the_quantizer_on_mixed_blocks_nans_infinities_and_zeros(triton_device, joined):
    patterns = np.random.default_rng(3).permutation(every_bf16())
    specials = np.array([0x7FC0] * 32 + [0x7F80] + [0x3F80] * 31 + [0x8000] * 32 + [0xFF81] + [0x0001] * 31)
    x = blocks_of(np.concatenate([specials, patterns]).astype(np.int32), None)
    scales = assert_quantizes_like_the_codec(x, joined, triton_device)
    # A block of NaNs gets 254, a NaN leaves the others' scale, zeros get 0.
    assert scales[:4].tolist() == [254, 254, 0, 0]


def test_the_launcher_picks_the_instruction_on_gfx950_only():
    on_gfx950 = torch.cuda.is_available() and torch.version.hip is not None and not interpreting()
    on_gfx950 = on_gfx950 and torch.cuda.get_device_properties(0).gcnArchName.startswith("gfx950")
    assert gfx950_converts() is on_gfx950


CONVERTS_DRIVER = """
import json
from bench.gfx950.asm import instructions, k_loop
from bench.gfx950.run import launch_case
from bench.gfx950.variants import variants
from bench.runner.case_args import SMOKE

extra = {"x-quant0": {"fused_quant": True, "route_launches": 0}, "x-route1": {"route_launches": 1}}
params = dict(SMOKE[0])
out = {}
for name, tiles in variants(params, extra=extra):
    if name not in ("table", *extra):
        continue
    launches, _ = launch_case(params, "native", tiles)
    for launch in launches:
        text = launch.kernel.asm["amdgcn"]
        body = instructions(text)
        cvt = [i for i, line in enumerate(body) if line.startswith("v_cvt_scalef32_pk_fp4_f32")]
        loop = k_loop(text)
        out[name + "/" + launch.function] = {
            "converts": len(cvt),
            "waited": all(body[i + 1] == "s_nop 0" for i in cvt),
            "in_loop": 0 if loop is None else sum(line.startswith("v_cvt_scalef32") for line in loop.body),
        }
print(json.dumps(out))
"""


@pytest.mark.cpu_only
def test_the_native_kernels_compiled_for_gfx950_hold_the_convert():
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_DEFAULT_FP_FUSION")}
    done = subprocess.run(
        [sys.executable, "-c", CONVERTS_DRIVER], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(kernel["waited"] for kernel in out.values()), out
    # a1 in the quantization launch, a2 in stage 1's epilogue, the hidden states in its K loop
    assert out["table/moe_native_prep_kernel"]["converts"] > 0
    assert out["x-route1/moe_native_route_kernel"]["converts"] > 0
    plain, fused = out["table/moe_native_stage1_kernel"], out["x-quant0/moe_native_stage1_kernel"]
    assert plain["converts"] > 0 and plain["in_loop"] == 0 and fused["in_loop"] > 0
    assert out["table/moe_native_stage2_kernel"]["converts"] == 0
