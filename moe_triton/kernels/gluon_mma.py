"""What the sm_90 Gluon stages share: a ring of STAGES slots, each one K step (BLOCK_K 128; in stage 1 also 256, and
512 on one warpgroup) of weight words [W_ROWS, BLOCK_K / 8] int32, their scales (one int32 of four e8m0 bytes a row
and 128 columns) and activation rows [ROWS, BLOCK_K] bf16, filled by a loader behind mbarriers; MMA warpgroup G
decodes ring rows [64 G, 64 G + 64) into wgmma's register operand, in the k_slot order of the activations' SPAN."""

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from moe_triton.kernels.decode import code_pairs, fast_pair_scale, in_slot_order, scaled_pairs


@triton.constexpr_function
def words_layout(acc_layout, span):
    """The register layout in which an MMA warpgroup loads its weight words from the ring, as a 32-bit wgmma operand
    whose 4 threads a row hold k_width consecutive words: span 32, word t of every 32-block by thread t; span 128,
    the four words of 32-block B of each 128 columns by thread B."""
    return gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=4 if span == 128 else 1)


# triton 3.6 names cp.async async_copy_global_to_shared; later ones async_load.
cp_async = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared

WG_ROWS = gl.constexpr(64)  # weight rows per MMA warpgroup: wgmma's M
LOADER_WARPS = gl.constexpr(4)
# The loader's layout of a slot's weight words: 4 words (one 16-byte cp.async) a thread, 128 rows (256 repeat it).
WORDS_LAYOUT = gl.constexpr(gl.BlockedLayout([1, 4], [8, 4], [LOADER_WARPS, 1], [1, 0]))
# The loader's layout of a slot's activation rows ([ROWS, 128] bf16): 8 values, one 16-byte cp.async, a thread.
ROWS_LAYOUT = gl.constexpr(gl.BlockedLayout([1, 8], [2, 16], [LOADER_WARPS, 1], [1, 0]))


@triton.constexpr_function
def scales_layout(w_rows):
    """The loader's layout of a slot's scales ([W_ROWS] int32, one a row)."""
    return gl.BlockedLayout([max(w_rows // 128, 1)], [32], [LOADER_WARPS], [0])


@gluon.jit
def decoded_weights(w_slot, sw, part, acc_layout: gl.constexpr, K_PART: gl.constexpr):
    """Columns [part K_PART, (part + 1) K_PART) of a warpgroup's 64 weight rows as wgmma's bf16 register operand
    (_fp4_to_bf16's fast path); sw: each row's four scale bytes of the 128 columns that hold the part. Loaded as a
    32-bit operand, a thread holds the words whose codes decode into its own operand values, so no data moves."""
    w_layout: gl.constexpr = words_layout(acc_layout, 32)
    words = w_slot.slice(part * (K_PART // 8), K_PART // 8, dim=1).load(w_layout)
    word = gl.arange(0, K_PART // 8, layout=gl.SliceLayout(0, w_layout))
    s = (gl.expand_dims(sw, 1) >> (8 * ((part * (K_PART // 32)) % 4 + gl.expand_dims(word, 0) // 4))) & 0xFF
    return _operand(words, fast_pair_scale(s), acc_layout, K_PART, 32)


@gluon.jit
def decoded_blocks(group_words, sw, part, acc_layout: gl.constexpr, K_PART: gl.constexpr):
    """decoded_weights in span 128: columns [part K_PART, (part + 1) K_PART) of the 128 whose words group_words holds
    (words_layout's, [64, 16]), each of a row's four threads decoding one 32-block's words with one scale byte."""
    T: gl.constexpr = K_PART // 32  # words of each 32-block in the part
    if T == 4:
        words = gl.reshape(group_words, [WG_ROWS, 4, 4])  # [row, block B, word t]
    else:
        # [row, B, part q, its word]: the part's words picked from the thread's registers (a sum over q of
        # compile-time selects; gl.split of this linear layout fails to type-check on triton 3.6)
        words = gl.reshape(group_words, [WG_ROWS, 4, 4 // T, T])
        parts: gl.constexpr = words.type.layout
        q = gl.arange(0, 4 // T, layout=gl.SliceLayout(0, gl.SliceLayout(1, gl.SliceLayout(3, parts))))
        q = gl.expand_dims(gl.expand_dims(gl.expand_dims(q, 0), 1), 3)
        words = gl.sum(gl.where(q == part % (4 // T), words, 0), axis=2)
    layout: gl.constexpr = words.type.layout
    rows: gl.constexpr = gl.SliceLayout(1, gl.SliceLayout(2, layout))
    block = gl.arange(0, 4, layout=gl.SliceLayout(0, gl.SliceLayout(2, layout)))
    s = (gl.expand_dims(gl.convert_layout(sw, rows, assert_trivial=True), 1) >> (8 * gl.expand_dims(block, 0))) & 0xFF
    scale = gl.broadcast(gl.expand_dims(fast_pair_scale(s), 2), words)[0]
    return _operand(words, scale, acc_layout, K_PART, 128)


@gluon.jit
def _operand(words, scale, acc_layout: gl.constexpr, K_PART: gl.constexpr, SPAN: gl.constexpr):
    """A part's words and their scales' bf16 pairs (one each a word) -> wgmma's bf16 register operand, columns in
    k_slot order of SPAN; convert_layout(..., assert_trivial=True) proves at compile time that no data moves."""
    p0, p1, p2, p3 = code_pairs(words)
    codes = gl.join(
        gl.join(scaled_pairs(p0, scale), scaled_pairs(p1, scale)),
        gl.join(scaled_pairs(p2, scale), scaled_pairs(p3, scale)),
    )
    return gl.convert_layout(
        in_slot_order(codes, WG_ROWS, K_PART, SPAN),
        gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2),
        assert_trivial=True,
    )


@gluon.jit
def mma_step(
    acc,
    i,
    ring,
    G: gl.constexpr,
    BLOCK_K: gl.constexpr,
    STAGES: gl.constexpr,
    SPLIT: gl.constexpr,
    SPAN: gl.constexpr,
    folded=None,
    STEPS: gl.constexpr = 1,
):
    """K steps i .. i + STEPS - 1 of warpgroup G: in SPLIT parts along k a step, decode (in the k_slot order of SPAN,
    the activations') and issue a wgmma, each decode overlapping the wgmma before it (with STEPS 2, a step's first
    decode the step before's last wgmma); then release the slots. folded (STEPS 1): (acc_t, t_ring) of a folded
    block (stage 1), a second wgmma on the same weights; returns (acc, acc_t) then."""
    gl.static_assert((STEPS == 1) or (folded is None), "mma_step: a folded block takes one K step a wait")
    w_ring, s_ring, a_ring, ready, empty = ring
    acc_layout: gl.constexpr = acc.type.layout
    w_layout: gl.constexpr = words_layout(acc_layout, SPAN)
    K_PART: gl.constexpr = BLOCK_K // SPLIT
    SCALE_WORDS: gl.constexpr = BLOCK_K // 128
    gl.static_assert(
        SPLIT % SCALE_WORDS == 0, "mma_step: a part's columns take one scale word (SPLIT >= BLOCK_K / 128)"
    )
    if folded is not None:
        acc_t, t_ring = folded
        t_layout: gl.constexpr = acc_t.type.layout
    for step in gl.static_range(STEPS):
        slot = (i + step) % STAGES
        mbarrier.wait(ready.index(slot), ((i + step) // STAGES) & 1)
        fence_async_shared()  # cp.async wrote the slot through the generic proxy; wgmma reads the async one
        w_slot = w_ring.index(slot).slice(G * WG_ROWS, WG_ROWS)
        for part in gl.static_range(SPLIT):
            if part % (SPLIT // SCALE_WORDS) == 0:  # the scale word of the 128 columns this part starts
                scales = s_ring.index(slot * SCALE_WORDS + part * K_PART // 128).slice(G * WG_ROWS, WG_ROWS)
                sw = scales.load(gl.SliceLayout(1, w_layout))
                if SPAN == 128:  # and their words, which the parts of those columns share
                    group_words = w_slot.slice(part * K_PART // 8, 16, dim=1).load(w_layout)
            if SPAN == 128:
                w = decoded_blocks(group_words, sw, part, acc_layout, K_PART)
            else:
                w = decoded_weights(w_slot, sw, part, acc_layout, K_PART)
            a_part = a_ring.index(slot).slice(part * K_PART, K_PART, dim=1).permute([1, 0])
            if folded is not None:
                t_part = t_ring.index(slot).slice(part * K_PART, K_PART, dim=1).permute([1, 0])
                acc = warpgroup_mma(w, a_part, acc, is_async=True)
                w_t = gl.convert_layout(
                    w, gl.DotOperandLayout(operand_index=0, parent=t_layout, k_width=2), assert_trivial=True
                )
                acc_t = warpgroup_mma(w_t, t_part, acc_t, is_async=True)
                if part > 0:
                    acc, acc_t, w, w_t = warpgroup_mma_wait(2, deps=[acc, acc_t, w, w_t])
            else:
                acc = warpgroup_mma(w, a_part, acc, is_async=True)
                if step + part > 0:
                    # the part before is done with its registers: at most two parts' operands are live
                    acc, w = warpgroup_mma_wait(1, deps=[acc, w])
    # Waited for at once: a wgmma still in flight across the loop's back edge makes ptxas
    # serialize every k16 wgmma (C7515). The other warpgroups decode meanwhile.
    if folded is not None:
        done = warpgroup_mma_wait(0, deps=[acc, acc_t])
    else:
        done = warpgroup_mma_wait(0, deps=[acc])
    for step in gl.static_range(STEPS):
        mbarrier.arrive(empty.index((i + step) % STAGES), count=1)
    return done


@gluon.jit
def mma_steps(
    acc,
    steps,
    ring,
    G: gl.constexpr,
    BLOCK_K: gl.constexpr,
    STAGES: gl.constexpr,
    SPLIT: gl.constexpr,
    SPAN: gl.constexpr,
    PAIRED: gl.constexpr,
):
    """acc after warpgroup G's K steps 0 .. steps - 1 (mma_step), with PAIRED two steps a wgmma wait (an odd last
    alone)."""
    if PAIRED:
        for i in range(0, steps - 1, 2):
            acc = mma_step(acc, i, ring, G, BLOCK_K, STAGES, SPLIT, SPAN, STEPS=2)
        if steps % 2:
            acc = mma_step(acc, steps - 1, ring, G, BLOCK_K, STAGES, SPLIT, SPAN)
    else:
        for i in range(steps):
            acc = mma_step(acc, i, ring, G, BLOCK_K, STAGES, SPLIT, SPAN)
    return acc


@gluon.jit
def row_range(first, ROWS: gl.constexpr):
    """Rows [first, first + ROWS) in the loader's layout of a slot's activation rows."""
    return first + gl.arange(0, ROWS, layout=gl.SliceLayout(1, ROWS_LAYOUT))


@gluon.jit
def row_offsets(rows, stride, BLOCK_K: gl.constexpr):
    """fill_slot's offsets of the first BLOCK_K elements of rows (row_range's layout) of a [*, stride] tensor: 32-bit
    (the launcher checks that they fit), half the registers of pointers."""
    cols = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, ROWS_LAYOUT))
    return gl.expand_dims(rows * stride, 1) + gl.expand_dims(cols, 0)


@gluon.jit
def weight_sources(w_ptr, w_scale_ptr, w_rows, s_rows, k_dim, BLOCK_K: gl.constexpr):
    """fill_slot's (int32 pointer, 32-bit offsets) of the words and scales at K step 0 of weight rows w_rows (in
    SliceLayout(1, WORDS_LAYOUT)) and s_rows (in scales_layout) of [*, k_dim / 2] bytes, k_dim a multiple of 128."""
    # rows of words start 16 bytes apart (one cp.async per 4 words)
    w_stride = gl.multiple_of(k_dim // 8, 16)
    words = gl.arange(0, BLOCK_K // 8, layout=gl.SliceLayout(0, WORDS_LAYOUT))
    w_offs = gl.expand_dims(w_rows * w_stride, 1) + gl.expand_dims(words, 0)
    int32 = gl.pointer_type(gl.int32)
    return (w_ptr.to(int32), w_offs), (w_scale_ptr.to(int32), s_rows * (k_dim // 128))


@gluon.jit
def step_offsets(i, BLOCK_K: gl.constexpr):
    """fill_slot's steps for K step i: the offsets of its words (int32), scales (int32 words of four) and columns."""
    return i * (BLOCK_K // 8), i * (BLOCK_K // 128), i * BLOCK_K


@gluon.jit
def allocate_ring(
    STAGES: gl.constexpr,
    W_ROWS: gl.constexpr,
    ROWS: gl.constexpr,
    BLOCK_K: gl.constexpr,
    NUM_WG: gl.constexpr,
    A_DTYPE: gl.constexpr = gl.bfloat16,
):
    """The ring and its barriers: ready completes when every loader thread's copies of a slot
    landed, empty when every MMA warpgroup is done with it. A_DTYPE: the activation rows' type."""
    w_ring = gl.allocate_shared_memory(
        gl.int32,
        [STAGES, W_ROWS, BLOCK_K // 8],
        gl.NVMMASharedLayout.get_default_for([W_ROWS, BLOCK_K // 8], gl.int32),
    )
    # slot i's scales: rows i S .. i S + S - 1, one int32 of four e8m0 bytes a weight row and 128 columns
    s_ring = gl.allocate_shared_memory(
        gl.int32, [STAGES * (BLOCK_K // 128), W_ROWS], gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    )
    a_ring = gl.allocate_shared_memory(
        A_DTYPE, [STAGES, ROWS, BLOCK_K], gl.NVMMASharedLayout.get_default_for([ROWS, BLOCK_K], A_DTYPE)
    )
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for slot in gl.static_range(STAGES):
        mbarrier.init(ready.index(slot), count=LOADER_WARPS * 32)  # one cp.async arrival per loader thread
        mbarrier.init(empty.index(slot), count=NUM_WG)  # one arrival per MMA warpgroup
    fence_async_shared()
    return w_ring, s_ring, a_ring, ready, empty


@gluon.jit
def folded_ring(ring, fold, STAGES: gl.constexpr, FOLD: gl.constexpr, BLOCK_K: gl.constexpr):
    """(fold, the folded block's activation ring [STAGES, FOLD, BLOCK_K] bf16 beside allocate_ring's ring): the
    next block's rows that a program folds (the Gluon stages' fold); without FOLD the ring's own activation ring
    stands in, as the partitions take the pair either way."""
    if FOLD:
        t_ring = gl.allocate_shared_memory(
            gl.bfloat16, [STAGES, FOLD, BLOCK_K], gl.NVMMASharedLayout.get_default_for([FOLD, BLOCK_K], gl.bfloat16)
        )
    else:
        t_ring = ring[2]
    return fold, t_ring


@gluon.jit
def fill_slot(i, ring, sources, steps, a_mask, STAGES: gl.constexpr, extra=None, EXTRA: gl.constexpr = False):
    """The loader's K step i into allocate_ring's ring: sources, (base pointer, 32-bit offsets) of the words, scales
    and activation rows; steps, their scalar offsets (the scales' in int32 words: i BLOCK_K / 128), added after the
    wait (a step's tensor held across it spills).
    EXTRA: one more activation ring in the same slot, extra = (ring, pointer, offsets, step, mask)."""
    w_ring, s_ring, a_ring, ready, empty = ring
    # one level of unpacking at a time: triton 3.6's JIT cannot hash nested tuple targets
    w_source, s_source, a_source = sources
    w_ptr, w_offs = w_source
    s_ptr, s_offs = s_source
    a_ptr, a_offs = a_source
    w_step, s_step, a_step = steps
    slot = i % STAGES
    SCALE_WORDS: gl.constexpr = w_ring.shape[2] // 16  # int32 words of scales a row and K step
    # a fresh barrier has completed the phase before its first: the first round does not wait
    mbarrier.wait(empty.index(slot), ((i // STAGES) & 1) ^ 1)
    cp_async(w_ring.index(slot), w_ptr + (w_offs + w_step))
    for j in gl.static_range(SCALE_WORDS):
        cp_async(s_ring.index(slot * SCALE_WORDS + j), s_ptr + (s_offs + (s_step + j)))
    cp_async(a_ring.index(slot), a_ptr + (a_offs + a_step), mask=a_mask)
    if EXTRA:
        x_ring, x_ptr, x_offs, x_step, x_mask = extra
        cp_async(x_ring.index(slot), x_ptr + (x_offs + x_step), mask=x_mask)
    async_copy.mbarrier_arrive(ready.index(slot), increment_count=False)
