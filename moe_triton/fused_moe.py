"""The Triton backend's entry point, fused_moe_triton: it picks the path and its tiles and runs the
shape's plan; routing, stage 1 and stage 2 in four launches (six with a tail tile), no host sync.

Two paths, each launched by its own module beside its kernels: the decode path (decode.py,
kernels/decode.py: fp4 weights decoded to bf16 in registers, bf16 MMAs; the NVIDIA one, with the
Gluon stages on sm_90) and the native path (native.py, kernels/native.py: tl.dot_scaled on packed
MXFP4 operands, gfx950's scaled MFMAs), chosen automatically on a gfx950 device and selectable
anywhere (`native=True`, or MOE_TRITON_NATIVE=1 / 0), where Triton emulates dot_scaled. The routing
launches all share are routing.py's, the per-shape plans plan.py's, the target probes and launch
options target.py's.

Scratch (routing arrays; the activations of both GEMMs, bf16 on the decode path, fp4 bytes and
e8m0 scales on the native path) comes from the buffers pool; the output is a new tensor every
call. Under Triton's CPU interpreter, which has no bf16 atomics,
stage 2 accumulates into an fp32 tensor that is rounded to bf16 at the end; on a GPU it adds
bf16 atomically into the output, as the runner's aiter kernel does.
"""

import torch

from moe_triton import target
from moe_triton.decode import decode_plan
from moe_triton.native import fused_moe_native
from moe_triton.plan import DecodePlan, planned_call
from moe_triton.tiles import NativeTileConfig, TileConfig
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
    path (None: target.native_default); tiles overrides that path's tile table (bench/tune/tiles.py). Off the
    native path, without tiles, the static table (tiles_nvidia.static_tiles) picks."""
    if native is None:
        native = target.native_default(hidden_states.device)
    if native:
        return fused_moe_native(hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids, tiles)
    inputs = (hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids)
    interpret = target.interpreting()
    key = (hidden_states.shape, w1.shape, topk_ids.shape, hidden_states.device, tiles, target.pdl_enabled(), interpret)

    def build() -> "DecodePlan":
        device = hidden_states.device
        shape = Shape.of(hidden_states, w1, topk_ids)
        return decode_plan(*inputs, tiles or static_tiles(shape, target.gluon_kernels(device)))

    return planned_call(key, build, inputs, interpret)
