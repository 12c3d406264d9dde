"""Compiling the package's kernels for sm_90 (H100, H200) on a machine without one: bench.gfx950.driver's
compile-only driver for that target, with the launchers' NVIDIA fast path on (the PTX decodes, the Gluon stages,
dependent launches, register caps), so that every kernel compiles as the launcher would launch it on an H200.
compiling_for_sm90 for any kernel, decode_launches for every launch of one call of the package. Compiled code,
nothing run: bench.h200.sass reads it."""

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


def decode_launches(params: dict, tiles=None, native: bool = False) -> list:
    """Compile (never run) every launch of one decode-path call for sm_90 (the native path's with
    native), as the launcher launches it on the H200: the fast decode, programmatic dependent launch,
    the tile table's register caps."""
    from bench.gfx950.run import compile_inputs
    from moe_triton import plan
    from moe_triton.fused_moe import fused_moe_triton
    from problem.validation import validate_inputs

    data = compile_inputs(params)
    validate_inputs(data)
    hidden, w1, w2, w1_scale, w2_scale, *_, topk_weights, topk_ids, _config = data
    plan.clear_plans()  # a recorded plan would replay instead of launching
    try:
        with compiling_for_sm90() as driver:  # the CPU tensors stand for CUDA ones
            fused_moe_triton(hidden, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids, tiles=tiles, native=native)
    finally:
        plan.clear_plans()
    return driver.launches
