"""The override table of aiter's 2-stage fused-MoE config, one row per official shape, as data:
moe_aiter/inject.py checks the rows and injects them into aiter.fused_moe.cfg_2stages; `python -m
bench.tune.aiter_rows` rewrites this file. The fields: docs/aiter_overrides.md, "The rows".

Hand-derived rows (docs/aiter_overrides.md says how), never timed on an MI355X;
`python -m bench.tune.aiter_rows` on an MI355X replaces them with measured winners.
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
