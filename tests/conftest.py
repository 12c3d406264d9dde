"""Shared test setup: Triton's interpreter on GPU-less machines, import paths, the hypothesis
profile, the `device` and `triton_device` fixtures, triton.language put back after each test, and
the cpu_only marker."""

import os
import sys
from pathlib import Path

import torch

# Chosen before any test module imports triton (as submission.py does for its own entry).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
else:
    # CUDA initialised and its device count cached now, before a test hides the GPU from a run it
    # starts in this process (the runner's --device cpu sets CUDA_VISIBLE_DEVICES=""): torch caches
    # the first count it takes after initialisation, read from NVML and that variable, so a first
    # count taken then would be 0 for every later test of the process (seen under pytest-xdist,
    # which orders the tests anyhow: "Invalid device id").
    torch.cuda.init()
    assert torch.cuda.device_count() > 0

import pytest  # noqa: E402
import triton.language as tl  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# The modules and packages sit at the repository root (mxfp4, reference, problem, task), the oracle beside the
# tests; both importable under any pytest import mode.
for path in (Path(__file__).resolve().parents[1], Path(__file__).resolve().parent):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from moe_triton.target import interpreting  # noqa: E402

# Fast property tests (the whole of test_mxfp4 + test_reference takes seconds on 2 CPU cores);
# no example database written into the tree.
settings.register_profile(
    "moe-mxfp4",
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("moe-mxfp4")

# Triton's interpreter swaps triton.language's builtins for its own while a kernel runs, and does not
# put them back after a call of one @triton.jit function from another (triton 3.6 to 3.9,
# InterpretedFunction.__call__). A kernel compiled later in the same process then meets the
# interpreter's builtins in its code generator and fails ("'block_argument' object has no attribute
# 'dtype'"), but only on a cold Triton cache: a cached kernel skips the code generator. So the
# language's namespaces are recorded here, before any test runs a kernel, and restored after each.
_LANGUAGE_NAMESPACES = (tl, tl.core, tl.math, tl.tensor, tl.core.tensor_descriptor_base)
_LANGUAGE = [dict(vars(namespace)) for namespace in _LANGUAGE_NAMESPACES]


@pytest.fixture(autouse=True)
def _triton_language_restored():
    """Each test starts with triton.language as imported, whatever an earlier one interpreted."""
    yield
    for namespace, recorded in zip(_LANGUAGE_NAMESPACES, _LANGUAGE, strict=True):
        for name in set(vars(namespace)) - set(recorded):
            delattr(namespace, name)
        for name, value in recorded.items():
            if vars(namespace).get(name) is not value:
                setattr(namespace, name, value)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
TRITON_DEVICES = (["cpu"] if interpreting() else []) + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """Cheap tests run on the CPU and, where present, on CUDA."""
    return torch.device(request.param)


@pytest.fixture(params=TRITON_DEVICES)
def triton_device(request) -> torch.device:
    """Where Triton kernels run: the CPU under the interpreter, and CUDA where present."""
    return torch.device(request.param)


def pytest_collection_modifyitems(config, items):
    """cpu_only tests (the offline gfx950 compile check, a CPU tool that CI runs) are skipped where
    a GPU is present, which keeps the whole suite on a GPU machine to what needs the GPU."""
    if not torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="cpu_only: CI runs it on the CPU")
    for item in items:
        if item.get_closest_marker("cpu_only"):
            item.add_marker(skip)
