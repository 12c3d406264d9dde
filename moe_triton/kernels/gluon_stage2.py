"""decode.py's moe_stage2_kernel in Gluon for sm_90, bit for bit in each product, with a loader partition and NUM_WG
MMA warpgroups in their own instruction streams (docs/triton.md, "The Gluon stage 2"). No CPU interpreter: tests
compile it."""

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from moe_triton.kernels.gluon_mma import (
    LOADER_WARPS,
    WG_ROWS,
    WORDS_LAYOUT,
    allocate_ring,
    fill_slot,
    folded_ring,
    mma_step,
    row_offsets,
    row_range,
    scales_layout,
    weight_sources,
)
from moe_triton.kernels.routing import (
    add_rows,
    folds_tail,
    routing_weights,
    skip_block,
    stage2_start,
    tail_folded,
    wait_for_a2,
)


@gluon.jit
def _ring_col(r):
    """Output column (from the tile's first) in ring row r: a warp's rows q and q + 8, which one thread holds, are
    columns 2q and 2q + 1, added as one bf16 pair."""
    return (r // 16) * 16 + (r % 8) * 2 + (r // 8) % 2


@triton.constexpr_function
def _pair_layout(rows):
    """The epilogue's [warp, q, token, half] layout: the accumulator's own placement (rows q and q + 8 of each warp as
    half 0 and 1), a thread's two halves in adjacent registers, so that one atomic adds the pair."""
    tokens = [[0, 0, 8 << j, 0] for j in range(rows.bit_length() - 4)]
    return gl.DistributedLinearLayout(
        reg_bases=[[0, 0, 0, 1], [0, 0, 1, 0]] + tokens,
        lane_bases=[[0, 0, 2, 0], [0, 0, 4, 0], [0, 1, 0, 0], [0, 2, 0, 0], [0, 4, 0, 0]],
        warp_bases=[[1, 0, 0, 0], [2, 0, 0, 0]],
        block_bases=[],
        shape=[4, 8, rows, 2],
    )


@gluon.jit
def _down_loader(
    inputs,
    BLOCK_M: gl.constexpr,
    ROWS: gl.constexpr,
    BLOCK_K: gl.constexpr,
    STAGES: gl.constexpr,
    NUM_WG: gl.constexpr,
    N_TILES: gl.constexpr,
    FOLD: gl.constexpr,
):
    """The loader partition; inputs: the kernel's loader_args. FOLD: the next block's first FOLD a2 rows into the
    folded block's ring as well, where this program folds it."""
    w_ptr, w_scale_ptr, a2_ptr, ring, block, w_row0, d_inter, folded = inputs
    fold, t_ring = folded
    W_ROWS: gl.constexpr = NUM_WG * WG_ROWS
    # d_inter is a multiple of 128: rows of words start a multiple of 16 words apart
    w_stride = gl.multiple_of(d_inter // 8, 16)
    a_offs = row_offsets(row_range(block * BLOCK_M, ROWS), d_inter, BLOCK_K)
    # ring row r of tile t holds weight row w_row0 + t W_ROWS + _ring_col(r)
    w_rows = _ring_col(gl.arange(0, W_ROWS, layout=gl.SliceLayout(1, WORDS_LAYOUT)))
    s_rows = _ring_col(gl.arange(0, W_ROWS, layout=scales_layout(W_ROWS)))
    words, scales = weight_sources(w_ptr, w_scale_ptr, w_row0 + w_rows, w_row0 + s_rows, d_inter, BLOCK_K)
    sources = (words, scales, (a2_ptr, a_offs))
    k_steps = d_inter // BLOCK_K
    if FOLD:
        t_rows = row_range((block + 1) * BLOCK_M, FOLD)
        t_offs = row_offsets(t_rows, d_inter, BLOCK_K)
        t_mask = gl.expand_dims((t_rows >= 0) & fold, 1)
    for i in range(N_TILES * k_steps):
        tile, k = i // k_steps, i % k_steps
        steps = (tile * W_ROWS * w_stride + k * (BLOCK_K // 8), tile * W_ROWS * (d_inter // 128) + k, k * BLOCK_K)
        if FOLD:
            fill_slot(i, ring, sources, steps, None, STAGES, (t_ring, a2_ptr, t_offs, k * BLOCK_K, t_mask), True)
        else:
            fill_slot(i, ring, sources, steps, None, STAGES)


@gluon.jit
def _mma_and_scatter(
    shared,
    BLOCK_M: gl.constexpr,
    ROWS: gl.constexpr,
    BLOCK_K: gl.constexpr,
    STAGES: gl.constexpr,
    G: gl.constexpr,
    SPLIT: gl.constexpr,
    NUM_WG: gl.constexpr,
    N_TILES: gl.constexpr,
    TOPK: gl.constexpr,
    FOLD: gl.constexpr,
    SPAN: gl.constexpr,
):
    """MMA warpgroup G: its 64 columns of each output tile, added into out from its registers, and with FOLD those of
    the folded block's first FOLD rows from the same decoded weights. shared: what every MMA warpgroup takes (the
    kernel's mma_args)."""
    out_ptr, topk_weights_ptr, sorted_ids_ptr, ring, block, col0, n_tokens, d_hidden, d_inter, folded = shared
    fold, t_ring = folded
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, ROWS, 16]
    )
    zeros = gl.zeros([WG_ROWS, ROWS], gl.float32, acc_layout)
    if FOLD:
        t_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, FOLD, 16]
        )
        t_zeros = gl.zeros([WG_ROWS, FOLD], gl.float32, t_layout)
    k_steps = d_inter // BLOCK_K
    for tile in range(N_TILES):
        first = col0 + (tile * NUM_WG + G) * WG_ROWS
        acc = zeros
        if FOLD:
            acc_t = t_zeros
            for k in range(k_steps):
                acc, acc_t = mma_step(acc, tile * k_steps + k, ring, G, BLOCK_K, STAGES, SPLIT, SPAN, (acc_t, t_ring))
            t_row0 = (block + 1) * BLOCK_M
            _scatter(acc_t, out_ptr, topk_weights_ptr, sorted_ids_ptr, t_row0, first, (n_tokens, d_hidden), TOPK, fold)
        else:
            for k in range(k_steps):
                acc = mma_step(acc, tile * k_steps + k, ring, G, BLOCK_K, STAGES, SPLIT, SPAN)
        _scatter(acc, out_ptr, topk_weights_ptr, sorted_ids_ptr, block * BLOCK_M, first, (n_tokens, d_hidden), TOPK)


@gluon.jit
def _scatter(acc, out_ptr, topk_weights_ptr, sorted_ids_ptr, row0, first, sizes, TOPK: gl.constexpr, store=None):
    """The epilogue of one accumulator [64 columns from `first`, ROWS sorted rows from row0]: times each row's routing
    weight, added into out from the registers; with `store` only where it holds (a folded block's, when this program
    folds it)."""
    n_tokens, d_hidden = sizes
    ROWS: gl.constexpr = acc.type.shape[1]
    pair: gl.constexpr = _pair_layout(ROWS)
    rows: gl.constexpr = gl.SliceLayout(3, pair)
    warp = gl.arange(0, 4, layout=gl.SliceLayout(1, gl.SliceLayout(2, rows)))
    q = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(2, rows)))
    parity = gl.arange(0, 2, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(2, pair))))
    cols = gl.expand_dims(gl.expand_dims(gl.expand_dims(warp, 1) * 16 + gl.expand_dims(q, 0) * 2, 2), 3)
    cols = cols + gl.expand_dims(gl.expand_dims(gl.expand_dims(parity, 0), 1), 2)
    # the block's tokens and weights, read again per tile: held across the K loop they spill
    row_ptrs = sorted_ids_ptr + row0 + gl.arange(0, ROWS, layout=gl.SliceLayout(0, gl.SliceLayout(1, rows)))
    if store is None:
        packed = gl.load(row_ptrs)
    else:
        packed = gl.load(row_ptrs, mask=store, other=n_tokens)
    tokens = packed & 0xFFFFFF
    valid = tokens < n_tokens
    weight = routing_weights(topk_weights_ptr, packed, tokens, valid, TOPK)
    weight = gl.expand_dims(gl.expand_dims(weight, 0), 1)
    # [warp, half, q, token] -> [warp, q, token, half]: columns 16 warp + 2q + half (_ring_col)
    y = gl.convert_layout(gl.permute(gl.reshape(acc, [4, 2, 8, ROWS]), [0, 2, 3, 1]), pair, assert_trivial=True)
    y = y * gl.expand_dims(weight, 3)
    offs = gl.expand_dims(gl.expand_dims(gl.expand_dims(tokens * d_hidden + first, 0), 1), 3) + cols
    mask = gl.expand_dims(gl.expand_dims(gl.expand_dims(valid, 0), 1), 3) & (cols >= 0)
    add_rows(out_ptr + offs, y, mask)


@gluon.jit
def moe_gluon_stage2_kernel(
    a2_ptr,
    w_ptr,
    w_scale_ptr,
    out_ptr,
    topk_weights_ptr,
    sorted_ids_ptr,
    sorted_expert_ids_ptr,
    num_valid_ids_ptr,
    n_tokens,
    d_hidden,
    d_inter,
    a2_ready_ptr,
    TOPK: gl.constexpr,
    BLOCK_M: gl.constexpr,
    ROWS: gl.constexpr,
    TAIL_M: gl.constexpr,
    BLOCK_K: gl.constexpr,
    STAGES: gl.constexpr,
    OVERLAP: gl.constexpr,
    PDL: gl.constexpr,
    SPLIT: gl.constexpr,
    NUM_WG: gl.constexpr,
    N_TILES: gl.constexpr,
    MMA_REGS: gl.constexpr,
    LOADER_REGS: gl.constexpr,
    SLOT_SPAN: gl.constexpr,
    FOLD: gl.constexpr = 0,
):
    """a2 (bf16, k_slot order of SLOT_SPAN, times 2^FAST_EXP), w2's fp4 bytes and e8m0 scales (as int32: [E * d_hidden,
    d_inter / 8] and [E * d_hidden, d_inter / 128]) -> out += routing weight x down GEMM, N_TILES tiles of 64 NUM_WG
    columns per program. d_inter is a multiple of BLOCK_K (128), d_hidden of 64 NUM_WG N_TILES; num_warps 4.
    MMA_REGS, LOADER_REGS: the worker partitions' registers per thread (setmaxnreg). OVERLAP: wait for this block's
    a2 only, as the decode stage 2 does (docs/triton.md, "Stage 2 block by block"). FOLD (TAIL_M or 0): the program
    of an expert's last full block also takes the expert's tail block, whose own program then has nothing to do
    (the Gluon stage 1's fold, docs/triton.md)."""
    gl.static_assert(BLOCK_K == 128, "gluon stage 2: BLOCK_K is 128 (one int32 of scales per row and step)")
    gl.static_assert((NUM_WG == 2) or (NUM_WG == 4), "gluon stage 2: NUM_WG is 2 or 4")
    block, group = stage2_start(a2_ready_ptr, d_inter, OVERLAP, PDL)
    skip = skip_block(block, sorted_ids_ptr, num_valid_ids_ptr, n_tokens, BLOCK_M, ROWS, TAIL_M)
    # the main launch folds the next block (MAIN_FOLD); the tail launch skips the folded ones
    MAIN_FOLD: gl.constexpr = FOLD if ROWS == BLOCK_M else 0
    SPAN: gl.constexpr = SLOT_SPAN
    fold = block < 0  # a runtime false: the partitions take it as a value either way
    if MAIN_FOLD:
        fold = folds_tail(block, sorted_ids_ptr, num_valid_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M, FOLD)
    elif FOLD:
        skip = skip | tail_folded(
            block, sorted_ids_ptr, num_valid_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M, FOLD
        )
    if not skip:
        if MAIN_FOLD and OVERLAP:
            if fold:
                wait_for_a2(a2_ready_ptr, block + 1, d_inter)
        W_ROWS: gl.constexpr = NUM_WG * WG_ROWS
        col0 = group * N_TILES * W_ROWS
        w_row0 = gl.load(sorted_expert_ids_ptr + block) * d_hidden + col0
        ring = allocate_ring(STAGES, W_ROWS, ROWS, BLOCK_K, NUM_WG)
        folded = folded_ring(ring, fold, STAGES, MAIN_FOLD, BLOCK_K)
        # MMA warpgroup 0 is the default partition; the other warpgroups and the loader are workers
        mma_args = (out_ptr, topk_weights_ptr, sorted_ids_ptr, ring, block, col0, n_tokens, d_hidden, d_inter, folded)
        loader_args = (w_ptr, w_scale_ptr, a2_ptr, ring, block, w_row0, d_inter, folded)
        if NUM_WG == 2:
            gl.warp_specialize(
                [
                    (
                        _mma_and_scatter,
                        (mma_args, BLOCK_M, ROWS, BLOCK_K, STAGES, 0, SPLIT, NUM_WG, N_TILES, TOPK, MAIN_FOLD, SPAN),
                    ),
                    (
                        _mma_and_scatter,
                        (mma_args, BLOCK_M, ROWS, BLOCK_K, STAGES, 1, SPLIT, NUM_WG, N_TILES, TOPK, MAIN_FOLD, SPAN),
                    ),
                    (_down_loader, (loader_args, BLOCK_M, ROWS, BLOCK_K, STAGES, NUM_WG, N_TILES, MAIN_FOLD)),
                ],
                [4, LOADER_WARPS.value],
                [MMA_REGS, LOADER_REGS],
            )
        else:
            gl.warp_specialize(
                [
                    (
                        _mma_and_scatter,
                        (mma_args, BLOCK_M, ROWS, BLOCK_K, STAGES, 0, SPLIT, NUM_WG, N_TILES, TOPK, MAIN_FOLD, SPAN),
                    ),
                    (
                        _mma_and_scatter,
                        (mma_args, BLOCK_M, ROWS, BLOCK_K, STAGES, 1, SPLIT, NUM_WG, N_TILES, TOPK, MAIN_FOLD, SPAN),
                    ),
                    (
                        _mma_and_scatter,
                        (mma_args, BLOCK_M, ROWS, BLOCK_K, STAGES, 2, SPLIT, NUM_WG, N_TILES, TOPK, MAIN_FOLD, SPAN),
                    ),
                    (
                        _mma_and_scatter,
                        (mma_args, BLOCK_M, ROWS, BLOCK_K, STAGES, 3, SPLIT, NUM_WG, N_TILES, TOPK, MAIN_FOLD, SPAN),
                    ),
                    (_down_loader, (loader_args, BLOCK_M, ROWS, BLOCK_K, STAGES, NUM_WG, N_TILES, MAIN_FOLD)),
                ],
                [4, 4, 4, LOADER_WARPS.value],
                [MMA_REGS, MMA_REGS, MMA_REGS, LOADER_REGS],
            )
