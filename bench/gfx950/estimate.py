"""A static MI355X time of one case from its compiled launches: an ESTIMATE, never a measurement.

bytes floor   (expected experts hit under uniform routing x expert_bytes + activations) / 8 TB/s;
              the activations are hidden_states in, the bf16 output out, topk ids and weights.
MFMA time     matrix-core cycles of every GEMM launch spread over 256 CUs x 4 SIMDs at 2.4 GHz.
compute time  the same launches at their compiled occupancy: each wave's K-loop iteration costs
              bench.gfx950.model.iteration_cycles (MFMA and VALU pipes overlap across the waves
              on a SIMD, not within one), spread over all SIMDs; no less than one program's own
              chain of iterations (few programs cannot fill the GPU).
estimate      max(bytes floor, compute time); the launch count is printed beside it (each launch
              adds a few microseconds on a real GPU, not modelled).
Work of a GEMM launch: its routing blocks (expected under uniform routing, split at TAIL_M like the
launcher when it has one) x ROWS rows x the stage's output columns (stage 1: 2I, stage 2: H) x its
K (H, I), in loop iterations of the K-loop dots' volume, each iteration run by every wave.
Prep and routing kernels hold no MFMA; their bytes are in the floor.
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.gfx950 import model
from bench.gfx950.check import KernelReport, is_gemm
from bench.roofline import expert_bytes


@dataclass
class Estimate:
    bytes_floor_us: float
    mfma_us: float
    compute_us: float
    launches: int

    @property
    def estimate_us(self) -> float:
        return max(self.bytes_floor_us, self.compute_us)


def layer_bytes(params: dict) -> float:
    m, h, i = params["bs"], params["dhidden"], params["dexpert"]
    topk = params["nexpertspertoken"] + params["nsharedexperts"]
    hit = model.expected_experts_hit(m, params["nroutedexperts"], params["nexpertspertoken"], params["nsharedexperts"])
    return hit * expert_bytes(h, i) + m * h * 2 * 2 + m * topk * (4 + 4)


def _gemm_dims(name: str, params: dict) -> tuple[int, int]:
    """(output columns, K) of a stage."""
    h, i = params["dhidden"], params["dexpert"]
    return (2 * i, h) if "stage1" in name else (h, i)


def gemm_times_us(rep: KernelReport, grid: tuple[int, int, int], constexprs: dict, params: dict) -> tuple[float, float]:
    """(MFMA us, compute us) of one GEMM launch."""
    if not rep.loop or not rep.dots:
        return 0.0, 0.0
    block_m = int(constexprs.get("BLOCK_M", min(rep.dots[0].m, rep.dots[0].n)))
    rows = int(constexprs.get("ROWS", block_m))
    blocks = model.expected_blocks(
        params["bs"],
        params["nroutedexperts"],
        params["nexpertspertoken"],
        params["nsharedexperts"],
        block_m,
        rows,
        int(constexprs.get("TAIL_M", 0)),
    )
    cols, k = _gemm_dims(rep.name, params)
    iterations = blocks * rows * cols * k / sum(d.m * d.n * d.k for d in rep.dots)  # per workgroup, all of them
    wave_iterations = iterations * rep.num_warps
    per_iter = model.iteration_cycles(rep.loop_mfma_cycles, rep.loop.valu, rep.other_per_iter, rep.waves)
    serial = model.iteration_cycles(rep.loop_mfma_cycles, rep.loop.valu, rep.other_per_iter, 1.0)
    programs = max(1.0, blocks * grid[1] * grid[2])
    chain = iterations / programs * serial
    mfma_us = model.seconds(wave_iterations * rep.loop_mfma_cycles) * 1e6
    compute_us = max(model.seconds(wave_iterations * per_iter), chain / model.CLOCK_HZ) * 1e6
    return mfma_us, compute_us


def estimate(params: dict, launches: list[tuple[KernelReport, object]]) -> Estimate:
    """launches: (report, Launch) per launch of the case, in order."""
    mfma = compute = 0.0
    for rep, launch in launches:
        if is_gemm(rep.name):
            a, b = gemm_times_us(rep, launch.grid, launch.constexprs, params)
            mfma, compute = mfma + a, compute + b
    return Estimate(
        bytes_floor_us=layer_bytes(params) / model.HBM_BYTES_PER_S * 1e6,
        mfma_us=mfma,
        compute_us=compute,
        launches=len(launches),
    )
