"""The runner's types (GPU MODE reference-kernels, amd_202602/moe-mxfp4/task.py), restated."""

from typing import TypeVar

import torch

input_t = TypeVar(
    "input_t",
    bound=tuple[
        torch.Tensor,  # hidden_states                  [M, d_hidden] bf16
        torch.Tensor,  # gate_up_weight                 [E, 2*d_expert_pad, d_hidden_pad//2] fp4x2 (raw)
        torch.Tensor,  # down_weight                    [E, d_hidden_pad, d_expert_pad//2] fp4x2 (raw)
        torch.Tensor,  # gate_up_weight_scale           [E*2*d_expert_pad, d_hidden_pad//32] e8m0 (raw)
        torch.Tensor,  # down_weight_scale              [E*d_hidden_pad, d_expert_pad//32] e8m0 (raw)
        torch.Tensor,  # gate_up_weight_shuffled        same shape, fp4x2 (shuffled)
        torch.Tensor,  # down_weight_shuffled           same shape, fp4x2 (shuffled)
        torch.Tensor,  # gate_up_weight_scale_shuffled  2-D e8m0 (shuffled)
        torch.Tensor,  # down_weight_scale_shuffled     2-D e8m0 (shuffled)
        torch.Tensor,  # topk_weights                   [M, total_top_k] fp32
        torch.Tensor,  # topk_ids                       [M, total_top_k] int32
        dict,  # config
    ],
)
output_t = TypeVar("output_t", bound=torch.Tensor)
