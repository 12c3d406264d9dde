"""What the selection measures per shape: the backends custom_kernel runs and, per target, the candidates,
the static choice (the incumbent) first (docs/selection.md, "The candidates"); a candidate's `detail` says
what it runs, so that a stored choice whose tiles changed is not reused."""

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import torch

from moe_aiter.backend import fused_moe_aiter, fused_moe_aiter_template
from moe_triton.target import gluon_kernels, interpreting, native_default
from moe_triton.tiles import TileConfig, default_block_m
from moe_triton.tiles_amd import NATIVE_ALTERNATES, native_tile_config
from moe_triton.tiles_nvidia import ALTERNATES, COLS64, ROWS64, SELECTION_WINNERS, static_tiles, tile_config
from problem.shapes import Shape
from reference import ref_kernel

if TYPE_CHECKING:  # the runner's types, for annotations only: the file runs without task.py
    from task import input_t, output_t


class Candidate(NamedTuple):
    name: str
    run: Callable[["input_t"], "output_t"]
    detail: str = ""


def run_triton(data: "input_t", tiles=None, native: bool | None = None) -> "output_t":
    from moe_triton.fused_moe import fused_moe_triton

    hidden, w1, w2, w1_scale, w2_scale, *_, topk_weights, topk_ids, _config = data
    return fused_moe_triton(hidden, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids, tiles=tiles, native=native)


BACKEND_RUNNERS = {
    "aiter": fused_moe_aiter,
    "aiter-fused": fused_moe_aiter_template,
    "triton": run_triton,
    "reference": ref_kernel,
}


@functools.cache
def platform() -> str:
    """The selection's target: gfx950-aiter, gfx950, gpu or cpu."""
    if not torch.cuda.is_available() or interpreting():
        return "cpu"
    if torch.version.hip is not None and torch.cuda.get_device_properties(0).gcnArchName.startswith("gfx950"):
        try:
            import aiter  # noqa: F401
        except ImportError:
            return "gfx950"
        return "gfx950-aiter"
    return "gpu"


def _triton(name: str, tiles, native: bool) -> Candidate:
    return Candidate(name, functools.partial(run_triton, tiles=tiles, native=native), repr(tiles))


def _cpu_candidates(shape: Shape) -> list[Candidate]:
    """The decode table tile, the default rule's tiles one routing-block size up, the native path."""
    native = native_default(torch.device("cpu"))
    larger = min(128, 2 * default_block_m(shape))
    neighbour = TileConfig(block_m=larger, stage1=ROWS64, stage2=COLS64, n_tiles2=4)
    return [
        Candidate("triton", run_triton, repr((native_tile_config if native else tile_config)(shape))),
        _triton(f"triton:block-m-{larger}", neighbour, False),
        _triton("triton-decode" if native else "triton-native", None, not native),
    ]


def _gpu_candidates(shape: Shape, every: bool) -> list[Candidate]:
    """The static choice, the decode table tile where that differs (a Gluon stage), and the
    ALTERNATES that won their shape (SELECTION_WINNERS); every: all ALTERNATES."""
    static, decode = static_tiles(shape, gluon=gluon_kernels(torch.device("cuda"))), tile_config(shape)
    out = [Candidate("triton", run_triton, repr(static))]
    if static != decode:
        out.append(_triton("triton:decode", decode, False))
    alternates = ALTERNATES.get(shape, {})
    names = alternates if every else SELECTION_WINNERS.get(shape, ())
    return out + [_triton(f"triton:{n}", alternates[n], False) for n in names]


def candidates_for(config: dict, target: str, every: bool = False) -> list[Candidate]:
    """The candidates of one shape, the choice without selection first; every
    (MOE_SELECT_CANDIDATES=all): on NVIDIA and other GPUs also those that never won a shape."""
    shape = Shape.of_config(config)
    if target == "cpu":
        return _cpu_candidates(shape)
    if target == "gpu":
        return _gpu_candidates(shape, every=every)
    native = [
        Candidate("triton", run_triton, repr(native_tile_config(shape))),
        *(_triton(f"triton:{n}", t, True) for n, t in NATIVE_ALTERNATES.get(shape, {}).items()),
    ]
    if target == "gfx950":
        return native
    return [Candidate("aiter", fused_moe_aiter), Candidate("aiter-fused", fused_moe_aiter_template), *native]
