"""The native gfx950 path's tiles, chosen from the offline gfx950 compile, and the kernel variants the
first-call selection times on an MI355X; the compiled figures behind each: docs/gfx950.md ("The AMD tile
table", "Kernel variants")."""

import triton

from moe_triton.tiles import NativeTileConfig, Stage, checked_shape, default_block_m
from problem.shapes import Shape

# E-33 bs-512 and I-2048 bs-512 (~140 rows per expert): one row per Triton, the tile search's lowest
# (docs/gfx950.md, "The tile search").
_BS512_ROW = (
    NativeTileConfig(
        block_m=128,
        stage1=Stage(block_n=32, block_k=256, warps=4, stages=3),
        stage2=Stage(block_n=64, block_k=256, warps=4, stages=3),
        n_tiles2=8,
        quant_blocks=128,
    )
    if tuple(int(part) for part in triton.__version__.split(".")[:2]) >= (3, 9)
    else NativeTileConfig(
        block_m=64,
        stage1=Stage(block_n=64, block_k=256, warps=4, stages=3),
        stage2=Stage(block_n=128, block_k=256, warps=4, stages=3),
        n_tiles2=7,
        quant_blocks=256,
    )
)

# The rows' common stage tiles: stage 1 takes twice block_n weight rows a program (256 over 8 waves:
# 2 column tiles of h), stage 2 writes 128-column tiles.
_ROWS256 = Stage(block_n=128, block_k=256, warps=8, stages=2)
_ROWS128 = Stage(block_n=64, block_k=256, warps=4, stages=2)
_COLS128 = Stage(block_n=128, block_k=256, warps=4, stages=2)

# Never timed on an MI355X; what the rows share and why: docs/gfx950.md, "The AMD tile table".
NATIVE_TUNED: dict[Shape, NativeTileConfig] = {
    # ~1 row per hit expert: 16-row blocks, stage 2 4 tiles a program
    Shape(16, 7168, 256, 257, 9): NativeTileConfig(block_m=16, stage1=_ROWS256, stage2=_COLS128, n_tiles2=4),
    # quant_blocks 128: the decode path's 16 leave 1792-7168 quantizing programs, several rounds
    Shape(128, 7168, 256, 257, 9): NativeTileConfig(
        block_m=16, stage1=_ROWS256, stage2=_COLS128, n_tiles2=4, quant_blocks=128
    ),
    # ~18 rows per expert: 32-row blocks halve the blocks; stage 1 128 weight rows, 4 waves
    Shape(512, 7168, 256, 257, 9): NativeTileConfig(
        block_m=32, stage1=_ROWS128, stage2=_COLS128, n_tiles2=4, quant_blocks=128
    ),
    # E-33 bs-16 and bs-128: the tile search's lowest ESTIMATE (triton 3.9); few programs stream
    # the weights at E-33, so deeper pipelines and fewer, longer programs pay
    Shape(16, 7168, 512, 33, 9): NativeTileConfig(
        block_m=16,
        stage1=Stage(block_n=64, block_k=256, warps=8, stages=4),
        stage2=Stage(block_n=64, block_k=256, warps=4, stages=3),
        n_tiles2=1,
    ),
    Shape(128, 7168, 512, 33, 9): NativeTileConfig(
        block_m=32,
        stage1=Stage(block_n=32, block_k=512, warps=8, stages=3),
        stage2=Stage(block_n=64, block_k=256, warps=4, stages=3),
        n_tiles2=2,
    ),
    Shape(512, 7168, 512, 33, 9): _BS512_ROW,
    Shape(512, 7168, 2048, 33, 9): _BS512_ROW,
    # the test shapes: few rows per expert; long K in stage 2 (d_inter 1024-2048), one tile a program
    Shape(8, 4096, 1024, 257, 9): NativeTileConfig(block_m=16, stage1=_ROWS256, stage2=_COLS128, n_tiles2=1),
    Shape(32, 7168, 2048, 33, 9): NativeTileConfig(block_m=16, stage1=_ROWS256, stage2=_COLS128, n_tiles2=1),
    Shape(128, 4096, 1536, 65, 7): NativeTileConfig(block_m=16, stage1=_ROWS256, stage2=_COLS128, n_tiles2=1),
}


def native_default_config(shape: Shape) -> NativeTileConfig:
    """NATIVE_TUNED's pattern: routing blocks of default_block_m (at most 64 rows); stage 2 chains 4
    tiles a program at one K step, 2 at two, 1 beyond."""
    block_m = min(64, default_block_m(shape))
    k_steps = -(-shape.d_inter // 256)
    n_tiles2 = 4 if k_steps == 1 else 2 if k_steps == 2 else 1
    stage1 = _ROWS256 if block_m == 16 else _ROWS128
    return NativeTileConfig(block_m=block_m, stage1=stage1, stage2=_COLS128, n_tiles2=n_tiles2)


def native_tile_config(shape: Shape) -> NativeTileConfig:
    return NATIVE_TUNED.get(checked_shape(shape)) or native_default_config(shape)


# The native kernel variants by flat field name, applied to a shape's NATIVE_TUNED row; compiled offline,
# never timed; what each does: docs/gfx950.md, "Kernel variants".
NATIVE_VARIANTS: dict[str, dict] = {
    "route1": dict(route_launches=1),
    "route1-cg": dict(route_launches=1, weight_cache=".cg"),
    "route1-xcd8": dict(route_launches=1, xcds=8),
    "route1-mfma32": dict(route_launches=1, nonkdim=32),
    "route1-xcd8-mfma32": dict(route_launches=1, xcds=8, nonkdim=32),
    "quant0": dict(fused_quant=True, route_launches=0),
    "quant0-cg": dict(fused_quant=True, route_launches=0, weight_cache=".cg"),
    "quant0-xcd8": dict(fused_quant=True, route_launches=0, xcds=8),
    "quant0-m16": dict(fused_quant=True, route_launches=0, block_m=16, block_n1=128, block_k1=256, warps1=8, stages1=2),
}


# Each shape's variants in the order of the offline ESTIMATE's ranking, the order the selection tries them
# in (a spent budget skips the lowest ranked): bench/results/gfx950/native-triton-3.6.0-ranking.json.
_NATIVE_VARIANTS_BY_SHAPE: dict[Shape, tuple[str, ...]] = {
    Shape(16, 7168, 256, 257, 9): ("quant0", "quant0-cg", "route1", "route1-cg"),
    Shape(128, 7168, 256, 257, 9): ("quant0", "quant0-cg", "quant0-xcd8", "route1", "route1-cg", "route1-xcd8"),
    Shape(512, 7168, 256, 257, 9): (
        "quant0-m16",
        "route1",
        "route1-xcd8",
        "route1-xcd8-mfma32",
        "route1-mfma32",
        "quant0",
        "quant0-xcd8",
    ),
    Shape(16, 7168, 512, 33, 9): ("quant0", "quant0-cg", "route1", "route1-cg"),
    Shape(128, 7168, 512, 33, 9): ("route1", "route1-xcd8", "quant0-m16"),
    Shape(512, 7168, 512, 33, 9): ("route1-mfma32", "route1-xcd8-mfma32", "route1", "quant0-m16"),
    Shape(512, 7168, 2048, 33, 9): ("route1-mfma32", "route1-xcd8-mfma32", "route1", "quant0-m16"),
    Shape(8, 4096, 1024, 257, 9): ("quant0", "quant0-cg", "route1", "route1-cg"),
    Shape(32, 7168, 2048, 33, 9): ("quant0", "quant0-cg", "route1", "route1-cg"),
    Shape(128, 4096, 1536, 65, 7): ("quant0", "quant0-xcd8", "route1", "route1-xcd8"),
}


NATIVE_ALTERNATES: dict[Shape, dict[str, NativeTileConfig]] = {
    shape: {name: NATIVE_TUNED[shape].replace(**NATIVE_VARIANTS[name]) for name in names}
    for shape, names in _NATIVE_VARIANTS_BY_SHAPE.items()
}
