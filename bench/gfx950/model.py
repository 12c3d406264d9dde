"""The MI355X (gfx950) as a few numbers, and what they give for a compiled kernel: occupancy and a
static time estimate. Datasheet figures, not measurements; nothing here ran on an MI355X.

Occupancy (waves per SIMD), CDNA3/4: each SIMD has 512 VGPRs per lane shared by VGPRs and AGPRs,
allocated in granules of 8, and holds at most 8 waves; a CU has 4 SIMDs and 160 KiB of LDS shared
by its workgroups; a workgroup of W waves spreads over the 4 SIMDs.
  vgpr_waves = min(8, floor(512 / ceil8(VGPRs incl. AGPRs)))
  workgroups per CU = min(floor(4 * vgpr_waves / W), floor(160 KiB / LDS per workgroup))
  waves per SIMD = min(vgpr_waves, workgroups per CU * W / 4)      (0: the LDS does not fit)
"""

from __future__ import annotations

import math

CUS = 256
SIMDS_PER_CU = 4
CLOCK_HZ = 2.4e9
HBM_BYTES_PER_S = 8e12
LDS_PER_CU = 160 * 1024
VGPRS_PER_SIMD_LANE = 512
VGPR_GRANULE = 8
MAX_WAVES_PER_SIMD = 8
VALU_CYCLES = 4  # a wave64 VALU instruction on a 16-lane SIMD
OTHER_CYCLES = 1  # scalar, memory and LDS issue, waits: counted as one cycle each

# Dense matrix rate per SIMD and cycle, from the datasheet peaks (MXFP4/FP6 about 10 PFLOP/s, FP8 5,
# BF16 2.5) over 256 CUs x 4 SIMDs x 2.4 GHz.
FLOPS_PER_SIMD_CYCLE = {"fp4": 4096, "fp6": 4096, "bf6": 4096, "fp8": 2048, "bf8": 2048, "bf16": 1024, "f16": 1024}

LEADERBOARD_BEST_US = 69.9  # the amd-moe-mxfp4 leaderboard's first place, geomean over its 7 benchmarks

# The estimate's two assumed figures (bench.gfx950.estimate; docs/gfx950.md, "The MI355X estimate").
# No public gap between dependent kernels on an MI300X or MI355X was found; the nearest public figure is
# 3.5 us per kernel for empty kernels dispatched in a batch through HSA on an AMD APU (AMD community
# forum, "HSA: Kernel dispatch latencies (What are your experiences?)", community.amd.com/t5/
# newcomers-start-here/hsa-kernel-dispatch-latencies-what-are-your-experiences/td-p/131511), assumed here.
LAUNCH_GAP_US = 3.5
# Achieved over peak HBM bandwidth, MI300X, BabelStream on large arrays: 81% of 5.3 TB/s ("AMD MI300X
# GPU Performance Analysis", arXiv 2510.27583); no measured MI355X figure is public, so the same fraction
# of its 8 TB/s. The layer streams 190-790 MB of weights per call, BabelStream-sized streams, from HBM:
# the harness writes 64 GiB between timed calls.
HBM_ACHIEVABLE_FRACTION = 0.81


def waves_per_simd(total_vgpr: int, lds_bytes: int, num_warps: int) -> float:
    """The module docstring's formula."""
    granules = max(1, math.ceil(total_vgpr / VGPR_GRANULE)) * VGPR_GRANULE
    vgpr_waves = min(MAX_WAVES_PER_SIMD, VGPRS_PER_SIMD_LANE // granules)
    by_vgpr = SIMDS_PER_CU * vgpr_waves // num_warps
    by_lds = LDS_PER_CU // lds_bytes if lds_bytes else by_vgpr
    return min(vgpr_waves, min(by_vgpr, by_lds) * num_warps / SIMDS_PER_CU)


def resident_programs(waves: float, num_warps: int) -> float:
    """Workgroups of num_warps waves that the whole GPU holds at once at `waves` waves per SIMD."""
    return CUS * SIMDS_PER_CU * waves / num_warps


def fill(programs: float, slots: float) -> float:
    """How much longer `programs` equal programs take on `slots` concurrent slots than a perfect
    spread would: every round of slots, the last partial one included, takes as long as a full one."""
    if programs <= 0 or slots <= 0:
        return 1.0
    return math.ceil(programs / slots - 1e-9) * slots / programs


def mfma_cycles(shape: tuple[int, int, int], operand_format: str) -> float:
    """Cycles one MFMA keeps its SIMD's matrix core busy, at the datasheet rate of its format."""
    m, n, k = shape
    return 2 * m * n * k / FLOPS_PER_SIMD_CYCLE[operand_format]


def iteration_cycles(mfma_cycles_per_iter: float, valu: int, other: int, waves: float) -> float:
    """SIMD cycles that one wave's loop iteration costs when `waves` waves share the SIMD: the
    matrix core and the VALU of different waves overlap (max of the two pipes), while within one
    wave they follow each other, which the other waves hide up to that throughput bound."""
    serial = mfma_cycles_per_iter + VALU_CYCLES * valu + OTHER_CYCLES * other
    throughput = max(mfma_cycles_per_iter, VALU_CYCLES * valu + OTHER_CYCLES * other)
    return max(throughput, serial / max(waves, 1.0))


def binomial_pmf(n: int, p: float) -> list[float]:
    return [math.comb(n, x) * p**x * (1 - p) ** (n - x) for x in range(n + 1)]


def expected_blocks(
    n_tokens: int,
    n_routed: int,
    routed_topk: int,
    n_shared: int,
    block_m: int,
    rows: int | None = None,
    tail_m: int = 0,
) -> float:
    """Expected routing blocks of block_m rows under uniform routing (each token picks routed_topk of
    n_routed experts; the shared experts take every token), counting only the blocks a launch of
    `rows`-row tiles takes when the stage is split at tail_m (SPEC: blocks with at most tail_m real
    rows go to the tail launch)."""
    rows = rows or block_m

    def taken(count: int) -> int:
        full, last = divmod(count, block_m)
        blocks = [block_m] * full + ([last] if last else [])
        if not tail_m:
            return len(blocks)
        return sum((b <= tail_m) == (rows < block_m) for b in blocks)

    pmf = binomial_pmf(n_tokens, routed_topk / n_routed)
    routed = n_routed * sum(p * taken(x) for x, p in enumerate(pmf))
    return routed + n_shared * taken(n_tokens)


def expected_experts_hit(n_tokens: int, n_routed: int, routed_topk: int, n_shared: int) -> float:
    return n_routed * (1 - (1 - routed_topk / n_routed) ** n_tokens) + n_shared


def seconds(cycles_per_simd_total: float) -> float:
    """Wall time of SIMD cycles spread evenly over the whole GPU."""
    return cycles_per_simd_total / (CUS * SIMDS_PER_CU * CLOCK_HZ)
