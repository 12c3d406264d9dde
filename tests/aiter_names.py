"""aiter f3be04a's names of the CK and FlyDSL kernels the tests build rows from: valid ones and the
starting rows' invalid choices (docs/aiter_overrides.md says why these fail)."""

from moe_aiter.catalogue import (
    CK_A4W4_GEMM1_INSTANCES,
    CK_A4W4_GEMM2_INSTANCES,
    ck_moe_kernel_name,
    flydsl_moe_kernel_name,
)

CK_S1_32 = ck_moe_kernel_name(1, CK_A4W4_GEMM1_INSTANCES[0])
CK_S1_32_SMALL = ck_moe_kernel_name(1, CK_A4W4_GEMM1_INSTANCES[3])  # 64x32x32x128 (dsv3 table, most tokens)
CK_S1_128 = ck_moe_kernel_name(1, CK_A4W4_GEMM1_INSTANCES[2])  # the starting rows' choice; needs block_m 128
CK_S2_32 = ck_moe_kernel_name(2, CK_A4W4_GEMM2_INSTANCES[3])  # aiter's own stage 2 for block_m 32 (dsv3 table)
CK_S2_64 = ck_moe_kernel_name(2, CK_A4W4_GEMM2_INSTANCES[1])
FLY_S2_16 = flydsl_moe_kernel_name(2, 16, 128, 128)  # the starting rows' choice; unusable (block_m 16)
