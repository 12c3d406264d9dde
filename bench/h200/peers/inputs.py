"""What every peer adapter checks and reads of the task's input tuple: its shapes, and the packed
fp4 weights and e8m0 scales as bytes, unchanged (no adapter requantizes the package's weights)."""

import torch

MX_BLOCK = 32
INPUT_LEN = 12  # reference.generate_input's tuple


def as_uint8(t: torch.Tensor, name: str) -> torch.Tensor:
    """A uint8 view of packed fp4, e8m0 or uint8 data."""
    if t.dtype in (torch.float4_e2m1fn_x2, torch.float8_e8m0fnu):
        return t.view(torch.uint8)
    if t.dtype != torch.uint8:
        raise ValueError(f"{name}: expected float4_e2m1fn_x2, float8_e8m0fnu or uint8, got {t.dtype}")
    return t


def expert_bytes(w: torch.Tensor, w_scale: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The package's [E, N, K/2] packed fp4 (element 2j in the low nibble) and [E N, K/32] e8m0 as
    uint8 [E, N, K/2] and uint8 [E, N, K/32], the same bytes (humming's mxfp4 schema tensors)."""
    values = as_uint8(w, name)
    scales = as_uint8(w_scale, f"{name}_scale")
    if values.dim() != 3:
        raise ValueError(f"{name}: expected [E, N, K/2], got {tuple(values.shape)}")
    n_experts, n, half_k = values.shape
    k = 2 * half_k
    if k % MX_BLOCK:
        raise ValueError(f"{name}: K = {k} is not a multiple of {MX_BLOCK}")
    if scales.numel() != n_experts * n * (k // MX_BLOCK) or scales.shape[-1] != k // MX_BLOCK:
        raise ValueError(f"{name}_scale: expected {(n_experts * n, k // MX_BLOCK)}, got {tuple(scales.shape)}")
    return values.contiguous(), scales.reshape(n_experts, n, k // MX_BLOCK).contiguous()


def check_input(data) -> None:
    if not isinstance(data, (tuple, list)) or len(data) != INPUT_LEN:
        raise ValueError(f"data: expected generate_input's {INPUT_LEN}-tuple, got {type(data).__name__}")
    hidden, w1, w2, *_, topk_weights, topk_ids, config = data
    if not isinstance(config, dict):
        raise ValueError(f"data[-1]: expected the config dict, got {type(config).__name__}")
    for dim in ("d_hidden", "d_expert"):
        if config.get(f"{dim}_pad", config.get(dim)) != config.get(dim):
            raise ValueError(f"config: {dim}_pad != {dim}; padded shapes are not supported")
    if hidden.dim() != 2 or hidden.dtype != torch.bfloat16:
        raise ValueError(f"hidden: expected [M, H] bf16, got {tuple(hidden.shape)} {hidden.dtype}")
    if w1.dim() != 3:
        raise ValueError(f"w1: expected [E, 2 I, H/2], got {tuple(w1.shape)}")
    n_experts, two_inter, half_h = w1.shape
    if 2 * half_h != hidden.shape[1] or two_inter % 2:
        raise ValueError(f"w1 {tuple(w1.shape)} does not fit hidden {tuple(hidden.shape)}")
    if tuple(w2.shape) != (n_experts, hidden.shape[1], two_inter // 4):
        raise ValueError(f"w2: expected {(n_experts, hidden.shape[1], two_inter // 4)}, got {tuple(w2.shape)}")
    if topk_ids.shape != topk_weights.shape or topk_ids.dim() != 2 or topk_ids.shape[0] != hidden.shape[0]:
        raise ValueError(
            f"topk_ids {tuple(topk_ids.shape)} / topk_weights {tuple(topk_weights.shape)}: expected [M, k], "
            f"M = {hidden.shape[0]}"
        )


def routed_slots(topk_ids: torch.Tensor, n_experts: int) -> torch.Tensor:
    """The expert of each slot (slot t k + j of a non-empty int32 / int64 topk_ids [M, k]) as int64
    [M k], every value checked to name one of n_experts. Syncs the host (the range): prepare only."""
    if topk_ids.dim() != 2 or topk_ids.numel() == 0:
        raise ValueError(f"topk_ids: expected a non-empty [M, k], got {tuple(topk_ids.shape)}")
    if topk_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"topk_ids: expected int32 or int64, got {topk_ids.dtype}")
    slots = topk_ids.reshape(-1).to(torch.int64)
    lo, hi = int(slots.min()), int(slots.max())
    if lo < 0 or hi >= n_experts:
        raise ValueError(f"topk_ids: values in [{lo}, {hi}], outside the {n_experts} experts")
    return slots
