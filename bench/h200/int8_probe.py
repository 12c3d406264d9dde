"""`python -m bench.h200.int8_probe [--out DIR]`: exact a4w4 on Hopper's int8 wgmma, probed on a GEMM of
I-2048 stage 1's shape (M = 4096 weight rows, N = 4608 activation rows, K = 7168), before any MoE
kernel is written that way.

Twice an e2m1 value is an integer in [-12, 12]; shifted left by d in 0..3 (a block's scale byte
minus its chunk's base) it fits int8. The kernel computes C = W A^T, W the MXFP4 codes decoded in
registers into such int8 values (wgmma's A operand: Hopper's int8 wgmma takes an 8-bit A from
registers, IGMMA.64xNx32.S8.S8) and A int8 activations in shared memory by TMA. A chunk of CHUNK
blocks sums exactly in int32 (at most 256 x 96 x 96 < 2^22 for CHUNK 8) and enters the fp32
accumulator with one rounding: the int32 sum plus 0x4B400000 read as fp32 is 1.5 x 2^23 plus the
sum, and two fused multiply-adds make it (sum x 2^bw) x 2^ba + acc. The window (every block of a
chunk within 4 binades of its base) is assumed held: the probe measures the fast path. CHUNK 1
(promotion after every 32-wide wgmma) stands for the fallback's cost only: the K order below mixes
a 128-wide step's four blocks in each 32-wide wgmma, so its sums are not per block and it is timed,
not checked.

The decode of a word of 8 codes (inline PTX, 11 instructions): two byte permutes (prmt) look the
4 codes of each half up in an 8-byte magnitude table shifted by d (two registers per weight row and
128-wide K step); with the selector as is, prmt gives the magnitudes of the positive codes and 0
for the negative ones (a selector nibble with bit 3 set copies the sign of the selected byte, and
every magnitude is below 128), with the sign bits flipped the reverse; the bytewise difference is
(pos + 0x80808080 - neg) ^ 0x80808080, no borrow crossing a byte.

K order: within each 128-wide K step, thread t of a row's four holds block t's codes, so its four
words share one table pair; the weight words and the activations are laid out for it on the host
(kernel_words, kernel_order), as a real kernel's weight and activation prepasses would.

On an NVIDIA GPU it checks the int8 GEMM bit for bit against a torch model on a small product (the
output poisoned with NaN first), then times at the full shape: the bf16 Gluon probe's GEMM
(bench/h200/gluon_probe.ws_gemm, the decoded weights precomputed in bf16), the same kernel with the
weights decoded into bf16 in registers (moe_triton.kernels.gluon_mma.decoded_weights), the int8
kernel per chunk size, torch._int_mm and torch's bf16 matmul, and writes int8_probe.json and
int8_probe.md. Without a GPU it compiles every variant for sm_90 and prints what the SASS holds:
MMA kinds, instructions of the K loop per 32-wide K step and per weight word. Works with triton 3.6
and 3.9.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.h200.gluon_probe import tma_load  # noqa: E402 (the repository root first)
from moe_triton.kernels.gluon_mma import decoded_weights  # noqa: E402

SHAPE = (4096, 4608, 7168)  # I-2048 stage 1: 2 x d_inter weight rows, 512 x 9 activation rows, d_hidden
BLOCK_M, BLOCK_N, BLOCK_K = 128, 128, 128  # two MMA warpgroups of 64 weight rows; 4 blocks a K step
WG_ROWS = 64
STAGES = 4
MAX_CHUNK = 8  # blocks: 8 x 32 x 96 x 96 < 2^22, the range the fp32 bias conversion is exact in
MAGIC = 0x4B400000  # fp32 bits of 1.5 x 2^23: + i stays exact for |i| < 2^22
LO_TABLE, HI_TABLE = 0x03020100, 0x0C080604  # 2 x |e2m1| of magnitude codes 0-3 and 4-7, one a byte

DECODE_ASM = gl.constexpr(
    """{
.reg .b32 n, h, nh, x, y;
xor.b32 n, $2, 0x88888888;
shr.u32 h, $2, 16;
shr.u32 nh, n, 16;
prmt.b32 x, $6, $10, $2;
prmt.b32 y, $6, $10, n;
add.s32 x, x, 0x80808080;
sub.s32 x, x, y;
xor.b32 $0, x, 0x80808080;
prmt.b32 x, $6, $10, h;
prmt.b32 y, $6, $10, nh;
add.s32 x, x, 0x80808080;
sub.s32 x, x, y;
xor.b32 $1, x, 0x80808080;
}"""
)

# The kernels timed: the int8 one per chunk (blocks per fp32 promotion; 1: the fallback's cost,
# unchecked), and the bf16 one with its weights decoded in registers.
CHECKED_CHUNKS = (8, 4)  # whole 128-wide K steps a chunk: the K order keeps each chunk's blocks apart
VARIANTS = {
    "int8-chunk8": dict(decode="int8", chunk=8),
    "int8-chunk4": dict(decode="int8", chunk=4),
    "int8-chunk1": dict(decode="int8", chunk=1),
    "bf16-decode": dict(decode="bf16", chunk=1),
}


# ----------------------------------------------------------------------------- the decode's bit logic


def prmt(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """PTX prmt.b32 (default mode) on uint32 arrays: byte i of the result is byte (c >> 4i) & 7 of
    the 8 bytes {b, a} (a the low four), or, where bit 3 of that selector nibble is set, that
    byte's sign bit copied into all eight bits."""
    table = np.stack([(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)], -1)
    out = np.zeros_like(a, dtype=np.uint32)
    for i in range(4):
        sel = (c >> (4 * i)) & 0xF
        byte = np.take_along_axis(table, (sel & 7)[..., None].astype(np.int64), -1)[..., 0]
        byte = np.where(sel & 8, np.where(byte & 0x80, 0xFF, 0), byte)
        out |= byte.astype(np.uint32) << np.uint32(8 * i)
    return out


def decode_model(words: np.ndarray, d: np.ndarray) -> np.ndarray:
    """DECODE_ASM in numpy: uint32 words of 8 codes (low nibble first) and shifts d (0..3) ->
    int8 [..., 8], code i of the word as (2 x e2m1) << d."""
    words, d = words.astype(np.uint32), d.astype(np.uint32)
    lo_t, hi_t = np.uint32(LO_TABLE) << d, np.uint32(HI_TABLE) << d
    halves = []
    for sel in (words, words >> np.uint32(16)):
        x = prmt(lo_t, hi_t, sel)
        y = prmt(lo_t, hi_t, sel ^ np.uint32(0x8888))
        halves.append(((x + np.uint32(0x80808080) - y) ^ np.uint32(0x80808080)).astype(np.uint32))
    packed = np.stack(halves, -1).astype("<u4")
    return packed.view(np.int8).reshape(*words.shape, 8)


# ----------------------------------------------------------------------------- host layouts and model


def shifted_values(codes: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """int32 (2 x e2m1(code)) << d per element: codes [rows, K] (0..15), d [rows, K / 32]."""
    from mxfp4.codec import E2M1_VALUES

    doubled = torch.tensor([int(2 * v) for v in E2M1_VALUES], dtype=torch.int32, device=codes.device)
    return doubled[codes.long()] << d.repeat_interleave(32, dim=1).int()


def kernel_order(x: torch.Tensor) -> torch.Tensor:
    """[rows, K] in the kernel's K order: position 128 S + 32 j + 16 h + 4 t + b of a step S holds
    element 128 S + 32 t + 8 j + 4 h + b (thread t's 8 codes of word j, low half h = 0)."""
    rows, k = x.shape
    s = x.reshape(rows, k // 128, 4, 4, 2, 4)  # S, t, j, h, b
    return s.permute(0, 1, 3, 4, 2, 5).reshape(rows, k)  # S, j, h, t, b


def kernel_words(codes: torch.Tensor) -> torch.Tensor:
    """codes [rows, K] (0..15) -> int32 words [rows, K / 8] as the kernel reads them: word 4 j + t
    of a step holds codes 32 t + 8 j .. + 7 (low nibble first)."""
    rows, k = codes.shape
    nibbles = codes.to(torch.int64).reshape(rows, k // 8, 8) << (4 * torch.arange(8, device=codes.device))
    words = nibbles.sum(-1).reshape(rows, k // 128, 4, 4)  # S, t, j
    words = words.transpose(2, 3).reshape(rows, k // 8)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def packed_shifts(d: torch.Tensor) -> torch.Tensor:
    """d [rows, K / 32] (0..3) -> int32 [K / 128, rows]: byte t of a step's word is block t's d."""
    rows, blocks = d.shape
    weights = 256 ** torch.arange(4, device=d.device, dtype=torch.int64)
    word = (d.to(torch.int64).reshape(rows, blocks // 4, 4) * weights).sum(-1)
    return word.T.contiguous().to(torch.int32)


def probe_inputs(m: int, n: int, k: int, chunk: int, device, seed: int = 0) -> dict:
    """Random codes and shifts for both operands (the activations as the kernel's int8 values), and
    per chunk a power-of-two scale per row of each (2^-8 .. 2^8)."""
    g = torch.Generator().manual_seed(seed)
    w_codes = torch.randint(0, 16, (m, k), generator=g, dtype=torch.uint8)
    w_d = torch.randint(0, 4, (m, k // 32), generator=g, dtype=torch.uint8)
    a_codes = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
    a_d = torch.randint(0, 4, (n, k // 32), generator=g, dtype=torch.uint8)
    chunks = -(-k // (32 * chunk))
    w_exp = torch.randint(-8, 9, (chunks, m), generator=g).float()
    a_exp = torch.randint(-8, 9, (chunks, n), generator=g).float()
    a = shifted_values(a_codes, a_d).to(torch.int8)
    return {
        "w_codes": w_codes.to(device),
        "w_d": w_d.to(device),
        "a": a.to(device),
        "w_scale": torch.exp2(w_exp).to(device),
        "a_scale": torch.exp2(a_exp).to(device),
    }


def model(inputs: dict, chunk: int) -> torch.Tensor:
    """The int8 path's result in torch: per chunk the exact integer sums (fp64), times both rows'
    scales (exact), added into fp32 one chunk after another."""
    w = shifted_values(inputs["w_codes"], inputs["w_d"]).double()
    a = inputs["a"].double()
    m, k = w.shape
    acc = torch.zeros(m, a.shape[0], dtype=torch.float32, device=w.device)
    for c, k0 in enumerate(range(0, k, 32 * chunk)):
        part = (w[:, k0 : k0 + 32 * chunk] @ a[:, k0 : k0 + 32 * chunk].T).float()
        acc = acc + part * inputs["w_scale"][c][:, None] * inputs["a_scale"][c][None, :]
    return acc


# ----------------------------------------------------------------------------- the kernels


@gluon.jit
def four(x):
    """x four times along two new trailing axes: the inputs of DECODE_ASM with pack 4."""
    return gl.join(gl.join(x, x), gl.join(x, x))


@gluon.jit
def shifted_int8_weights(w_slot, d_word, acc_layout: gl.constexpr):
    """A K step of a warpgroup's 64 weight rows as wgmma's int8 register operand ([64, 128], the
    kernel's K order): w_slot its words ([64, 16] int32, shared), d_word each row's four shifts
    (one byte per block, SliceLayout(1) of the words' layout)."""
    w_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=1)
    words = w_slot.load(w_layout)
    t = gl.arange(0, 16, layout=gl.SliceLayout(0, w_layout)) % 4
    d = (gl.expand_dims(d_word, 1) >> (8 * gl.expand_dims(t, 0))) & 3
    lo, hi = gl.inline_asm_elementwise(
        DECODE_ASM,
        "=r,=r,r,r,r,r,r,r,r,r,r,r,r,r",
        [four(words), four(0x03020100 << d), four(0x0C080604 << d)],
        dtype=(gl.int8, gl.int8),
        is_pure=True,
        pack=4,
    )
    v = gl.reshape(gl.join(lo, hi), [64, 4, 4, 4, 2])  # row, j, t, b, h
    v = gl.reshape(gl.permute(v, [0, 1, 4, 2, 3]), [64, 128])  # row, j, h, t, b
    return gl.convert_layout(v, gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=4), assert_trivial=True)


@gluon.jit
def _parts(a, PARTS: gl.constexpr):
    """The int8 operand [64, 128] split along K into PARTS (1, 2 or 4) tensors [64, 128 / PARTS]."""
    if PARTS == 1:
        return (a,)
    elif PARTS == 2:
        x = gl.permute(gl.reshape(a, [64, 2, 64]), [0, 2, 1])
        p0, p1 = gl.split(x)
        return p0, p1
    else:
        x = gl.permute(gl.reshape(a, [64, 2, 2, 32]), [0, 3, 1, 2])
        x0, x1 = gl.split(x)
        p0, p1 = gl.split(x0)
        p2, p3 = gl.split(x1)
        return p0, p1, p2, p3


@gluon.jit
def _chunk_scales(w_scale_ptr, a_scale_ptr, c, m_dim, n_dim, G: gl.constexpr, acc_layout: gl.constexpr):
    """Chunk c's power-of-two scales of the warpgroup's weight rows ([64, 1]) and of the tile's
    activation rows ([1, 128])."""
    rows = gl.program_id(0) * 128 + G * 64 + gl.arange(0, 64, layout=gl.SliceLayout(1, acc_layout))
    cols = gl.program_id(1) * 128 + gl.arange(0, 128, layout=gl.SliceLayout(0, acc_layout))
    sw = gl.expand_dims(gl.load(w_scale_ptr + c * m_dim + rows), 1)
    return sw, gl.expand_dims(gl.load(a_scale_ptr + c * n_dim + cols), 0)


@gluon.jit
def promote(acc, acc_i, sw, sa):
    """acc += (int32 sum x sw) x sa with one rounding: the sum read as fp32 through the bias, then
    two fused multiply-adds, the first exact."""
    biased = (acc_i + 0x4B400000).to(gl.float32, bitcast=True)
    exact = gl.fma(biased, sw, sw * -12582912.0)  # (1.5 x 2^23 + i) sw - 1.5 x 2^23 sw
    return gl.fma(exact, sa, acc)


@gluon.jit
def _loader(w_desc, d_desc, a_desc, w_ring, d_ring, a_ring, ready, empty, k_steps, STAGES: gl.constexpr):
    m0 = gl.program_id(0) * w_desc.block_type.shape[0]
    n0 = gl.program_id(1) * a_desc.block_type.shape[0]
    nbytes: gl.constexpr = w_desc.block_type.nbytes + d_desc.block_type.nbytes + a_desc.block_type.nbytes
    for i in range(k_steps):
        slot = i % STAGES
        # a fresh barrier has completed the phase before its first: the first round does not wait
        mbarrier.wait(empty.index(slot), ((i // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(slot), nbytes)
        tma_load(w_desc, [m0, i * 16], ready.index(slot), w_ring.index(slot))
        tma_load(d_desc, [i, m0], ready.index(slot), d_ring.index(slot))
        tma_load(a_desc, [n0, i * 128], ready.index(slot), a_ring.index(slot))


@gluon.jit
def _step_scales(
    w_scale_ptr, a_scale_ptr, i, m_dim, n_dim, G: gl.constexpr, acc_layout: gl.constexpr, PARTS: gl.constexpr
):
    """The scales of K step i's PARTS chunks (2 or 4): (sw, sa) of each, flattened."""
    c = i * PARTS
    sw0, sa0 = _chunk_scales(w_scale_ptr, a_scale_ptr, c, m_dim, n_dim, G, acc_layout)
    sw1, sa1 = _chunk_scales(w_scale_ptr, a_scale_ptr, c + 1, m_dim, n_dim, G, acc_layout)
    if PARTS == 2:
        return sw0, sa0, sw1, sa1
    else:
        sw2, sa2 = _chunk_scales(w_scale_ptr, a_scale_ptr, c + 2, m_dim, n_dim, G, acc_layout)
        sw3, sa3 = _chunk_scales(w_scale_ptr, a_scale_ptr, c + 3, m_dim, n_dim, G, acc_layout)
        return sw0, sa0, sw1, sa1, sw2, sa2, sw3, sa3


@gluon.jit
def _int8_loop(
    w_scale_ptr,
    a_scale_ptr,
    rings,
    k_steps,
    m_dim,
    n_dim,
    acc_layout: gl.constexpr,
    G: gl.constexpr,
    CHUNK: gl.constexpr,
):
    """The K loop of MMA warpgroup G: per K step decode, wgmma into int32 (restarted at each
    chunk) and promote each finished chunk into fp32."""
    w_ring, d_ring, a_ring, ready, empty = rings
    STAGES: gl.constexpr = w_ring.type.shape[0]
    w_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=1)
    w_operand: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=4)
    acc = gl.zeros([64, 128], gl.float32, acc_layout)
    acc_i = gl.zeros([64, 128], gl.int32, acc_layout)
    PART: gl.constexpr = CHUNK if CHUNK < 4 else 4  # blocks per wgmma
    STEPS: gl.constexpr = CHUNK // 4 if CHUNK > 4 else 1  # K steps per chunk
    n_chunks = k_steps // STEPS
    sw, sa = _chunk_scales(w_scale_ptr, a_scale_ptr, 0, m_dim, n_dim, G, acc_layout)
    for i in range(k_steps):
        slot = i % STAGES
        if CHUNK < 4:  # the step's chunks' scales, loaded before the wait
            scales = _step_scales(w_scale_ptr, a_scale_ptr, i, m_dim, n_dim, G, acc_layout, 4 // PART)
        mbarrier.wait(ready.index(slot), (i // STAGES) & 1)
        d_word = d_ring.index(slot).reshape([128]).slice(G * 64, 64).load(gl.SliceLayout(1, w_layout))
        w = shifted_int8_weights(w_ring.index(slot).slice(G * 64, 64), d_word, acc_layout)
        a_slot = a_ring.index(slot)
        parts = _parts(w, 4 // PART)
        for p in gl.static_range(4 // PART):
            a_part = a_slot.slice(p * 32 * PART, 32 * PART, dim=1).permute([1, 0])
            w_part = gl.convert_layout(parts[p], w_operand, assert_trivial=True)
            acc_i = warpgroup_mma(w_part, a_part, acc_i, use_acc=(i % STEPS) > 0, is_async=True)
            acc_i = warpgroup_mma_wait(0, deps=[acc_i])
            if CHUNK < 4:
                acc = promote(acc, acc_i, scales[2 * p], scales[2 * p + 1])
        mbarrier.arrive(empty.index(slot), count=1)
        if CHUNK >= 4:
            if i % STEPS == STEPS - 1:
                acc = promote(acc, acc_i, sw, sa)
                # the next chunk's scales, loaded a chunk ahead (the last chunk reloads its own)
                nxt = gl.minimum(i // STEPS + 1, n_chunks - 1)
                sw, sa = _chunk_scales(w_scale_ptr, a_scale_ptr, nxt, m_dim, n_dim, G, acc_layout)
    return acc


@gluon.jit
def _bf16_loop(rings, k_steps, acc_layout: gl.constexpr, G: gl.constexpr):
    """The K loop of MMA warpgroup G with the weights decoded into bf16 (gluon_mma.decoded_weights,
    the Gluon stage 1's decode; d_ring holds each row's four scale bytes), bf16 activations."""
    w_ring, d_ring, a_ring, ready, empty = rings
    STAGES: gl.constexpr = w_ring.type.shape[0]
    w_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=1)
    acc = gl.zeros([64, 128], gl.float32, acc_layout)
    for i in range(k_steps):
        slot = i % STAGES
        mbarrier.wait(ready.index(slot), (i // STAGES) & 1)
        sw = d_ring.index(slot).reshape([128]).slice(G * 64, 64).load(gl.SliceLayout(1, w_layout))
        w = decoded_weights(w_ring.index(slot).slice(G * 64, 64), sw, 0, acc_layout, 128)
        acc = warpgroup_mma(w, a_ring.index(slot).permute([1, 0]), acc, is_async=True)
        acc = warpgroup_mma_wait(0, deps=[acc])
        mbarrier.arrive(empty.index(slot), count=1)
    return acc


@gluon.jit
def _mma(shared, G: gl.constexpr, CHUNK: gl.constexpr, INT8: gl.constexpr):
    """MMA warpgroup G: weight rows [64 G, 64 G + 64) of the tile, its K loop, then C."""
    # one level of unpacking at a time: triton 3.6's JIT cannot hash nested tuple targets
    c_ptr, w_scale_ptr, a_scale_ptr, rings, k_steps, m_dim, n_dim = shared
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, 128, 32 if INT8 else 16]
    )
    if INT8:
        acc = _int8_loop(w_scale_ptr, a_scale_ptr, rings, k_steps, m_dim, n_dim, acc_layout, G, CHUNK)
    else:
        acc = _bf16_loop(rings, k_steps, acc_layout, G)
    rows = gl.program_id(0) * 128 + G * 64 + gl.arange(0, 64, layout=gl.SliceLayout(1, acc_layout))
    cols = gl.program_id(1) * 128 + gl.arange(0, 128, layout=gl.SliceLayout(0, acc_layout))
    gl.store(c_ptr + gl.expand_dims(rows, 1) * n_dim + gl.expand_dims(cols, 0), acc)


@gluon.jit
def decoded_gemm_kernel(
    w_desc,
    d_desc,
    a_desc,
    c_ptr,
    w_scale_ptr,
    a_scale_ptr,
    m_dim,
    n_dim,
    k_dim,
    CHUNK: gl.constexpr,
    INT8: gl.constexpr,
):
    """C tile [128, 128] = decoded W [128, K] x A^T: a loader warp fills a ring by TMA, two MMA
    warpgroups (the default partition and a worker) decode 64 weight rows each."""
    STAGES: gl.constexpr = 4
    w_ring = gl.allocate_shared_memory(gl.int32, [STAGES] + w_desc.block_type.shape, w_desc.layout)
    d_ring = gl.allocate_shared_memory(gl.int32, [STAGES] + d_desc.block_type.shape, d_desc.layout)
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for slot in gl.static_range(STAGES):
        mbarrier.init(ready.index(slot), count=1)
        mbarrier.init(empty.index(slot), count=2)  # one arrival per MMA warpgroup
    fence_async_shared()
    rings = (w_ring, d_ring, a_ring, ready, empty)
    k_steps = k_dim // 128
    mma_args = (c_ptr, w_scale_ptr, a_scale_ptr, rings, k_steps, m_dim, n_dim)
    loader_args = (w_desc, d_desc, a_desc, w_ring, d_ring, a_ring, ready, empty, k_steps, STAGES)
    gl.warp_specialize(
        [(_mma, (mma_args, 0, CHUNK, INT8)), (_mma, (mma_args, 1, CHUNK, INT8)), (_loader, loader_args)],
        [4, 1],
        [232, 40],  # the loader gives its registers to the MMA warpgroups
    )


# ----------------------------------------------------------------------------- launching


def _descriptor(t: torch.Tensor, block: list[int]):
    dtype = {torch.int32: gl.int32, torch.int8: gl.int8, torch.bfloat16: gl.bfloat16}[t.dtype]
    return TensorDescriptor.from_tensor(t, block, gl.NVMMASharedLayout.get_default_for(block, dtype))


def launch_operands(inputs: dict, decode: str) -> dict:
    """What decoded_gemm takes, from probe_inputs: the weight words and the packed shifts (for the
    bf16 decode, scale bytes: each row's shifts read as e8m0 around 127) and the activations in the
    kernel's K order (bf16 for the bf16 decode)."""
    a = kernel_order(inputs["a"])
    shifts = inputs["w_d"] if decode == "int8" else (inputs["w_d"] + 125)
    return {
        "words": kernel_words(inputs["w_codes"]),
        "shifts": packed_shifts(shifts),
        "a": a if decode == "int8" else a.to(torch.bfloat16),
        "w_scale": inputs["w_scale"],
        "a_scale": inputs["a_scale"],
    }


def decoded_gemm(operands: dict, c: torch.Tensor, decode: str = "int8", chunk: int = 8) -> torch.Tensor:
    """c [M, N] fp32 = decoded weights x activations^T (module docstring); M, N multiples of 128,
    K of 128 (and of 32 chunk)."""
    if decode not in ("int8", "bf16"):
        raise ValueError(f"decode: 'int8' or 'bf16', got {decode!r}")
    if chunk not in (1, 2, 4, 8):
        raise ValueError(f"chunk: 1, 2, 4 or {MAX_CHUNK} blocks (the int32 sums stay below 2^22), got {chunk}")
    words, a = operands["words"], operands["a"]
    m, n, k = words.shape[0], a.shape[0], a.shape[1]
    if m % BLOCK_M or n % BLOCK_N or k % max(BLOCK_K, 32 * chunk):
        raise ValueError(f"shape: M {m} and N {n} must be multiples of 128, K {k} of {max(BLOCK_K, 32 * chunk)}")
    descs = (
        _descriptor(words, [BLOCK_M, BLOCK_K // 8]),
        _descriptor(operands["shifts"], [1, BLOCK_M]),
        _descriptor(a, [BLOCK_N, BLOCK_K]),
    )
    grid = (m // BLOCK_M, n // BLOCK_N)
    decoded_gemm_kernel[grid](
        *descs, c, operands["w_scale"], operands["a_scale"], m, n, k, chunk, decode == "int8", num_warps=4
    )
    return c


# ----------------------------------------------------------------------------- compiled for sm_90

LOOP_OPS = ("IGMMA", "HGMMA", "PRMT", "LOP3", "SHF", "IADD3", "IMAD", "FFMA", "HMUL2", "LDS", "SYNCS", "BAR")


def compiled_for_sm90(variant: str) -> dict:
    """Compile one of VARIANTS for sm_90 on this machine; what its SASS holds: the MMA kinds, and
    per 32-wide K step the instructions of a warp in the K loop (a loop iteration is 128 wide)."""
    from bench.h200.sass import disassemble, instructions, k_loop, opcode, resources
    from bench.h200.sm90 import compiling_for_sm90

    tiles = VARIANTS[variant]
    inputs = probe_inputs(256, 128, 1024, tiles["chunk"], "cpu")
    with compiling_for_sm90() as driver:
        operands = launch_operands(inputs, tiles["decode"])
        decoded_gemm(operands, torch.empty(256, 128), **tiles)
    kernel = driver.launches[-1].kernel
    text = disassemble(kernel.asm["cubin"])
    kinds = Counter(m[0] for m in re.findall(r"\b([IH]GMMA\.\w+(\.\w+)*)", text))
    body = k_loop(instructions(text))
    ops = Counter(opcode(t) for t in body)
    # the promotion: the bias adds, the fused multiply-adds and the scales' loads; with CHUNK > 4
    # blocks its block runs on one K step in CHUNK / 4
    promotion = sum(bool(re.search(r"0x4b400000|\bFFMA\b|\bLDG\b", t)) for t in body)
    runs = 1 if tiles["decode"] == "bf16" else min(1.0, 4 / tiles["chunk"])
    executed = len(body) - promotion + promotion * runs if tiles["decode"] == "int8" else len(body)
    words = WG_ROWS * BLOCK_K // 8 / 128  # weight words a thread decodes per iteration
    return {
        "mma_kinds": dict(kinds),
        "registers": resources(kernel.asm["cubin"]).registers,
        "shared": kernel.metadata.shared,
        "loop_instructions": len(body),
        "promotion_instructions": promotion if tiles["decode"] == "int8" else 0,
        "executed_per_k32": round(executed * 32 / BLOCK_K, 1),
        "decode_and_mma_per_word": round((len(body) - (promotion if tiles["decode"] == "int8" else 0)) / words, 1),
        "loop_ops": {op: ops[op] for op in LOOP_OPS if ops[op]},
    }


def reference_loop(variant: str) -> dict:
    """The bf16 Gluon probe's K loop (gluon_probe.ws_gemm, bf16 A from shared memory), per 32-wide K
    step, for the same comparison."""
    from bench.h200 import gluon_probe
    from bench.h200.sass import disassemble, instructions, k_loop, opcode
    from bench.h200.sm90 import compiling_for_sm90

    tiles = gluon_probe.VARIANTS[variant]
    with compiling_for_sm90() as driver:
        gluon_probe.ws_gemm(*gluon_probe.inputs(512, 512, 1024, "cpu"), **tiles)
    kernel = driver.launches[-1].kernel
    text = disassemble(kernel.asm["cubin"])
    body = k_loop(instructions(text))
    ops = Counter(opcode(t) for t in body)
    return {
        "mma_kinds": dict(Counter(m[0] for m in re.findall(r"\b(HGMMA\.\w+(\.\w+)*)", text))),
        "loop_instructions": len(body),
        "per_k32": round(len(body) * 32 / 64, 1),  # its loop is one 64-wide K step
        "loop_ops": {op: ops[op] for op in LOOP_OPS if ops[op]},
    }


# ----------------------------------------------------------------------------- on the GPU


def check(chunk: int) -> dict:
    """The int8 kernel against model() on a small product, its output poisoned with NaN first."""
    inputs = probe_inputs(256, 256, 1024, chunk, "cuda", seed=chunk)
    c = torch.full((256, 256), float("nan"), device="cuda")
    decoded_gemm(launch_operands(inputs, "int8"), c, "int8", chunk)
    expected = model(inputs, chunk)
    off = int((c.view(torch.int32) != expected.view(torch.int32)).sum())
    return {"chunk": chunk, "elements": c.numel(), "bits_off": off, "nan": int(c.isnan().sum())}


def _timed(fn) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=50, rep=300)


def _reference_times(m: int, n: int, k: int) -> list[tuple[str, float]]:
    """The bf16 references (the weights decoded beforehand: the Gluon probe's GEMM and torch's
    matmul) and the int8 ceiling (torch._int_mm on int8 weights), ms each; their operands are
    freed on return."""
    from bench.h200 import gluon_probe

    w, b = torch.randn(m, k, device="cuda").bfloat16(), torch.randn(k, n, device="cuda").bfloat16()
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    times = [("torch bf16 matmul", _timed(lambda: torch.matmul(w, b, out=c)))]
    for name in ("wg2-lag0", "wg2-lag1"):
        tiles = gluon_probe.VARIANTS[name]
        times.append((f"bf16 Gluon probe {name}", _timed(lambda t=tiles: gluon_probe.ws_gemm(w, b, c, **t))))
    w8 = torch.randint(-96, 97, (m, k), device="cuda", dtype=torch.int8)
    a8 = torch.randint(-96, 97, (n, k), device="cuda", dtype=torch.int8)
    times.append(("torch._int_mm int8", _timed(lambda: torch._int_mm(w8, a8.T))))
    return times


def check_and_time() -> dict:
    m, n, k = SHAPE
    flops = 2 * m * n * k
    result = {"device": torch.cuda.get_device_name(), "shape": {"M": m, "N": n, "K": k}, "checks": [], "timings": []}
    result["checks"] = [check(chunk) for chunk in CHECKED_CHUNKS]

    def record(name, ms, note=""):
        result["timings"].append({"name": name, "us": ms * 1e3, "tflops": flops / ms / 1e9, "note": note})
        print(f"{name}: {ms * 1e3:.1f} us, {flops / ms / 1e9:.0f} TFLOP/s {note}", flush=True)

    for name, ms in _reference_times(m, n, k):
        record(name, ms)
    c = torch.empty(m, n, device="cuda")
    for name, tiles in VARIANTS.items():
        operands = launch_operands(probe_inputs(m, n, k, tiles["chunk"], "cuda"), tiles["decode"])
        record(name, _timed(lambda o=operands, t=tiles: decoded_gemm(o, c, **t)))
        del operands
    times = {t["name"]: t["us"] for t in result["timings"]}
    best_bf16 = min(times["bf16 Gluon probe wg2-lag0"], times["bf16 Gluon probe wg2-lag1"])
    result["ratio_to_bf16_probe"] = {name: round(best_bf16 / times[name], 3) for name in VARIANTS if name in times}
    return result


def markdown(result: dict) -> list[str]:
    lines = [
        f"int8 probe, {result['device']}, M {result['shape']['M']} N {result['shape']['N']} K {result['shape']['K']}",
        "",
        "| kernel | us | TFLOP/s | vs the bf16 probe |",
        "|---|---|---|---|",
    ]
    for t in result["timings"]:
        ratio = result["ratio_to_bf16_probe"].get(t["name"])
        lines.append(
            f"| {t['name']} | {t['us']:.1f} | {t['tflops']:.0f} | {'' if ratio is None else f'{ratio:.2f}x'} |"
        )
    lines += ["", "| check (256 x 256 x 1024) | elements | bits off the torch model | NaN left |", "|---|---|---|---|"]
    for ch in result["checks"]:
        lines.append(f"| chunk {ch['chunk']} | {ch['elements']} | {ch['bits_off']} | {ch['nan']} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    from bench.runner.preflight import UsageParser

    parser = UsageParser(
        prog="python -m bench.h200.int8_probe",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, default=None, help="folder for int8_probe.json and .md (GPU run)")
    args = parser.parse_args(argv)
    import triton

    if torch.cuda.is_available():
        started = time.time()
        result = {"triton": triton.__version__, "torch": torch.__version__, **check_and_time()}
        result["seconds"] = round(time.time() - started, 1)
        text = "\n".join(markdown(result))
        print(text)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "int8_probe.json").write_text(json.dumps(result, indent=1))
            (args.out / "int8_probe.md").write_text(text + "\n")
        bad = [ch for ch in result["checks"] if ch["bits_off"] or ch["nan"]]
        return 1 if bad else 0
    os.environ["TRITON_INTERPRET"] = "0"
    print(f"triton {triton.__version__}, compiled for sm_90 (no GPU here)")
    for name in VARIANTS:
        print(f"{name}: {compiled_for_sm90(name)}", flush=True)
    for name in ("wg2-lag0", "wg2-lag1"):
        print(f"bf16 Gluon probe {name}: {reference_loop(name)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
