"""The Triton backend's entry point, and first_call, the launch machinery both paths share (docs/triton.md)."""

import torch

from moe_triton import plan, target
from moe_triton.decode import PATH as DECODE
from moe_triton.native import PATH as NATIVE
from moe_triton.routing import routing_capacity
from moe_triton.tiles import NativeTileConfig, TileConfig, check_sizes
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
    """SPEC 1 on raw MXFP4 weights w1 [E, 2I, H/2], w2 [E, H, I/2] (fp4x2 or uint8), scales [E*2I, H/32] and
    [E*H, I/32] -> [M, H] bf16, the inputs validated by the caller (validate_inputs); native picks the path
    (None: target.native_default), tiles override the path's table."""
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
    """A shape's first call on a path with tiles cfg: checks, scratch, launches -> (plan, output)."""
    device = inputs[0].device
    if not isinstance(cfg, path.tiles):
        name = "native" if path.native else "decode"
        raise ValueError(f"tiles: the {name} path takes a {path.tiles.__name__}, got {type(cfg).__name__}")
    n_blocks = checked_blocks(path, shape, cfg, device)
    layer = plan.Layer(shape, cfg, n_blocks, path.scratch(shape, cfg, n_blocks, device))

    def launches(call: plan.Call) -> None:
        routing, a1 = path.prep(call, layer)
        path.stage1(call, layer, routing, a1)
        path.stage2(call, layer, routing)

    return plan.record_plan(launches, inputs, path.native)


def checked_blocks(path: plan.Path, shape: Shape, cfg, device) -> int:
    """The routing's capacity in blocks of cfg.block_m, once cfg's sizes and the path's checks accept it on shape
    and device (a ValueError naming the field otherwise)."""
    check_sizes(cfg)
    n_blocks = routing_capacity(shape.n_tokens * shape.topk, shape.n_experts, cfg.block_m)
    path.check(shape, cfg, n_blocks, device)
    return n_blocks
