"""The CK kernels aiter f3be04a builds for this problem (fp4 x fp4 -> bf16, per_1x32, Silu, preshuffled
weights, routed weight in stage 2): data only, read by moe_aiter/inject.py (names, validation) and
by bench/tune/aiter_rows.py (the candidate rows, with FlyDSL's stage-2 tiles).

CK 2-stage instances (csrc/ck_gemm_moe_2stages_codegen at f3be04a): gen_instances.py's build-all
loop (:1124-1161, the one module_moe_ck2stages runs) generates fp4x2 x fp4x2 with b16 out, silu,
MulRoutedWeight at stage 2 and preshuffle, which get_gemm1/2_kernels_list
(gemm_moe_ck2stages_common.py:362, :434) map to the "a4w4" lists a4w4_gemm1_kernels_list (:202)
and a4w4_gemm2_kernels_list (:324); the kernel name is kernelInstanceGEMM1/2.name (:40, :85).
Tuples are (BLOCK_SIZE, MPerBlock, NPerBlock, KPerBlock, MWaves, NWaves, GemmPipelineVersion).
"""

AITER_COMMIT = "f3be04a12a0cfd6b5e2c7a94edc774f1bc24460d"

CK_A4W4_GEMM1_INSTANCES = (
    (256, 32, 128, 128, 1, 4, 3),
    (256, 64, 128, 128, 1, 4, 3),
    (256, 128, 128, 128, 1, 4, 3),
    (64, 32, 32, 128, 1, 1, 3),
)
CK_A4W4_GEMM2_INSTANCES = (
    (256, 32, 128, 128, 1, 4, 3),
    (256, 64, 128, 128, 1, 4, 3),
    (256, 128, 128, 128, 1, 4, 3),
    (64, 32, 32, 128, 1, 1, 1),
    (64, 64, 128, 128, 1, 1, 3),
    (64, 128, 128, 128, 1, 1, 3),
)
