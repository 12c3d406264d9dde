#!POPCORN leaderboard amd-moe-mxfp4
#!POPCORN gpu MI355X
"""The leaderboard entry point: custom_kernel(data) runs the layer on the best backend here.

Backends: "aiter" (the 2-stage aiter pipeline with the shape-override table, MI355X / gfx950 with
aiter importable; the default there, except for the shapes that backend_table gives to triton),
"aiter-fused" (the leaderboard template's single aiter.fused_moe call), "triton" (the Triton
kernels: the native MXFP4 path on gfx950, the decode path elsewhere; the default where aiter is
not, run by Triton's CPU interpreter when there is no GPU) and "reference" (the torch
reference). The environment variable MOE_BACKEND overrides the choice. Inputs are validated
(metadata only) and never written.
"""

import functools
import os

import torch

# Without a GPU, Triton's interpreter must be chosen before triton is first imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from backend_table import backend_for  # noqa: E402
from task import input_t, output_t  # noqa: E402
from validation import validate_inputs  # noqa: E402

BACKENDS = ("aiter", "aiter-fused", "triton", "reference")


@functools.cache
def default_backend() -> str:
    """aiter on a gfx950 GPU where aiter imports, else triton."""
    if torch.cuda.is_available() and torch.version.hip is not None:
        if torch.cuda.get_device_properties(0).gcnArchName.startswith("gfx950"):
            try:
                import aiter  # noqa: F401
            except ImportError:
                return "triton"
            return "aiter"
    return "triton"


def selected_backend(config: dict | None = None) -> str:
    """MOE_BACKEND if set, else the default; where the default is aiter, backend_table may pick
    triton for the shape of `config`."""
    forced = os.environ.get("MOE_BACKEND")
    if forced and forced not in BACKENDS:
        raise ValueError(f"MOE_BACKEND: unknown backend {forced!r}; choose one of {', '.join(BACKENDS)}")
    backend = forced or default_backend()
    if not forced and backend == "aiter" and config is not None:
        return backend_for(config)
    return backend


def _run_triton(data: input_t) -> output_t:
    from moe_triton import fused_moe_triton

    hidden, w1, w2, w1_scale, w2_scale, *_, topk_weights, topk_ids, config = data
    return fused_moe_triton(hidden, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids, config)


def _run_reference(data: input_t) -> output_t:
    from reference import ref_kernel

    return ref_kernel(data)


def _run_aiter(data: input_t) -> output_t:
    from aiter_backend import fused_moe_aiter

    return fused_moe_aiter(data)


def _run_aiter_fused(data: input_t) -> output_t:
    from aiter_backend import fused_moe_aiter_template

    return fused_moe_aiter_template(data)


_RUNNERS = {"aiter": _run_aiter, "aiter-fused": _run_aiter_fused, "triton": _run_triton, "reference": _run_reference}


def custom_kernel(data: input_t) -> output_t:
    validate_inputs(data)
    return _RUNNERS[selected_backend(data[-1])](data)


if __name__ == "__main__":
    print(f"moe-mxfp4 submission: backend {selected_backend()}")
