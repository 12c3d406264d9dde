"""Native MXFP4 kernels for gfx950 (launchers in moe_triton/native.py; docs/gfx950.md, "The kernels"): tl.dot_scaled
takes the packed fp4 bytes and e8m0 scales as they are (scaled MFMAs; emulated elsewhere, so the same source runs on
NVIDIA GPUs and the CPU interpreter). Every quantization is mxfp4.convert's, SPEC 3.3 bit for bit."""

import triton
import triton.language as tl

from moe_triton.kernels.routing import (
    add_rows,
    chunk_histogram,
    expert_counts,
    expert_slots,
    route_whole_histogram,
    routing_block,
    routing_weights,
    skip_block,
)
from moe_triton.kernels.silu import gated_h
from mxfp4.convert import mx_convert_bf16_pairs, mx_convert_pairs


@triton.jit
def xcd_program(linear, grid, XCDS: tl.constexpr):
    """The logical program that flat hardware program `linear` of `grid` runs: die d (linear % XCDS) gets the d-th
    contiguous run of ids, so neighbours share an L2 (docs/gfx950.md, "XCD order"). A permutation of [0, grid)."""
    per_die = grid // XCDS
    die = linear % XCDS
    return die * per_die + tl.minimum(die, grid % XCDS) + linear // XCDS


@triton.jit
def _program_tile(XCDS: tl.constexpr):
    """(routing block, column tile) of this program; XCDS > 0 remaps it by xcd_program, blocks fastest, so that a
    die runs consecutive blocks (mostly one expert's) of one column tile."""
    if XCDS > 0:
        n_blocks = tl.num_programs(0)
        linear = tl.program_id(1) * n_blocks + tl.program_id(0)
        logical = xcd_program(linear, n_blocks * tl.num_programs(1), XCDS)
        block, column = logical % n_blocks, logical // n_blocks
    else:
        block, column = tl.program_id(0), tl.program_id(1)
    return block, column


@triton.jit
def _mx_operand(ptr, scale_ptr, rows, k_dim, k0, BLOCK_K: tl.constexpr, CACHE: tl.constexpr):
    """MXFP4 rows[:, k0:k0+BLOCK_K] of a matrix of bytes [*, k_dim/2] at ptr and scales [*, k_dim/32] at scale_ptr
    -> (bytes [R, BLOCK_K/2], scales [R, BLOCK_K/32]). rows are 32-bit offsets from the scalar base pointers, so that
    AMD's loads are buffer loads; CACHE is tl.load's cache modifier."""
    # k_dim is a multiple of 256 (problem/validation.py): rows start 128-byte aligned, scale rows 8-byte.
    row_bytes = tl.multiple_of(k_dim // 2, 128)
    row_scales = tl.multiple_of(k_dim // 32, 8)
    kb = k0 // 2 + tl.arange(0, BLOCK_K // 2)
    ks = k0 // 32 + tl.arange(0, BLOCK_K // 32)
    values = tl.load(ptr + (rows[:, None] * row_bytes + kb[None, :]), cache_modifier=CACHE)
    return values, tl.load(scale_ptr + (rows[:, None] * row_scales + ks[None, :]), cache_modifier=CACHE)


@triton.jit
def _quantized_rows(hidden_ptr, rows, d_hidden, k0, ROWS: tl.constexpr, BLOCK_K: tl.constexpr, GFX950: tl.constexpr):
    """_mx_operand's pair for bf16 rows quantized on the fly (SPEC 3.3, mxfp4.convert):
    hidden_ptr holds the hidden states' bf16 bits as int32 pairs [*, d_hidden/2]."""
    row_pairs = tl.multiple_of(d_hidden // 2, 128)
    kp = k0 // 2 + tl.arange(0, BLOCK_K // 2)
    bits = tl.reshape(tl.load(hidden_ptr + (rows[:, None] * row_pairs + kp[None, :])), (ROWS, BLOCK_K // 32, 16))
    fp4, scale = mx_convert_bf16_pairs(bits, GFX950)
    return tl.reshape(fp4, (ROWS, BLOCK_K // 2)), scale


@triton.jit
def _mx_step(acc, a, a_scale, w_ptr, w_scale_ptr, w_rows, k_dim, k0, BLOCK_K: tl.constexpr, W_CACHE: tl.constexpr):
    """acc [N, R] += MXFP4 W[w_rows, k0:k0+BLOCK_K] (read here, cache modifier W_CACHE) @ a^T (_mx_operand's)."""
    w, w_scale = _mx_operand(w_ptr, w_scale_ptr, w_rows, k_dim, k0, BLOCK_K, W_CACHE)
    return tl.dot_scaled(w, w_scale, "e2m1", tl.trans(a), a_scale, "e2m1", acc)


@triton.jit
def _a1_share(
    hidden_ptr,
    a1_ptr,
    a1_scale_ptr,
    out_ptr,
    first_program,
    n_tokens,
    d_hidden,
    QUANT_BLOCKS: tl.constexpr,
    QUANT: tl.constexpr,
    GFX950: tl.constexpr,
):
    """Programs from first_program on: QUANT_BLOCKS 32-blocks of the flat hidden states (bf16 bits as int32 pairs),
    quantized to a1 bytes and scales when QUANT, and the output elements they cover zeroed."""
    blocks = (tl.program_id(0) - first_program) * QUANT_BLOCKS + tl.arange(0, QUANT_BLOCKS)
    valid = blocks < n_tokens * (d_hidden // 32)
    if QUANT:
        pairs = blocks[:, None].to(tl.int64) * 16 + tl.arange(0, 16)[None, :]
        bits = tl.reshape(tl.load(hidden_ptr + pairs, mask=valid[:, None], other=0), (QUANT_BLOCKS, 1, 16))
        fp4, scale = mx_convert_bf16_pairs(bits, GFX950)
        tl.store(a1_ptr + pairs, tl.reshape(fp4, (QUANT_BLOCKS, 16)), mask=valid[:, None])
        tl.store(a1_scale_ptr + blocks, tl.reshape(scale, (QUANT_BLOCKS,)), mask=valid)
    offs = blocks[:, None].to(tl.int64) * 32 + tl.arange(0, 32)[None, :]
    tl.store(out_ptr + offs, tl.zeros((QUANT_BLOCKS, 32), dtype=out_ptr.dtype.element_ty), mask=valid[:, None])


@triton.jit
def moe_native_prep_kernel(
    topk_ids_ptr,
    hidden_ptr,
    a1_ptr,
    a1_scale_ptr,
    out_ptr,
    chunk_counts_ptr,
    n_tokens,
    n_slots,
    n_chunks,
    d_hidden,
    EXPERT_BINS: tl.constexpr,
    HIST_CHUNK: tl.constexpr,
    QUANT_BLOCKS: tl.constexpr,
    QUANT: tl.constexpr,
    GFX950: tl.constexpr,
):
    """Programs below n_chunks count one chunk of topk_ids; the others zero the output and, with QUANT, write a1."""
    pid = tl.program_id(0)
    if pid < n_chunks:
        chunk_histogram(topk_ids_ptr, chunk_counts_ptr, n_slots, EXPERT_BINS, HIST_CHUNK)
    else:
        _a1_share(hidden_ptr, a1_ptr, a1_scale_ptr, out_ptr, n_chunks, n_tokens, d_hidden, QUANT_BLOCKS, QUANT, GFX950)


@triton.jit
def moe_native_route_kernel(
    topk_ids_ptr,
    hidden_ptr,
    a1_ptr,
    a1_scale_ptr,
    out_ptr,
    sorted_ids_ptr,
    sorted_expert_ids_ptr,
    num_valid_ids_ptr,
    n_tokens,
    n_experts,
    n_slots,
    d_hidden,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    EXPERT_BINS: tl.constexpr,
    SLOT_CHUNK: tl.constexpr,
    MAX_EXPERT_BLOCKS: tl.constexpr,
    COUNT_CHUNK: tl.constexpr,
    QUANT_BLOCKS: tl.constexpr,
    QUANT: tl.constexpr,
    GFX950: tl.constexpr,
):
    """The prep and route launches in one: programs below n_experts each count the whole histogram and place their
    expert's slots (place_expert); the others zero the output and, with QUANT, write a1."""
    pid = tl.program_id(0)
    if pid < n_experts:
        routing = (sorted_ids_ptr, sorted_expert_ids_ptr, num_valid_ids_ptr)
        route_whole_histogram(
            topk_ids_ptr,
            routing,
            n_tokens,
            n_experts,
            n_slots,
            TOPK,
            BLOCK_M,
            EXPERT_BINS,
            SLOT_CHUNK,
            MAX_EXPERT_BLOCKS,
            COUNT_CHUNK,
        )
    else:
        _a1_share(hidden_ptr, a1_ptr, a1_scale_ptr, out_ptr, n_experts, n_tokens, d_hidden, QUANT_BLOCKS, QUANT, GFX950)


@triton.jit
def _route_own_block(
    topk_ids_ptr,
    block,
    n_tokens,
    n_experts,
    n_slots,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    EXPERT_BINS: tl.constexpr,
    SLOT_CHUNK: tl.constexpr,
):
    """Routing block `block`, computed by this program alone from topk_ids: (packed ids [BLOCK_M], its expert, the
    padded total). Row r is its expert's slot of rank block * BLOCK_M - group start + r, or padding; the rank
    match is BLOCK_M x n_slots compares, for small slot counts."""
    counts = expert_counts(topk_ids_ptr, n_slots, n_experts, EXPERT_BINS, SLOT_CHUNK)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, axis=0)
    start = block * BLOCK_M
    # The group holding row `start`: the first expert whose group ends past it.
    expert = tl.sum((ends <= start).to(tl.int32), axis=0)
    bins = tl.arange(0, EXPERT_BINS)
    group_start = tl.sum(tl.where(bins < expert, padded, 0), axis=0)
    count = tl.sum(tl.where(bins == expert, counts, 0), axis=0)
    ranks = start - group_start + tl.arange(0, BLOCK_M)
    # A row matches one slot at most: the matches add up in a tile reduced once after the loop (a reduction per
    # step kept BLOCK_M sums in scalar registers through the loop, which spilled them on gfx950).
    found = tl.zeros((BLOCK_M, SLOT_CHUNK), dtype=tl.int32)
    placed = 0
    for first in range(0, n_slots, SLOT_CHUNK):
        offs, hit, rank = expert_slots(topk_ids_ptr, first, n_slots, expert, placed, SLOT_CHUNK)
        match = hit[None, :] & (rank[None, :] == ranks[:, None])
        found += tl.where(match, offs[None, :], 0)
        placed += tl.sum(hit.to(tl.int32), axis=0)
    slots = tl.sum(found, axis=1)
    packed = tl.where(ranks < count, ((slots % TOPK) << 24) | (slots // TOPK), (TOPK << 24) | n_tokens)
    return packed, expert, tl.sum(padded, axis=0)


@triton.jit
def _zero_share(out_ptr, n_out, ZERO_BLOCK: tl.constexpr):
    """This program's share of zeroing the output (n_out elements, strided by the whole grid)."""
    n_programs = tl.num_programs(0) * tl.num_programs(1)
    program = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
    for first in range(program * ZERO_BLOCK, n_out, n_programs * ZERO_BLOCK):
        offs = first + tl.arange(0, ZERO_BLOCK)
        tl.store(out_ptr + offs, tl.zeros((ZERO_BLOCK,), dtype=out_ptr.dtype.element_ty), mask=offs < n_out)


@triton.jit
def _stage1_epilogue(
    acc,
    a2_ptr,
    a2_scale_ptr,
    rows,
    column,
    d_inter,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GFX950: tl.constexpr,
    JUDGE: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    """acc [2 BLOCK_N, BLOCK_M] (gate and up rows interleaved) -> bf16(silu(gate) * up) as a2 bytes and scales."""
    gate, up = tl.split(tl.reshape(tl.trans(acc), (BLOCK_M, BLOCK_N, 2)))
    h = gated_h(gate, up, JUDGE, INTERPRET)
    bits = tl.reshape(h.to(tl.int32, bitcast=True), (BLOCK_M, BLOCK_N // 32, 16, 2))
    h_even, h_odd = tl.split(bits)
    fp4, scale = mx_convert_pairs(h_even, h_odd, GFX950)
    byte_cols = column * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)
    scale_cols = column * (BLOCK_N // 32) + tl.arange(0, BLOCK_N // 32)
    tl.store(
        a2_ptr + (rows[:, None] * (d_inter // 2) + byte_cols[None, :]),
        tl.reshape(fp4, (BLOCK_M, BLOCK_N // 2)),
        mask=(byte_cols < d_inter // 2)[None, :],
    )
    tl.store(
        a2_scale_ptr + (rows[:, None] * (d_inter // 32) + scale_cols[None, :]),
        scale,
        mask=(scale_cols < d_inter // 32)[None, :],
    )


@triton.jit
def moe_native_stage1_kernel(
    a1_ptr,
    a1_scale_ptr,
    w1_ptr,
    w1_scale_ptr,
    a2_ptr,
    a2_scale_ptr,
    sorted_ids_ptr,
    sorted_expert_ids_ptr,
    num_valid_ids_ptr,
    topk_ids_ptr,
    out_ptr,
    n_tokens,
    n_experts,
    n_slots,
    d_hidden,
    d_inter,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    XCDS: tl.constexpr,
    W_CACHE: tl.constexpr,
    QUANT_A: tl.constexpr,
    ROUTE: tl.constexpr,
    EXPERT_BINS: tl.constexpr,
    SLOT_CHUNK: tl.constexpr,
    ZERO_BLOCK: tl.constexpr,
    GFX950: tl.constexpr,
    JUDGE: tl.constexpr,
    INTERPRET: tl.constexpr,
):
    """QUANT_A: a1_ptr holds the hidden states' bf16 bits as int32 pairs, quantized per K step (a1_scale_ptr unused).
    ROUTE (with QUANT_A): no routing launch before; each program routes its own block, column tile 0 writes it for
    stage 2, and every program zeroes a share of the output."""
    block, column = _program_tile(XCDS)
    writes_routing = column == 0
    if ROUTE:
        _zero_share(out_ptr, n_tokens * d_hidden, ZERO_BLOCK)
        packed, expert, n_valid = _route_own_block(
            topk_ids_ptr, block, n_tokens, n_experts, n_slots, TOPK, BLOCK_M, EXPERT_BINS, SLOT_CHUNK
        )
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        tokens = packed & 0xFFFFFF
        valid = tokens < n_tokens
        if (block == 0) & writes_routing:
            tl.store(num_valid_ids_ptr, n_valid)
            tl.store(num_valid_ids_ptr + 1, n_tokens)
        if block * BLOCK_M >= n_valid:
            return
        if writes_routing:
            tl.store(sorted_ids_ptr + rows, packed)
            tl.store(sorted_expert_ids_ptr + block, expert)
        expert = expert.to(tl.int64)
    else:
        if skip_block(block, sorted_ids_ptr, num_valid_ids_ptr, n_tokens, BLOCK_M, BLOCK_M, 0):
            return
        rows, _packed, tokens, valid, expert = routing_block(
            block, sorted_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M, BLOCK_M
        )
    cols = column * BLOCK_N + tl.arange(0, BLOCK_N)
    # The expert's weights as 64-bit scalar base pointers, its rows as 32-bit offsets; gate and up rows interleaved
    w_base = w1_ptr + expert * (2 * d_inter) * (d_hidden // 2)
    w_scale_base = w1_scale_ptr + expert * (2 * d_inter) * (d_hidden // 32)
    gate_rows = tl.minimum(cols, d_inter - 1)
    w_rows = tl.reshape(tl.join(gate_rows, gate_rows + d_inter), (2 * BLOCK_N,))
    acc = tl.zeros((2 * BLOCK_N, BLOCK_M), dtype=tl.float32)
    # Padding rows read token 0's activations, not masked loads: a product row depends on its own row only
    a_rows = tl.where(valid, tokens, 0)
    for k0 in range(0, d_hidden, BLOCK_K):
        if QUANT_A:
            a, a_scale = _quantized_rows(a1_ptr, a_rows, d_hidden, k0, BLOCK_M, BLOCK_K, GFX950)
        else:
            a, a_scale = _mx_operand(a1_ptr, a1_scale_ptr, a_rows, d_hidden, k0, BLOCK_K, "")
        acc = _mx_step(acc, a, a_scale, w_base, w_scale_base, w_rows, d_hidden, k0, BLOCK_K, W_CACHE)
    _stage1_epilogue(acc, a2_ptr, a2_scale_ptr, rows, column, d_inter, BLOCK_M, BLOCK_N, GFX950, JUDGE, INTERPRET)


@triton.jit
def moe_native_stage2_kernel(
    a2_ptr,
    a2_scale_ptr,
    w2_ptr,
    w2_scale_ptr,
    out_ptr,
    topk_weights_ptr,
    sorted_ids_ptr,
    sorted_expert_ids_ptr,
    num_valid_ids_ptr,
    n_tokens,
    d_hidden,
    d_inter,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    K_STEPS: tl.constexpr,
    N_TILES: tl.constexpr,
    EVEN_N: tl.constexpr,
    XCDS: tl.constexpr,
    W_CACHE: tl.constexpr,
):
    """out_ptr is the zeroed output, which the rows are added into atomically."""
    block, column = _program_tile(XCDS)
    if skip_block(block, sorted_ids_ptr, num_valid_ids_ptr, n_tokens, BLOCK_M, BLOCK_M, 0):
        return
    rows, packed, tokens, valid, expert = routing_block(
        block, sorted_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M, BLOCK_M
    )
    weight = routing_weights(topk_weights_ptr, packed, tokens, valid, TOPK)
    # The expert's weights and the output as scalar bases moved by whole tiles; the 32-bit offsets stay the same
    w_base = w2_ptr + expert * d_hidden * (d_inter // 2)
    w_scale_base = w2_scale_ptr + expert * d_hidden * (d_inter // 32)
    out_offs = tokens[:, None] * d_hidden + tl.arange(0, BLOCK_N)[None, :]
    # Padding rows and a partial last tile's columns past d_hidden (the last weight row's) are masked out of the add
    if K_STEPS == 1:
        a, a_scale = _mx_operand(a2_ptr, a2_scale_ptr, rows, d_inter, 0, BLOCK_K, "")
    # The program's tiles that lie inside d_hidden (a runtime count: no work past the end).
    first_tile = column * N_TILES
    for tile in range(first_tile, tl.minimum(first_tile + N_TILES, tl.cdiv(d_hidden, BLOCK_N))):
        w_ptr = w_base + tile * BLOCK_N * (d_inter // 2)
        w_scale_ptr = w_scale_base + tile * BLOCK_N * (d_inter // 32)
        if EVEN_N:
            w_rows = tl.arange(0, BLOCK_N)
            mask = valid[:, None]
        else:
            w_rows = tl.minimum(tl.arange(0, BLOCK_N), d_hidden - 1 - tile * BLOCK_N)
            mask = valid[:, None] & (tile * BLOCK_N + tl.arange(0, BLOCK_N) < d_hidden)[None, :]
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        if K_STEPS == 1:
            # No K loop: the pipeliner loads the next tile's weights during this one's epilogue
            acc = _mx_step(acc, a, a_scale, w_ptr, w_scale_ptr, w_rows, d_inter, 0, BLOCK_K, W_CACHE)
        else:
            for k0 in range(0, d_inter, BLOCK_K):
                a, a_scale = _mx_operand(a2_ptr, a2_scale_ptr, rows, d_inter, k0, BLOCK_K, "")
                acc = _mx_step(acc, a, a_scale, w_ptr, w_scale_ptr, w_rows, d_inter, k0, BLOCK_K, W_CACHE)
        y = tl.trans(acc) * weight[:, None]
        add_rows(out_ptr + tile * BLOCK_N + out_offs, y, mask)
