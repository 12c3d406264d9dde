"""The tiles of the Triton backend: what a tile choice holds, per path, and the routing-block rule
both targets' defaults start from. The choices per target are data: tiles_nvidia.py (the decode
path: H200 sweep winners and the selection's alternates) and tiles_amd.py (the native gfx950
path: offline-compile choices and the kernel variants). Keys are (d_hidden, d_inter, n_experts,
topk, n_tokens) everywhere.

TileConfig (decode path): block_m is the routing block (the rows of one expert that a program
takes); stage 1 (gate/up GEMM) and stage 2 (down GEMM) each have their own tile, warps and
pipeline depth. block_n1 counts columns of h: a stage-1 program decodes 2 * block_n1 weight rows
(its gate and up rows). A stage-2 program computes n_tiles2 output tiles of block_n2 columns one
after the other. max_regs1 and max_regs2 cap each stage's registers per thread on NVIDIA GPUs
(ptxas .maxnreg; 0 leaves it to the compiler), to fit one more program per SM. tail_m > 0 runs
each stage in two launches: routing blocks with at most tail_m real rows (an expert's last, partly
filled block) on tiles of tail_m rows, so that the MMA skips their padding. gluon1 > 0 runs stage
1 on the warp-specialized Gluon kernel (kernels/gluon_stage1.py, NVIDIA sm_90 only), each K step
decoded and issued to the tensor cores in gluon1 parts along k (1, 2 or 4); block_n1 must be 64
or 128 (2 or 4 MMA warpgroups of 32 h columns each), block_k1 128 and warps1 8; stages1 is its
ring's slots and max_regs1 its registers a thread at launch, which the loader and MMA warpgroups share
(decode.gluon_registers): 0 for one program an SM, else a multiple of 8 from 56 (80 for two programs
an SM) to 168 with two MMA warpgroups, 96 with four. gluon2 > 0 does the same for stage 2 (kernels/gluon_stage2.py):
block_n2 128 or 256 output columns per tile (2 or 4 MMA warpgroups of 64), block_k2 128, warps2 8,
stages2 its ring's slots, n_tiles2 tiles per program as in the decode kernel, max_regs2 as max_regs1
(two MMA warpgroups: block_n2 128).
fold1 = 1 (gluon1 with tail_m only) has the Gluon stage 1's program of an expert's last full block
also compute the expert's tail block (its first tail_m rows) from the same decoded weights, instead
of the tail launch decoding them again (docs/triton.md, "The fold").

NativeTileConfig (native gfx950 path, kernels/native.py): the same tile fields without the
NVIDIA-only ones, plus the AMD backend's options and the kernel variants.
"""

from typing import NamedTuple


class TileConfig(NamedTuple):
    block_m: int
    block_n1: int
    block_k1: int
    warps1: int
    stages1: int
    block_n2: int
    block_k2: int
    warps2: int
    stages2: int
    n_tiles2: int
    max_regs1: int = 0
    tail_m: int = 0
    max_regs2: int = 0
    gluon1: int = 0
    gluon2: int = 0
    fold1: int = 0


def default_block_m(n_tokens: int, n_experts: int, topk: int) -> int:
    """Small routing blocks while experts see few rows each, larger ones when they see many."""
    rows_per_expert = n_tokens * topk / n_experts
    return 16 if rows_per_expert <= 24 else 32 if rows_per_expert <= 96 else 128


class NativeTileConfig(NamedTuple):
    """Tiles of the native gfx950 path. nonkdim is the AMD backend's matrix_instr_nonkdim (16:
    v_mfma_scale_f32_16x16x128_f8f6f4, 32: the 32x32x64 one); waves_per_eu its occupancy hint
    (0: the compiler's choice). The kernel variants (docs/gfx950.md), each off by default:
    xcds > 0 remaps both GEMMs' programs so that one die of that many (8 on an MI355X) runs
    consecutive routing blocks of a column tile (moe_triton.kernels.native.xcd_program); weight_cache
    is tl.load's cache modifier for the weights (".cg": streaming); fused_quant has stage 1
    quantize the bf16 hidden states itself (no a1 buffer; gfx950's fp4 converts, mxfp4/convert.py,
    every column tile repeating it); route_launches counts the launches before stage 1 (2:
    histograms then placement, 1: one launch that does both, 0: stage 1 routes its own block and
    zeroes the output, with fused_quant only). quant_blocks is how many 32-element blocks of the
    hidden states each quantizing program of the routing launches takes (a power of 2; the decode
    path's 16 by default: fewer, longer programs where tiny ones take several rounds)."""

    block_m: int
    block_n1: int
    block_k1: int
    warps1: int
    stages1: int
    block_n2: int
    block_k2: int
    warps2: int
    stages2: int
    n_tiles2: int
    nonkdim: int = 16
    waves_per_eu: int = 0
    xcds: int = 0
    weight_cache: str = ""
    fused_quant: bool = False
    route_launches: int = 2
    quant_blocks: int = 16
