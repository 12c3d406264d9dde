"""The Triton backend's routing (moe_prep_kernel's chunk histograms, then moe_route_kernel; or in one
launch, moe_route_prep_kernel) against aiter's moe_sorting layout built in plain torch
(aiter_double.sort_routing), plus the other duties of route_decode: zero the output and the
overlap's counts (1500 of them: two steps of the zeroing loop), leave topk_ids alone; the one
launch writes what the two write, a1 included, bit for bit.

The shapes reach the launcher's corners: one histogram chunk; several chunks and a placement loop
of two chunks; chunks larger than 1024 slots (at most 8 histogram programs: 9000 slots in 5 chunks
of 2048, a placement loop of three steps of 4096, the last one partial) over the official 257
experts, with an expert that nobody picks.
"""

import pytest
import torch
from aiter_double import sorted_buffers

from moe_triton.routing import route_decode


def skewed_topk_ids(n_tokens: int, topk: int, n_experts: int, seed: int) -> torch.Tensor:
    """Distinct routed experts per token, drawn with skewed odds (expert 1 never), and the shared
    expert (the last id) in the last column, as generate_input lays them out."""
    g = torch.Generator().manual_seed(seed)
    odds = (torch.arange(n_experts - 1, dtype=torch.float64) % 7 + 1) ** 2
    odds[1] = 0
    routed = torch.multinomial(odds.expand(n_tokens, -1), topk - 1, replacement=False, generator=g)
    shared = torch.full((n_tokens, 1), n_experts - 1)
    return torch.cat([routed, shared], dim=1).to(torch.int32)


SHAPES = [(5, 3, 4, 16), (700, 7, 40, 32), (1000, 9, 257, 16)]


@pytest.mark.parametrize("launches", [2, 1])
@pytest.mark.parametrize(("n_tokens", "topk", "n_experts", "block_m"), SHAPES)
def test_routing_matches_aiter_layout(triton_device, n_tokens, topk, n_experts, block_m, launches):
    topk_ids = skewed_topk_ids(n_tokens, topk, n_experts, seed=n_tokens).to(triton_device)
    ids_before = topk_ids.clone()
    hidden = torch.randn(n_tokens, 64, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    out = torch.full((n_tokens, 64), float("nan"), device=triton_device)
    a2_ready = torch.full((1500,), -7, dtype=torch.int32, device=triton_device)

    (sorted_ids, sorted_expert_ids, num_valid_ids), _a1 = route_decode(
        hidden.to(triton_device), topk_ids, n_experts, block_m, out, a2_ready, launches
    )

    weights = torch.ones(topk_ids.shape, dtype=torch.float32)
    want_ids, _, want_experts, want_valid = sorted_buffers(topk_ids.cpu().long(), weights, n_experts, block_m)
    total = int(want_valid[0])
    assert num_valid_ids.cpu().tolist() == [total, n_tokens]
    assert torch.equal(sorted_ids[:total].cpu(), want_ids[:total])
    assert torch.equal(sorted_expert_ids[: total // block_m].cpu(), want_experts[: total // block_m])
    assert torch.equal(out.cpu(), torch.zeros(n_tokens, 64))
    assert torch.equal(a2_ready.cpu(), torch.zeros(1500, dtype=torch.int32))
    assert torch.equal(topk_ids, ids_before)


@pytest.mark.parametrize(("n_tokens", "topk", "n_experts", "block_m"), SHAPES[:2])
def test_one_launch_writes_what_two_write(triton_device, n_tokens, topk, n_experts, block_m):
    topk_ids = skewed_topk_ids(n_tokens, topk, n_experts, seed=n_tokens + 1).to(triton_device)
    hidden = torch.randn(n_tokens, 256, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    hidden = hidden.to(triton_device)
    results = []
    for launches in (2, 1):
        out = torch.full((n_tokens, 256), float("nan"), dtype=torch.bfloat16, device=triton_device)
        a2_ready = torch.full((40,), 9, dtype=torch.int32, device=triton_device)
        routing, a1 = route_decode(hidden, topk_ids, n_experts, block_m, out, a2_ready, launches)
        results.append([t.clone() for t in (*routing, a1, out, a2_ready)])
        for t in (*routing, a1):
            t.view(torch.uint8).fill_(0xFF)  # poisoned: what the next call does not write stays wrong
    total = int(results[0][2][0])
    two, one = results
    assert torch.equal(one[0][:total], two[0][:total]) and torch.equal(
        one[1][: total // block_m], two[1][: total // block_m]
    )
    for got, want in zip(one[2:], two[2:], strict=True):
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
