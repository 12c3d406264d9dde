"""The Gluon stage 2 (moe_triton/kernels/gluon_stage2.py, tiles with gluon2). Gluon has no CPU
interpreter, so on the CPU: the kernel compiles for sm_90 for every table tile that names it and its
tail launch (wgmma not serialized, 16-byte cp.async, no spills, bf16 pairs per atomic), a torch model
of its tiling (ring rows, each step's scale bytes, the epilogue's columns and weights) gives the
products of the plain down GEMM bit for bit and sums to the decode path's output, a model of the
fold's programs multiplies every routing block once, and bad tiles are refused in one line. On an
sm_90 GPU the kernel itself runs against reference.ref_kernel and the decode path's output (with the
fold too), with poisoned scratch and output, on small odd shapes; bench/h200/gluon_check.py checks
the official ones."""

from math import gcd

import pytest
import torch
from gluon_compile import compiled_launches
from layer_checks import GPU_CASES, assert_matches_reference, experts_routing, fold_rule, real_blocks, small_case
from test_gluon_stage1 import FAST, ON_SM90, decoded_slot, k_slot, run

from bench.h200.gluon_check import routed_a2
from bench.runner.case_args import SMOKE, case_shape
from bench.tune.tiles import case_tiles
from moe_triton import target
from moe_triton.routing import routing_buffers
from moe_triton.tiles import TileConfig
from moe_triton.tiles_nvidia import GLUON_TUNED, gluon2_variant, gluon_variant
from mxfp4.codec import dequantize
from reference import generate_input


def stage2_variant(
    tiles: TileConfig, d_hidden: int, block_n: int, stages: int, parts: int, n_tiles: int, regs: int = 0
):
    """gluon2_variant with n_tiles cut to divide d_hidden's tiles (the small shapes have few)."""
    return gluon2_variant(tiles, block_n, stages, parts, gcd(n_tiles, d_hidden // block_n), regs)


# ------------------------------------------------------------------------------- the tiling, in torch


def ring_col(r: torch.Tensor) -> torch.Tensor:
    """The kernel's _ring_col: within each warp's 16 rows, rows q and q + 8 are columns 2q, 2q + 1."""
    return (r // 16) * 16 + (r % 8) * 2 + (r // 8) % 2


def model_products(data, tiles: TileConfig, a2: torch.Tensor) -> torch.Tensor:
    """[sorted rows, d_hidden]: each sorted row's bf16 product (its routing weight times its down
    GEMM) as the Gluon stage 2 tiles it: per (routing block, tile of 64 NUM_WG columns) the ring
    rows of each K step decoded, exact sums (float64, as exact as the kernel's fp32 of exact
    products), each warpgroup's epilogue reading [warp, q or q + 8, q, token] as columns
    16 warp + 2q (+ 1). a2 holds the kernel's input (times 2^FAST_EXP)."""
    hidden, w2, w2s, topk_weights, ids = data[0], data[2], data[4], data[9], data[10]
    n_tokens, d_hidden = hidden.shape
    n_experts, d_inter = w2.shape[0], w2.shape[2] * 2
    block_m, num_wg = tiles.block_m, tiles.block_n2 // 64
    words = w2.view(torch.uint8).reshape(n_experts * d_hidden, d_inter // 2).view(torch.int32)
    scale_words = w2s.view(torch.uint8).reshape(n_experts * d_hidden, d_inter // 32).view(torch.int32)
    sorted_ids, sorted_expert_ids, num_valid_ids = routing_buffers(ids.numel(), n_experts, block_m, hidden.device)
    out = torch.zeros(int(num_valid_ids[0]), d_hidden, dtype=torch.bfloat16)
    for block in range(int(num_valid_ids[0]) // block_m):
        packed = sorted_ids[block * block_m : (block + 1) * block_m]
        tokens, slots = packed & 0xFFFFFF, packed >> 24
        real = tokens < n_tokens
        # padding rows hold token n_tokens and no slot: weight 0, as the kernel's masked load
        picked = topk_weights[tokens.clamp(max=n_tokens - 1), slots.clamp(max=topk_weights.shape[1] - 1)]
        weight = torch.where(real, picked, 0.0)
        acts = a2[block * block_m : (block + 1) * block_m].double()
        for col0 in range(0, d_hidden, 64 * num_wg):
            rows = int(sorted_expert_ids[block]) * d_hidden + col0 + ring_col(torch.arange(64 * num_wg))
            acc = sum(
                decoded_slot(words[rows], scale_words[rows], i, tiles.slot_span2) @ acts[:, i * 128 : (i + 1) * 128].T
                for i in range(d_inter // 128)
            ).float()
            for g in range(num_wg):
                # [warp, q or q + 8, q, token] -> [token, warp, q, half]: columns 16 warp + 2q + half
                pairs = acc[64 * g : 64 * (g + 1)].reshape(4, 2, 8, block_m).permute(3, 0, 2, 1)
                y = (pairs * weight[:, None, None, None]).bfloat16().reshape(block_m, 64)
                out[block * block_m : (block + 1) * block_m, col0 + 64 * g : col0 + 64 * (g + 1)] = y
    return out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the model reads the interpreter's a2")
@pytest.mark.parametrize("block_n, span", [(128, 32), (256, 32), (128, 128)])
def test_a_torch_model_of_the_gluon_stage_2_tiling_gives_the_plain_products_and_the_decode_output(block_n, span):
    data = generate_input(**SMOKE[0])
    tiles = case_tiles(data).replace(slot_span2=span)
    out = run(data, tiles)
    hidden, w2, w2s, topk_weights, ids = data[0], data[2], data[4], data[9], data[10]
    n_tokens, d_hidden = hidden.shape
    # the interpreter's a2 is the portable path's (no 2^FAST_EXP): scale it as the GPU's is
    real, a2_real = routed_a2(data, tiles.block_m)
    routing = routing_buffers(ids.numel(), w2.shape[0], tiles.block_m, hidden.device)
    sorted_ids, sorted_expert_ids, num_valid_ids = routing
    a2 = torch.zeros(int(num_valid_ids[0]), a2_real.shape[1])
    a2[real] = a2_real.float()
    got = model_products(data, stage2_variant(tiles, d_hidden, block_n, 3, 2, 4), a2.double() * 2.0**FAST)
    # the plain down GEMM of each real sorted row: a2's columns back in natural order, w2 dequantized
    tokens, slots = sorted_ids[real] & 0xFFFFFF, sorted_ids[real] >> 24
    experts = sorted_expert_ids[real // tiles.block_m].long()
    natural = a2[real][:, k_slot(torch.arange(a2.shape[1]), span)].double()
    weights = dequantize(w2.reshape(-1, w2.shape[2]), w2s).reshape(*w2.shape[:2], -1).double()
    plain = torch.einsum("rk,rnk->rn", natural, weights[experts]).float() * topk_weights[tokens, slots][:, None]
    assert torch.equal(got[real].view(torch.int16), plain.bfloat16().view(torch.int16))
    # the products summed per token are the decode path's output, up to the order of its bf16 adds
    summed = torch.zeros(n_tokens, d_hidden, dtype=torch.float64).index_add_(0, tokens, got[real].double())
    assert torch.allclose(out.double(), summed, rtol=2**-6, atol=1e-3 * float(summed.abs().max()))


# ---------------------------------------------------------------------------------- compiled, sm_90


@pytest.mark.cpu_only
def test_the_table_tiles_compile_for_sm90_unserialized_without_spills_and_with_paired_atomics():
    from problem.cases import BENCHMARKS

    tuned = [(c, GLUON_TUNED.get(case_shape(c))) for c in BENCHMARKS]
    pairs = [(c, tiles) for c, tiles in tuned if getattr(tiles, "gluon2", 0)]
    assert pairs, "no table tile runs the Gluon stage 2"
    launches = compiled_launches(pairs, "moe_gluon_stage2_kernel")
    assert len(launches) == sum(2 if t.tail_m else 1 for _, t in pairs)  # full blocks' launch and the tails'
    # (width, wgmmas a step): a folding launch issues each step's wgmmas twice, its tail launch once
    kinds = [(t.block_n2, 2 if t.fold2 and not tail else 1) for _, t in pairs for tail in range(2 if t.tail_m else 1)]
    for got, (block_n, folds) in zip(launches, kinds, strict=True):
        # each MMA warpgroup's K step: two parts of four k16 wgmmas, waited for twice a step
        assert got["mma"] == (block_n // 64) * 8 * folds and got["waits"] * 4 <= got["mma"], got
        assert got["cp_async_16"] and got["register_split"] and got["paired_atomics"], got
        # triton 3.6 spills one 64-bit value of each 104-register MMA warpgroup (four of them)
        # once per tile, a store at its start and a load in its epilogue; 3.9 nothing
        assert got["loop"] and got["k_loop_spills"] == 0 and got["shared"] <= 232448, got
        assert got["spills"] <= (2 * (block_n // 64 - 1) if block_n == 256 else 0), got


@pytest.mark.cpu_only
def test_the_fold_compiles_for_sm90_with_a_second_wgmma_a_step_and_no_spills():
    # I-2048's table tile with the fold: the full blocks' launch issues each step's wgmmas twice (the block's
    # rows, then the folded tail's on the same decoded weights), still one program an SM; the tail launch as before
    from problem.cases import BENCHMARKS

    case = next(c for c in BENCHMARKS if c["dexpert"] == 2048)
    tiles = GLUON_TUNED[case_shape(case)].replace(fold2=0)
    assert tiles.gluon2 and tiles.tail_m, "the I-2048 row no longer runs the Gluon stage 2 with tails"
    plain, tail = compiled_launches([(case, tiles)], "moe_gluon_stage2_kernel")
    main, folded_tail = compiled_launches([(case, tiles.replace(fold2=1))], "moe_gluon_stage2_kernel")
    assert main["mma"] == 2 * plain["mma"] and main["waits"] * 4 <= main["mma"], main
    assert main["k_loop_spills"] == 0 and main["spills"] == 0 and main["shared"] <= 232448, main
    assert main["cp_async_16"] and main["register_split"] and main["paired_atomics"], main
    assert folded_tail["mma"] == tail["mma"] and folded_tail["spills"] == 0, folded_tail


# ------------------------------------------------------------------------------ the fold, in Python


def stage2_programs(routing, n_tokens: int, block_m: int, tail_m: int, fold: int) -> list[list[int]]:
    """moe_gluon_stage2_kernel's programs of a column group over both launches, in Python (skip_block, folds_tail and
    tail_folded): per program the routing blocks it multiplies."""
    folding = fold_rule(routing, n_tokens, block_m, fold)
    sorted_ids, valid = routing[0].tolist(), int(routing[2][0])
    programs = []
    for rows in (block_m, tail_m) if tail_m else (block_m,):
        for b in range(len(routing[1])):
            is_tail = tail_m and (sorted_ids[b * block_m + tail_m] & 0xFFFFFF) >= n_tokens
            mine = b * block_m < valid and (not tail_m or is_tail == (rows < block_m))
            if rows < block_m and b > 0 and folding(b - 1):
                mine = False  # the tail launch leaves a folded tail to the program before it
            if mine:
                programs.append([b] + ([b + 1] if rows == block_m and folding(b) else []))
    return programs


@pytest.mark.parametrize("fold", [0, 16])
def test_a_model_of_the_stage_2_fold_multiplies_every_block_once(triton_device, fold):
    """Experts of 0, 5 (a tail no block folds), 16, 40 (a full block and a folded tail), 50 (a last block of more
    than 16 rows) and 64 rows, in 32-row blocks with 16-row tails: over the full blocks' launch and the tail
    launch every block with real rows is multiplied by one program, a folded tail by its full block's."""
    routing, n_tokens = experts_routing([0, 5, 16, 40, 50, 64], 32, triton_device)
    programs = stage2_programs(routing, n_tokens, 32, 16, fold)
    assert sorted(b for blocks in programs for b in blocks) == real_blocks(routing, n_tokens, 32)
    assert sum(len(blocks) == 2 for blocks in programs) == (1 if fold else 0)  # the 40-row expert's tail


# ------------------------------------------------------------------------------------- refusals


def test_bad_gluon_stage_2_tiles_are_refused_in_one_line(monkeypatch):
    data = generate_input(**small_case())
    tiles = stage2_variant(case_tiles(data), data[0].shape[1], 128, 3, 2, 2)
    if not ON_SM90:
        with pytest.raises(ValueError, match=r"^tiles: gluon2 needs an NVIDIA sm_90 GPU"):
            run(data, tiles)
        monkeypatch.setattr(target, "gluon_kernels", lambda device: True)
    bad_tiles = (
        (tiles.replace(gluon2=3), "gluon2 must be"),
        (tiles.replace(block_n2=64), "block_n2 128 or 256"),
        (tiles.replace(n_tiles2=3), "N (256) of 384"),
    )
    for bad, says in bad_tiles:
        with pytest.raises(ValueError, match=r"^tiles: gluon2") as err:
            run(data, bad)
        assert says in str(err.value) and "\n" not in str(err.value)


def test_fold2_needs_the_gluon_stage_2_and_tail_tiles(monkeypatch):
    data = generate_input(**small_case())
    monkeypatch.setattr(target, "gluon_kernels", lambda device: True)
    tiles = stage2_variant(case_tiles(data), data[0].shape[1], 128, 3, 2, 2).replace(block_m=32)
    for bad, says in (
        (tiles.replace(fold2=1), "not 1 with 2 and 0"),
        (tiles.replace(fold2=2, tail_m=16), "not 2 with 2 and 16"),
        (tiles.replace(fold2=1, gluon2=0, tail_m=16), "not 1 with 0 and 16"),
    ):
        with pytest.raises(ValueError, match=r"^tiles: fold2 must be 0 or 1, and 1 only with gluon2 and tail_m") as err:
            run(data, bad)
        assert says in str(err.value) and "\n" not in str(err.value)


# ------------------------------------------------------------------------------------------- GPU


@pytest.mark.skipif(not ON_SM90, reason="the Gluon stage 2 runs on sm_90 GPUs")
@pytest.mark.parametrize("block_n", [128, 256])
@pytest.mark.parametrize("case", GPU_CASES)
def test_on_the_gpu_the_gluon_stage_2_gives_the_decode_paths_output_and_the_references(case, block_n):
    from bench.h200.harness import poison

    data = generate_input(**case)
    before = [t.clone() for t in data[:-1]]
    tiles = case_tiles(data)
    want = run(data, tiles)
    one_slot = data[10].shape[1] == 1  # one product per output element: no order of adds to differ
    # two programs an SM (80 registers a thread) with two MMA warpgroups
    variants = ((3, 2, 2, 0), (2, 4, 1, 0), (4, 1, 4, 0)) + (((3, 2, 2, 80),) if block_n == 128 else ())
    for stages, split, n_tiles, regs in variants:
        poison(data[0].shape)
        out = run(data, stage2_variant(tiles, data[0].shape[1], block_n, stages, split, n_tiles, regs))
        assert_matches_reference(data, out)
        if one_slot:
            assert torch.equal(out.view(torch.int16), want.view(torch.int16))
        else:
            # the same products; the order of the bf16 adds into each element differs, and with it
            # the rounding of partial sums up to the largest of them (about the output's largest)
            assert torch.allclose(out.float(), want.float(), rtol=2**-5, atol=2**-5 * float(want.abs().max()))
    for t, b in zip(data[:-1], before, strict=True):
        assert torch.equal(t.view(torch.uint8), b.view(torch.uint8))


@pytest.mark.parametrize(
    "argv, says",
    [
        (["time", "--splits", "3"], "--splits [3]: each must be one of [1, 2, 4]"),
        (["time", "--block-ns", "96"], "--block-ns [96]: each must be one of [32, 64, 128]"),
        (["time", "--block-ns", "32", "--fold"], "--block-ns 32 (one warpgroup) takes no --fold"),
        (["time", "--paired", "1", "--fold"], "--paired [1]: 0 or 1, and 0 with --fold"),
        (["check", "--stages", "1"], "--stages [1]: ring slots must be at least 2"),
        (["time", "--regs", "60"], "--regs [60]: each must be 0 or a multiple of 8 from 56 to 168"),
        (
            ["time", "--regs", "104", "--block-ns", "128"],
            "--regs 104: --block-ns 128 (four MMA warpgroups) takes at most 96",
        ),
        (["time", "--stage2", "128-4-2"], "--stage2 128-4-2: expected N-S-P-T or N-S-P-T-R, four or five integers"),
        (
            ["time", "--stage2", "128-4-2-4-60"],
            "--stage2 128-4-2-4-60: R must be 0 or a multiple of 8 from 56 to 168 (N 128) or 96 (N 256)",
        ),
        (
            ["time", "--stage2", "64-4-2-4"],
            "--stage2 64-4-2-4: N must be 128 or 256, S at least 2, P 1, 2 or 4, T divide 7168 / N",
        ),
        (
            ["time", "--stage2", "256-4-2-3"],
            "--stage2 256-4-2-3: N must be 128 or 256, S at least 2, P 1, 2 or 4, T divide 7168 / N",
        ),
        (["check", "--stage1-variants", "0"], "--stage1-variants 0 needs --stage2 variants"),
        (["time", "--combine"], "--combine needs --stage2 variants"),
        (["time", "--tail-m", "32"], "--tail-m 32: needs --block-m and a power of two from 16 to below it"),
        (
            ["time", "--block-m", "64", "--tail-m", "64"],
            "--tail-m 64: needs --block-m and a power of two from 16 to below it",
        ),
    ],
)
def test_gluon_check_refuses_a_variant_it_cannot_run_in_one_line(argv, says, capsys):
    from bench.h200 import gluon_check

    assert gluon_check.main(argv) == 2
    assert capsys.readouterr().err.strip() == f"python -m bench.h200.gluon_check: error: {says}"


def test_gluon_check_builds_its_variants_over_the_static_tile_each_stage_1_variant_and_other_routing():
    from argparse import Namespace

    from bench.h200.gluon_check import base_tiles, variants
    from problem.cases import BENCHMARKS

    case = next(c for c in BENCHMARKS if (c["dexpert"], c["bs"]) == (512, 512))
    decode, static = base_tiles(case)
    given = dict(
        block_ns=[64],
        stages=[4],
        splits=[2],
        regs=[0],
        stage2=["256-4-2-4"],
        block_m=None,
        tail_m=0,
        fold=False,
        paired=[0],
        block_ks=[128],
    )
    over_static = variants(Namespace(**given, stage1_variants=0, combine=False), decode, static)
    assert list(over_static) == ["g2-256-4-2-4"] and over_static["g2-256-4-2-4"] == static  # the table's own
    given.update(block_m=128, tail_m=32)
    combined = variants(Namespace(**given, stage1_variants=1, combine=True), decode, static)
    assert list(combined) == ["gluon-n64-s4-p2", "gluon-n64-s4-p2+g2-256-4-2-4"]
    t = combined["gluon-n64-s4-p2+g2-256-4-2-4"]
    fields = (t.block_m, t.tail_m, t.gluon1, t.block_n1, t.stages1, t.gluon2, t.block_n2, t.stages2, t.n_tiles2)
    assert fields == (128, 32, 2, 64, 4, 2, 256, 4, 4)


def test_gluon_check_names_its_one_warpgroup_and_paired_variants():
    from argparse import Namespace

    from bench.h200.gluon_check import base_tiles, variants
    from problem.cases import BENCHMARKS

    given = dict(block_ns=[32, 64], stages=[4], splits=[2], regs=[0], stage2=[], block_m=None, tail_m=0)
    args = Namespace(**given, fold=False, paired=[0, 1], block_ks=[128, 256], stage1_variants=1)
    decode, static = base_tiles(next(c for c in BENCHMARKS if c["bs"] == 16))
    named = variants(Namespace(**vars(args), combine=False), decode, static)
    assert list(named) == [
        "gluon-n32-s4-p2",
        "gluon-n32-s4-p2-k256",
        "gluon-n32-s4-p2-paired",
        "gluon-n32-s4-p2-paired-k256",
        "gluon-n64-s4-p2",
        "gluon-n64-s4-p2-k256",
        "gluon-n64-s4-p2-paired",
        "gluon-n64-s4-p2-paired-k256",
    ]
    fields = [(t.block_n1, t.warps1, t.paired1, t.block_k1) for t in named.values()]
    # one warpgroup is 4 warps
    assert fields == [
        (32, 4, 0, 128),
        (32, 4, 0, 256),
        (32, 4, 1, 128),
        (32, 4, 1, 256),
        (64, 8, 0, 128),
        (64, 8, 0, 256),
        (64, 8, 1, 128),
        (64, 8, 1, 256),
    ]
    # K steps of 256 in two or four parts only, of 512 in four on one warpgroup and where they divide d_hidden
    one_part = variants(Namespace(**{**vars(args), "splits": [1]}, combine=False), decode, static)
    assert len(one_part) == 4 and all(t.block_k1 == 128 for t in one_part.values())
    k512 = Namespace(**{**vars(args), "splits": [2, 4], "paired": [0], "block_ks": [512]}, combine=False)
    assert list(variants(k512, decode, static)) == ["gluon-n32-s4-p4-k512"]
    assert variants(k512, decode, static, d_hidden=768) == {}


def test_gluon_checks_fold_variants_get_tail_tiles_where_the_tile_has_none():
    from argparse import Namespace

    from bench.h200.gluon_check import base_tiles, variants
    from problem.cases import BENCHMARKS

    given = dict(
        block_ns=[64],
        stages=[4],
        splits=[2],
        regs=[0],
        stage2=[],
        block_m=None,
        tail_m=0,
        fold=True,
        paired=[0],
        block_ks=[128],
    )
    args = Namespace(**given, stage1_variants=1, combine=False)
    i2048 = next(c for c in BENCHMARKS if c["dexpert"] == 2048)
    decode = base_tiles(i2048)[0]
    assert decode.tail_m  # the table's own tails are kept
    folded = variants(args, decode, decode)["gluon-n64-s4-p2-fold"]
    assert (folded.fold1, folded.block_m, folded.tail_m) == (1, decode.block_m, decode.tail_m)
    untailed = decode.replace(block_m=16, tail_m=0)
    folded = variants(args, untailed, untailed)["gluon-n64-s4-p2-fold"]
    assert (folded.fold1, folded.block_m, folded.tail_m) == (1, 32, 16)


@pytest.mark.skipif(not ON_SM90, reason="the Gluon stage 2 runs on sm_90 GPUs")
@pytest.mark.parametrize("block_n", [128, 256])
@pytest.mark.parametrize("case", [SMOKE[2], small_case(bs=40, nroutedexperts=4)], ids=["smoke2", "bs40"])
def test_on_the_gpu_the_stage_2_fold_gives_the_tail_launchs_output_and_the_references(case, block_n):
    # 32-row blocks with 16-row tails: the full blocks' programs also take their expert's tail; apart and with the
    # stages block by block (the Gluon stage 1 folding its tails too, in one launch)
    from bench.h200.harness import poison

    data = generate_input(**case)
    before = [t.clone() for t in data[:-1]]
    tiles = stage2_variant(case_tiles(data).replace(block_m=32, tail_m=16), data[0].shape[1], block_n, 3, 2, 2)
    want = run(data, tiles)
    block_by_block = gluon_variant(tiles, 64, 3, 2).replace(fold1=1, overlap=1)
    for folded in (tiles.replace(fold2=1), block_by_block.replace(fold2=1)):
        poison(data[0].shape)
        out = run(data, folded)
        assert_matches_reference(data, out)
        # the same products; the tails' bf16 adds come in another order
        assert torch.allclose(out.float(), want.float(), rtol=2**-5, atol=2**-5 * float(want.abs().max()))
    for t, b in zip(data[:-1], before, strict=True):
        assert torch.equal(t.view(torch.uint8), b.view(torch.uint8))
