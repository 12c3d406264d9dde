"""The decode path's tiles (NVIDIA, the CPU interpreter, non-gfx950 ROCm GPUs): TUNED (else default_config),
GLUON_TUNED (the Gluon stages on sm_90: static_tiles), the selection's ALTERNATES and SELECTION_WINNERS;
how each row was measured: docs/tiles.md."""

from moe_triton.tiles import Stage, TileConfig, checked_shape, default_block_m
from problem.shapes import Shape

ROWS64 = Stage(block_n=32, block_k=256, warps=4, stages=3)
ROWS64_2DEEP = Stage(block_n=32, block_k=256, warps=4, stages=2)
ROWS128 = Stage(block_n=64, block_k=256, warps=8, stages=3)
COLS64 = Stage(block_n=64, block_k=256, warps=4, stages=2)
COLS64_3DEEP = Stage(block_n=64, block_k=256, warps=4, stages=3)
COLS128 = Stage(block_n=128, block_k=256, warps=4, stages=2)
COLS128_K128 = Stage(block_n=128, block_k=128, warps=4, stages=2)

# bench/tune/tiles.py --sweep on the H200, 2026-11-30 (torch 2.11, triton 3.6); E-257 bs-16 and bs-128's
# stage 2 three deep, so that a tile's copy overlaps the tile before it (H100, 2026-12-06); the overlap
# (stage 2 block by block) with max_regs1 128 at E-257 bs-16, bs-128 and E-33 bs-16: 141.0 against
# 154.6, 315.9 against 329.9 and 100.0 against 106.7 us a call; E-257 bs-128's stage 2 16 tiles a
# program: 316.6 against 320.3 (H100, 2026-12-06).
TUNED: dict[Shape, TileConfig] = {
    Shape(16, 7168, 256, 257, 9): TileConfig(
        block_m=16, stage1=ROWS64, stage2=COLS64_3DEEP, n_tiles2=8, max_regs1=128, overlap=1
    ),
    Shape(128, 7168, 256, 257, 9): TileConfig(
        block_m=16, stage1=ROWS64, stage2=COLS64_3DEEP, n_tiles2=16, max_regs1=128, overlap=1
    ),
    Shape(512, 7168, 256, 257, 9): TileConfig(
        block_m=32, stage1=ROWS64_2DEEP, stage2=COLS64, n_tiles2=8, max_regs1=128, max_regs2=72
    ),
    Shape(16, 7168, 512, 33, 9): TileConfig(
        block_m=16, stage1=ROWS64, stage2=COLS128, n_tiles2=1, max_regs1=128, max_regs2=88, overlap=1
    ),
    Shape(128, 7168, 512, 33, 9): TileConfig(
        block_m=32, stage1=ROWS64_2DEEP, stage2=COLS128, n_tiles2=4, max_regs1=128
    ),
    Shape(512, 7168, 512, 33, 9): TileConfig(block_m=64, stage1=ROWS64, stage2=COLS64, n_tiles2=4),
    Shape(512, 7168, 2048, 33, 9): TileConfig(block_m=128, stage1=ROWS128, stage2=COLS128_K128, n_tiles2=1, tail_m=32),
}


def default_config(shape: Shape) -> TileConfig:
    """TUNED's pattern: small routing blocks chain 4 stage-2 tiles; large ones decode 128 weight rows
    over two warp groups and run the experts' tail blocks on 32-row tiles."""
    block_m = default_block_m(shape)
    if block_m >= 128:
        return TileConfig(block_m=block_m, stage1=ROWS128, stage2=COLS128_K128, n_tiles2=1, tail_m=32)
    return TileConfig(block_m=block_m, stage1=ROWS64, stage2=COLS64, n_tiles2=4)


def tile_config(shape: Shape) -> TileConfig:
    return TUNED.get(checked_shape(shape)) or default_config(shape)


def gluon_variant(
    tiles: TileConfig, block_n: int, stages: int, parts: int, regs: int = 0, paired: int = 0, block_k: int = 128
) -> TileConfig:
    """tiles with stage 1 on the Gluon kernel (block_n1, stages1, gluon1, max_regs1, paired1, block_k1; the fixed
    fields as docs/tiles.md, "TileConfig", says: block_n1 32 is one warpgroup of 4 warps with no loader
    partition), the rest as it is."""
    warps = 4 if block_n == 32 else 8
    return tiles.replace(
        block_n1=block_n, block_k1=block_k, warps1=warps, stages1=stages, max_regs1=regs, gluon1=parts, paired1=paired
    )


def gluon2_variant(tiles: TileConfig, block_n: int, stages: int, parts: int, n_tiles: int, regs: int = 0) -> TileConfig:
    """tiles with stage 2 on the Gluon kernel (block_n2, stages2, gluon2, n_tiles2, max_regs2), the rest as it is."""
    return tiles.replace(
        block_n2=block_n, block_k2=128, warps2=8, stages2=stages, n_tiles2=n_tiles, max_regs2=regs, gluon2=parts
    )


# Where the Gluon stages beat the decode table's tile on the H200 (bench/h200/gluon_check.py,
# 2026-12-04, torch 2.11, triton 3.6) and, where dated so, on an H100.
GLUON_TUNED: dict[Shape, TileConfig] = {
    # one warpgroup a program, one wgmma wait every two K steps: stage 1 283.2 against the decode
    # stage 1's 309.7 us (H100, 2026-12-06); K steps of 256: 402.1 against 424.7 us a call, two of
    # them in the ring: 397.9 against 403.6 (H100, 2026-12-07)
    Shape(512, 7168, 256, 257, 9): gluon_variant(
        TUNED[Shape(512, 7168, 256, 257, 9)], 32, stages=2, parts=2, paired=1, block_k=256
    ).replace(overlap=1),
    # 64-row blocks; the routing and a1 in one launch: 171.1 against 174.6 us a call (H100, 2026-12-06); K steps
    # of 256: 164.6 against 167.6; a program a tile (no stream-K) and stage 2 block by block, two stage-2 tiles a
    # program: 151.9 against 166.8 at four ring slots, 153.8 at three, which triton 3.9 compiles without the four
    # spills it puts in four slots' K loop (H100, triton 3.6, 2026-12-07)
    Shape(128, 7168, 512, 33, 9): gluon2_variant(
        gluon_variant(TUNED[Shape(128, 7168, 512, 33, 9)], 64, stages=3, parts=2, block_k=256).replace(
            block_m=64, route_launches=1, overlap=1
        ),
        256,
        stages=4,
        parts=2,
        n_tiles=2,
    ),
    # stage 2 block by block: 356.1 against 368.9 us a call (H100, 2026-12-06)
    Shape(512, 7168, 512, 33, 9): gluon2_variant(
        gluon_variant(TUNED[Shape(512, 7168, 512, 33, 9)], 128, stages=4, parts=2).replace(overlap=1),
        256,
        stages=4,
        parts=2,
        n_tiles=4,
    ),
    # the fold: the last full block's program also computes the expert's tail block; stage 2 block by
    # block: 971.8 against 979.7 us a call; four stage-2 tiles a program: 959.3 against 965.7; stage 2's
    # fold too: 925.6 and 922.4 against 964.2 and 960.8 (H100, 2026-12-06)
    Shape(512, 7168, 2048, 33, 9): gluon2_variant(
        gluon_variant(TUNED[Shape(512, 7168, 2048, 33, 9)], 64, stages=4, parts=2).replace(fold1=1, overlap=1),
        128,
        stages=4,
        parts=2,
        n_tiles=4,
    ).replace(fold2=1),
}


# The H200 runners-up (bench/notes/decode-path-*.md, 2026-11-30), each its shape's TUNED row with
# the changes its name says (docs/tiles.md). Marked untimed: neighbours that no sweep measured.
_RUNNERS_UP: dict[Shape, dict[str, dict]] = {
    Shape(16, 7168, 256, 257, 9): {
        "regs1-off": dict(max_regs1=0, overlap=0),  # the stages apart, as the H200 selection chose it
        "stages1-2": dict(stages1=2),  # untimed
    },
    Shape(128, 7168, 256, 257, 9): {
        "retune": dict(block_n2=128, block_k2=128, stages2=2, n_tiles2=4),
        "apart": dict(overlap=0),  # 328.9 against 315.9 us with 8 stage-2 tiles a program (H100, 2026-12-06)
    },
    Shape(512, 7168, 256, 257, 9): {
        "regs2-80": dict(max_regs2=80),
        "regs2-off": dict(max_regs2=0),
    },
    Shape(16, 7168, 512, 33, 9): {
        "regs2-96": dict(max_regs2=96),
        "regs2-off": dict(max_regs2=0),
        "retune": dict(block_n2=64, n_tiles2=4, max_regs2=0),
    },
    Shape(128, 7168, 512, 33, 9): {
        "block-m-64": dict(block_m=64, stages1=3, block_n2=64, max_regs1=0),
        "regs1-off": dict(max_regs1=0),  # untimed
    },
    Shape(512, 7168, 512, 33, 9): {
        "stages1-2": dict(stages1=2),  # untimed
        "n-tiles2-2": dict(n_tiles2=2),  # untimed
    },
    Shape(512, 7168, 2048, 33, 9): {
        "block-m-64": dict(block_m=64, block_n1=32, warps1=4, block_n2=64, block_k2=256, n_tiles2=4, tail_m=0),
        "stages1-2": dict(stages1=2),  # untimed
    },
}
ALTERNATES: dict[Shape, dict[str, TileConfig]] = {
    shape: {name: TUNED[shape].replace(**changes) for name, changes in named.items()}
    for shape, named in _RUNNERS_UP.items()
}

# The ALTERNATES that won their shape in the first-call selection on the H200 (2026-12-01,
# bench/results/selection-host-job.md); the others run with MOE_SELECT_CANDIDATES=all.
SELECTION_WINNERS: dict[Shape, tuple[str, ...]] = {
    Shape(16, 7168, 256, 257, 9): ("regs1-off",),
    Shape(16, 7168, 512, 33, 9): ("regs2-96",),
    Shape(128, 7168, 512, 33, 9): ("block-m-64",),
}


def static_tiles(shape: Shape, gluon: bool) -> TileConfig:
    """The static choice of a shape: the Gluon stages' tile where GLUON_TUNED names the shape and
    they can run (gluon: an sm_90 GPU), else the decode table's."""
    if gluon and checked_shape(shape) in GLUON_TUNED:
        return GLUON_TUNED[shape]
    return tile_config(shape)
