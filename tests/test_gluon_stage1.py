"""The Gluon stage 1 (moe_triton/kernels/gluon_stage1.py, tiles with gluon1). Gluon has no CPU
interpreter, so on the CPU: the kernel compiles for sm_90 for every official shape's table tile and
its tail launch (wgmma not serialized, 16-byte cp.async, no spills in the K loop), a torch model of
its tiling (ring rows, the scale bytes of each step, the epilogue's columns) reproduces the decode
path's a2 bit for bit, and bad tiles are refused in one line. On an sm_90 GPU the kernel itself
runs against the decode path's a2 (bit for bit) and reference.ref_kernel, with poisoned scratch and
output, on small odd shapes; bench/h200/gluon_check.py checks the official ones."""

import pytest
import torch
from gluon_compile import compiled_launches
from layer_checks import GPU_CASES, assert_matches_reference, k_slot, small_case

from bench.h200.gluon_check import routed_a2
from bench.runner.case_args import SMOKE, case_shape
from bench.tune.tiles import case_tiles
from buffers import get_buffer
from moe_triton import decode as decode_launcher
from moe_triton import target
from moe_triton.fused_moe import fused_moe_triton
from moe_triton.kernels.decode import FAST_EXP
from moe_triton.routing import routing_buffers, routing_capacity
from moe_triton.tiles import TileConfig
from moe_triton.tiles_nvidia import GLUON_TUNED, TUNED, gluon_variant, static_tiles, tile_config
from problem.cases import TESTS
from reference import generate_input, quant_dequant_activation

ON_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
FAST = FAST_EXP.value
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def run(data, tiles):
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    return fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, tiles=tiles, native=False)


# ------------------------------------------------------------------------------- the tiling, in torch


def ring_row(r: torch.Tensor, d_inter: int) -> torch.Tensor:
    """The kernel's ring_row: warpgroup r // 64's group; per 16 rows 8 gate rows, then their up rows."""
    return (r // 64) * 32 + ((r % 64) // 16) * 8 + r % 8 + ((r // 8) % 2) * d_inter


def decoded_slot(words: torch.Tensor, scale_words: torch.Tensor, step: int, span: int) -> torch.Tensor:
    """A ring slot's weights [rows, 128] at K step `step` in k_slot order of span, times 2^-FAST_EXP,
    as the MMA warps decode them: code c of word t of 32-block j (column 32 j + 8 t + c) at its
    k_slot, its scale byte j of the step's int32 of scales."""
    rows = words.shape[0]
    w = words[:, step * 16 : (step + 1) * 16].to(torch.int64) & 0xFFFFFFFF  # 4 blocks x 4 words
    codes = torch.stack([(w >> (4 * c)) & 0xF for c in range(8)], dim=-1)  # [rows, 16 words, 8 codes]
    value = E2M1[codes & 7] * torch.where(codes >= 8, -1.0, 1.0)
    s = (scale_words[:, step].to(torch.int64)[:, None] >> (8 * torch.arange(4))) & 0xFF  # [rows, 4 blocks]
    value = value.view(rows, 4, 4, 8) * torch.exp2(s.double() - 127 - FAST)[:, :, None, None]
    out = torch.empty(rows, 128, dtype=torch.float64)
    out[:, k_slot(torch.arange(128), span)] = value.reshape(rows, 128).double()
    return out


def model_a2(data, tiles: TileConfig, a1: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """a2 on the real rows as the Gluon stage 1 tiles it: per (routing block, 32 NUM_WG columns)
    the ring rows of each K step decoded, exact sums (in float64, as exact as the kernel's fp32),
    each warpgroup's epilogue reading its gate and up rows and writing columns 8 warp + row."""
    hidden, w1, w1s, ids = data[0], data[1], data[3], data[10]
    n_tokens, d_hidden = hidden.shape
    n_experts, two_inter = w1.shape[0], w1.shape[1]
    d_inter, num_wg, block_m = two_inter // 2, tiles.block_n1 // 32, tiles.block_m
    words = w1.view(torch.uint8).reshape(n_experts * two_inter, d_hidden // 2).view(torch.int32)
    scale_words = w1s.view(torch.uint8).reshape(n_experts * two_inter, d_hidden // 32).view(torch.int32)
    sorted_ids, sorted_expert_ids, num_valid_ids = routing_buffers(ids.numel(), n_experts, block_m, hidden.device)
    a2 = torch.zeros(routing_capacity(ids.numel(), n_experts, block_m) * block_m, d_inter)
    for block in range(int(num_valid_ids[0]) // block_m):
        tokens = sorted_ids[block * block_m : (block + 1) * block_m] & 0xFFFFFF
        acts = torch.where((tokens < n_tokens)[:, None], a1[tokens.clamp(max=n_tokens - 1)].double(), 0.0)
        for col0 in range(0, d_inter, 32 * num_wg):
            rows = int(sorted_expert_ids[block]) * two_inter + col0 + ring_row(torch.arange(64 * num_wg), d_inter)
            acc = sum(
                decoded_slot(words[rows], scale_words[rows], i, tiles.slot_span1) @ acts[:, i * 128 : (i + 1) * 128].T
                for i in range(d_hidden // 128)
            ).float()
            for g in range(num_wg):
                # [warp, gate or up, row, token]: the accumulator rows of warpgroup g
                gate, up = acc[64 * g : 64 * (g + 1)].reshape(4, 2, 8, block_m).unbind(1)
                h = (gate / (1 + torch.exp(-gate.double()).float()) * up).bfloat16().float()
                cols = col0 + 32 * g + 8 * torch.arange(4)[:, None] + torch.arange(8)[None, :]
                # SPEC 3.3 on each token's 32 columns (one block), times 2^FAST_EXP
                values = quant_dequant_activation(h.permute(2, 0, 1).reshape(block_m, 32)) * 2.0**FAST
                a2[block * block_m : (block + 1) * block_m, k_slot(cols.flatten(), tiles.slot_span2)] = values
    return a2[real].bfloat16()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the model reads the interpreter's a1 and a2")
@pytest.mark.parametrize(
    "case, block_n, span",
    [pytest.param(SMOKE[c], n, 32, id=f"smoke{c}-{n}") for c in (0, 1) for n in (32, 64, 128)]
    + [pytest.param(SMOKE[0], n, 128, id=f"smoke0-{n}-span128") for n in (32, 128)],
)
def test_a_torch_model_of_the_gluon_tiling_gives_the_decode_paths_a2_bit_for_bit(case, block_n, span):
    data = generate_input(**case)
    tiles = case_tiles(data).replace(slot_span1=span, slot_span2=span)
    run(data, tiles)
    real, want = routed_a2(data, tiles.block_m)
    # the interpreter's a1 is the portable path's (no 2^FAST_EXP): scale it as the GPU's is
    a1 = get_buffer("a1", tuple(data[0].shape), torch.bfloat16, data[0].device)
    got = model_a2(data, gluon_variant(tiles, block_n, stages=3, parts=2), a1.double() * 2.0**FAST, real)
    assert torch.equal(got.float() * 2.0**-FAST, want.float())


@pytest.mark.parametrize("block_k, split", [(128, 1), (128, 2), (128, 4), (256, 2), (256, 4), (512, 4)])
def test_each_parts_codes_take_their_own_blocks_scale_byte(block_k, split):
    # the kernel's addressing: fill_slot copies scale words s_step + j (s_step = i block_k / 128) into the slot's
    # rows, mma_step reads row part K_PART / 128 of them, decoded_weights byte (part K_PART / 32) % 4 + word / 4
    scale_words, k_part = block_k // 128, block_k // split
    for i in range(3):
        for part in range(split):
            for word in range(k_part // 8):
                scale_word = i * scale_words + part * k_part // 128
                byte = (part * (k_part // 32)) % 4 + word // 4
                block = (i * block_k + part * k_part + 8 * word) // 32  # the 32-block of the word's codes
                assert (scale_word, byte) == divmod(block, 4)


@pytest.mark.parametrize("block_k, split", [(128, 1), (128, 2), (128, 4), (256, 2), (256, 4), (512, 4)])
def test_each_part_of_span_128_decodes_the_columns_its_activations_hold(block_k, split):
    # decoded_blocks: part p of its 128 columns takes words q T + u of each 32-block B (q = p % (4 / T), T words a
    # block in the part), with block B's scale byte B; its codes must be the activation columns that k_slot of span
    # 128 puts in the part's slots, which the wgmma pairs them with
    k_part = block_k // split
    words_a_block = k_part // 32
    for i in range(3):
        for part in range(split):
            start = i * block_k + part * k_part  # the part's first slot
            group, q = start // 128, part % (4 // words_a_block)
            columns = []
            for block in range(4):
                for u in range(words_a_block):
                    word = 4 * block + q * words_a_block + u  # of the group's 16
                    columns += [group * 128 + 8 * word + c for c in range(8)]
                    assert (group * 128 + 8 * word) // 32 == 4 * group + block  # the block of scale byte `block`
            slots = k_slot(torch.tensor(columns), 128)
            assert sorted(slots.tolist()) == list(range(start, start + k_part)), (block_k, split, part)


# ---------------------------------------------------------------------------------- compiled, sm_90


@pytest.mark.cpu_only
def test_the_table_tiles_compile_for_sm90_unserialized_and_without_spills_in_the_k_loop():
    from problem.cases import BENCHMARKS

    tuned = [(c, GLUON_TUNED.get(case_shape(c))) for c in BENCHMARKS]
    # the one-warpgroup rows (no partitions) are the next test's
    pairs = [(c, tiles) for c, tiles in tuned if getattr(tiles, "gluon1", 0) and tiles.block_n1 > 32]
    # and two programs an SM (80 registers at launch), as the selection's variants run it
    e257 = next(c for c in BENCHMARKS if c["nroutedexperts"] == 256 and c["bs"] == 512)
    pairs.append((e257, gluon_variant(TUNED[case_shape(e257)], 64, stages=4, parts=2, regs=80)))
    launches = compiled_launches(pairs, "moe_gluon_stage1_kernel")

    # full blocks' launch and the tails' (one launch where the overlap needs the fold to take them)
    def tails(t):
        return (0, 1) if t.tail_m and not t.overlap else (0,)

    assert len(launches) == sum(len(tails(t)) for _, t in pairs)
    # (h columns, K step, folded): a folded tile's full blocks' launch issues the tail block's wgmmas too
    kinds = [(t.block_n1, t.block_k1, t.fold1 and not tail) for _, t in pairs for tail in tails(t)]
    assert any(block_k == 256 for _, block_k, _ in kinds)
    for got, (block_n, block_k, folded) in zip(launches, kinds, strict=True):
        # each MMA warpgroup's K step: two parts of four (eight at K 256) k16 wgmmas, waited for twice a step;
        # ptxas serializing them would wait after every one
        want = (block_n // 32) * (block_k // 16) * (2 if folded else 1)
        assert got["mma"] == want and got["waits"] * 4 <= got["mma"], got
        assert got["cp_async_16"] and got["register_split"], got  # 16-byte cp.async, setmaxnreg
        # triton 3.6 spills a few values of the fold's second ring outside the K loop
        assert got["loop"] and got["k_loop_spills" if folded else "loop_spills"] == 0, got
        assert got["shared"] <= 232448, got
    # a register budget is the launch's (two programs of 384 threads an SM at 80)
    budgets = [(t.max_regs1, t.block_n1 // 32) for _, t in pairs for _ in tails(t)]
    assert any(budget for budget, _ in budgets)
    for got, (budget, num_wg) in zip(launches, budgets, strict=True):
        assert got["registers"] == (budget or decode_launcher.gluon_launch_registers(num_wg)), got


@pytest.mark.cpu_only
def test_one_warpgroup_compiles_for_sm90_without_a_loader_partition_and_with_paired_waits():
    from problem.cases import BENCHMARKS

    # E-257 bs-16 and E-33 bs-16: 16-row blocks, 56 K steps; paired, one wait every two steps
    cases = [c for c in BENCHMARKS if c["bs"] == 16]
    pairs = [
        (c, gluon_variant(TUNED[case_shape(c)], 32, stages=4, parts=2, paired=paired))
        for c in cases
        for paired in (0, 1)
    ]
    launches = compiled_launches(pairs, "moe_gluon_stage1_kernel")
    assert len(launches) == len(pairs)
    for got, (_, tiles) in zip(launches, pairs, strict=True):
        # a step's two parts of four k16 wgmmas, waited for twice; paired, the two steps' loop and
        # the odd step's tail (none at 56 steps, compiled all the same)
        assert (got["mma"], got["waits"]) == ((24, 6) if tiles.paired1 else (8, 2)), got
        assert got["cp_async_16"] and not got["register_split"], got  # the warpgroup loads its own ring
        assert got["loop"] and got["loop_spills"] == 0 and got["spills"] == 0, got
        # four programs an SM: at most 128 registers a thread and a quarter of the shared memory
        assert got["registers"] <= 128 and got["shared"] <= 232448 // 4, got


@pytest.mark.cpu_only
@pytest.mark.parametrize("block_k, stages, parts, most_registers", [(256, 3, (2, 4), 128), (512, 2, (4,), 168)])
def test_one_warpgroup_compiles_for_sm90_with_long_k_steps(block_k, stages, parts, most_registers):
    from problem.cases import BENCHMARKS

    # E-257 bs-16's and bs-512's tiles: steps of 256 in two or four parts, of 512 in four (each part's scales one
    # int32 word); with 256, the static table's one-warpgroup rows as well
    cases = [c for c in BENCHMARKS if c["nroutedexperts"] == 256 and c["bs"] in (16, 512)]
    pairs = [
        (c, gluon_variant(TUNED[case_shape(c)], 32, stages=stages, parts=p, paired=w, block_k=block_k))
        for c in cases
        for p in parts
        for w in (0, 1)
    ]
    tuned = [(c, GLUON_TUNED.get(case_shape(c))) for c in BENCHMARKS]
    table = [(c, tiles) for c, tiles in tuned if getattr(tiles, "block_n1", 0) == 32 and tiles.gluon1]
    assert table and all(tiles.block_k1 == 256 for _, tiles in table)
    pairs += table if block_k == 256 else []
    launches = compiled_launches(pairs, "moe_gluon_stage1_kernel")
    assert len(launches) == len(pairs)
    for got, (_, tiles) in zip(launches, pairs, strict=True):
        # block_k / 16 k16 wgmmas a step; paired, the two steps' loop and the odd step's tail
        assert got["mma"] == (3 if tiles.paired1 else 1) * block_k // 16 and got["waits"] * 4 <= got["mma"], got
        assert got["cp_async_16"] and not got["register_split"], got
        assert got["loop"] and got["loop_spills"] == 0 and got["spills"] == 0, got
        # four programs an SM by registers at 256, three at 512; two by shared memory at least
        assert got["registers"] <= most_registers and got["shared"] <= 232448 // 2, got


@pytest.mark.cpu_only
def test_two_test_shapes_compile_with_both_widths():
    pairs = [
        (case, gluon_variant(tile_config(case_shape(case)), block_n, stages=3, parts=2))
        for case in TESTS[:2]
        for block_n in (64, 128)
    ]
    assert len(compiled_launches(pairs, "moe_gluon_stage1_kernel")) >= len(pairs)


# ------------------------------------------------------------------------------------- refusals


def test_bad_gluon_tiles_are_refused_in_one_line(monkeypatch):
    data = generate_input(**small_case())
    tiles = gluon_variant(case_tiles(data), 64, stages=3, parts=2)
    if not ON_SM90:
        with pytest.raises(ValueError, match=r"^tiles: gluon1 needs an NVIDIA sm_90 GPU"):
            run(data, tiles)
        monkeypatch.setattr(target, "gluon_kernels", lambda device: True)
    for bad, field in (
        (tiles.replace(gluon1=3), "gluon1 must be"),
        (tiles.replace(block_n1=256), "block_n1"),
        (tiles.replace(block_n1=32), "(or 32 with 4)"),  # one warpgroup is 4 warps
    ):
        with pytest.raises(ValueError, match=r"^tiles: gluon1") as err:
            run(data, bad)
        assert field in str(err.value) and "\n" not in str(err.value)
    for bad, says in (
        (tiles.replace(paired1=2), "^tiles: paired1 must be 0 or 1, with gluon1 and no fold1, not 2$"),
        (tiles.replace(gluon1=0, paired1=1), "^tiles: paired1 must be 0 or 1"),
        (gluon_variant(tiles, 32, 4, 2).replace(fold1=1), r"^tiles: gluon1 with .*warpgroup\) takes no fold1$"),
        # K steps of 256 in two or four parts only (each part's scales one int32), of 512 in four on one
        # warpgroup only, and of 128, 256 or 512 only
        (gluon_variant(tiles, 32, 4, 1, block_k=256), r"^tiles: gluon1 .*\(or 256 in 2 or 4 parts, .*not 32, 4, 256$"),
        (gluon_variant(tiles, 64, 4, 1, block_k=256), r"^tiles: gluon1 needs block_n1 64 or 128 .*not 64, 8, 256$"),
        (gluon_variant(tiles, 64, 4, 4, block_k=512), r"^tiles: gluon1 needs block_n1 64 or 128 .*not 64, 8, 512$"),
        (gluon_variant(tiles, 32, 4, 2, block_k=512), r"^tiles: gluon1 .*in 4 with one warpgroup\), not 32, 4, 512$"),
        (gluon_variant(tiles, 32, 4, 4, block_k=1024), r"^tiles: gluon1 needs block_n1 64 or 128 .*not 32, 4, 1024$"),
    ):
        with pytest.raises(ValueError, match=says):
            run(data, bad)
    for block_n, regs, most in ((64, 60, 168), (64, 48, 168), (64, 176, 168), (128, 104, 96)):
        says = f"^tiles: max_regs1 with gluon1 must be 0 or a multiple of 8 from 56 to {most}, not {regs}$"
        with pytest.raises(ValueError, match=says):
            run(data, tiles.replace(block_n1=block_n, max_regs1=regs))


@pytest.mark.parametrize(
    "num_wg, budget", [(2, r) for r in (0, 56, 64, 72, 80, 96, 168)] + [(4, r) for r in (0, 56, 96)]
)
def test_a_register_budget_is_split_within_the_launchs_registers(budget, num_wg):
    split = decode_launcher.gluon_registers(budget, num_wg)
    mma, loader = split["MMA_REGS"], split["LOADER_REGS"]
    launch = split.get("maxnreg", decode_launcher.gluon_launch_registers(num_wg))
    assert launch * 128 * (num_wg + 1) <= 65536
    assert (budget == 0) == ("maxnreg" not in split)
    # setmaxnreg takes multiples of 8 from 24 to 256; the default partition (MMA warpgroup 0) gets
    # what the workers leave of the launch's registers, at least as many as each of them
    default = (num_wg + 1) * launch - (num_wg - 1) * mma - loader
    assert all(24 <= r <= 256 and r % 8 == 0 for r in (mma, loader)), split
    assert mma <= default <= 256, split
    if budget:
        assert loader == (56 if budget >= 72 else 40) and default - mma < 8 * num_wg, split


def test_the_static_table_runs_the_gluon_stages_only_on_sm90():
    for key, tiles in GLUON_TUNED.items():
        assert static_tiles(key, gluon=True) == tiles and (tiles.gluon1 or tiles.gluon2)
        assert static_tiles(key, gluon=False) == TUNED[key]
        # the decode table's routing, or, where both stages are Gluon ones, their own routing blocks (no
        # tails); each stage the decode table's or a Gluon one
        routing = (tiles.block_m, tiles.tail_m)
        own = tiles.gluon1 and tiles.gluon2 and tiles.tail_m == 0
        assert routing == (TUNED[key].block_m, TUNED[key].tail_m) or own
        stage1 = ("block_n1", "block_k1", "warps1", "stages1", "max_regs1")
        stage2 = ("block_n2", "block_k2", "warps2", "stages2", "n_tiles2", "max_regs2")
        for gluon, fields in ((tiles.gluon1, stage1), (tiles.gluon2, stage2)):
            assert gluon or all(getattr(tiles, f) == getattr(TUNED[key], f) for f in fields)


# ------------------------------------------------------------------------------------------- GPU


@pytest.mark.skipif(not ON_SM90, reason="the Gluon stage 1 runs on sm_90 GPUs")
@pytest.mark.parametrize("block_n", [32, 64, 128])
@pytest.mark.parametrize("case", GPU_CASES)
def test_on_the_gpu_a2_is_the_decode_paths_bit_for_bit_and_the_layer_the_references(case, block_n):
    from bench.h200.harness import poison

    data = generate_input(**case)
    before = [t.clone() for t in data[:-1]]
    tiles = case_tiles(data)
    run(data, tiles)
    real, want = routed_a2(data, tiles.block_m)
    # two programs an SM (80 registers a thread) only where the accumulator is small; one wgmma wait
    # every two K steps (paired), whose odd step the small shapes' odd K step counts reach; K steps of 256
    budgets = ((3, 2, 0, 0, 128), (2, 4, 0, 0, 128), (4, 2, 0, 1, 128), (3, 2, 0, 0, 256), (2, 4, 0, 1, 256))
    budgets += ((3, 2, 80, 0, 128),) if block_n == 64 and tiles.block_m <= 32 else ()
    # one warpgroup also in K steps of 512 where they divide d_hidden (smoke0's one step: paired's odd tail)
    budgets += ((2, 4, 0, 1, 512),) if block_n == 32 and data[0].shape[1] % 512 == 0 else ()
    for stages, split, regs, paired, block_k in budgets:
        poison(data[0].shape)
        out = run(data, gluon_variant(tiles, block_n, stages, split, regs, paired, block_k))
        assert torch.equal(routed_a2(data, tiles.block_m)[1].view(torch.int16), want.view(torch.int16))
        assert_matches_reference(data, out)
    for t, b in zip(data[:-1], before, strict=True):
        assert torch.equal(t.view(torch.uint8), b.view(torch.uint8))


# ----------------------------------------------------------------------------- the fold (fold1 = 1)


def test_fold_needs_the_gluon_stage_1_and_tail_tiles(monkeypatch):
    data = generate_input(**small_case())
    monkeypatch.setattr(target, "gluon_kernels", lambda device: True)
    tiles = gluon_variant(case_tiles(data), 64, stages=3, parts=2).replace(fold1=1, tail_m=0)
    with pytest.raises(ValueError, match=r"^tiles: fold1 needs gluon1 and tail_m, not 2 and 0$"):
        run(data, tiles)


@pytest.mark.skipif(not ON_SM90, reason="the Gluon stage 1 runs on sm_90 GPUs")
@pytest.mark.parametrize("block_n", [64, 128])
@pytest.mark.parametrize("case", [SMOKE[2], small_case(bs=40, nroutedexperts=4)], ids=["smoke2", "bs40"])
def test_on_the_gpu_the_fold_gives_the_decode_paths_a2_bit_for_bit(case, block_n):
    from bench.h200.harness import poison

    data = generate_input(**case)
    tiles = case_tiles(data).replace(block_m=32, tail_m=16)
    run(data, tiles)
    want = routed_a2(data, 32)[1]
    for block_k in (128, 256):
        poison(data[0].shape)
        out = run(data, gluon_variant(tiles, block_n, 3, 2, block_k=block_k).replace(fold1=1))
        assert torch.equal(routed_a2(data, 32)[1].view(torch.int16), want.view(torch.int16))
        assert_matches_reference(data, out)
