"""Shared by the Triton backend's tests: a small layer to run, the comparison with
reference.ref_kernel (bit for bit under the CPU interpreter, where both accumulate in fp32; the
leaderboard's tolerance on a GPU, where stage 2 adds bf16 atomically) and a torch model of the
activation buffers' column order."""

import types

import pytest
import torch

from bench.runner.case_args import SMOKE
from reference import check_implementation, ref_kernel

ON_GPU = torch.cuda.is_available()
try:
    from triton.runtime.interpreter import InterpreterBuilder

    # The native path's tl.dot_scaled: compiled on a GPU; under the interpreter from triton 3.9 (not 3.6).
    HAS_DOT_SCALED = ON_GPU or hasattr(InterpreterBuilder, "create_dot_scaled")
except ImportError:
    HAS_DOT_SCALED = ON_GPU


# Overrides of small_case that reach the launchers' edge cases: one token, top-1 with no shared
# expert, two shared experts.
ODD_SHAPES = {
    "bs1": dict(bs=1),
    "top1-no-shared": dict(nexpertspertoken=1, nsharedexperts=0),
    "two-shared": dict(nsharedexperts=2, nexpertspertoken=2),
}


def small_case(**overrides):
    case = dict(dhidden=256, dexpert=256, nroutedexperts=6, nexpertspertoken=3, nsharedexperts=1, bs=7, seed=11)
    return {**case, **overrides}


# The GPU tests' cases: SMOKE and the ODD_SHAPES, each named.
GPU_CASES = [pytest.param(case, id=f"smoke{i}") for i, case in enumerate(SMOKE)] + [
    pytest.param(small_case(**overrides), id=name) for name, overrides in ODD_SHAPES.items()
]


def k_slot(cols: torch.Tensor, span: int) -> torch.Tensor:
    """kernels/decode.py's k_slot: column 32B + 8t + 4b + 2s + h of each 128 to 32B + 16s + 8h + 2t + b (span 32)
    or to 32t + 16s + 8h + 2B + b (span 128)."""
    r = cols % 128
    block, word, b, s, h = r >> 5, (r >> 3) & 3, (r >> 2) & 1, (r >> 1) & 1, r & 1
    outer, thread = (word, block) if span == 128 else (block, word)
    return cols - r + 32 * outer + 16 * s + 8 * h + 2 * thread + b


def assert_matches_reference(data, out):
    ref = ref_kernel(data)
    assert out.dtype == torch.bfloat16 and out.shape == ref.shape
    if ON_GPU:
        ok, msg = check_implementation(data, out)
        assert ok, msg
    else:
        assert torch.equal(out, ref), (out.float() - ref.float()).abs().max()


def assert_same_sums(out: torch.Tensor, other: torch.Tensor, topk: int) -> None:
    """Two outputs of the layer on one input from tiles that differ in how they add the slots: bit
    for bit under the interpreter, which runs the atomics in a fixed order. On a GPU the stage-2
    bf16 atomic adds come in any order: each of a token's topk adds rounds once, by at most half a
    bf16 ulp (2^-8 relative) of a partial sum, whose size the row's largest value stands for, so the
    two differ by at most topk * 2^-7 of it."""
    if not ON_GPU:
        assert torch.equal(out.view(torch.int16), other.view(torch.int16))
        return
    a, b = out.float(), other.float()
    row = torch.maximum(a.abs(), b.abs()).amax(dim=1, keepdim=True)
    excess = (a - b).abs() / (topk * 2.0**-7 * row)
    assert float(excess.max()) <= 1.0, f"{float(excess.max()):.3f} of the bound for reordered bf16 atomics"


class FakeCompiled:
    """Stands for a CompiledKernel: records how its launcher is called, or raises."""

    def __init__(self, fail=False):
        self.calls, self.fail = [], fail
        self.function, self.packed_metadata = "function", "metadata"

    def launch_metadata(self, grid, stream, *args):
        return ("launch metadata", grid, stream, len(args))

    def run(self, *args):
        if self.fail:
            raise TypeError("launcher called the wrong way")
        self.calls.append(args)


def go_direct(monkeypatch, plan, fail=False):
    """The plan's launches through FakeCompiled launchers (a test double of the compiled kernels:
    no GPU here), its direct launches on."""
    from moe_triton import plan as plans

    fakes = [FakeCompiled(fail) for _ in plan.launches]
    for launch, fake in zip(plan.launches, fakes, strict=True):
        launch.compiled = fake
    plan.direct = True
    active = types.SimpleNamespace(get_current_device=lambda: 0, get_current_stream=lambda device: 1234)
    monkeypatch.setattr(plans, "driver", types.SimpleNamespace(active=active))
    return fakes


def fold_rule(routing, n_tokens: int, block_m: int, fold: int):
    """The Gluon stages' fold rule (kernels/routing.py's folds_tail) in Python over routing's lists: whether the
    program of block b also takes block b + 1, a tail of b's expert with at most `fold` real rows (0: never)."""
    sorted_ids, sorted_expert_ids, num_valid_ids = (t.tolist() for t in routing)

    def folds_tail(b: int) -> bool:
        return (
            bool(fold)
            and (b + 1) * block_m < num_valid_ids[0]
            and sorted_expert_ids[b + 1] == sorted_expert_ids[b]
            and (sorted_ids[(b + 1) * block_m + fold] & 0xFFFFFF) >= n_tokens
        )

    return folds_tail


def experts_routing(rows: list[int], block_m: int, device) -> tuple[list[torch.Tensor], int]:
    """The decode path's routing (on the CPU) of one slot a token, expert e taking rows[e] of them in a shuffled
    order, and the tokens: for the fold's models."""
    from moe_triton.routing import route_decode

    ids = torch.cat([torch.full((n,), e, dtype=torch.int32) for e, n in enumerate(rows)])
    topk_ids = ids[torch.randperm(len(ids), generator=torch.Generator().manual_seed(3))].view(-1, 1)
    n_tokens = topk_ids.shape[0]
    hidden = torch.randn(n_tokens, 64, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    out = torch.empty(n_tokens, 64, dtype=torch.bfloat16, device=device)
    a2_ready = torch.empty(len(ids) // block_m + len(rows), dtype=torch.int32, device=device)
    routing, _ = route_decode(hidden.to(device), topk_ids.to(device), len(rows), block_m, out, a2_ready)
    return [t.cpu() for t in routing], n_tokens


def real_blocks(routing, n_tokens: int, block_m: int) -> list[int]:
    """The routing blocks that hold real rows (past num_valid_ids the buffers hold what an earlier call left)."""
    valid_blocks = int(routing[2][0]) // block_m
    rows = routing[0]
    return [b for b in range(valid_blocks) if (rows[b * block_m : (b + 1) * block_m] & 0xFFFFFF).lt(n_tokens).any()]
