"""`python -m bench.h200.row_reads`: what DRAM rate this NVIDIA GPU gives a stage-1 weight stream for the bytes it
reads of each weight row a K step. The programs read as the decode and Gluon stage 1 read w1: one program a tile
of 64 rows over all of K, a piece of CHUNK bytes of each row a step (K steps of 128, 256, 512 and 1024 in fp4 are
pieces of 64, 128, 256 and 512 bytes), on E-257's whole w1 (257 x 512 rows of 3584 bytes, 472 MB), the pieces
either scattered over the tile's 64 rows (row stride 3584 bytes, as the kernels read) or, the same code and bytes,
contiguous (each step one run of 64 pieces). scattered against contiguous says what short pieces cost beside the
bytes. Each is checked against a torch model, then timed the way bench/tune/tiles.py times a kernel (an L2 flush,
events around one launch, the median). Writes row_reads.json and .md under --out.
"""

from __future__ import annotations

import statistics
import sys

import triton
import triton.language as tl

TILE_ROWS = 64  # weight rows a program: wgmma's M
ROW_WORDS = 896  # int32 words of a w1 row: K 7168 in fp4 (3584 bytes)
CHUNKS = (64, 128, 256, 512)  # bytes of a row a K step
ROWS = 257 * 512  # E-257's gate_up rows


@triton.jit
def row_reads_kernel(w_ptr, out_ptr, row_stride, step_stride, ROW_WORDS: tl.constexpr, CHUNK_WORDS: tl.constexpr):
    """Program t: the XOR of its tile's pieces, [64, CHUNK_WORDS] int32 a step; piece (row r, step s) at word
    t 64 ROW_WORDS + r row_stride + s step_stride."""
    tile = tl.program_id(0)
    rows = tl.arange(0, 64)[:, None]
    words = tl.arange(0, CHUNK_WORDS)[None, :]
    base = w_ptr + tile.to(tl.int64) * 64 * ROW_WORDS + rows * row_stride + words
    acc = tl.zeros((64, CHUNK_WORDS), tl.int32)
    for step in range(ROW_WORDS // CHUNK_WORDS):
        acc ^= tl.load(base + step * step_stride)
    tl.store(out_ptr + tile * 64 * CHUNK_WORDS + rows * CHUNK_WORDS + words, acc)


def strides(chunk: int, scattered: bool) -> tuple[int, int]:
    """(row stride, step stride) in words: the kernels' layout, or each step's 64 pieces in one run."""
    words = chunk // 4
    return (ROW_WORDS, words) if scattered else (words, TILE_ROWS * words)


def expected(w, chunk: int, scattered: bool):
    """The torch model: each tile's pieces as the kernel reads them, XORed over the steps."""
    words = chunk // 4
    tiles = w.view(-1, TILE_ROWS, ROW_WORDS)
    if scattered:
        pieces = tiles.view(-1, TILE_ROWS, ROW_WORDS // words, words).transpose(1, 2)
    else:
        pieces = tiles.reshape(-1, ROW_WORDS // words, TILE_ROWS, words)
    acc = pieces[:, 0].clone()
    for step in range(1, pieces.shape[1]):
        acc ^= pieces[:, step]
    return acc.reshape(-1)


def launch(w, out, chunk: int, scattered: bool) -> None:
    grid = (w.numel() // (TILE_ROWS * ROW_WORDS),)
    row_reads_kernel[grid](w, out, *strides(chunk, scattered), ROW_WORDS, chunk // 4, num_warps=4)


def weights(rows: int, device, seed: int = 0):
    import torch

    generator = torch.Generator(device=device).manual_seed(seed)
    size = (rows * ROW_WORDS,)
    return torch.randint(-(2**31), 2**31 - 1, size, dtype=torch.int32, device=device, generator=generator)


def check(device, rows: int = 2 * TILE_ROWS) -> bool:
    """Every chunk and layout against the torch model on a small set."""
    import torch

    w = weights(rows, device, seed=1)
    for chunk in CHUNKS:
        for scattered in (True, False):
            out = torch.full((rows * chunk // 4,), -1, dtype=torch.int32, device=device)
            launch(w, out, chunk, scattered)
            if not torch.equal(out, expected(w, chunk, scattered)):
                return False
    return True


def time_all(reps: int, device) -> list[dict]:
    import torch

    from bench.tune.tiles import time_call

    w = weights(ROWS, device)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    table = []
    for chunk in CHUNKS:
        out = torch.empty(ROWS * chunk // 4, dtype=torch.int32, device=device)
        for scattered in (True, False):
            us = statistics.median(time_call(lambda o=out, c=chunk, s=scattered: launch(w, o, c, s), reps, flush))
            layout = "scattered" if scattered else "contiguous"
            table.append({"chunk": chunk, "layout": layout, "us": us, "tb_per_s": w.numel() * 4 / (us * 1e-6) / 1e12})
            print(f"{chunk} B {layout}: {us:.1f} us {table[-1]['tb_per_s']:.2f} TB/s", flush=True)
    return table


def measured(reps: int, device) -> tuple[bool, str, list[dict], list[str]]:
    """Every chunk and layout checked, then timed: checked_probe_main's run."""
    checked = check(device)
    rows = time_all(reps, device)
    table = ["| bytes a row a step | layout | us | TB/s |", "|---:|---|---:|---:|"]
    table += [f"| {r['chunk']} | {r['layout']} | {r['us']:.1f} | {r['tb_per_s']:.2f} |" for r in rows]
    return checked, "every chunk and layout", rows, table


def main(argv: list[str] | None = None) -> int:
    from bench.h200.harness import checked_probe_main

    help_reps = "timed launches per chunk and layout"
    return checked_probe_main("row_reads", __doc__, argv, 12, help_reps, "times a weight stream", measured)


if __name__ == "__main__":
    sys.exit(main())
