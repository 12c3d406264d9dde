"""MXFP4 activation quantization with the moe-sort scale layout in one Triton kernel, a drop-in for
aiter's fused_dynamic_mxfp4_quant_moe_sort, SPEC 3.3 bit for bit; its layouts, Inf/NaN rules and two
kinds of programs: docs/aiter.md, "The quantizer"."""

import torch
import triton
import triton.language as tl

from buffers import get_buffer
from moe_triton.target import interpreting
from mxfp4.codec import E8M0_DTYPE, FP4_DTYPE, MX_BLOCK
from mxfp4.encode import mx_encode_pairs, mx_scale_byte

SCALE_TILE_ROWS = 32  # rows of one e8m0_shuffle tile
SCALE_TILE_GROUPS = 8  # 32-element groups of one e8m0_shuffle tile
_NUM_WARPS = 4


@triton.jit
def _load_bits(x_ptr, src64, stride_x, pcol, mask2, BLOCK_R: tl.constexpr, BLOCK_G: tl.constexpr, MANT: tl.constexpr):
    """(even, odd) element bit patterns as int32 [R, G, 16], 0 where masked. pcol [P = 16 G]: the
    element-pair index along the row (contiguous, so the loads vectorize); mask2 [R, P]."""
    if MANT == 7:  # bf16: x_ptr holds int32 pairs, element 2j in the low half
        pair = tl.load(x_ptr + src64[:, None] * stride_x + pcol[None, :], mask=mask2, other=0)
        pair = tl.reshape(pair, (BLOCK_R, BLOCK_G, 16))
        return pair & 0xFFFF, (pair >> 16) & 0xFFFF
    else:  # fp32 bits, one int32 per element
        off = src64[:, None] * stride_x + 2 * pcol[None, :]
        even = tl.load(x_ptr + off, mask=mask2, other=0)
        odd = tl.load(x_ptr + off + 1, mask=mask2, other=0)
        return tl.reshape(even, (BLOCK_R, BLOCK_G, 16)), tl.reshape(odd, (BLOCK_R, BLOCK_G, 16))


@triton.jit
def _mxfp4_quant_sort_kernel(
    x_ptr,  # int32: bf16 bit pairs [rows, cols/2], or fp32 bits [rows, cols]
    fp4_ptr,  # uint8 [rows, cols/2]
    scale_ptr,  # uint8, (n_sort_rows/32, n_col_tiles, 4, 16, 4) contiguous
    sorted_ids_ptr,  # int32 [n_sorted]
    num_valid_ptr,  # int32 [>= 1]
    n_rows,
    n_cols,
    stride_x,  # in int32 units
    stride_fp4,
    n_sorted,
    n_sort_rows,  # rows of the scale matrix: n_sorted rounded up to 32
    n_row_programs,  # programs along axis 0 that quantize token-order rows; the rest walk the sort
    n_col_tiles,  # 256-column tiles of the scale layout
    token_num,
    TOPK: tl.constexpr,
    MANT: tl.constexpr,  # mantissa bits of the input format: 7 (bf16) or 23 (fp32)
    BLOCK_R: tl.constexpr,  # rows per program, a multiple of 32
    BLOCK_G: tl.constexpr,  # 32-element groups per program, a multiple of 8
):
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    r_idx = tl.arange(0, BLOCK_R)
    g_idx = pid_c * BLOCK_G + tl.arange(0, BLOCK_G)  # global 32-group index
    pcol = pid_c * (BLOCK_G * 16) + tl.arange(0, BLOCK_G * 16)  # element pair = fp4 byte index
    pcol_ok = pcol < n_cols // 2
    mag_mask: tl.constexpr = (1 << (MANT + 8)) - 1

    if pid_r < n_row_programs:
        # token order: every row of x, quantized once
        row = pid_r * BLOCK_R + r_idx
        ok = (row < n_rows)[:, None] & pcol_ok[None, :]
        raw_even, raw_odd = _load_bits(x_ptr, row.to(tl.int64), stride_x, pcol, ok, BLOCK_R, BLOCK_G, MANT)
        packed = tl.reshape(mx_encode_pairs(raw_even, raw_odd, MANT)[0], (BLOCK_R, BLOCK_G * 16))
        tl.store(fp4_ptr + row.to(tl.int64)[:, None] * stride_fp4 + pcol[None, :], packed, mask=ok)
    else:
        # sorted order: the scale bytes of 32-row tiles of sorted ids below num_valid_ids
        n_valid = tl.load(num_valid_ptr)
        pos = (pid_r - n_row_programs) * BLOCK_R + r_idx
        if (pid_r - n_row_programs) * BLOCK_R < n_valid:
            in_sort = (pos < n_valid) & (pos < n_sorted)
            ids = tl.load(sorted_ids_ptr + pos, mask=in_sort, other=0)
            token = ids & 0xFFFFFF
            if TOPK == 1:
                src = token
            else:
                src = token * TOPK + ((ids >> 24) & 0xFF)
            ok = (in_sort & (token < token_num))[:, None] & pcol_ok[None, :]
            raw_even, raw_odd = _load_bits(x_ptr, src.to(tl.int64), stride_x, pcol, ok, BLOCK_R, BLOCK_G, MANT)
            sbyte = mx_scale_byte(raw_even & mag_mask, raw_odd & mag_mask, MANT)
            # e8m0_shuffle tiling (SPEC 3.5): in the 256-byte tile of (row // 32, group // 8), row
            # r = 16a + b and group g = 4d + e land at e*64 + b*4 + d*2 + a. Past num_valid_ids: skipped.
            rt = pos % 32
            row_part = (pos // 32).to(tl.int64) * (n_col_tiles * 256) + (rt % 16) * 4 + rt // 16
            gt = g_idx % 8
            grp_part = (g_idx // 8) * 256 + (gt % 4) * 64 + (gt // 4) * 2
            row_ok = (pos < n_sort_rows) & ((pos // 32) * 32 < n_valid)
            s_mask = row_ok[:, None] & (g_idx < n_col_tiles * 8)[None, :]
            tl.store(scale_ptr + row_part[:, None] + grp_part[None, :], sbyte.to(tl.uint8), mask=s_mask)


def _program_blocks(n_rows: int, n_cols: int, device) -> tuple[int, int]:
    """(rows, 32-groups) per program: one 32 x 256 tile on a GPU; in Triton's CPU interpreter,
    whose cost is per operation, not per element, far fewer and larger programs."""
    if torch.device(device).type == "cpu" or interpreting():
        rows = min(512, max(SCALE_TILE_ROWS, triton.next_power_of_2(n_rows)))
        groups = min(64, max(SCALE_TILE_GROUPS, triton.next_power_of_2(n_cols // MX_BLOCK)))
        return rows, groups
    return SCALE_TILE_ROWS, SCALE_TILE_GROUPS


def _bits_view(x: torch.Tensor) -> tuple[torch.Tensor, int]:
    """int32 view of x's bits and its mantissa width: bf16 as pairs [rows, cols/2], fp32 as is, fp16 via fp32."""
    if x.dtype == torch.bfloat16:
        if x.stride(1) != 1 or x.stride(0) % 2 or x.storage_offset() % 2:
            x = x.contiguous()
        return x.view(torch.int32), 7
    if x.dtype == torch.float16:
        x = x.float()
    if x.dtype == torch.float32:
        return (x if x.stride(1) == 1 else x.contiguous()).view(torch.int32), 23
    raise ValueError(f"x: expected bfloat16, float16 or float32, got {x.dtype}")


def fused_dynamic_mxfp4_quant_moe_sort(
    x: torch.Tensor,
    sorted_ids: torch.Tensor,
    num_valid_ids: torch.Tensor,
    token_num: int,
    topk: int,
    block_size: int = 32,
    *,
    out: torch.Tensor | None = None,
    out_scales: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """MXFP4-quantize x [rows, cols] (SPEC 3.3) -> (fp4 [rows, cols/2], sorted scales [-1, ceil8(cols/32)]);
    rows are tokens for topk == 1, else token*topk + slot; block_size (moe_sorting's block_m) a multiple of
    32. out / out_scales: preallocated uint8 (or fp4 / e8m0) tensors of those shapes (the scales
    (ceil(len(sorted_ids)/32), ceil(cols/256), 4, 16, 4)), else cached buffers keyed by shape and topk."""
    if x.dim() != 2:
        raise ValueError(f"x: expected 2-D [rows, cols], got shape {tuple(x.shape)}")
    n_rows, n_cols = x.shape
    if n_cols % MX_BLOCK:
        raise ValueError(f"x: cols must be a multiple of {MX_BLOCK}, got {n_cols}")
    if block_size % SCALE_TILE_ROWS:
        raise ValueError(f"block_size must be a multiple of {SCALE_TILE_ROWS} (aiter asserts it too), got {block_size}")
    if topk < 1:
        raise ValueError(f"topk must be >= 1, got {topk}")
    need_rows = token_num * (topk if topk > 1 else 1)
    if n_rows < need_rows:
        raise ValueError(f"x: {n_rows} rows, but token_num={token_num}, topk={topk} address {need_rows}")
    if sorted_ids.dtype != torch.int32 or sorted_ids.dim() != 1 or not sorted_ids.is_contiguous():
        raise ValueError("sorted_ids: expected a contiguous 1-D int32 tensor")
    if num_valid_ids.dtype != torch.int32 or num_valid_ids.numel() < 1:
        raise ValueError("num_valid_ids: expected an int32 tensor holding at least [padded_total]")
    bits, mant = _bits_view(x)

    n_sorted = sorted_ids.numel()
    n_sort_blocks = triton.cdiv(n_sorted, SCALE_TILE_ROWS)
    n_col_tiles = triton.cdiv(n_cols, MX_BLOCK * SCALE_TILE_GROUPS)
    fp4_shape = (n_rows, n_cols // 2)
    scale_shape = (n_sort_blocks, n_col_tiles, 4, 16, 4)
    if out is None:
        out = get_buffer(f"quant_fp4_k{topk}", fp4_shape, torch.uint8, x.device)
    if out_scales is None:
        out_scales = get_buffer(f"quant_scales_k{topk}", scale_shape, torch.uint8, x.device)
    fp4 = out.view(torch.uint8) if out.dtype != torch.uint8 else out
    scales = out_scales.view(torch.uint8) if out_scales.dtype != torch.uint8 else out_scales
    if tuple(fp4.shape) != fp4_shape or fp4.stride(1) != 1:
        raise ValueError(f"out: expected shape {fp4_shape} with unit column stride, got {tuple(fp4.shape)}")
    if scales.numel() != n_sort_blocks * n_col_tiles * 256 or not scales.is_contiguous():
        raise ValueError(f"out_scales: expected a contiguous tensor of shape {scale_shape}")

    block_r, block_g = _program_blocks(max(n_rows, n_sorted), n_cols, x.device)
    n_sort_rows = n_sort_blocks * SCALE_TILE_ROWS
    n_row_programs = triton.cdiv(n_rows, block_r)
    grid = (n_row_programs + triton.cdiv(n_sort_rows, block_r), triton.cdiv(n_cols, MX_BLOCK * block_g))
    _mxfp4_quant_sort_kernel[grid](
        bits,
        fp4,
        scales,
        sorted_ids,
        num_valid_ids,
        n_rows,
        n_cols,
        bits.stride(0),
        fp4.stride(0),
        n_sorted,
        n_sort_rows,
        n_row_programs,
        n_col_tiles,
        token_num,
        TOPK=topk,
        MANT=mant,
        BLOCK_R=block_r,
        BLOCK_G=block_g,
        num_warps=_NUM_WARPS,
    )
    return fp4.view(FP4_DTYPE), scales.view(E8M0_DTYPE).view(-1, n_col_tiles * SCALE_TILE_GROUPS)
