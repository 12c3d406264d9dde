"""The two steps the peers' GEMMs leave to the layer around them, each one Triton kernel: SwiGLU
between the GEMMs and the weighted top-k sum after the second (glue.py launches them)."""

import triton
import triton.language as tl

from moe_triton.kernels.silu import gated_h, round_to_bf16


@triton.jit
def swiglu_kernel(gate_up_ptr, h_ptr, inter, stride_row, BLOCK: tl.constexpr, INTERPRET: tl.constexpr):
    """h[r, c] = bf16(silu(gate) * up) of gate = gate_up[r, c], up = gate_up[r, inter + c], as the
    judge computes it on CUDA (the package's gated_h, JUDGE "torch"); one program per row and block."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    live = cols < inter
    gate = tl.load(gate_up_ptr + row * stride_row + cols, mask=live, other=0.0).to(tl.float32)
    up = tl.load(gate_up_ptr + row * stride_row + inter + cols, mask=live, other=0.0).to(tl.float32)
    h = gated_h(gate, up, "torch", INTERPRET)
    tl.store(h_ptr + row * inter + cols, h.to(tl.bfloat16), mask=live)


@triton.jit
def topk_sum_kernel(y_ptr, weights_ptr, out_ptr, width, TOPK: tl.constexpr, BLOCK: tl.constexpr):
    """out[t] = bf16(sum_j weights[t, j] y[t TOPK + j]): fp32 products and sum, rounded once."""
    token = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    live = cols < width
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for j in tl.static_range(TOPK):
        weight = tl.load(weights_ptr + token * TOPK + j)
        acc += weight * tl.load(y_ptr + (token * TOPK + j) * width + cols, mask=live, other=0.0).to(tl.float32)
    tl.store(out_ptr + token * width + cols, round_to_bf16(acc).to(tl.bfloat16), mask=live)
