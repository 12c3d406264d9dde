"""The NVIDIA tiles. The decode path's (also what the CPU interpreter and non-gfx950 ROCm GPUs run):
TUNED holds the H200 sweep's winners (bench/tune/tiles.py --sweep, bench/NOTES.md), other shapes
get default_config; ALTERNATES are the first-call selection's other candidates. GLUON_TUNED: the
shapes whose stage 1 runs on the Gluon kernel on sm_90 GPUs (static_tiles).
"""

from moe_triton.tiles import TileConfig, default_block_m

# bench/tune/tiles.py --sweep on the H200, 2026-11-30 (torch 2.11, triton 3.6), the decode with the
# cheaper nibble placement (bench/notes/decode-path-5-7.md); block_n1 counts h columns. tail_m from
# the same notes: a win only where the MMA dominates (I-2048); elsewhere the second launches cost more.
# max_regs2 from the register caps' A/B there: 4-7% off stage 2 at E-257 bs-512 and E-33 bs-16 only.
TUNED: dict[tuple[int, int, int, int, int], TileConfig] = {
    (7168, 256, 257, 9, 16): TileConfig(16, 32, 256, 4, 3, 64, 256, 4, 2, 4, max_regs1=128),
    (7168, 256, 257, 9, 128): TileConfig(16, 32, 256, 4, 3, 64, 256, 4, 2, 8),
    (7168, 256, 257, 9, 512): TileConfig(32, 32, 256, 4, 2, 64, 256, 4, 2, 8, max_regs1=128, max_regs2=72),
    (7168, 512, 33, 9, 16): TileConfig(16, 32, 256, 4, 3, 128, 256, 4, 2, 1, max_regs2=88),
    (7168, 512, 33, 9, 128): TileConfig(32, 32, 256, 4, 2, 128, 256, 4, 2, 4, max_regs1=128),
    (7168, 512, 33, 9, 512): TileConfig(64, 32, 256, 4, 3, 64, 256, 4, 2, 4),
    (7168, 2048, 33, 9, 512): TileConfig(128, 64, 256, 8, 3, 128, 128, 4, 2, 1, tail_m=32),
}


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


# The Gluon stages (kernels/gluon_stage1.py, gluon_stage2.py; sm_90 GPUs only, static_tiles' gluon)
# where they beat the decode table tile on the H200: bench/h200/gluon_check.py time, 2026-12-04
# (torch 2.11, triton 3.6), the leaderboard's timing, layer median us against the decode table's:
# stage 1 at E-33 I-512 bs-512 (four MMA warpgroups, 128 h columns a program) and I-2048 bs-512 (two);
# stage 2 at the E-33 shapes (four warpgroups, 256 columns a tile) and I-2048 (two, 128): E-33 bs-16
# 95.5 against 97.6, bs-128 196.6 against 201.7, bs-512 360.8 against 459.8, I-2048 980.6-991.2
# against 1477.6. With one program an SM both lose at E-257, whose 16-32-row blocks decode every
# weight row for few rows; with two (max_regs1 80, below GLUON_TUNED) stage 1 wins at E-257 bs-512
# and E-33 bs-128 (bench/results/nvidia-speed.md).
def gluon_variant(tiles: TileConfig, block_n: int, stages: int, parts: int, regs: int = 0) -> TileConfig:
    """tiles with stage 1 on the Gluon kernel: its fixed fields (k steps of 128, 8 MMA warps),
    block_n h columns a program (64 or 128: 2 or 4 MMA warpgroups), `stages` ring slots, each K
    step in `parts` parts (gluon1) and `regs` registers a thread at launch (max_regs1; 0: one
    program an SM); the routing and stage 2 as they are."""
    return tiles._replace(block_n1=block_n, block_k1=128, warps1=8, stages1=stages, max_regs1=regs, gluon1=parts)


def gluon2_variant(tiles: TileConfig, block_n: int, stages: int, parts: int, n_tiles: int, regs: int = 0) -> TileConfig:
    """tiles with stage 2 on the Gluon kernel: its fixed fields (k steps of 128, 8 MMA warps),
    block_n output columns a tile (128 or 256: 2 or 4 MMA warpgroups), `stages` ring slots, each K
    step in `parts` parts (gluon2), n_tiles tiles a program and `regs` registers a thread at launch
    (max_regs2; 0: one program an SM); the rest as it is."""
    return tiles._replace(
        block_n2=block_n, block_k2=128, warps2=8, stages2=stages, n_tiles2=n_tiles, max_regs2=regs, gluon2=parts
    )


# Two programs an SM (max_regs1 80; measured on the H200 2026-12-04): stage 1 at E-257 bs-512
# (stage 1 300.8 against the decode table's 318.6 us, layer 455.2 against 470.9) and E-33 bs-128
# (123.7 against 139.9, layer 188.6 against 194.9); it loses at E-257 bs-16 and bs-128 and E-33
# bs-16, and stage 2 with it wins nowhere on the benchmark (bench/results/nvidia-speed.md).
GLUON_TUNED: dict[tuple[int, int, int, int, int], TileConfig] = {
    (7168, 256, 257, 9, 512): gluon_variant(TUNED[(7168, 256, 257, 9, 512)], 64, stages=4, parts=2, regs=80),
    (7168, 512, 33, 9, 16): gluon2_variant(TUNED[(7168, 512, 33, 9, 16)], 256, stages=4, parts=2, n_tiles=7),
    (7168, 512, 33, 9, 128): gluon2_variant(
        gluon_variant(TUNED[(7168, 512, 33, 9, 128)], 64, stages=4, parts=2, regs=80), 256, stages=4, parts=2, n_tiles=4
    ),
    (7168, 512, 33, 9, 512): gluon2_variant(
        gluon_variant(TUNED[(7168, 512, 33, 9, 512)], 128, stages=4, parts=2), 256, stages=4, parts=2, n_tiles=4
    ),
    (7168, 2048, 33, 9, 512): gluon2_variant(
        gluon_variant(TUNED[(7168, 2048, 33, 9, 512)], 64, stages=4, parts=2)._replace(fold1=1),
        128,
        stages=4,
        parts=2,
        n_tiles=8,
    ),
}


# The selection's alternates (submission: selection/candidates.py measures them at the first call per shape
# against the table's tile, which is always the first candidate): named tiles per shape key.
# ALTERNATES are the decode path's (runners-up of the H200 sweep), NATIVE_ALTERNATES the native
# path's (tiles and kernel variants that pass python -m bench.gfx950).
# The H200 runners-up, from bench/notes/decode-path-*.md (2026-11-30): "retune" the stage-2 tiles
# before the nibble placement's retune (stage 2 118.8 against 114.2 us, 38.1 against 36.2), "regs2-*"
# the register caps that lost (stage 2 130.0 / 136.8 against 127.5 us at E-257 bs-512, 35.0 /
# 36.2 against 34.8 at E-33 bs-16), "block-m-64" the larger routing blocks tried with one multiply
# per code pair (kernel sums 2-3% lower, its timed check disagreed). Marked untimed: neighbours of the tuned
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

# The ALTERNATES that have won their shape in the first-call selection on the H200 (2026-12-01,
# bench/results/selection-host-job.md: E-257 bs-16 regs1-off and E-33 bs-128 block-m-64 in the cold
# run; E-33 bs-16 regs2-96 in some runs, within 1% of the table tile). With the static choice they
# are the selection's default candidates on NVIDIA (docs/selection.md); the other ALTERNATES, which
# won no shape, run with MOE_SELECT_CANDIDATES=all.
SELECTION_WINNERS: dict[tuple[int, int, int, int, int], tuple[str, ...]] = {
    (7168, 256, 257, 9, 16): ("regs1-off",),
    (7168, 512, 33, 9, 16): ("regs2-96",),
    (7168, 512, 33, 9, 128): ("block-m-64",),
}


def static_tiles(n_tokens: int, d_hidden: int, d_inter: int, n_experts: int, topk: int, gluon: bool) -> TileConfig:
    """The static choice of a shape: the Gluon stages' tile where GLUON_TUNED names the shape and
    they can run (gluon: an sm_90 GPU), else the decode table's."""
    key = (d_hidden, d_inter, n_experts, topk, n_tokens)
    if gluon and key in GLUON_TUNED:
        return GLUON_TUNED[key]
    return tile_config(n_tokens, d_hidden, d_inter, n_experts, topk)
