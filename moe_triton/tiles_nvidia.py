"""The decode path's tiles (the NVIDIA design; also what the CPU interpreter and non-gfx950 ROCm
GPUs run): TUNED holds the H200 sweep's winners (bench/tune/tiles.py --sweep, bench/NOTES.md),
other shapes get default_config; ALTERNATES are the first-call selection's other candidates.
"""

from moe_triton.tiles import TileConfig, default_block_m

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


# The selection's alternates (submission: selection/candidates.py measures them at the first call per shape
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
