"""Compiling the package's kernels for sm_90 (H100, H200) on a machine without one: bench.gfx950.driver's
compile-only driver for that target, with the launchers' NVIDIA fast path on (the PTX decodes, the Gluon stages,
dependent launches, register caps), so that every kernel compiles as the launcher would launch it on an H200.
Compiled code, nothing run: bench.h200.sass reads it."""

from __future__ import annotations

import contextlib


@contextlib.contextmanager
def fast_decode_on():
    """The launchers' NVIDIA fast path on for CPU tensors (they stand for CUDA ones), on an sm_90 GPU:
    moe_triton.target's fast_decode and gluon_kernels say True (the launchers call them through the module)."""
    from unittest import mock

    from moe_triton import target

    with mock.patch.object(target, "fast_decode", lambda device: True):
        with mock.patch.object(target, "gluon_kernels", lambda device: True):
            yield


@contextlib.contextmanager
def compiling_for_sm90():
    """Yield the active compile-only driver for sm_90 (its .launches: bench.gfx950.driver.Launch), the fast path
    on."""
    from bench.gfx950.driver import SM90, compile_only

    with fast_decode_on(), compile_only(SM90) as driver:
        yield driver
