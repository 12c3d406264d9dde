"""The native gfx950 path's tiles (kernels/native.py): NATIVE_TUNED and native_default_config,
chosen from the offline gfx950 compile (python -m bench.gfx950; docs/gfx950.md gives the reason
per row), and the kernel variants the first-call selection times on an MI355X (NATIVE_VARIANTS,
NATIVE_ALTERNATES).
"""

from moe_triton.tiles import NativeTileConfig, default_block_m


def _triton_version() -> tuple[int, int]:
    import triton

    major, minor = triton.__version__.split(".")[:2]
    return int(major), int(minor)


# E-33 bs-512 and I-2048 bs-512 (~140 rows per expert): the tile search's lowest for both shapes,
# per Triton, since triton 3.9's AMD pipeliner keeps one LDS tile more per stage than 3.6's (the
# compiled kernels' LDS; 3.7 and 3.8 were not compiled here). Each is reached by route1-mfma32.
# 3.6: 64-row blocks, stage 1 128 weight rows x 256 at 3 stages, stage 2 seven 128-column tiles per
# program, so that either stage's programs fit one round of the CUs' slots (1.08x and 1.02x the
# floor; 3.9 gives it half the slots and its stage 2 spills 4 SGPRs there). 3.9: 128-row blocks,
# stage 1 64 weight rows, stage 2 eight 64-column tiles (1.12x and 1.10x there; 2.00x and 1.58x on
# 3.6). Both with 128-256 32-blocks per quantizing program of the routing launch.
_BS512_ROW = (
    NativeTileConfig(128, 32, 256, 4, 3, 64, 256, 4, 3, 8, quant_blocks=128)
    if _triton_version() >= (3, 9)
    else NativeTileConfig(64, 64, 256, 4, 3, 128, 256, 4, 3, 7, quant_blocks=256)
)

# Chosen from offline gfx950 compiles (bench/gfx950/run.py, triton 3.6 and 3.9), never timed on an
# MI355X; docs/gfx950.md gives the compiled figures. Shared reasons: the routing block follows the
# rows per expert (16 below ~24, 32 below ~96, 64 above: the scaled MFMA is 16 wide, so block_m 16
# wastes nothing on one-token experts); stage 1 decodes nothing, so a program takes as many weight
# rows as keep VALU per MFMA low (address arithmetic is per row and K step, MFMAs per row pair);
# stage 2 chains 128-column tiles so the routing and activation tile are paid once per program.
NATIVE_TUNED: dict[tuple[int, int, int, int, int], NativeTileConfig] = {
    # ~1 row per hit expert: 16-row blocks; stage 1 256 weight rows over 8 waves (2 column tiles
    # of h); stage 2 4 tiles of 128 columns, 4 waves.
    (7168, 256, 257, 9, 16): NativeTileConfig(16, 128, 256, 8, 2, 128, 256, 4, 2, 4),
    # bs-128 and bs-512: the routing launches' quantizing programs take 128 32-blocks each (quant_blocks;
    # the decode path's 16 leave 1792-7168 programs, several rounds of the CUs' slots: 0.7-3.3 us).
    (7168, 256, 257, 9, 128): NativeTileConfig(16, 128, 256, 8, 2, 128, 256, 4, 2, 4, quant_blocks=128),
    # ~18 rows per expert: 32-row blocks halve the blocks; stage 1 128 weight rows, 4 waves.
    (7168, 256, 257, 9, 512): NativeTileConfig(32, 64, 256, 4, 2, 128, 256, 4, 2, 4, quant_blocks=128),
    # E-33 bs-16 and bs-128: bench.gfx950.search's lowest ESTIMATE per shape (triton 3.9;
    # docs/gfx950.md, "The tile search"), as the row's stage tiles behind two routing launches; the
    # variant that reaches it (quant0 or route1) is the shape's first alternate. Few programs stream
    # the weights at E-33, so deeper pipelines (3-4 stages) and fewer, longer programs pay.
    # ~4 rows per expert: 16-row blocks, stage 1 128 weight rows over 8 waves at 4 stages, stage 2
    # one 64-column tile per program at 3 stages.
    (7168, 512, 33, 9, 16): NativeTileConfig(16, 64, 256, 8, 4, 64, 256, 4, 3, 1),
    # ~35 rows per expert: 32-row blocks, stage 1 64 weight rows x 512 of K at 3 stages.
    (7168, 512, 33, 9, 128): NativeTileConfig(32, 32, 512, 8, 3, 64, 256, 4, 3, 2),
    # E-33 bs-512 and I-2048 bs-512 (~140 rows per expert): _BS512_ROW, per Triton.
    (7168, 512, 33, 9, 512): _BS512_ROW,
    (7168, 2048, 33, 9, 512): _BS512_ROW,
    # The test shapes: few rows per expert, 16-row blocks; long K in stage 2 (d_inter 1024-2048).
    (4096, 1024, 257, 9, 8): NativeTileConfig(16, 128, 256, 8, 2, 128, 256, 4, 2, 1),
    (7168, 2048, 33, 9, 32): NativeTileConfig(16, 128, 256, 8, 2, 128, 256, 4, 2, 1),
    (4096, 1536, 65, 7, 128): NativeTileConfig(16, 128, 256, 8, 2, 128, 256, 4, 2, 1),
}


def native_default_config(n_tokens: int, d_hidden: int, d_inter: int, n_experts: int, topk: int) -> NativeTileConfig:
    """NATIVE_TUNED's pattern: routing blocks sized to the rows per expert (default_block_m, at
    most 64 rows); stage 1 256 weight rows over 8 waves at block_m 16, else 128 over 4; stage 2
    128-column tiles, chained 4 per program at one K step, 2 at two, 1 beyond."""
    block_m = min(64, default_block_m(n_tokens, n_experts, topk))
    k_steps = -(-d_inter // 256)
    n_tiles2 = 4 if k_steps == 1 else 2 if k_steps == 2 else 1
    if block_m == 16:
        return NativeTileConfig(16, 128, 256, 8, 2, 128, 256, 4, 2, n_tiles2)
    return NativeTileConfig(block_m, 64, 256, 4, 2, 128, 256, 4, 2, n_tiles2)


def native_tile_config(n_tokens: int, d_hidden: int, d_inter: int, n_experts: int, topk: int) -> NativeTileConfig:
    tuned = NATIVE_TUNED.get((d_hidden, d_inter, n_experts, topk, n_tokens))
    return tuned or native_default_config(n_tokens, d_hidden, d_inter, n_experts, topk)


# The native kernel variants (NativeTileConfig's variant fields; docs/gfx950.md, "Kernel variants"),
# applied to a shape's NATIVE_TUNED row. Figures are per K step of one wave on gfx950 (instructions /
# MFMAs / VALU, triton 3.9 ; 3.6), compiled offline, never timed.
NATIVE_VARIANTS: dict[str, dict] = {
    # 3 launches: one routing launch counts, places, zeroes the output and writes a1; GEMMs as the row.
    "route1": dict(route_launches=1),
    # route1 with the weights loaded non-temporally (".cg" compiles to sc0 nt): for shapes where
    # each weight tile is read by one program (about one routing block per expert).
    "route1-cg": dict(route_launches=1, weight_cache=".cg"),
    # route1 with both GEMMs' programs in XCD order: consecutive blocks of one expert at one column
    # tile run on one die and read its weight tile through one L2; GEMM loops as the row.
    "route1-xcd8": dict(route_launches=1, xcds=8),
    # The 32x32x64 scaled MFMA (nonkdim 32) at blocks of 32 rows or more, same work per step: on
    # 3.6 stage 1 71 / 4 / 17 against 94 / 8 / 37 (32 rows) and 100 / 8 / 23 against 151 / 16 / 67
    # (64 rows); on 3.9 a tie (93 / 4 / 23 against 89 / 8 / 21), except stage 2 at d_inter 256
    # (its step holds the epilogue): 125 / 4 / 62 against 149 / 8 / 70.
    "route1-mfma32": dict(route_launches=1, nonkdim=32),
    "route1-xcd8-mfma32": dict(route_launches=1, xcds=8, nonkdim=32),
    # 2 launches: stage 1 routes its own block, zeroes its share of the output and quantizes its
    # rows with gfx950's fp4 converts (mxfp4/convert.py); every column tile of stage 1 repeats the
    # quantization. At 16-row blocks (256 x 16 x 256, 8 waves) 124 / 4 / 61 ; 119 / 4 / 61 per K step
    # against the row's 82 / 4 / 20 ; 67 / 4 / 18.
    "quant0": dict(fused_quant=True, route_launches=0),
    "quant0-cg": dict(fused_quant=True, route_launches=0, weight_cache=".cg"),
    "quant0-xcd8": dict(fused_quant=True, route_launches=0, xcds=8),
    # quant0 on 16-row blocks with 256 weight rows over 8 waves (the 16-row rows' stage 1, its K step
    # and stages too, which the searched E-33 rows' deeper stage 1 would overfill the LDS with): at
    # the 32- and 64-row shapes fewer column tiles repeat the quantization, 15 VALU per MFMA.
    "quant0-m16": dict(fused_quant=True, route_launches=0, block_m=16, block_n1=128, block_k1=256, warps1=8, stages1=2),
}


# Which variants suit which shape: shapes of about one block per expert take streaming; shapes with
# several blocks per expert (or a shared expert of 8-16 blocks) the XCD order; 32 rows and more the
# 32x32 MFMA. The two-launch variants (quant0*) are in every shape's list: at 16-row blocks the
# row's tiles, at 32 rows the row's or 16-row blocks, at 64 rows (where each
# wave quantizes 64 values per K step and d_inter / block_n1 column tiles repeat it) the best
# two-launch one only. Each shape's names are in the order of the offline ESTIMATE's ranking
# (bench/results/gfx950/native-triton-3.6.0-ranking.json, ties as listed): the selection tries
# them in this order, so a spent budget skips the lowest ranked.
_NATIVE_VARIANTS_BY_SHAPE: dict[tuple[int, int, int, int, int], tuple[str, ...]] = {
    (7168, 256, 257, 9, 16): ("quant0", "quant0-cg", "route1", "route1-cg"),
    (7168, 256, 257, 9, 128): ("quant0", "quant0-cg", "quant0-xcd8", "route1", "route1-cg", "route1-xcd8"),
    (7168, 256, 257, 9, 512): (
        "quant0-m16",
        "route1",
        "route1-xcd8",
        "route1-xcd8-mfma32",
        "route1-mfma32",
        "quant0",
        "quant0-xcd8",
    ),
    (7168, 512, 33, 9, 16): ("quant0", "quant0-cg", "route1", "route1-cg"),
    (7168, 512, 33, 9, 128): ("route1", "route1-xcd8", "quant0-m16"),
    (7168, 512, 33, 9, 512): ("route1-mfma32", "route1-xcd8-mfma32", "route1", "quant0-m16"),
    (7168, 2048, 33, 9, 512): ("route1-mfma32", "route1-xcd8-mfma32", "route1", "quant0-m16"),
    (4096, 1024, 257, 9, 8): ("quant0", "quant0-cg", "route1", "route1-cg"),
    (7168, 2048, 33, 9, 32): ("quant0", "quant0-cg", "route1", "route1-cg"),
    (4096, 1536, 65, 7, 128): ("quant0", "quant0-xcd8", "route1", "route1-xcd8"),
}


NATIVE_ALTERNATES: dict[tuple[int, int, int, int, int], dict[str, NativeTileConfig]] = {
    key: {name: NATIVE_TUNED[key]._replace(**NATIVE_VARIANTS[name]) for name in names}
    for key, names in _NATIVE_VARIANTS_BY_SHAPE.items()
}
