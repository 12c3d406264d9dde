"""The layer around a peer's two GEMMs, shared by the adapters: SwiGLU and the weighted top-k sum,
each one fused Triton kernel (_glue_kernels.py), as vLLM runs them around its MoE GEMMs
(silu_and_mul, moe_sum) and as the package fuses them into its stages. In plain torch they cost
the peers more than some of their GEMMs on the H200: the SwiGLU's four elementwise kernels about
110 us at I-2048 bs-512, and torch.bmm with an fp32 output (the top-k sum) went to a MAGMA kernel
of about 200 us at bs-512 (torch.profiler, bench/notes/nvidia-speed.md)."""

import torch
import triton

from bench.h200.peers._glue_kernels import swiglu_kernel, topk_sum_kernel
from moe_triton.target import interpreting

BLOCK = 1024


def swiglu(gate_up: torch.Tensor, inter: int) -> torch.Tensor:
    """h = bf16(silu(gate) * up) of [rows, 2 I] bf16 or fp32 (gate the first I columns), bit for
    bit reference.silu_and_mul(gate.float(), up.float()) on CUDA."""
    if gate_up.dim() != 2 or gate_up.shape[1] != 2 * inter or gate_up.stride(1) != 1:
        raise ValueError(f"gate_up: expected [rows, {2 * inter}] with unit column stride, got {tuple(gate_up.shape)}")
    h = torch.empty((gate_up.shape[0], inter), dtype=torch.bfloat16, device=gate_up.device)
    if h.numel():
        grid = (gate_up.shape[0], triton.cdiv(inter, BLOCK))
        swiglu_kernel[grid](gate_up, h, inter, gate_up.stride(0), BLOCK=BLOCK, INTERPRET=interpreting())
    return h


def topk_sum(y: torch.Tensor, topk_weights: torch.Tensor) -> torch.Tensor:
    """out[t] = bf16(sum_j topk_weights[t, j] * y[t k + j]) of y [M k, H] bf16, the products and
    their sum in fp32, rounded once."""
    n_tokens, topk = topk_weights.shape
    if y.dim() != 2 or y.shape[0] != n_tokens * topk:
        raise ValueError(f"y: expected [{n_tokens * topk}, H] for topk_weights {tuple(topk_weights.shape)}")
    y, weights = y.contiguous(), topk_weights.float().contiguous()
    out = torch.empty((n_tokens, y.shape[1]), dtype=torch.bfloat16, device=y.device)
    if out.numel():
        topk_sum_kernel[(n_tokens, triton.cdiv(y.shape[1], BLOCK))](y, weights, out, y.shape[1], TOPK=topk, BLOCK=BLOCK)
    return out
