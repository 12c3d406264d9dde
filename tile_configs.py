"""Tile configurations of the Triton backend: a table keyed by shape, and a default rule.

Keys are (d_hidden, d_inter, n_experts, topk, n_tokens). block_m is the routing block (the rows
of one expert that a program takes); stage 1 (gate/up GEMM) and stage 2 (down GEMM) each have
their own tile, warps and pipeline depth. block_n1 counts columns of h: a stage-1 program decodes
2 * block_n1 weight rows (its gate and up rows). A stage-2 program computes n_tiles2 output
tiles of block_n2 columns one after the other. max_regs1 and max_regs2 cap each stage's registers
per thread on NVIDIA GPUs (ptxas .maxnreg; 0 leaves it to the compiler), to fit one more program
per SM.
tail_m > 0 runs each stage in two launches: routing blocks with at most tail_m real rows (an
expert's last, partly filled block) on tiles of tail_m rows, so that the MMA skips their padding.
TUNED holds the H200 sweep's winners (bench/tune/tiles.py --sweep, bench/NOTES.md); other shapes
get default_config.

NATIVE_TUNED and native_default_config are the native gfx950 path's (moe_native_kernels): the
same tile fields without the NVIDIA-only ones, plus the AMD backend's options, chosen from the
offline gfx950 compile (python -m bench.gfx950; docs/gfx950.md gives the reason per row).
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


# bench/tune/tiles.py --sweep on the H200, 2026-11-30 (torch 2.11, triton 3.6), the decode of
# bench/NOTES.md's fifth version; block_n1 counts h columns. tail_m from bench/NOTES.md (fifth
# version): a win only where the MMA dominates (I-2048); elsewhere the second launches cost more.
# max_regs2 from the sixth version's A/B: 4-7% off stage 2 at E-257 bs-512 and E-33 bs-16 only.
TUNED: dict[tuple[int, int, int, int, int], TileConfig] = {
    (7168, 256, 257, 9, 16): TileConfig(16, 32, 256, 4, 3, 64, 256, 4, 2, 4, max_regs1=128),
    (7168, 256, 257, 9, 128): TileConfig(16, 32, 256, 4, 3, 64, 256, 4, 2, 8),
    (7168, 256, 257, 9, 512): TileConfig(32, 32, 256, 4, 2, 64, 256, 4, 2, 8, max_regs1=128, max_regs2=72),
    (7168, 512, 33, 9, 16): TileConfig(16, 32, 256, 4, 3, 128, 256, 4, 2, 1, max_regs2=88),
    (7168, 512, 33, 9, 128): TileConfig(32, 32, 256, 4, 2, 128, 256, 4, 2, 4, max_regs1=128),
    (7168, 512, 33, 9, 512): TileConfig(64, 32, 256, 4, 3, 64, 256, 4, 2, 4),
    (7168, 2048, 33, 9, 512): TileConfig(128, 64, 256, 8, 3, 128, 128, 4, 2, 1, tail_m=32),
}


def default_block_m(n_tokens: int, n_experts: int, topk: int) -> int:
    """Small routing blocks while experts see few rows each, larger ones when they see many."""
    rows_per_expert = n_tokens * topk / n_experts
    return 16 if rows_per_expert <= 24 else 32 if rows_per_expert <= 96 else 128


def default_config(n_tokens: int, d_hidden: int, d_inter: int, n_experts: int, topk: int) -> TileConfig:
    """The tuned shapes' pattern: small routing blocks decode 64 weight rows per program and
    chain output tiles in stage 2; large ones decode 128 rows over two warp groups and run the
    experts' last, partly filled blocks on 32-row tiles."""
    block_m = default_block_m(n_tokens, n_experts, topk)
    if block_m >= 128:
        return TileConfig(block_m, 64, 256, 8, 3, 128, 128, 4, 2, 1, tail_m=32)
    return TileConfig(block_m, 32, 256, 4, 3, 64, 256, 4, 2, 4)


def tile_config(n_tokens: int, d_hidden: int, d_inter: int, n_experts: int, topk: int) -> TileConfig:
    tuned = TUNED.get((d_hidden, d_inter, n_experts, topk, n_tokens))
    return tuned or default_config(n_tokens, d_hidden, d_inter, n_experts, topk)


class NativeTileConfig(NamedTuple):
    """Tiles of the native gfx950 path. nonkdim is the AMD backend's matrix_instr_nonkdim (16:
    v_mfma_scale_f32_16x16x128_f8f6f4, 32: the 32x32x64 one); waves_per_eu its occupancy hint
    (0: the compiler's choice). The kernel variants (docs/gfx950.md), each off by default:
    xcds > 0 remaps both GEMMs' programs so that one die of that many (8 on an MI355X) runs
    consecutive routing blocks of a column tile (moe_native_kernels.xcd_program); weight_cache
    is tl.load's cache modifier for the weights (".cg": streaming); fused_quant has stage 1
    quantize the bf16 hidden states itself (no a1 buffer); route_launches counts the launches
    before stage 1 (2: histograms then placement, 1: one launch that does both, 0: stage 1
    routes its own block and zeroes the output, with fused_quant only)."""

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
    (7168, 256, 257, 9, 128): NativeTileConfig(16, 128, 256, 8, 2, 128, 256, 4, 2, 4),
    # ~18 rows per expert: 32-row blocks halve the blocks; stage 1 128 weight rows, 4 waves.
    (7168, 256, 257, 9, 512): NativeTileConfig(32, 64, 256, 4, 2, 128, 256, 4, 2, 4),
    # ~4 rows per expert; d_inter 512: stage 2 two K steps per tile, 2 tiles per program.
    (7168, 512, 33, 9, 16): NativeTileConfig(16, 128, 256, 8, 2, 128, 256, 4, 2, 2),
    # ~35 rows per expert: 32-row blocks.
    (7168, 512, 33, 9, 128): NativeTileConfig(32, 64, 256, 4, 2, 128, 256, 4, 2, 2),
    # ~140 rows per expert: 64-row blocks, 4 MFMA rows per weight row pair (VALU per MFMA ~2-4).
    (7168, 512, 33, 9, 512): NativeTileConfig(64, 64, 256, 4, 2, 128, 256, 8, 2, 2),
    # d_inter 2048: stage 2 has 8 K steps, one tile per program over 8 waves.
    (7168, 2048, 33, 9, 512): NativeTileConfig(64, 64, 256, 4, 2, 128, 256, 8, 2, 1),
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


# The selection's alternates (submission: candidates.py measures them at the first call per shape
# against the table's tile, which is always the first candidate): named tiles per shape key.
# ALTERNATES are the decode path's (runners-up of the H200 sweep), NATIVE_ALTERNATES the native
# path's (tiles and kernel variants that pass python -m bench.gfx950).
# The H200 runners-up, from bench/NOTES.md: "retune" the fifth version's stage-2 tiles before its
# retune (item 5: stage 2 118.8 against 114.2 us, 38.1 against 36.2), "regs2-*" the sixth
# version's register caps (item 2: stage 2 130.0 / 136.8 against 127.5 us at E-257 bs-512, 35.0 /
# 36.2 against 34.8 at E-33 bs-16), "block-m-64" the fourth version's larger routing blocks
# (kernel sums 2-3% lower, its timed check disagreed). Marked untimed: neighbours of the tuned
# tile (another pipeline depth, no register cap) that no sweep measured.
ALTERNATES: dict[tuple[int, int, int, int, int], dict[str, TileConfig]] = {
    (7168, 256, 257, 9, 16): {
        "regs1-off": TileConfig(16, 32, 256, 4, 3, 64, 256, 4, 2, 4),  # untimed
        "stages1-2": TileConfig(16, 32, 256, 4, 2, 64, 256, 4, 2, 4, max_regs1=128),  # untimed
    },
    (7168, 256, 257, 9, 128): {
        "retune": TileConfig(16, 32, 256, 4, 3, 128, 128, 4, 2, 4),
        "regs1-128": TileConfig(16, 32, 256, 4, 3, 64, 256, 4, 2, 8, max_regs1=128),  # untimed
    },
    (7168, 256, 257, 9, 512): {
        "regs2-80": TileConfig(32, 32, 256, 4, 2, 64, 256, 4, 2, 8, max_regs1=128, max_regs2=80),
        "regs2-off": TileConfig(32, 32, 256, 4, 2, 64, 256, 4, 2, 8, max_regs1=128),
    },
    (7168, 512, 33, 9, 16): {
        "regs2-96": TileConfig(16, 32, 256, 4, 3, 128, 256, 4, 2, 1, max_regs2=96),
        "regs2-off": TileConfig(16, 32, 256, 4, 3, 128, 256, 4, 2, 1),
        "retune": TileConfig(16, 32, 256, 4, 3, 64, 256, 4, 2, 4),
    },
    (7168, 512, 33, 9, 128): {
        "block-m-64": TileConfig(64, 32, 256, 4, 3, 64, 256, 4, 2, 4),
        "regs1-off": TileConfig(32, 32, 256, 4, 2, 128, 256, 4, 2, 4),  # untimed
    },
    (7168, 512, 33, 9, 512): {
        "stages1-2": TileConfig(64, 32, 256, 4, 2, 64, 256, 4, 2, 4),  # untimed
        "n-tiles2-2": TileConfig(64, 32, 256, 4, 3, 64, 256, 4, 2, 2),  # untimed
    },
    (7168, 2048, 33, 9, 512): {
        "block-m-64": TileConfig(64, 32, 256, 4, 3, 64, 256, 4, 2, 4),
        "stages1-2": TileConfig(128, 64, 256, 8, 2, 128, 128, 4, 2, 1, tail_m=32),  # untimed
    },
}

# The native kernel variants (NativeTileConfig's variant fields; docs/gfx950.md, "Kernel variants"),
# applied to a shape's NATIVE_TUNED row. Figures are per K step of one wave on gfx950 (instructions /
# MFMAs / VALU, triton 3.9 ; 3.6), compiled offline, never timed.
NATIVE_VARIANTS: dict[str, dict] = {
    # 3 launches: one routing launch counts, places, zeroes the output and writes a1; GEMMs as the row.
    "route1": dict(route_launches=1),
    # route1 with the weights loaded non-temporally (".cg" compiles to sc0 nt): for shapes where
    # each weight tile is read by one program (about one routing block per expert).
    "route1-cg": dict(route_launches=1, weight_cache=".cg"),
    # Both GEMMs' programs in XCD order: consecutive blocks of one expert at one column tile run on
    # one die and read its weight tile through one L2; GEMM loops as the row.
    "xcd8": dict(xcds=8),
    "route1-xcd8": dict(route_launches=1, xcds=8),
    # The 32x32x64 scaled MFMA (nonkdim 32) at blocks of 32 rows or more, same work per step: on
    # 3.6 stage 1 71 / 4 / 17 against 94 / 8 / 37 (32 rows) and 100 / 8 / 23 against 151 / 16 / 67
    # (64 rows); on 3.9 a tie (93 / 4 / 23 against 89 / 8 / 21), except stage 2 at d_inter 256
    # (its step holds the epilogue): 125 / 4 / 62 against 149 / 8 / 70.
    "route1-mfma32": dict(route_launches=1, nonkdim=32),
    "route1-xcd8-mfma32": dict(route_launches=1, xcds=8, nonkdim=32),
}

# Which variants suit which shape: shapes of about one block per expert take streaming; shapes with
# several blocks per expert (or a shared expert of 8-16 blocks) the XCD order; 32 rows and more the
# 32x32 MFMA. Stage 1 quantizing its own rows (fused_quant, and the 2-launch route_launches 0 it
# enables) is listed nowhere: its encoder costs about 45 VALU per element per K step and lane
# (docs/gfx950.md), far more than the launch it saves. Each shape's names are in the order of the
# offline ESTIMATE's ranking (bench/results/gfx950/native-triton-3.6.0-ranking.json, ties as
# listed): the selection tries them in this order, so a spent budget skips the lowest ranked.
_NATIVE_VARIANTS_BY_SHAPE: dict[tuple[int, int, int, int, int], tuple[str, ...]] = {
    (7168, 256, 257, 9, 16): ("route1", "route1-cg"),
    (7168, 256, 257, 9, 128): ("route1", "route1-cg", "route1-xcd8"),
    (7168, 256, 257, 9, 512): ("route1", "route1-xcd8", "route1-mfma32", "route1-xcd8-mfma32"),
    (7168, 512, 33, 9, 16): ("route1", "route1-cg"),
    (7168, 512, 33, 9, 128): ("route1", "route1-xcd8", "route1-mfma32", "route1-xcd8-mfma32"),
    (7168, 512, 33, 9, 512): ("route1", "route1-xcd8", "route1-mfma32", "route1-xcd8-mfma32", "xcd8"),
    (7168, 2048, 33, 9, 512): ("route1", "route1-xcd8", "route1-mfma32", "route1-xcd8-mfma32", "xcd8"),
    (4096, 1024, 257, 9, 8): ("route1", "route1-cg"),
    (7168, 2048, 33, 9, 32): ("route1", "route1-cg"),
    (4096, 1536, 65, 7, 128): ("route1", "route1-xcd8"),
}
NATIVE_ALTERNATES: dict[tuple[int, int, int, int, int], dict[str, NativeTileConfig]] = {
    key: {name: NATIVE_TUNED[key]._replace(**NATIVE_VARIANTS[name]) for name in names}
    for key, names in _NATIVE_VARIANTS_BY_SHAPE.items()
}
