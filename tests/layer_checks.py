"""Shared by the Triton backend's tests: a small layer to run and the comparison with
reference.ref_kernel (bit for bit under the CPU interpreter, where both accumulate in fp32; the
leaderboard's tolerance on a GPU, where stage 2 adds bf16 atomically)."""

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
