"""conftest's _triton_language_restored: Triton's interpreter leaves triton.language patched after a
call of one @triton.jit function from another, and the fixture puts it back before the next test
(else a kernel compiled later in the process fails in its code generator on a cold cache)."""

import pytest
import torch
import triton
import triton.language as tl
from conftest import _LANGUAGE, _LANGUAGE_NAMESPACES

from moe_triton.target import interpreting

pytestmark = pytest.mark.skipif(not interpreting(), reason="Triton's interpreter only")


@triton.jit
def _twice(x):
    return x + x


@triton.jit
def _twice_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, _twice(tl.load(x_ptr + offs)))


def _patched() -> list[str]:
    return [
        name
        for namespace, recorded in zip(_LANGUAGE_NAMESPACES, _LANGUAGE, strict=True)
        for name, value in vars(namespace).items()
        if recorded.get(name) is not value
    ]


def test_a_nested_jit_call_leaves_the_language_patched():
    x = torch.randn(16)
    out = torch.full_like(x, float("nan"))
    _twice_kernel[(1,)](x, out, BLOCK=16)
    assert torch.equal(out, 2 * x)
    assert _patched()  # the interpreter's tl.tensor.__repr__ among them, left behind


def test_the_next_test_finds_it_as_imported():
    assert _patched() == []
