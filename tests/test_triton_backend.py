"""The Triton backend against reference.ref_kernel (CPU: Triton's interpreter; GPU: compiled).

On the CPU both sides accumulate in fp32 and agree bit for bit; on a GPU stage 2 adds bf16
atomically, so the comparison is the leaderboard's tolerance there. The bundle's custom_kernel
(this package's modules, each whole) on a SMOKE case through the local runner is
tests/test_bundle.py's test_the_local_runner_passes_the_bundle_on_a_smoke_case.
"""

import pytest
import torch
from gluon_compile import compiled_launches
from layer_checks import HAS_DOT_SCALED, ODD_SHAPES, ON_GPU, assert_matches_reference, small_case

from bench.runner.case_args import SMOKE, case_shape
from moe_triton.fused_moe import fused_moe_triton
from moe_triton.routing import routing_capacity
from moe_triton.tiles import Stage, TileConfig
from moe_triton.tiles_amd import native_default_config
from moe_triton.tiles_nvidia import default_config, tile_config
from problem.cases import BENCHMARKS
from problem.shapes import Shape
from reference import check_implementation, generate_input, ref_kernel
from submission import custom_kernel


def with_routing(data, topk_ids, topk_weights=None):
    """The same layer with other routing (the weights keep their meaning)."""
    data = list(data)
    data[10] = topk_ids.to(torch.int32).contiguous()
    if topk_weights is not None:
        data[9] = topk_weights.to(torch.float32).contiguous()
    return tuple(data)


@pytest.mark.parametrize("overrides", ODD_SHAPES.values(), ids=ODD_SHAPES.keys())
def test_odd_shapes(overrides):
    data = generate_input(**small_case(**overrides))
    assert_matches_reference(data, custom_kernel(data))


def test_expert_nobody_picks_and_one_expert_for_all():
    data = generate_input(**small_case(bs=9))
    n_tokens, topk = data[10].shape
    # Routed slot 0 of every token goes to expert 1, slot 1 to expert 2: experts 0, 3, 4, 5 idle.
    ids = data[10].clone()
    ids[:, 0], ids[:, 1] = 1, 2
    ids[:, 2] = torch.arange(3, 3 + n_tokens, device=ids.device) % 2 + 3
    assert_matches_reference(with_routing(data, ids), custom_kernel(with_routing(data, ids)))


@pytest.mark.parametrize("exponent", [-40, 20])
@pytest.mark.filterwarnings("ignore:overflow encountered in exp")  # silu of a large negative gate, as in fp32 torch
def test_hidden_states_far_from_one(exponent):
    # The NVIDIA path stores both GEMMs' activations times 2^63 (moe_triton.kernels.decode.FAST_EXP),
    # exact while they stay below 2^64 in magnitude. h = silu(g) * u grows with the square of the
    # hidden states: scaled by 2^20 they give h near 2^40, inside the range (2^40 would not be).
    data = list(generate_input(**small_case(seed=13)))
    data[0] = data[0] * 2.0**exponent
    out, ref = custom_kernel(tuple(data)), ref_kernel(tuple(data))
    if ON_GPU:
        # The leaderboard's absolute tolerance would accept anything at 2^-40: compare relative
        # to the largest output instead.
        scale = float(ref.float().abs().max())
        assert scale > 0
        torch.testing.assert_close(out.float(), ref.float(), rtol=5e-2, atol=5e-2 * scale)
    else:
        assert torch.equal(out, ref), (out.float() - ref.float()).abs().max()


# Triton's interpreter computes the NaN and +-Inf blocks in numpy, which warns about them.
@pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning:triton.runtime.interpreter")
@pytest.mark.filterwarnings("ignore:invalid value encountered in matmul:RuntimeWarning:triton.runtime.interpreter")
@pytest.mark.filterwarnings("ignore:All-NaN slice encountered:RuntimeWarning:triton.runtime.interpreter")
@pytest.mark.parametrize("native", [False, True], ids=["decode", "native"])
def test_nan_inputs_follow_the_reference_rule(native):
    # SPEC 3.3's NaN rule (aiter's): a NaN element keeps its block's scale and saturates to code
    # 7 with its sign; a block of NaNs gets byte 254, so its codes decode to +-Inf.
    if native and not HAS_DOT_SCALED:
        pytest.skip("this Triton's interpreter has no dot_scaled")
    data = list(generate_input(**small_case(seed=17)))
    hidden = data[0].clone()
    hidden[1, 5] = float("nan")
    hidden[2, 64] = -float("nan")
    if not ON_GPU:
        # Decoded, a block of NaNs is +-6 x 2^127: past the NVIDIA decode path's exact range
        # (scale bytes 58..191 with activations below 2^64) and Triton's dot_scaled emulation
        # there (measured on the H200: finite values and zeros); exact under the interpreter.
        hidden[3, 32:64] = float("nan")
    data[0] = hidden
    data = tuple(data)
    h, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    out = fused_moe_triton(h, w1, w2, w1s, w2s, topk_weights, topk_ids, native=native)
    ref = ref_kernel(data)
    assert ref[1].isfinite().all() and ref[3].isfinite().all() == ON_GPU
    if ON_GPU:
        ok, msg = check_implementation(data, out)
        assert ok, msg
    else:
        torch.testing.assert_close(out, ref, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize(("n_tiles2", "max_regs1", "max_regs2"), [(1, 0, 0), (3, 128, 88)])
def test_tiles_that_do_not_divide_the_shape(n_tiles2, max_regs1, max_regs2):
    # d_hidden 768 is 1.5 tiles of 512: with 3 tiles per stage-2 program, the third lies past
    # the end and must add nothing. The register caps only reach the compiler on NVIDIA GPUs.
    # Two routed experts of one per token (and the shared one): three blocks instead of seven.
    data = generate_input(**small_case(dhidden=768, dexpert=768, bs=5, nroutedexperts=2, nexpertspertoken=1))
    tiles = TileConfig(
        block_m=16,
        stage1=Stage(block_n=512, block_k=256, warps=4, stages=2),
        stage2=Stage(block_n=512, block_k=256, warps=4, stages=2),
        n_tiles2=n_tiles2,
        max_regs1=max_regs1,
        max_regs2=max_regs2,
    )
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    out = fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, tiles)
    assert_matches_reference(data, out)


def tail_tiles(tail_m):
    return TileConfig(
        block_m=32,
        stage1=Stage(block_n=64, block_k=256, warps=4, stages=2),
        stage2=Stage(block_n=128, block_k=256, warps=4, stages=2),
        n_tiles2=1,
        tail_m=tail_m,
    )


def test_tail_blocks_on_their_own_tiles():
    # Routing blocks of 32 rows; those with at most 16 real rows run in a second launch of each
    # stage on 16-row tiles. Expert 5 and the shared expert 6 get all 40 tokens (a full block,
    # then a tail of 8), expert 2 gets 17 (one real row past the tail's 16: the full launch),
    # expert 3 exactly 16 (the tail launch), expert 4 seven, expert 1 all 40 in column 0.
    data = generate_input(**small_case(bs=40, seed=21))
    ids = data[10].clone()
    tokens = torch.arange(40, device=ids.device)
    ids[:, 0] = 1
    ids[:, 1] = torch.where(tokens < 17, 2, torch.where(tokens < 33, 3, 4))
    ids[:, 2] = 5
    data = with_routing(data, ids)
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    out = fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, tail_tiles(16))
    assert_matches_reference(data, out)


@pytest.mark.parametrize("tail_m", [24, 32, 8])
def test_tail_tiles_must_be_smaller_powers_of_two(tail_m):
    data = generate_input(**small_case())
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    with pytest.raises(ValueError, match="tail_m"):
        fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, tail_tiles(tail_m))


def test_the_decode_path_refuses_native_tiles():
    data = generate_input(**small_case())
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    tiles = native_default_config(Shape.of(hidden, w1, topk_ids))
    with pytest.raises(ValueError, match="tiles: the decode path takes a TileConfig, got NativeTileConfig"):
        fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, tiles, native=False)


def test_inputs_unchanged_and_new_data_on_reused_buffers():
    # Two routed experts of one per token: buffers are reused the same way for any shape.
    case = small_case(nroutedexperts=2, nexpertspertoken=1)
    first = generate_input(**case)
    before = [t.clone() if isinstance(t, torch.Tensor) else dict(t) for t in first]
    out_first = custom_kernel(first)
    for t, b in zip(first, before, strict=True):
        if isinstance(t, torch.Tensor):
            assert torch.equal(t.view(torch.uint8), b.view(torch.uint8))
        else:
            assert t == b
    second = generate_input(**{**case, "seed": 12})
    out_second = custom_kernel(second)
    assert_matches_reference(second, out_second)
    assert_matches_reference(first, out_first)
    assert out_first.data_ptr() != out_second.data_ptr()


def test_routing_capacity_bounds_the_padded_layout():
    # Every expert that is hit pads fewer than block_m rows; at most n_slots experts are hit.
    assert routing_capacity(n_slots=144, n_experts=257, block_m=16) == 144
    assert routing_capacity(n_slots=4608, n_experts=33, block_m=128) == 36 + 33
    assert default_config(Shape(16, 7168, 256, 257, 9)).block_m == 16
    assert default_config(Shape(512, 7168, 2048, 33, 9)).block_m == 128


@pytest.mark.skipif(not ON_GPU, reason="CUDA graphs need a GPU")
def test_cuda_graph_capture_replays_on_new_data():
    data = generate_input(**SMOKE[0])
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        custom_kernel(data)  # compile and allocate the scratch outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = custom_kernel(data)
    for seed in (101, 102):
        fresh = generate_input(**{**SMOKE[0], "seed": seed})
        for dst, src in zip(data[:11], fresh[:11], strict=True):
            dst.copy_(src)
        out.fill_(float("nan"))
        graph.replay()
        assert_matches_reference(data, out)


@pytest.mark.cpu_only
def test_the_decode_stage_1_waits_for_its_wgmmas_once_a_k_step_and_copies_words_16_bytes_a_thread():
    """Compiled for sm_90 on the CPU (the interpreter cannot show it): Triton splits a dot on a register
    operand into k16 wgmmas with a fence and a wait each, unless the loop reads the dot's result at once
    (_whole_dot); E-257 bs-16's K step of 256 then issues its 16 wgmmas behind one wait."""
    case = next(c for c in BENCHMARKS if c["nroutedexperts"] == 256 and c["bs"] == 16)
    (got,) = compiled_launches([(case, tile_config(case_shape(case)))], "moe_stage1_kernel")
    assert got["mma"] == 16 and got["waits"] == 1 and got["loop_spills"] == 0, got
    assert_one_16_byte_copy_a_threads_words(got)


@pytest.mark.cpu_only
def test_the_decode_stage_2_copies_a_threads_weight_words_in_one_16_byte_copy():
    case = next(c for c in BENCHMARKS if c["nroutedexperts"] == 256 and c["bs"] == 16)
    (got,) = compiled_launches([(case, tile_config(case_shape(case)))], "moe_stage2_kernel")
    assert_one_16_byte_copy_a_threads_words(got)


def assert_one_16_byte_copy_a_threads_words(got: dict) -> None:
    """Compiled for sm_90 on the CPU: weight_tile tells Triton that rows of words are a multiple of 128 bytes apart,
    so each thread's four words are one 16-byte copy past L1; from the stride alone Triton knew 8 bytes and issued
    two 8-byte copies through L1 (3-12 us a call slower on an H100, docs/triton.md)."""
    assert "LDGSTS.E.BYPASS.128" in got["loop_copies"] and "LDGSTS.E.64" not in got["loop_copies"], got
