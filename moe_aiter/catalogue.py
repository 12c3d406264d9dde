"""The CK kernels aiter f3be04a builds for this problem (fp4 x fp4 -> bf16, per_1x32, Silu, preshuffled
weights, routed weight in stage 2) and their names, read by shape_overrides.py (the rows' kernels),
moe_aiter/inject.py (validation) and bench/tune/aiter_rows.py (the candidate rows, with FlyDSL's
stage-2 tiles).

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

# The name suffixes for this problem: Nswizzle always 0 (gen_instances.py:865), Quant3 =
# QuantType.per_1x32, stage 1 without routed weight (doweight_stage1 False), stage 2 with it,
# element ops MulABScaleShuffled / MulABScaleExpertWeightShuffled (gemm_moe_ck2stages_common.py:425, :491).
_CK1_SUFFIX = "MulABScaleShuffled_v{v}_Nswizzle0_Quant3_MulRoutedWeight0_silu_FP4X2_FP4X2_B16"
_CK2_SUFFIX = "MulABScaleExpertWeightShuffled_v{v}_Nswizzle0_Quant3_MulRoutedWeight1_FP4X2_FP4X2_B16"


def ck_moe_kernel_name(stage: int, instance: tuple) -> str:
    """aiter's CK 2-stage kernel name (kernelInstanceGEMM1/2.name) of an a4w4 instance tuple."""
    block, m, n, k, mw, nw, ver = instance
    suffix = (_CK1_SUFFIX if stage == 1 else _CK2_SUFFIX).format(v=ver)
    return f"moe_ck2stages_gemm{stage}_{block}x{m}x{n}x{k}_{mw}x{nw}_{suffix}"


def flydsl_moe_kernel_name(stage: int, tile_m: int, tile_n: int, tile_k: int, mode: str = "atomic") -> str:
    """FlyDSL kernel name for fp4 activations, fp4 weights, bf16 out (moe_kernels.py:14-28 format)."""
    name = f"flydsl_moe{stage}_afp4_wfp4_bf16_t{tile_m}x{tile_n}x{tile_k}"
    return f"{name}_{mode}" if mode else name
