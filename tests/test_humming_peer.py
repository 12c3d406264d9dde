"""The humming peer adapter (bench/h200/peers/humming.py) on the CPU: its weights are the package's
bytes in humming's packing and e2m1 decoding (both rules re-implemented from humming's CUDA
source), its indexed-MoE routing against a plain loop, the layer's plumbing around humming's GEMMs
(slot rows, gate before up, the weighted slot sum) with torch stand-ins for the GEMMs against a
per-slot computation bit for bit, and its failure without a GPU. With humming and a CUDA GPU, every
entry against its torch model (OWN_REFERENCES) within the model's bound."""

import importlib
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.h200.harness import excess
from bench.runner.case_args import SMOKE
from mxfp4.codec import E2M1_VALUES, _unpack, dequantize
from reference import compare, generate_input, ref_kernel, silu_and_mul

ROOT = Path(__file__).resolve().parents[1]
peer = importlib.import_module("bench.h200.peers.humming")


def _loop_routing(topk_ids, n_experts, block_m):
    """The metadata the way humming's testing/data.py lays it out, written as a loop."""
    flat = topk_ids.reshape(-1).tolist()
    sorted_ids, expert_ids = [], []
    for e in range(n_experts):
        slots = [s for s, x in enumerate(flat) if x == e]
        n_blocks = math.ceil(len(slots) / block_m)
        sorted_ids += slots + [len(flat)] * (n_blocks * block_m - len(slots))
        expert_ids += [e] * n_blocks
    return sorted_ids, expert_ids


def test_the_module_imports_without_humming_and_names_its_entries():
    probe = (
        "import sys, bench.h200.peers.humming; print(sorted(m for m in sys.modules if m.split('.')[0] == 'humming'))"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
    assert set(peer.PEERS) == {"humming-w4a8", "humming-w4a16"}
    assert set(peer.EXTRA_PEERS) == {"humming-w4a8-g128"}
    assert peer.PEERS["humming-w4a8"][0] is peer.prepare_w4a8
    assert all(run is peer.run for _, run in (*peer.PEERS.values(), *peer.EXTRA_PEERS.values()))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's refusal")
def test_prepare_without_a_gpu_says_so():
    data = generate_input(**SMOKE[0])
    for prepare, _ in peer.PEERS.values():
        with pytest.raises(peer.PeerError, match="CUDA GPU"):
            prepare(data)
    with pytest.raises(peer.PeerError, match="12-tuple"):
        peer.prepare_w4a16(data[:5])


def test_weights_are_the_packages_bytes_in_hummings_packing_and_decoding():
    hidden, w1, w2, w1s, w2s, *_ = generate_input(**SMOKE[1])
    for w, s, name in ((w1, w1s, "w1"), (w2, w2s, "w2")):
        values, scales = peer.expert_bytes(w, s, name)
        n_experts, n, half_k = values.shape
        assert values.dtype == scales.dtype == torch.uint8
        assert scales.shape == (n_experts, n, 2 * half_k // 32)
        assert torch.equal(values.reshape(-1), w.view(torch.uint8).reshape(-1))
        assert torch.equal(scales.reshape(-1), s.view(torch.uint8).reshape(-1))
        codes = _unpack(values)  # element 2j from the low nibble
        # humming's mxfp4 schema views the bytes as int32 words: the words its packer would write
        assert torch.equal(humming_words := peer.humming_pack_words(codes), values.view(torch.int32))
        assert humming_words.shape == (n_experts, n, half_k // 4)
        # and its decode of each code is the package's e2m1 value, so the products are the same
        decoded = peer.humming_e2m1_values(codes) * torch.pow(2.0, scales.float() - 127).repeat_interleave(32, -1)
        assert torch.equal(decoded.reshape(n_experts * n, -1), dequantize(w.reshape(n_experts * n, -1), s))
    assert torch.equal(peer.humming_e2m1_values(torch.arange(16)), torch.tensor(E2M1_VALUES))


def test_scale_span_fits_the_fused_e8m0_window_of_w4a8():
    for case in SMOKE:
        _, w1, w2, w1s, w2s, *_ = generate_input(**case)
        for w, s in ((w1, w1s), (w2, w2s)):
            assert 1 <= peer.scale_span(peer.expert_bytes(w, s, "w")[1]) <= peer.FUSED_E8M0_SPAN
    crafted = torch.full((3, 4, 2), 120, dtype=torch.uint8)
    crafted[1, 2, 1] = 135
    crafted[2, 0, 0] = 100
    assert peer.scale_span(crafted) == 20


@pytest.mark.parametrize("block_m", [8, 16, 24, 88])
def test_routing_matches_a_plain_loop(block_m):
    gen = torch.Generator().manual_seed(block_m)
    n_tokens, topk, n_experts = 37, 5, 12  # experts 9 and 10 never hit, 11 is the shared one
    routed = torch.rand((n_tokens, 9), generator=gen).argsort(dim=1)[:, : topk - 1]
    topk_ids = torch.cat([routed, torch.full((n_tokens, 1), 11)], dim=1).to(torch.int32)
    sorted_ids, expert_ids, num_tokens_padded = peer.build_indexed_routing(topk_ids, n_experts, block_m)
    want_sorted, want_experts = _loop_routing(topk_ids, n_experts, block_m)
    assert sorted_ids.dtype == expert_ids.dtype == num_tokens_padded.dtype == torch.int32
    assert sorted_ids.tolist() == want_sorted
    assert expert_ids.tolist() == want_experts
    assert num_tokens_padded.tolist() == [len(want_sorted)] and len(want_sorted) % block_m == 0
    assert 9 not in want_experts and 10 not in want_experts
    real = sorted_ids[sorted_ids < n_tokens * topk]
    assert sorted(real.tolist()) == list(range(n_tokens * topk))  # every slot once
    with pytest.raises(ValueError, match="outside"):
        peer.build_indexed_routing(topk_ids, 11, block_m)


class IndexedGemm:
    """A torch stand-in for humming's indexed GEMM, run on the routing the way its kernel reads it:
    block b of sorted_ids against expert expert_ids[b]; input row id // top_k, output row id; pad
    ids (>= rows) skipped. Products in float64 (exact for these operands), rounded to bf16."""

    def __init__(self, weights, topk_ids, block_m, rows, top_k):
        self.weights = weights
        self.routing = peer.build_indexed_routing(topk_ids, weights.shape[0], block_m)
        self.block_m, self.rows, self.top_k = block_m, rows, top_k

    def __call__(self, x):
        sorted_ids, expert_ids, num_tokens_padded = self.routing
        self.out = torch.full((self.rows, self.weights.shape[1]), float("nan"), dtype=torch.bfloat16)
        for b in range(int(num_tokens_padded[0]) // self.block_m):
            ids = sorted_ids[b * self.block_m : (b + 1) * self.block_m].long()
            ids = ids[ids < self.rows]
            w = self.weights[int(expert_ids[b])]
            self.out[ids] = (x[ids // self.top_k].double() @ w.T).to(torch.bfloat16)
        return self.out


def _decoded(w, s):
    values, scales = peer.expert_bytes(w, s, "w")
    n_experts, n, half_k = values.shape
    return (
        dequantize(values.reshape(n_experts * n, half_k), scales.reshape(n_experts * n, -1))
        .double()
        .view(n_experts, n, 2 * half_k)
    )


@pytest.mark.cpu_only  # the stand-in GEMMs on the CPU; on a GPU humming's own (the last test)
@pytest.mark.parametrize("case", SMOKE)
def test_the_layer_around_the_gemms_is_the_per_slot_computation(case):
    data = generate_input(**case)
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    n_tokens, topk = topk_ids.shape
    rows, inter = n_tokens * topk, w1.shape[1] // 2
    w1d, w2d = _decoded(w1, w1s), _decoded(w2, w2s)
    gate_up = IndexedGemm(w1d, topk_ids, 16, rows, topk)
    down = IndexedGemm(w2d, topk_ids, 24, rows, 1)
    state = peer.Layer("test", hidden, gate_up, down, inter, topk_weights, {})
    out = peer.forward(state)

    want_y = torch.empty((rows, hidden.shape[1]), dtype=torch.bfloat16)
    want = torch.zeros(hidden.shape, dtype=torch.float64)
    for t in range(n_tokens):
        for j in range(topk):
            e = int(topk_ids[t, j])
            g = (hidden[t].double() @ w1d[e].T).to(torch.bfloat16)
            h = silu_and_mul(g[:inter].float(), g[inter:].float())
            want_y[t * topk + j] = (h.double() @ w2d[e].T).to(torch.bfloat16)
            want[t] += float(topk_weights[t, j]) * want_y[t * topk + j].double()
    assert torch.equal(down.out, want_y)  # rows, experts, gate/up halves and the silu: bit for bit
    assert out.dtype == torch.bfloat16 and out.shape == hidden.shape
    # the fp32 slot sum against the exact one: within an ulp of bf16, almost always the same bits
    assert torch.allclose(out.double(), want, rtol=2**-7, atol=0)
    assert (out == want.to(torch.bfloat16)).float().mean() > 0.99
    # and w4a16_reference (the GPU check's yardstick) models the same roundings
    ref = peer.w4a16_reference(data)
    assert compare(ref, out, rtol=2**-6, atol=2**-6)[0]


def test_fp8_rows_is_hummings_dynamic_e4m3_quantization():
    gen = torch.Generator().manual_seed(11)
    x = (torch.randn(6, 256, generator=gen) * torch.logspace(-3, 3, 6)[:, None]).to(torch.bfloat16)
    x[2] = 0  # an all-zero row: the clamped scale keeps it zero, not NaN
    per_row = peer.fp8_rows(0)(x)
    scale = x.float().abs().amax(1, keepdim=True) / 448
    assert torch.equal(per_row[2], torch.zeros(256))
    live = [0, 1, 3, 4, 5]
    codes = (x[live].float() * scale[live].reciprocal()).to(torch.float8_e4m3fn).float()
    assert torch.equal(codes.abs().amax(1), torch.full((5,), 448.0))  # each row's amax maps onto e4m3's top
    assert torch.equal(per_row[live], codes * scale[live])
    assert (per_row[live] - x[live].float()).abs().max(1).values.le(scale[live, 0] * 16).all()  # half an ulp at 448
    grouped = peer.fp8_rows(128)(x)
    for half in (slice(0, 128), slice(128, 256)):
        want = peer.fp8_rows(0)(x[:, half].contiguous())
        assert torch.equal(grouped[:, half], want)  # a group of 128 is a row of its own


def test_the_w4a8_models_are_the_layer_with_fp8_activations():
    data = generate_input(**SMOKE[0])
    w4a16, w4a8 = peer.w4a16_reference(data), peer.w4a8_reference(data)
    assert not torch.equal(w4a16, w4a8)
    assert compare(w4a8, w4a16, rtol=0.25, atol=0.25)[0]  # fp8 rows move the layer, by fp8's step
    assert peer.OWN_REFERENCES == {
        "humming-w4a8": (peer.w4a8_reference, 4.0),
        "humming-w4a16": (peer.w4a16_reference, 1.0),
        "humming-w4a8-g128": (peer.w4a8_g128_reference, 4.0),
    }


@pytest.mark.skipif(not torch.cuda.is_available(), reason="humming runs on a CUDA GPU")
@pytest.mark.parametrize("name", [*peer.PEERS, *peer.EXTRA_PEERS])
def test_each_entry_on_the_gpu_against_its_torch_model(name):
    pytest.importorskip("humming")
    prepare, run = {**peer.PEERS, **peer.EXTRA_PEERS}[name]
    data = generate_input(**SMOKE[0])
    before = [t.clone() for t in data[:11]]
    state = prepare(data)
    out = run(state)
    torch.cuda.synchronize()
    assert out.shape == data[0].shape and out.dtype == torch.bfloat16
    model, bound = peer.OWN_REFERENCES[name]
    got = excess(out, model(data))
    assert got <= bound, f"{name}: {got:.2f} tolerances from its torch model (bound {bound}); {state.info}"
    assert excess(out, ref_kernel(data)) > 1  # and not the a4w4 numerics: the model is the yardstick
    assert all(torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(before, data[:11], strict=True))
