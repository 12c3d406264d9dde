"""The Triton backend's routing (moe_prep_kernel's chunk histograms, then moe_route_slots_kernel or
moe_route_kernel; or in one launch, moe_route_prep_kernel) against aiter's moe_sorting layout built
in plain torch (aiter_double.sort_routing), plus the other duties of route_decode: zero the output and the
overlap's counts (1500 of them: two steps of the zeroing loop), leave topk_ids alone; the one
launch writes what the two write, a1 included, bit for bit.

The shapes reach the launcher's corners: one histogram chunk; several chunks and a placement loop
of two chunks; chunks larger than 1024 slots (at most 8 histogram programs: 9000 slots in 5 chunks
of 2048, a placement loop of three steps of 4096, the last one partial) over the official 257
experts, with an expert that nobody picks.

The route launch places the slots by slot chunks (moe_route_slots_kernel, from SLOTS_ROUTE_FROM slots on) or by
experts (moe_route_kernel, below); both write the same arrays, bit for bit, over buffers poisoned before the launch, on
fresh topk_ids: one token (fewer slots than a program's), a few programs with the last one partial, several
histogram chunks (chunks of 1024 and 2048 slots), an expert that nobody picks, every slot on one expert.
"""

import pytest
import torch
from aiter_double import sorted_buffers

from moe_triton import routing
from moe_triton.routing import route_decode, route_native, routing_buffers


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


POISON = -0x21524111  # 0xDEADBEEF: what no launch writes


def fresh_topk_ids(n_tokens: int, topk: int, n_experts: int, kind: str, seed: int) -> torch.Tensor:
    """topk_ids drawn uniformly (repeats within a token allowed), skewed (skewed_topk_ids: expert 1 never), or every
    slot on one expert."""
    if kind == "skewed":
        return skewed_topk_ids(n_tokens, topk, n_experts, seed)
    if kind == "one":
        return torch.full((n_tokens, topk), seed % n_experts, dtype=torch.int32)
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, n_experts, (n_tokens, topk), generator=g, dtype=torch.int32)


def poisoned_routing(monkeypatch, route_by: str, topk_ids, n_experts: int, block_m: int, native: bool = False):
    """The routing arrays that the two routing launches write, the second placing by route_by, over pooled buffers
    filled with POISON first; copies, since the next call writes the same buffers."""
    monkeypatch.setattr(routing, "ROUTE_BY", route_by)
    n_tokens, device = topk_ids.shape[0], topk_ids.device
    for buffer in routing_buffers(topk_ids.numel(), n_experts, block_m, device):
        buffer.fill_(POISON)
    hidden = torch.zeros(n_tokens, 32, dtype=torch.bfloat16, device=device)
    out = torch.empty(n_tokens, 32, device=device)
    if native:
        arrays = route_native(hidden, topk_ids, n_experts, block_m, out)
    else:
        a2_ready = torch.empty(1, dtype=torch.int32, device=device)
        arrays, _a1 = route_decode(hidden, topk_ids, n_experts, block_m, out, a2_ready)
    return [t.cpu().clone() for t in arrays]


def assert_aiter_layout(arrays, topk_ids, n_experts: int, block_m: int):
    """aiter's layout (sort_routing) up to the padded total, and nothing written past it."""
    sorted_ids, sorted_expert_ids, num_valid_ids = arrays
    weights = torch.ones(topk_ids.shape, dtype=torch.float32)
    want_ids, _, want_experts, want_valid = sorted_buffers(topk_ids.cpu().long(), weights, n_experts, block_m)
    total, blocks = int(want_valid[0]), int(want_valid[0]) // block_m
    assert num_valid_ids.tolist() == [total, topk_ids.shape[0]]
    assert torch.equal(sorted_ids[:total], want_ids[:total])
    assert torch.equal(sorted_expert_ids[:blocks], want_experts[:blocks])
    assert bool((sorted_ids[total:] == POISON).all()) and bool((sorted_expert_ids[blocks:] == POISON).all())


# (n_tokens, topk, n_experts, block_m, kind of topk_ids); 512 x 9 slots make 5 histogram chunks of 1024, 1000 x 9
# five of 2048.
BOTH_WAYS = [
    (1, 9, 257, 16, "uniform"),
    (37, 9, 33, 32, "uniform"),
    (512, 9, 257, 32, "skewed"),
    (512, 9, 33, 16, "uniform"),
    (512, 9, 33, 64, "skewed"),
    (512, 9, 33, 128, "uniform"),
    (300, 9, 33, 128, "one"),
]


@pytest.mark.parametrize(("n_tokens", "topk", "n_experts", "block_m", "kind"), BOTH_WAYS)
def test_slots_placement_writes_what_the_experts_placement_writes(
    monkeypatch, triton_device, n_tokens, topk, n_experts, block_m, kind
):
    topk_ids = fresh_topk_ids(n_tokens, topk, n_experts, kind, seed=n_tokens + block_m).to(triton_device)
    by_experts = poisoned_routing(monkeypatch, "experts", topk_ids, n_experts, block_m)
    by_slots = poisoned_routing(monkeypatch, "slots", topk_ids, n_experts, block_m)
    for got, want in zip(by_slots, by_experts, strict=True):
        assert torch.equal(got, want)
    assert_aiter_layout(by_slots, topk_ids, n_experts, block_m)


@pytest.mark.parametrize(
    ("n_tokens", "topk", "n_experts", "block_m", "seeds"),
    [(1, 9, 257, 16, 12), (7, 3, 5, 16, 12), (37, 9, 33, 32, 6), (229, 9, 33, 32, 3), (512, 9, 33, 32, 1)]
    + [(512, 9, 257, 16, 2), (512, 9, 257, 128, 1), (1000, 9, 257, 64, 1)],
)
def test_slots_placement_matches_aiter_layout_over_seeds(
    triton_device, monkeypatch, n_tokens, topk, n_experts, block_m, seeds
):
    for seed in range(seeds):
        for kind in ("uniform", "skewed") if n_experts > topk else ("uniform",):
            topk_ids = fresh_topk_ids(n_tokens, topk, n_experts, kind, seed).to(triton_device)
            by_slots = poisoned_routing(monkeypatch, "slots", topk_ids, n_experts, block_m)
            assert_aiter_layout(by_slots, topk_ids, n_experts, block_m)


@pytest.mark.parametrize("route_by", ["slots", "experts"])
def test_the_native_path_routes_either_way(monkeypatch, triton_device, route_by):
    topk_ids = fresh_topk_ids(150, 9, 33, "skewed", seed=3).to(triton_device)
    assert_aiter_layout(poisoned_routing(monkeypatch, route_by, topk_ids, 33, 32, native=True), topk_ids, 33, 32)


def test_the_placement_follows_the_slot_count(monkeypatch):
    monkeypatch.setattr(routing, "ROUTE_BY", "")
    assert routing.route_by(routing.SLOTS_ROUTE_FROM - 1) == "experts"
    assert routing.route_by(routing.SLOTS_ROUTE_FROM) == "slots"
    monkeypatch.setattr(routing, "ROUTE_BY", "experts")
    assert routing.route_by(10 * routing.SLOTS_ROUTE_FROM) == "experts"
    monkeypatch.setattr(routing, "ROUTE_BY", "fast")
    with pytest.raises(ValueError, match="ROUTE_BY must be"):
        routing.route_by(1)


def test_the_route_launch_of_16_and_512_tokens(monkeypatch, triton_device):
    """By default 16 x 9 slots are placed by experts, 512 x 9 by slot chunks, each as aiter lays them out."""
    launched = []
    launch = routing.plan.launch
    monkeypatch.setattr(routing.plan, "launch", lambda fn, *a, **k: (launched.append(fn.__name__), launch(fn, *a, **k)))
    for n_tokens in (16, 512):
        topk_ids = fresh_topk_ids(n_tokens, 9, 257, "uniform", seed=n_tokens).to(triton_device)
        assert_aiter_layout(poisoned_routing(monkeypatch, "", topk_ids, 257, 32), topk_ids, 257, 32)
    assert launched[1::2] == ["moe_route_kernel", "moe_route_slots_kernel"]
