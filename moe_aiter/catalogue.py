"""The kernels aiter f3be04a builds for this problem (fp4 x fp4 -> bf16, per_1x32, Silu, preshuffled
weights, routed weight in stage 2): data only, read by moe_aiter/inject.py (names, validation) and
by bench/tune/aiter_rows.py (the candidate rows).

CK 2-stage instances (csrc/ck_gemm_moe_2stages_codegen at f3be04a): gen_instances.py's build-all
loop (:1124-1161, the one module_moe_ck2stages runs) generates fp4x2 x fp4x2 with b16 out, silu,
MulRoutedWeight at stage 2 and preshuffle, which get_gemm1/2_kernels_list
(gemm_moe_ck2stages_common.py:362, :434) map to the "a4w4" lists a4w4_gemm1_kernels_list (:202)
and a4w4_gemm2_kernels_list (:324); the kernel name is kernelInstanceGEMM1/2.name (:40, :85).
Tuples are (BLOCK_SIZE, MPerBlock, NPerBlock, KPerBlock, MWaves, NWaves, GemmPipelineVersion).

FlyDSL stage 2 (aiter/ops/flydsl/moe_kernels.py:63-92, registered at import by :95-102):
tile_m x tile_n x tile_k x mode for fp4 weights. Its stage 1 takes no fp4 activations
(gemm_moe_tune.py: "TODO: stage1 support fp4"), so stage 1 is always CK here.

aiter's own tuner pairs a block_m with the CK instances whose MPerBlock equals it and the FlyDSL
kernels whose tile_m equals it (gemm_moe_tune.py:1676, :1728, :1825, :1876); block_m 16 is out
here because the activation quantizer needs block_m % 32 == 0 (moe_aiter/inject.py).
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

FLYDSL_STAGE2_TILE_M = (32, 64)
FLYDSL_STAGE2_TILE_N = (128, 256)
FLYDSL_STAGE2_TILE_K = (256,)
FLYDSL_STAGE2_MODES = ("atomic", "reduce")

# The sorting block heights a tuned row may use with quantized activations.
TUNE_BLOCK_M = (32, 64, 128)
