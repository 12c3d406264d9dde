"""A static MI355X figure of one case from its compiled launches: an ESTIMATE, never a measurement.

bytes floor   (expected experts hit under uniform routing x expert_bytes + activations) / 8 TB/s;
              the activations are hidden_states in, the bf16 output out, topk ids and weights.
MFMA us       matrix-core cycles of every GEMM launch spread over 256 CUs x 4 SIMDs at 2.4 GHz.
compute us    the same launches at their compiled occupancy: each wave's K-loop iteration costs
              bench.gfx950.model.iteration_cycles (MFMA and VALU pipes overlap across the waves
              on a SIMD, not within one), spread over all SIMDs; no less than one program's own
              chain of iterations (few programs cannot fill the GPU).
ESTIMATE      what the floor leaves out, added up launch by launch (one stream: each launch waits
              for the one before it):
                launches x gap
              + per GEMM launch max(its weight bytes / (fraction x 8 TB/s) x CU fill,
                                    its compute us x slot fill, one program's chain)
              + the activations' bytes / (fraction x 8 TB/s)
              gap and fraction: bench.gfx950.model.LAUNCH_GAP_US, HBM_ACHIEVABLE_FRACTION (cited there).
              CU fill = model.fill(programs, 256): a CU streams at most its 1/256 share of the
              bandwidth, so fewer programs than CUs, or a last partial round of them, leave bandwidth
              unused. Slot fill = model.fill(programs, resident programs at the compiled waves per
              SIMD): the last partial round of programs takes as long as a full one.
Work of a GEMM launch: its routing blocks (expected under uniform routing, split at TAIL_M like the
launcher when it has one) x ROWS rows x the stage's output columns (stage 1: 2I, stage 2: H) x its
K (H, I), in loop iterations of the K-loop dots' volume, each iteration run by every wave. Its
programs: the grid times the expected blocks over the blocks the routing can take at most (the
programs past num_valid_ids return at once). A stage's weight bytes are shared among its launches
by their programs. Prep and routing kernels hold no MFMA: they cost their gap, their bytes are the
activations'. Not modelled: memory latency, L2 reuse between programs (so an XCD-aware program order
changes nothing here), the atomics' contention, the routing kernel's own work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bench.gfx950 import model
from bench.gfx950.check import KernelReport, is_gemm
from bench.roofline import MX_BLOCK, expert_bytes


@dataclass
class LaunchEstimate:
    """One launch's share of the ESTIMATE beside its gap (zero for launches without MFMAs)."""

    programs: float  # expected programs that do work (GEMM launches), the grid otherwise
    slots: float  # programs resident at once at the compiled occupancy
    bytes_us: float = 0.0  # its weight bytes at the achievable bandwidth, CU fill applied
    compute_us: float = 0.0  # spread over the GPU with the slot fill applied, or one program's chain

    @property
    def us(self) -> float:
        return max(self.bytes_us, self.compute_us)


@dataclass
class Estimate:
    bytes_floor_us: float
    mfma_us: float
    compute_us: float
    launches: int
    gap_us: float = model.LAUNCH_GAP_US
    activations_us: float = 0.0  # the bytes that are not weights, at the achievable bandwidth
    per_launch: list[LaunchEstimate] = field(default_factory=list)  # one per launch, in order

    @property
    def estimate_us(self) -> float:
        return self.launches * self.gap_us + sum(x.us for x in self.per_launch) + self.activations_us


def experts_hit(params: dict) -> float:
    return model.expected_experts_hit(
        params["bs"], params["nroutedexperts"], params["nexpertspertoken"], params["nsharedexperts"]
    )


def weight_bytes(params: dict) -> float:
    return experts_hit(params) * expert_bytes(params["dhidden"], params["dexpert"])


def layer_bytes(params: dict) -> float:
    m, h = params["bs"], params["dhidden"]
    topk = params["nexpertspertoken"] + params["nsharedexperts"]
    return weight_bytes(params) + m * h * 2 * 2 + m * topk * (4 + 4)


def _stage(name: str) -> int:
    return 1 if "stage1" in name else 2


def _gemm_dims(name: str, params: dict) -> tuple[int, int]:
    """(output columns, K) of a stage."""
    h, i = params["dhidden"], params["dexpert"]
    return (2 * i, h) if _stage(name) == 1 else (h, i)


def stage_weight_bytes(name: str, params: dict) -> float:
    """The weights of the hit experts that a stage reads: fp4 bytes and one e8m0 byte per 32."""
    cols, k = _gemm_dims(name, params)
    return experts_hit(params) * cols * k * (1 / 2 + 1 / MX_BLOCK)


def _blocks(rep: KernelReport, constexprs: dict, params: dict) -> tuple[float, int, int]:
    """(expected routing blocks this launch takes, block_m, rows per program)."""
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
    return blocks, block_m, rows


def capacity(params: dict, block_m: int) -> int:
    """Routing blocks the launcher sizes its grid for (moe_triton.fused_moe.routing_capacity's formula)."""
    slots = params["bs"] * (params["nexpertspertoken"] + params["nsharedexperts"])
    experts = params["nroutedexperts"] + params["nsharedexperts"]
    return -(-(slots + min(experts, slots) * (block_m - 1)) // block_m)


def programs(rep: KernelReport, grid: tuple[int, int, int], constexprs: dict, params: dict) -> float:
    """Expected programs of a GEMM launch that do work."""
    blocks, block_m, _ = _blocks(rep, constexprs, params)
    return math.prod(grid) * blocks / capacity(params, block_m)


def gemm_times_us(
    rep: KernelReport, grid: tuple[int, int, int], constexprs: dict, params: dict
) -> tuple[float, float, float, float]:
    """(MFMA us, compute us, compute us at the slot fill, one program's chain us) of one GEMM launch."""
    if not rep.loop or not rep.dots:
        return 0.0, 0.0, 0.0, 0.0
    blocks, _, rows = _blocks(rep, constexprs, params)
    cols, k = _gemm_dims(rep.name, params)
    iterations = blocks * rows * cols * k / sum(d.m * d.n * d.k for d in rep.dots)  # per workgroup, all of them
    wave_iterations = iterations * rep.num_warps
    per_iter = model.iteration_cycles(rep.loop_mfma_cycles, rep.loop.valu, rep.other_per_iter, rep.waves)
    serial = model.iteration_cycles(rep.loop_mfma_cycles, rep.loop.valu, rep.other_per_iter, 1.0)
    count = max(1.0, programs(rep, grid, constexprs, params))
    chain_us = iterations / count * serial / model.CLOCK_HZ * 1e6
    spread_us = model.seconds(wave_iterations * per_iter) * 1e6
    filled_us = spread_us * model.fill(count, model.resident_programs(rep.waves, rep.num_warps))
    mfma_us = model.seconds(wave_iterations * rep.loop_mfma_cycles) * 1e6
    return mfma_us, max(spread_us, chain_us), filled_us, chain_us


def estimate(
    params: dict,
    launches: list[tuple[KernelReport, object]],
    gap_us: float = model.LAUNCH_GAP_US,
    fraction: float = model.HBM_ACHIEVABLE_FRACTION,
) -> Estimate:
    """launches: (report, Launch) per launch of the case, in order."""
    bandwidth = fraction * model.HBM_BYTES_PER_S
    rows = []  # (report, launch, modelled as a GEMM, programs)
    for rep, launch in launches:
        gemm = is_gemm(rep.name) and bool(rep.loop and rep.dots)
        count = programs(rep, launch.grid, launch.constexprs, params) if gemm else math.prod(launch.grid)
        rows.append((rep, launch, gemm, count))
    per_stage = {1: 0.0, 2: 0.0}
    for rep, _, gemm, count in rows:
        per_stage[_stage(rep.name)] += count if gemm else 0.0
    mfma = compute = 0.0
    per_launch = []
    for rep, launch, gemm, count in rows:
        entry = LaunchEstimate(programs=count, slots=model.resident_programs(rep.waves, rep.num_warps))
        if gemm:
            mfma_us, compute_us, filled_us, chain_us = gemm_times_us(rep, launch.grid, launch.constexprs, params)
            mfma, compute = mfma + mfma_us, compute + compute_us
            share = count / per_stage[_stage(rep.name)] if per_stage[_stage(rep.name)] else 0.0
            stream_us = stage_weight_bytes(rep.name, params) * share / bandwidth * 1e6
            entry.bytes_us = stream_us * model.fill(count, model.CUS)
            entry.compute_us = max(filled_us, chain_us)
        per_launch.append(entry)
    return Estimate(
        bytes_floor_us=layer_bytes(params) / model.HBM_BYTES_PER_S * 1e6,
        mfma_us=mfma,
        compute_us=compute,
        launches=len(launches),
        gap_us=gap_us,
        activations_us=(layer_bytes(params) - weight_bytes(params)) / bandwidth * 1e6,
        per_launch=per_launch,
    )


def assumptions(gap_us: float = model.LAUNCH_GAP_US, fraction: float = model.HBM_ACHIEVABLE_FRACTION) -> str:
    """The one line under the case table."""
    return (
        f"ESTIMATE (static, not a time) = launches x {gap_us:g} us gap + per GEMM launch max(weight bytes at "
        f"{fraction:g} x 8 TB/s x CU fill, compute x slot fill, one program's chain) + activations at "
        f"{fraction:g} x 8 TB/s; uniform routing, no L2 reuse, no latency or atomics modelled"
    )
