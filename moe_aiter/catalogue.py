"""The CK 2-stage kernels aiter f3be04a builds for this problem (fp4 x fp4 -> bf16, per_1x32, Silu,
preshuffled weights, routed weight in stage 2) and the CK and FlyDSL kernel names; where in aiter
the lists come from: docs/aiter_overrides.md, "The rows". Tuples are (BLOCK_SIZE, MPerBlock,
NPerBlock, KPerBlock, MWaves, NWaves, GemmPipelineVersion).
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

# The name suffixes for this problem (docs/aiter_overrides.md, "The rows").
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
