"""The Triton backend's entry point, fused_moe_triton: it picks the path (decode.py, the NVIDIA one;
native.py, chosen on a gfx950 device and selectable anywhere with `native=True` or
MOE_TRITON_NATIVE=1 / 0) and its tiles, and runs the shape's plan: routing, stage 1 and stage 2 in
four launches (six with a tail tile), no host sync. first_call is the launch machinery both paths
share: a shape's first call runs the path's checks and scratch, then its launches, recorded into
the shape's plan (plan.py), which later calls replay; each path gives only what differs (plan.Path).

Scratch comes from the buffers pool; the output is a new tensor every call. Under Triton's CPU
interpreter, which has no bf16 atomics, stage 2 accumulates into an fp32 tensor that is rounded to
bf16 at the end; on a GPU it adds bf16 atomically into the output, as the runner's aiter kernel does.
"""

import torch

from moe_triton import plan, target
from moe_triton.decode import PATH as DECODE
from moe_triton.native import PATH as NATIVE
from moe_triton.routing import routing_capacity
from moe_triton.tiles import NativeTileConfig, TileConfig
from moe_triton.tiles_amd import native_tile_config
from moe_triton.tiles_nvidia import static_tiles
from problem.shapes import Shape


def fused_moe_triton(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    w1_scale: torch.Tensor,
    w2_scale: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    tiles: TileConfig | NativeTileConfig | None = None,
    native: bool | None = None,
) -> torch.Tensor:
    """SPEC 1 on raw MXFP4 weights: w1 [E, 2I, H/2], w2 [E, H, I/2] (fp4x2 or uint8), scales
    2-D [E*2I, H/32] and [E*H, I/32]; returns [M, H] bf16. The caller validates the input tuple
    (problem.validation.validate_inputs); the shapes are read from the tensors. native picks the
    path (None: target.native_default); tiles overrides that path's tile table (bench/tune/tiles.py).
    Without tiles, the native table (tiles_amd.native_tile_config) or off the native path the static
    one (tiles_nvidia.static_tiles) picks. A plan is kept per path, input sizes, device, tiles, PDL
    switch and interpreter."""
    device = hidden_states.device
    if native is None:
        native = target.native_default(device)
    inputs = (hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids)
    interpret = target.interpreting()
    # The tensors' own sizes: a Shape per call would cost the replay microseconds.
    key = (native, hidden_states.shape, w1.shape, topk_ids.shape, device, tiles, target.pdl_enabled(), interpret)

    def record() -> tuple[plan.Plan, torch.Tensor]:
        shape = Shape.of(hidden_states, w1, topk_ids)
        if native:
            return first_call(NATIVE, inputs, shape, tiles or native_tile_config(shape))
        return first_call(DECODE, inputs, shape, tiles or static_tiles(shape, target.gluon_kernels(device)))

    return plan.planned_call(key, record, inputs, interpret)


def first_call(path: plan.Path, inputs: tuple, shape: Shape, cfg) -> tuple[plan.Plan, torch.Tensor]:
    """A shape's first call on a path with tiles cfg: the path's checks and scratch, then its
    launches, routing, stage 1 and stage 2, recorded into the shape's plan (plan.record_plan).
    Returns the plan and this call's output."""
    device = inputs[0].device
    if not isinstance(cfg, path.tiles):
        name = "native" if path.native else "decode"
        raise ValueError(f"tiles: the {name} path takes a {path.tiles.__name__}, got {type(cfg).__name__}")
    n_blocks = routing_capacity(shape.n_tokens * shape.topk, shape.n_experts, cfg.block_m)
    path.check(shape, cfg, n_blocks, device)
    layer = plan.Layer(shape, cfg, n_blocks, path.scratch(shape, cfg, n_blocks, device))

    def launches(call: plan.Call) -> None:
        routing, a1 = path.prep(call, layer)
        path.stage1(call, layer, routing, a1)
        path.stage2(call, layer, routing)

    return plan.record_plan(launches, inputs, path.native)
