"""decode.py's moe_stage1_kernel in Gluon for sm_90, bit for bit, with a loader partition and NUM_WG MMA warpgroups
in their own instruction streams (docs/triton.md, "The Gluon stage 1"). No CPU interpreter: tests compile it."""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from moe_triton.kernels.decode import FAST_EXP, k_slot, mx_block_scales, mx_values
from moe_triton.kernels.gluon_mma import (
    LOADER_WARPS,
    WORDS_LAYOUT,
    allocate_ring,
    fill_slot,
    folded_ring,
    mma_step,
    mma_steps,
    row_offsets,
    row_range,
    scales_layout,
    step_offsets,
    weight_sources,
)
from moe_triton.kernels.routing import (
    a2_columns_done,
    after_previous_launch,
    block_and_tile,
    folds_tail,
    skip_block,
    tail_folded,
)
from moe_triton.kernels.silu import gated_h

GROUP = gl.constexpr(32)  # h columns per MMA warpgroup: one MXFP4 block of a2 (WG_ROWS gate and up rows)


@gluon.jit
def _loader(
    inputs,
    BLOCK_M: gl.constexpr,
    ROWS: gl.constexpr,
    BLOCK_K: gl.constexpr,
    STAGES: gl.constexpr,
    NUM_WG: gl.constexpr,
    FOLD: gl.constexpr,
):
    """The loader partition; inputs: the kernel's loader_args."""
    (
        w_ptr,
        w_scale_ptr,
        a1_ptr,
        sorted_ids_ptr,
        ring,
        block,
        w_row0,
        d_inter,
        n_tokens,
        d_hidden,
        folded,
    ) = inputs
    fold, t_ring = folded
    tile = (block, w_row0, d_inter, n_tokens, d_hidden)
    sources, valid = _tile_sources((w_ptr, w_scale_ptr, a1_ptr, sorted_ids_ptr), tile, BLOCK_M, ROWS, BLOCK_K, NUM_WG)
    if FOLD:
        # the next block's first FOLD rows (its real ones, when this program folds it)
        t_rows = row_range((block + 1) * BLOCK_M, FOLD)
        t_tokens = gl.load(sorted_ids_ptr + t_rows, mask=fold, other=n_tokens) & 0xFFFFFF
        t_valid = gl.expand_dims((t_tokens < n_tokens) & fold, 1)
        t_offs = row_offsets(t_tokens, d_hidden, BLOCK_K)
        for i in range(d_hidden // BLOCK_K):
            extra = (t_ring, a1_ptr, t_offs, i * BLOCK_K, t_valid)
            fill_slot(i, ring, sources, step_offsets(i, BLOCK_K), valid, STAGES, extra, True)
    else:
        for i in range(d_hidden // BLOCK_K):
            fill_slot(i, ring, sources, step_offsets(i, BLOCK_K), valid, STAGES)


@gluon.jit
def _tile_sources(ptrs, tile, BLOCK_M: gl.constexpr, ROWS: gl.constexpr, BLOCK_K: gl.constexpr, NUM_WG: gl.constexpr):
    """fill_slot's sources of one tile at K step 0 and the mask of its real activation rows: routing block `block`'s
    first ROWS rows, the weight rows from w_row0 (ring row r holds w_row0 + ring_row(r))."""
    w_ptr, w_scale_ptr, a1_ptr, sorted_ids_ptr = ptrs
    block, w_row0, d_inter, n_tokens, d_hidden = tile
    W_ROWS: gl.constexpr = NUM_WG * 2 * GROUP
    tokens = gl.load(sorted_ids_ptr + row_range(block * BLOCK_M, ROWS)) & 0xFFFFFF
    a_offs = row_offsets(tokens, d_hidden, BLOCK_K)
    w_rows = ring_row(gl.arange(0, W_ROWS, layout=gl.SliceLayout(1, WORDS_LAYOUT)), d_inter)
    s_rows = ring_row(gl.arange(0, W_ROWS, layout=scales_layout(W_ROWS)), d_inter)
    words, scales = weight_sources(w_ptr, w_scale_ptr, w_row0 + w_rows, w_row0 + s_rows, d_hidden, BLOCK_K)
    return (words, scales, (a1_ptr, a_offs)), gl.expand_dims(tokens < n_tokens, 1)


@gluon.jit
def ring_row(r, d_inter):
    """Weight row (from w_row0) in ring row r: warpgroup r // 64 takes group r // 64, each warp's 16 rows 8 gate rows
    then the same 8 columns' up rows, so that a thread's two accumulator rows are one column's gate and up sums."""
    return (r // 64) * GROUP + ((r % 64) // 16) * 8 + r % 8 + ((r // 8) % 2) * d_inter


@gluon.jit
def _one_warpgroup(
    ptrs,
    a2_ptr,
    tile,
    col0,
    BLOCK_M: gl.constexpr,
    ROWS: gl.constexpr,
    BLOCK_K: gl.constexpr,
    STAGES: gl.constexpr,
    CK: gl.constexpr,
    SPLIT: gl.constexpr,
    PAIRED: gl.constexpr,
    SPANS: gl.constexpr,
):
    """One warpgroup both fills the ring and decodes it (no partitions): the 64 weight rows of h columns
    [col0, col0 + 32), STAGES K steps in flight, the next copies issued once a step's (or, PAIRED, two steps')
    slots are released."""
    block, _w_row0, d_inter, _n_tokens, d_hidden = tile
    ring = allocate_ring(STAGES, 2 * GROUP, ROWS, BLOCK_K, 1)
    sources, valid = _tile_sources(ptrs, tile, BLOCK_M, ROWS, BLOCK_K, 1)
    steps = d_hidden // BLOCK_K
    for i in range(gl.minimum(STAGES, steps)):
        fill_slot(i, ring, sources, step_offsets(i, BLOCK_K), valid, STAGES)
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, ROWS, 16]
    )
    acc = gl.zeros([2 * GROUP, ROWS], gl.float32, acc_layout)
    STEPS: gl.constexpr = 2 if PAIRED else 1  # K steps a wgmma wait
    for i in range(0, steps - STEPS + 1, STEPS):
        acc = mma_step(acc, i, ring, 0, BLOCK_K, STAGES, SPLIT, SPANS[0], STEPS=STEPS)
        for j in range(i + STAGES, gl.minimum(i + STAGES + STEPS, steps)):
            fill_slot(j, ring, sources, step_offsets(j, BLOCK_K), valid, STAGES)
    if steps % STEPS:
        acc = mma_step(acc, steps - 1, ring, 0, BLOCK_K, STAGES, SPLIT, SPANS[0])
    store_a2(acc, a2_ptr, block * BLOCK_M, col0, d_inter, 0, ROWS, CK, block >= 0, False, SPANS[1])


@gluon.jit
def _mma_and_epilogue(
    shared,
    BLOCK_M: gl.constexpr,
    ROWS: gl.constexpr,
    BLOCK_K: gl.constexpr,
    STAGES: gl.constexpr,
    CK: gl.constexpr,
    G: gl.constexpr,
    SPLIT: gl.constexpr,
    FOLD: gl.constexpr,
    PAIRED: gl.constexpr,
    SPANS: gl.constexpr,
):
    """MMA warpgroup G: the 32 h columns of group G, then their a2 from its registers (and the
    folded block's, FOLD > 0). shared: what every MMA warpgroup takes (the kernel's mma_args)."""
    a2_ptr, ring, block, col0, d_inter, d_hidden, folded = shared
    fold, t_ring = folded
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, ROWS, 16]
    )
    acc = gl.zeros([2 * GROUP, ROWS], gl.float32, acc_layout)
    if FOLD:
        t_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, FOLD, 16]
        )
        acc_t = gl.zeros([2 * GROUP, FOLD], gl.float32, t_layout)
        for i in range(d_hidden // BLOCK_K):
            acc, acc_t = mma_step(acc, i, ring, G, BLOCK_K, STAGES, SPLIT, SPANS[0], (acc_t, t_ring))
        store_a2(acc_t, a2_ptr, (block + 1) * BLOCK_M, col0, d_inter, G, FOLD, CK, fold, True, SPANS[1])
    else:
        acc = mma_steps(acc, d_hidden // BLOCK_K, ring, G, BLOCK_K, STAGES, SPLIT, SPANS[0], PAIRED)
    store_a2(acc, a2_ptr, block * BLOCK_M, col0, d_inter, G, ROWS, CK, fold, False, SPANS[1])


@gluon.jit
def store_a2(
    acc,
    a2_ptr,
    row0,
    col0,
    d_inter,
    G: gl.constexpr,
    ROWS: gl.constexpr,
    CK: gl.constexpr,
    store,
    MASKED: gl.constexpr,
    SPAN: gl.constexpr,
):
    """The epilogue of one accumulator of ROWS sorted rows from row0: a2 of group G's columns, in k_slot order of
    SPAN; with MASKED, written only where store holds (a folded block's, when this program folds it)."""
    # [warp, gate or up, row in 8, token] -> gate and up [warp, row, token] of columns 8 warp + row
    # (ring_row), in the registers that hold them
    gate, up = gl.split(gl.permute(gl.reshape(acc, [4, 2, 8, ROWS]), [0, 2, 3, 1]))
    if CK:
        h = gated_h(gate, up, "ck", False)
    else:
        h = gated_h(gate, up, "torch", False)
    # the group is one 32-block of each token's a2 row: decode.py's _mx_round_trip over axes 0, 1
    inv, scale = mx_block_scales(gl.max(gl.max(gl.abs(h), axis=1), axis=0), FAST_EXP)
    inv = gl.expand_dims(gl.expand_dims(inv, 0), 1)
    scale = gl.expand_dims(gl.expand_dims(scale, 0), 1)
    a2 = mx_values(h, inv, scale).to(gl.bfloat16)
    layout: gl.constexpr = a2.type.layout
    warp = gl.arange(0, 4, layout=gl.SliceLayout(1, gl.SliceLayout(2, layout)))
    row = gl.arange(0, 8, layout=gl.SliceLayout(0, gl.SliceLayout(2, layout)))
    token = gl.arange(0, ROWS, layout=gl.SliceLayout(0, gl.SliceLayout(1, layout)))
    cols = k_slot(col0 + G * GROUP + gl.expand_dims(warp, 1) * 8 + gl.expand_dims(row, 0), SPAN)
    rows = (row0 + token).to(gl.int64) * d_inter
    offs = gl.expand_dims(cols, 2) + gl.expand_dims(gl.expand_dims(rows, 0), 1)
    if MASKED:
        gl.store(a2_ptr + offs, a2, mask=(offs >= 0) & store)
    else:
        gl.store(a2_ptr + offs, a2)


@gluon.jit
def moe_gluon_stage1_kernel(
    a1_ptr,
    w_ptr,
    w_scale_ptr,
    a2_ptr,
    sorted_ids_ptr,
    sorted_expert_ids_ptr,
    num_valid_ids_ptr,
    n_tokens,
    d_hidden,
    d_inter,
    BLOCK_M: gl.constexpr,
    ROWS: gl.constexpr,
    TAIL_M: gl.constexpr,
    BLOCK_K: gl.constexpr,
    STAGES: gl.constexpr,
    JUDGE: gl.constexpr,
    PDL: gl.constexpr,
    SPLIT: gl.constexpr,
    NUM_WG: gl.constexpr,
    FOLD: gl.constexpr,
    MMA_REGS: gl.constexpr,
    LOADER_REGS: gl.constexpr,
    SLOT_SPAN1: gl.constexpr,
    SLOT_SPAN2: gl.constexpr,
    PAIRED: gl.constexpr = 0,
    OVERLAP: gl.constexpr = 0,
    a2_ready_ptr=None,
):
    """a1 (bf16, k_slot order of SLOT_SPAN1, times 2^FAST_EXP), w1's fp4 bytes and e8m0 scales (as int32:
    [E * 2 * d_inter, d_hidden / 8] and [E * 2 * d_inter, d_hidden / 128]) -> a2 (k_slot order of SLOT_SPAN2), 32
    NUM_WG columns of h per program. d_hidden is a multiple of BLOCK_K (128 or 256; 512 on one warpgroup), d_inter of
    32 NUM_WG; num_warps 4. FOLD (TAIL_M or 0): see folds_tail. MMA_REGS, LOADER_REGS: the worker partitions'
    registers per thread (setmaxnreg). OVERLAP: count the stored columns in a2_ready_ptr, as the decode stage 1 does,
    in one launch with FOLD (docs/triton.md, "Stage 2 block by block")."""
    gl.static_assert(
        (BLOCK_K == 128) or (BLOCK_K == 256) or ((BLOCK_K == 512) and (NUM_WG == 1)),
        "gluon stage 1: BLOCK_K is 128 or 256, or 512 on one warpgroup",
    )
    gl.static_assert((NUM_WG == 1) or (NUM_WG == 2) or (NUM_WG == 4), "gluon stage 1: NUM_WG is 1, 2 or 4")
    after_previous_launch(PDL)
    CK: gl.constexpr = JUDGE == "ck"
    SPANS: gl.constexpr = (SLOT_SPAN1, SLOT_SPAN2)  # a1's order, which the decode takes, and a2's
    if NUM_WG == 1:
        block, group = block_and_tile(OVERLAP)
        if not skip_block(block, sorted_ids_ptr, num_valid_ids_ptr, n_tokens, BLOCK_M, ROWS, TAIL_M):
            col0 = group * GROUP
            w_row0 = gl.load(sorted_expert_ids_ptr + block) * 2 * d_inter + col0
            ptrs = (w_ptr, w_scale_ptr, a1_ptr, sorted_ids_ptr)
            tile = (block, w_row0, d_inter, n_tokens, d_hidden)
            _one_warpgroup(ptrs, a2_ptr, tile, col0, BLOCK_M, ROWS, BLOCK_K, STAGES, CK, SPLIT, PAIRED, SPANS)
        if OVERLAP:
            a2_columns_done(a2_ready_ptr, block, GROUP)
    else:
        gl.static_assert((OVERLAP == 0) or (ROWS == BLOCK_M), "gluon stage 1: the overlap takes no tail launch")
        block, ctile = block_and_tile(OVERLAP)
        # the overlap launches stage 1 once (no tail launch): a tail that no block of its expert folds runs as a
        # whole block there
        skip = skip_block(block, sorted_ids_ptr, num_valid_ids_ptr, n_tokens, BLOCK_M, ROWS, 0 if OVERLAP else TAIL_M)
        expert = gl.load(sorted_expert_ids_ptr + block)
        # the main launch folds the next block (MAIN_FOLD); the tail launch skips the folded ones
        MAIN_FOLD: gl.constexpr = FOLD if ROWS == BLOCK_M else 0
        fold = block < 0  # a runtime false: the partitions take it as a value either way
        folded_before = block < 0
        if MAIN_FOLD:
            fold = folds_tail(block, sorted_ids_ptr, num_valid_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M, FOLD)
            if OVERLAP:
                folded_before = tail_folded(
                    block, sorted_ids_ptr, num_valid_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M, FOLD
                )
                skip = skip | folded_before
        elif FOLD:
            skip = skip | tail_folded(
                block, sorted_ids_ptr, num_valid_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M, FOLD
            )
        if not skip:
            W_ROWS: gl.constexpr = NUM_WG * 2 * GROUP
            col0 = ctile * NUM_WG * GROUP
            w_row0 = expert * 2 * d_inter + col0
            ring = allocate_ring(STAGES, W_ROWS, ROWS, BLOCK_K, NUM_WG)
            folded = folded_ring(ring, fold, STAGES, MAIN_FOLD, BLOCK_K)
            # MMA warpgroup 0 is the default partition; the other warpgroups and the loader are workers
            mma_args = (a2_ptr, ring, block, col0, d_inter, d_hidden, folded)
            loader_args = (w_ptr, w_scale_ptr, a1_ptr, sorted_ids_ptr, ring, block, w_row0, d_inter, n_tokens, d_hidden)
            loader_args += (folded,)
            if NUM_WG == 2:
                gl.warp_specialize(
                    [
                        (
                            _mma_and_epilogue,
                            (mma_args, BLOCK_M, ROWS, BLOCK_K, STAGES, CK, 0, SPLIT, MAIN_FOLD, PAIRED, SPANS),
                        ),
                        (
                            _mma_and_epilogue,
                            (mma_args, BLOCK_M, ROWS, BLOCK_K, STAGES, CK, 1, SPLIT, MAIN_FOLD, PAIRED, SPANS),
                        ),
                        (_loader, (loader_args, BLOCK_M, ROWS, BLOCK_K, STAGES, NUM_WG, MAIN_FOLD)),
                    ],
                    [4, LOADER_WARPS.value],
                    [MMA_REGS, LOADER_REGS],
                )
            else:
                gl.warp_specialize(
                    [
                        (
                            _mma_and_epilogue,
                            (mma_args, BLOCK_M, ROWS, BLOCK_K, STAGES, CK, 0, SPLIT, MAIN_FOLD, PAIRED, SPANS),
                        ),
                        (
                            _mma_and_epilogue,
                            (mma_args, BLOCK_M, ROWS, BLOCK_K, STAGES, CK, 1, SPLIT, MAIN_FOLD, PAIRED, SPANS),
                        ),
                        (
                            _mma_and_epilogue,
                            (mma_args, BLOCK_M, ROWS, BLOCK_K, STAGES, CK, 2, SPLIT, MAIN_FOLD, PAIRED, SPANS),
                        ),
                        (
                            _mma_and_epilogue,
                            (mma_args, BLOCK_M, ROWS, BLOCK_K, STAGES, CK, 3, SPLIT, MAIN_FOLD, PAIRED, SPANS),
                        ),
                        (_loader, (loader_args, BLOCK_M, ROWS, BLOCK_K, STAGES, NUM_WG, MAIN_FOLD)),
                    ],
                    [4, 4, 4, LOADER_WARPS.value],
                    [MMA_REGS, MMA_REGS, MMA_REGS, LOADER_REGS],
                )
        if OVERLAP:
            # after the partitions' join (a barrier of all warps, behind every warpgroup's a2 stores); a folded
            # block's columns are counted by the program that folds it
            if not folded_before:
                a2_columns_done(a2_ready_ptr, block, NUM_WG * GROUP)
                if fold:
                    a2_columns_done(a2_ready_ptr, block + 1, NUM_WG * GROUP)
