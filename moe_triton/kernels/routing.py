"""Routing shared by every Triton path (docs/triton.md, "The kernels"): aiter-compatible sorted_ids (slot << 24 |
token, each expert padded to block_m with topk << 24 | M), sorted_expert_ids per block and num_valid_ids."""

import triton
import triton.language as tl


@triton.jit
def after_previous_launch(PDL: tl.constexpr):
    """Programmatic dependent launch (NVIDIA, launch_pdl): wait for the previous kernel's writes and let the next
    kernel be scheduled; every kernel calls this before touching memory."""
    # triton.language.extra.cuda's gdc_wait and gdc_launch_dependents, inline: that module fails to import on ROCm
    if PDL:
        tl.inline_asm_elementwise("griddepcontrol.wait; // dummy $0", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
    let_next_launch(PDL)


@triton.jit
def let_next_launch(PDL: tl.constexpr):
    """Let the next kernel be scheduled (it waits for this one's writes in its own after_previous_launch)."""
    if PDL:
        tl.inline_asm_elementwise(
            "griddepcontrol.launch_dependents; // dummy $0", "=r", [], dtype=tl.int32, is_pure=False, pack=1
        )


@triton.jit
def block_and_tile(BLOCK_MAJOR: tl.constexpr):
    """A stage's routing block and column tile: blocks along program_id(0), so that one column tile of every block
    is launched together; or, BLOCK_MAJOR, along program_id(1), so that a block's tiles are launched together and
    stage 1 finishes the blocks in order (the overlap of the stages, docs/triton.md)."""
    if BLOCK_MAJOR:
        return tl.program_id(1), tl.program_id(0)
    return tl.program_id(0), tl.program_id(1)


@triton.jit
def a2_columns_done(a2_ready_ptr, block, columns):
    """Stage 1's program has stored `columns` columns of routing block `block`'s a2 rows: counted after a CTA
    barrier, with release semantics, so that a stage-2 program that reads the count (wait_for_a2) sees the stores
    and everything this program saw (the routing, the zeroed output)."""
    tl.debug_barrier()
    tl.atomic_add(a2_ready_ptr + block, columns, sem="release", scope="gpu")


@triton.jit
def wait_for_a2(a2_ready_ptr, block, d_inter):
    """Stage 2's wait, instead of the wait for all of stage 1 (after_previous_launch), until stage 1 has stored all
    d_inter columns of routing block `block`'s a2 rows; acquire, so that the stores are visible after it."""
    while tl.atomic_add(a2_ready_ptr + block, 0, sem="acquire", scope="gpu") < d_inter:
        pass


@triton.jit
def stage2_start(a2_ready_ptr, d_inter, OVERLAP: tl.constexpr, PDL: tl.constexpr):
    """A stage-2 program's routing block and column group, once what it reads is there: with OVERLAP its block's a2
    rows (wait_for_a2; what the program reads comes after the wait's acquire), else all of stage 1."""
    block, group = block_and_tile(OVERLAP)
    if OVERLAP:
        let_next_launch(PDL)
        wait_for_a2(a2_ready_ptr, block, d_inter)
    else:
        after_previous_launch(PDL)
    return block, group


@triton.jit
def slot_experts(topk_ids_ptr, first, n_slots, EXPERT_BINS: tl.constexpr, CHUNK: tl.constexpr):
    """The experts of slots [first, first + CHUNK) of topk_ids, for tl.histogram: slots past
    n_slots land in the last bin, which is no expert's (EXPERT_BINS > n_experts)."""
    slots = first + tl.arange(0, CHUNK)
    return tl.load(topk_ids_ptr + slots, mask=slots < n_slots, other=EXPERT_BINS - 1)


@triton.jit
def chunk_histogram(topk_ids_ptr, chunk_counts_ptr, n_slots, EXPERT_BINS: tl.constexpr, HIST_CHUNK: tl.constexpr):
    """Expert histogram of chunk program_id(0) of topk_ids, into row program_id(0) of the chunk counts."""
    pid = tl.program_id(0)
    ids = slot_experts(topk_ids_ptr, pid * HIST_CHUNK, n_slots, EXPERT_BINS, HIST_CHUNK)
    tl.store(chunk_counts_ptr + pid * EXPERT_BINS + tl.arange(0, EXPERT_BINS), tl.histogram(ids, EXPERT_BINS))


@triton.jit
def expert_counts(topk_ids_ptr, n_slots, n_experts, EXPERT_BINS: tl.constexpr, SLOT_CHUNK: tl.constexpr):
    """The whole expert histogram of topk_ids [EXPERT_BINS] (zero past the experts), counted by this one program."""
    counts = tl.zeros((EXPERT_BINS,), dtype=tl.int32)
    for start in range(0, n_slots, SLOT_CHUNK):
        counts += tl.histogram(slot_experts(topk_ids_ptr, start, n_slots, EXPERT_BINS, SLOT_CHUNK), EXPERT_BINS)
    return tl.where(tl.arange(0, EXPERT_BINS) < n_experts, counts, 0)


@triton.jit
def expert_slots(topk_ids_ptr, first, n_slots, expert, placed, SLOT_CHUNK: tl.constexpr):
    """Slots [first, first + SLOT_CHUNK) of topk_ids: their indices, which of them pick `expert`,
    and the rank of each such slot among the expert's, `placed` of them in the slots before."""
    offs = first + tl.arange(0, SLOT_CHUNK)
    hit = tl.load(topk_ids_ptr + offs, mask=offs < n_slots, other=-1) == expert
    return offs, hit, placed + tl.cumsum(hit.to(tl.int32), axis=0) - 1


@triton.jit
def chunk_table(chunk_counts_ptr, n_chunks, n_experts, EXPERT_BINS: tl.constexpr, MAX_CHUNKS: tl.constexpr):
    """moe_prep_kernel's chunk counts [MAX_CHUNKS, EXPERT_BINS] (rows past n_chunks zero) and their sum over the
    chunks, the whole histogram (zero past the experts)."""
    bins = tl.arange(0, EXPERT_BINS)
    chunks = tl.arange(0, MAX_CHUNKS)
    table = tl.load(
        chunk_counts_ptr + chunks[:, None] * EXPERT_BINS + bins[None, :], mask=(chunks < n_chunks)[:, None], other=0
    )
    return table, tl.where(bins < n_experts, tl.sum(table, axis=0), 0)


@triton.jit
def moe_route_kernel(
    topk_ids_ptr,
    chunk_counts_ptr,
    sorted_ids_ptr,
    sorted_expert_ids_ptr,
    num_valid_ids_ptr,
    n_tokens,
    n_experts,
    n_slots,
    n_chunks,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    EXPERT_BINS: tl.constexpr,
    MAX_CHUNKS: tl.constexpr,
    SLOT_CHUNK: tl.constexpr,
    MAX_EXPERT_BLOCKS: tl.constexpr,
    PDL: tl.constexpr,
):
    """Expert program_id(0)'s share of the routing (place_expert), from moe_prep_kernel's chunk counts."""
    after_previous_launch(PDL)
    _table, counts = chunk_table(chunk_counts_ptr, n_chunks, n_experts, EXPERT_BINS, MAX_CHUNKS)
    routing = (sorted_ids_ptr, sorted_expert_ids_ptr, num_valid_ids_ptr)
    place_expert(counts, topk_ids_ptr, routing, n_tokens, n_slots, TOPK, BLOCK_M, SLOT_CHUNK, MAX_EXPERT_BLOCKS)


@triton.jit
def moe_route_slots_kernel(
    topk_ids_ptr,
    chunk_counts_ptr,
    sorted_ids_ptr,
    sorted_expert_ids_ptr,
    num_valid_ids_ptr,
    n_tokens,
    n_experts,
    n_slots,
    n_chunks,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    EXPERT_BINS: tl.constexpr,
    MAX_CHUNKS: tl.constexpr,
    HIST_CHUNK: tl.constexpr,
    ROUTE_SLOTS: tl.constexpr,
    COUNT_CHUNK: tl.constexpr,
    PDL: tl.constexpr,
):
    """Slots [program_id(0) * ROUTE_SLOTS, +ROUTE_SLOTS) placed from moe_prep_kernel's chunk counts, as place_expert
    places them, bit for bit: a slot goes to its expert's padded offset plus the expert's slots before it (in lower
    chunks, in its chunk before the program, in the program), so that no program reads more than one chunk of
    topk_ids. The slot that opens a block writes the block's expert, an expert's last slot its padding, program 0
    num_valid_ids. ROUTE_SLOTS divides HIST_CHUNK."""
    after_previous_launch(PDL)
    first = tl.program_id(0) * ROUTE_SLOTS
    chunk = first // HIST_CHUNK
    table, counts = chunk_table(chunk_counts_ptr, n_chunks, n_experts, EXPERT_BINS, MAX_CHUNKS)
    before = tl.sum(tl.where((tl.arange(0, MAX_CHUNKS) < chunk)[:, None], table, 0), axis=0)
    for start in range(chunk * HIST_CHUNK, first, COUNT_CHUNK):
        before += tl.histogram(slot_experts(topk_ids_ptr, start, first, EXPERT_BINS, COUNT_CHUNK), EXPERT_BINS)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    offsets = tl.cumsum(padded, axis=0) - padded
    if first == 0:
        tl.store(num_valid_ids_ptr, tl.sum(padded, axis=0))
        tl.store(num_valid_ids_ptr + 1, n_tokens)

    slots = first + tl.arange(0, ROUTE_SLOTS)
    experts = slot_experts(topk_ids_ptr, first, n_slots, EXPERT_BINS, ROUTE_SLOTS)
    valid = experts < n_experts  # slots past n_slots read as the last bin
    earlier = (slots[:, None] < slots[None, :]) & (experts[:, None] == experts[None, :])
    rank = tl.gather(before, experts, 0) + tl.sum(earlier.to(tl.int32), axis=0)
    offset = tl.gather(offsets, experts, 0)
    tl.store(sorted_ids_ptr + offset + rank, ((slots % TOPK) << 24) | (slots // TOPK), mask=valid)
    tl.store(sorted_expert_ids_ptr + (offset + rank) // BLOCK_M, experts, mask=valid & (rank % BLOCK_M == 0))
    count = tl.gather(counts, experts, 0)
    pad = tl.where(valid & (rank == count - 1), (count + BLOCK_M - 1) // BLOCK_M * BLOCK_M - count, 0)
    for row in range(0, tl.max(pad, axis=0)):
        tl.store(sorted_ids_ptr + offset + count + row, (TOPK << 24) | n_tokens, mask=row < pad)


@triton.jit
def route_whole_histogram(
    topk_ids_ptr,
    routing,
    n_tokens,
    n_experts,
    n_slots,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    EXPERT_BINS: tl.constexpr,
    SLOT_CHUNK: tl.constexpr,
    MAX_EXPERT_BLOCKS: tl.constexpr,
    COUNT_CHUNK: tl.constexpr,
):
    """Expert program_id(0)'s routing in a single routing launch: the whole histogram counted by this program
    (COUNT_CHUNK slots a step), then place_expert."""
    counts = expert_counts(topk_ids_ptr, n_slots, n_experts, EXPERT_BINS, COUNT_CHUNK)
    place_expert(counts, topk_ids_ptr, routing, n_tokens, n_slots, TOPK, BLOCK_M, SLOT_CHUNK, MAX_EXPERT_BLOCKS)


@triton.jit
def place_expert(
    counts,
    topk_ids_ptr,
    routing,
    n_tokens,
    n_slots,
    TOPK: tl.constexpr,
    BLOCK_M: tl.constexpr,
    SLOT_CHUNK: tl.constexpr,
    MAX_EXPERT_BLOCKS: tl.constexpr,
):
    """Expert program_id(0)'s routing from the whole histogram counts [EXPERT_BINS]: its slots in slot order after the
    lower experts' padded groups, its padding and its blocks' expert id; program 0 also writes num_valid_ids."""
    sorted_ids_ptr, sorted_expert_ids_ptr, num_valid_ids_ptr = routing
    pid = tl.program_id(0)
    bins = tl.arange(0, counts.shape[0])
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    offset = tl.sum(tl.where(bins < pid, padded, 0), axis=0)
    my_count = tl.sum(tl.where(bins == pid, counts, 0), axis=0)
    my_padded = tl.sum(tl.where(bins == pid, padded, 0), axis=0)
    if pid == 0:
        tl.store(num_valid_ids_ptr, tl.sum(padded, axis=0))
        tl.store(num_valid_ids_ptr + 1, n_tokens)
    placed = 0
    for start in range(0, n_slots, SLOT_CHUNK):
        offs, hit, rank = expert_slots(topk_ids_ptr, start, n_slots, pid, placed, SLOT_CHUNK)
        packed = ((offs % TOPK) << 24) | (offs // TOPK)
        tl.store(sorted_ids_ptr + offset + rank, packed, mask=hit)
        placed += tl.sum(hit.to(tl.int32), axis=0)
    pad = my_count + tl.arange(0, BLOCK_M)
    tl.store(sorted_ids_ptr + offset + pad, (TOPK << 24) | n_tokens, mask=pad < my_padded)
    blocks = tl.arange(0, MAX_EXPERT_BLOCKS)
    tl.store(sorted_expert_ids_ptr + offset // BLOCK_M + blocks, pid + 0 * blocks, mask=blocks < my_padded // BLOCK_M)


@triton.jit
def folds_tail(
    block, sorted_ids_ptr, num_valid_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M: tl.constexpr, FOLD: tl.constexpr
):
    """Whether block + 1 is a tail (at most FOLD real rows) of block's expert, which the program of block then folds
    (the Gluon stages' fold); only an expert's last block is partly filled, so a tail after a block of its expert is
    always folded."""
    start = (block + 1) * BLOCK_M
    inside = start < tl.load(num_valid_ids_ptr)
    same = tl.load(sorted_expert_ids_ptr + block + 1, mask=inside, other=-2) == tl.load(sorted_expert_ids_ptr + block)
    tail = (tl.load(sorted_ids_ptr + start + FOLD, mask=inside, other=0) & 0xFFFFFF) >= n_tokens
    return inside & same & tail


@triton.jit
def tail_folded(
    block, sorted_ids_ptr, num_valid_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M: tl.constexpr, FOLD: tl.constexpr
):
    """Whether block is a tail that the program of block - 1 folds (folds_tail), so that it has no program of its
    own."""
    previous = tl.maximum(block - 1, 0)
    return (block > 0) & folds_tail(
        previous, sorted_ids_ptr, num_valid_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M, FOLD
    )


@triton.jit
def skip_block(
    block, sorted_ids_ptr, num_valid_ids_ptr, n_tokens, BLOCK_M: tl.constexpr, ROWS: tl.constexpr, TAIL_M: tl.constexpr
):
    """Whether routing block `block` is not this launch's: past the valid rows, or, with TAIL_M > 0, the other
    launch's (at most TAIL_M real rows go to the tail launch, ROWS = TAIL_M; real rows come before padding)."""
    start = block * BLOCK_M
    skip = start >= tl.load(num_valid_ids_ptr)
    if TAIL_M > 0:
        is_tail = (tl.load(sorted_ids_ptr + start + TAIL_M) & 0xFFFFFF) >= n_tokens
        skip = skip | (is_tail != (ROWS < BLOCK_M))
    return skip


@triton.jit
def routing_block(block, sorted_ids_ptr, sorted_expert_ids_ptr, n_tokens, BLOCK_M: tl.constexpr, ROWS: tl.constexpr):
    """The first ROWS sorted rows of routing block `block`, their packed ids, tokens and which are real (padding holds
    token n_tokens), and the block's expert."""
    rows = block * BLOCK_M + tl.arange(0, ROWS)
    packed = tl.load(sorted_ids_ptr + rows)
    tokens = packed & 0xFFFFFF
    expert = tl.load(sorted_expert_ids_ptr + block).to(tl.int64)
    return rows, packed, tokens, tokens < n_tokens, expert


@triton.jit
def routing_weights(topk_weights_ptr, packed, tokens, valid, TOPK: tl.constexpr):
    """Each sorted row's routing weight (from routing_block's packed, tokens, valid); 0 for padding."""
    return tl.load(topk_weights_ptr + (tokens * TOPK + (packed >> 24)).to(tl.int64), mask=valid, other=0.0)


@triton.jit
def add_rows(out_ptrs, y, mask):
    """Stage 2's epilogue: y rounded to the output's dtype and added atomically (relaxed: the adds commute)."""
    tl.atomic_add(out_ptrs, y.to(out_ptrs.dtype.element_ty), mask=mask, sem="relaxed")
