"""The shape-keyed override table of aiter's 2-stage fused-MoE config: one row per official
shape, data. The aiter backend injects it into aiter.fused_moe.cfg_2stages at its first call
(moe_aiter/inject.py: the rules a row must follow, the keying, the injection); `python -m
bench.tune.aiter_rows` rewrites this file (bench/tune/write_overrides.py).

Hand-derived rows (docs/aiter_overrides.md says how), never timed on an MI355X;
`python -m bench.tune.aiter_rows` on an MI355X replaces them with measured winners.

Each row (ROW_FIELDS): aiter's key fields of the shape (padded tokens, model_dim, inter_dim,
experts, topk; the others are fixed by moe_aiter.inject.aiter_key), aiter's row fields, the CK
stage 2 used when FlyDSL is unavailable, and its provenance: `us` is the mean time measured by
`python -m bench.tune.aiter_rows` (None: never timed), with `date`, `versions` and `source`.
"""

# ruff: noqa: E501

from moe_aiter.catalogue import ck_moe_kernel_name, flydsl_moe_kernel_name

# fmt: off
CK1_64X32X32X128 = ck_moe_kernel_name(1, (64, 32, 32, 128, 1, 1, 3))
FLYDSL2_T32X128X256_ATOMIC = flydsl_moe_kernel_name(2, 32, 128, 256, "atomic")
CK2_64X32X32X128 = ck_moe_kernel_name(2, (64, 32, 32, 128, 1, 1, 1))
CK1_256X32X128X128 = ck_moe_kernel_name(1, (256, 32, 128, 128, 1, 4, 3))
CK1_256X64X128X128 = ck_moe_kernel_name(1, (256, 64, 128, 128, 1, 4, 3))
FLYDSL2_T64X128X256_ATOMIC = flydsl_moe_kernel_name(2, 64, 128, 256, "atomic")
CK2_256X64X128X128 = ck_moe_kernel_name(2, (256, 64, 128, 128, 1, 4, 3))
SOURCE = "by construction (block_m = MPerBlock = tile_m; E-257 stage 1 as in aiter dsv3_fp4_tuned_fmoe.csv); never timed"

ROW_FIELDS = ("token", "model_dim", "inter_dim", "expert", "topk", "block_m", "ksplit", "kernelName1", "kernelName2", "fallback_kernelName2", "us", "date", "versions", "source")
OVERRIDE_TABLE = (
    (16, 7168, 256, 257, 9, 32, 0, CK1_64X32X32X128, FLYDSL2_T32X128X256_ATOMIC, CK2_64X32X32X128, None, None, None, SOURCE),
    (128, 7168, 256, 257, 9, 32, 0, CK1_256X32X128X128, FLYDSL2_T32X128X256_ATOMIC, CK2_64X32X32X128, None, None, None, SOURCE),
    (512, 7168, 256, 257, 9, 32, 0, CK1_64X32X32X128, FLYDSL2_T32X128X256_ATOMIC, CK2_64X32X32X128, None, None, None, SOURCE),
    (16, 7168, 512, 33, 9, 32, 0, CK1_64X32X32X128, FLYDSL2_T32X128X256_ATOMIC, CK2_64X32X32X128, None, None, None, SOURCE),
    (128, 7168, 512, 33, 9, 32, 0, CK1_256X32X128X128, FLYDSL2_T32X128X256_ATOMIC, CK2_64X32X32X128, None, None, None, SOURCE),
    (512, 7168, 512, 33, 9, 64, 0, CK1_256X64X128X128, FLYDSL2_T64X128X256_ATOMIC, CK2_256X64X128X128, None, None, None, SOURCE),
    (512, 7168, 2048, 33, 9, 32, 0, CK1_256X32X128X128, FLYDSL2_T32X128X256_ATOMIC, CK2_64X32X32X128, None, None, None, SOURCE),
)
# fmt: on
OVERRIDE_ROWS = tuple(dict(zip(ROW_FIELDS, row, strict=True)) for row in OVERRIDE_TABLE)
