"""A static MI355X figure of one case from its compiled launches: an ESTIMATE, never a measurement.

It is bench.gfx950.model's cost model (one structure; the H200's constants predict the H200's measured
times, bench.h200.twin) with the MI355X's constants, fed with what the gfx950 compile gives:
  programs      GEMM launches: the grid times the expected routing blocks over the blocks the routing
                can take at most (the programs past num_valid_ids return at once), with the variance
                of the block count under uniform routing; other launches: the grid.
  slots         programs a CU holds: 4 SIMDs x the compiled waves per SIMD / the workgroup's waves.
  one program   its K steps (the stage's rows x columns x K over the grid, in the K-loop dots' volume)
                x per step: issue cycles 4 x VALU + other, matrix the MFMAs' cycles, memory L_step /
                (stages - 1); plus the kernel's instructions outside the loop once. Prep and routing
                launches: one program's path (the shortest to s_endpgm, its loops once), one exposed load.
  bytes         GEMM launches: the stage's weights of the hit experts (stage 1 2I x H, stage 2 H x I,
                half a byte each and a scale byte per 32), shared among its launches by programs;
                in flight per program: (stages - 1) K steps of weight and activation tiles.
ESTIMATE      = launches x gap + sum over launches of max(bytes term, compute term) (averaged over the
                block count's spread) + the activations' bytes at the achievable bandwidth.
bytes floor   every byte (expected experts hit x bench.roofline.expert_bytes, hidden states in, the bf16
              output out, topk ids and weights) at the datasheet's 8 TB/s.
floor (2)     the model's own floor: the same bytes at the achievable bandwidth and two launches' gaps.
MFMA us       matrix-core cycles of every GEMM launch spread over 256 CUs x 4 SIMDs.
Not modelled: L2 and MALL reuse between programs (so an XCD-aware order or a cache modifier changes
nothing), the atomics' contention (so stage 2's bf16 atomic adds cost their issue slots only), the
8 XCDs' separate L2s, the routing's skew from uniform.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from bench.gfx950 import model
from bench.gfx950.check import KernelReport, is_gemm
from bench.roofline import MX_BLOCK, expert_bytes

FP4_BYTES = 1 / 2 + 1 / MX_BLOCK  # an MXFP4 element with its share of the scale byte


@dataclass
class LaunchEstimate:
    """One launch's share of the ESTIMATE beside its gap."""

    programs: float  # expected programs that do work (GEMM launches), the grid otherwise
    slots: float  # programs resident at once at the compiled occupancy, whole GPU
    bytes_us: float = 0.0  # its weight bytes at the bandwidth its programs in flight reach
    compute_us: float = 0.0  # rounds of resident programs
    us: float = 0.0  # max of the two, averaged over the block count's spread


@dataclass
class Estimate:
    bytes_floor_us: float
    mfma_us: float
    compute_us: float
    launches: int
    machine: model.Machine = model.MI355X
    activations_us: float = 0.0  # the bytes that are not weights, at the achievable bandwidth
    floor2_us: float = 0.0  # every byte at the achievable bandwidth and two gaps
    per_launch: list[LaunchEstimate] = field(default_factory=list)  # one per launch, in order

    @property
    def gap_us(self) -> float:
        return self.machine.gap_s * 1e6

    @property
    def estimate_us(self) -> float:
        return (
            self.machine.call_s * 1e6
            + self.launches * self.gap_us
            + sum(x.us for x in self.per_launch)
            + self.activations_us
        )

    @property
    def floor_ratio(self) -> float:
        return self.estimate_us / self.floor2_us if self.floor2_us else 0.0


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
    return experts_hit(params) * cols * k * FP4_BYTES


def _routing(constexprs: dict, block: int) -> tuple[int, int, int]:
    """(block_m, rows per program, tail_m) of a GEMM launch (block: the dots' smaller side, if no BLOCK_M)."""
    block_m = int(constexprs.get("BLOCK_M", block))
    return block_m, int(constexprs.get("ROWS", block_m)), int(constexprs.get("TAIL_M", 0))


def block_moments(constexprs: dict, params: dict, block: int = 16) -> tuple[float, float, int, int]:
    """(mean and variance of the routing blocks this launch takes, block_m, rows per program)."""
    block_m, rows, tail_m = _routing(constexprs, block)
    mean, variance = model.blocks_moments(
        params["bs"],
        params["nroutedexperts"],
        params["nexpertspertoken"],
        params["nsharedexperts"],
        block_m,
        rows,
        tail_m,
    )
    return mean, variance, block_m, rows


def capacity(params: dict, block_m: int) -> int:
    """Routing blocks the launcher sizes its grid for (moe_triton.routing.routing_capacity's formula)."""
    slots = params["bs"] * (params["nexpertspertoken"] + params["nsharedexperts"])
    experts = params["nroutedexperts"] + params["nsharedexperts"]
    return -(-(slots + min(experts, slots) * (block_m - 1)) // block_m)


def gemm_programs(grid, constexprs: dict, params: dict, block: int = 16) -> tuple[float, float]:
    """(mean, variance) of a GEMM launch's programs that do work: the grid times the blocks it takes over
    the blocks the routing can take at most."""
    mean, variance, block_m, _ = block_moments(constexprs, params, block)
    share = math.prod(grid) / capacity(params, block_m)
    return share * mean, share * share * variance


def _dot_block(rep: KernelReport) -> int:
    return min(rep.dots[0].m, rep.dots[0].n)


def programs(rep: KernelReport, grid: tuple[int, int, int], constexprs: dict, params: dict) -> float:
    """Expected programs of a GEMM launch that do work."""
    return gemm_programs(grid, constexprs, params, _dot_block(rep))[0]


def _issue(instructions: int, mfma: int, valu: int) -> float:
    """Issue cycles of a wave's instructions: 4 per VALU, 1 per other; an MFMA costs its matrix cycles."""
    return model.VALU_CYCLES * valu + model.OTHER_CYCLES * (instructions - mfma - valu)


def _rest_issue(rep: KernelReport) -> float:
    """Issue cycles of the instructions outside the counted K loop, each once (none when the whole kernel
    was counted as the loop)."""
    if rep.kernel is None or rep.loop is None or rep.loop.whole_kernel:
        return 0.0
    body = rep.loop.per_step(1)  # the loop's text, all its K steps
    return max(
        0.0,
        _issue(rep.kernel.instructions, rep.kernel.mfma, rep.kernel.valu)
        - _issue(body.instructions, body.mfma, body.valu),
    )


def slots_per_cu(rep: KernelReport) -> float:
    return model.SIMDS_PER_CU * rep.waves / rep.num_warps


def gemm_work(
    rep: KernelReport, grid, constexprs: dict, params: dict, machine: model.Machine
) -> tuple[model.ProgramWork, float]:
    """(one program's work, its bytes in flight) of a GEMM launch."""
    _, _, block_m, rows = block_moments(constexprs, params, _dot_block(rep))
    cols, k = _gemm_dims(rep.name, params)
    # The stage's work of one routing block over the programs of one block (the grid over the capacity).
    steps = rows * cols * k / sum(d.m * d.n * d.k for d in rep.dots) * capacity(params, block_m) / math.prod(grid)
    loop = rep.loop
    work = model.ProgramWork(
        issue=steps * _issue(loop.instructions, loop.mfma, loop.valu) + _rest_issue(rep),
        matrix=steps * rep.loop_mfma_cycles,
        memory=steps * machine.step_latency_cycles / max(1, rep.num_stages - 1),
        warps=rep.num_warps,
    )
    weights = sum(d.m * d.k for d in rep.dots) * FP4_BYTES  # the weights are the left operand
    activations = sum(d.n * d.k for d in rep.dots) * (FP4_BYTES if all(d.scaled for d in rep.dots) else 2)
    return work, max(1, rep.num_stages - 1) * (weights + activations)


def other_work(rep: KernelReport, machine: model.Machine) -> model.ProgramWork:
    """A launch without MFMAs: one program's path (asm.program_path) and one exposed load."""
    path = rep.path
    issue = _issue(path.instructions, path.mfma, path.valu) if path else 0.0
    return model.ProgramWork(issue=issue, matrix=0.0, memory=machine.step_latency_cycles, warps=rep.num_warps)


def estimate(
    params: dict,
    launches: list[tuple[KernelReport, object]],
    gap_us: float | None = None,
    fraction: float | None = None,
    machine: model.Machine = model.MI355X,
) -> Estimate:
    """launches: (report, Launch) per launch of the case, in order; gap_us and fraction replace the
    machine's gap and achievable fraction."""
    machine = machine.with_options(gap_us, fraction)
    rows = []  # (report, launch, LaunchWork)
    per_stage = {1: 0.0, 2: 0.0}
    for rep, launch in launches:
        gemm = is_gemm(rep.name) and bool(rep.loop and rep.dots)
        slots = slots_per_cu(rep)
        if gemm:
            mean, variance = gemm_programs(launch.grid, launch.constexprs, params, _dot_block(rep))
            work, in_flight = gemm_work(rep, launch.grid, launch.constexprs, params, machine)
            per_stage[_stage(rep.name)] += mean
            rows.append((rep, model.LaunchWork(mean, variance, slots, work, 0.0, in_flight)))
        else:
            rows.append((rep, model.LaunchWork(math.prod(launch.grid), 0.0, slots, other_work(rep, machine), 0.0, 0.0)))
    mfma = compute = 0.0
    per_launch = []
    for rep, work in rows:
        if rep.loop and rep.dots and is_gemm(rep.name):
            total = per_stage[_stage(rep.name)]
            work.nbytes = stage_weight_bytes(rep.name, params) * (work.programs / total if total else 0.0)
            mfma += work.programs * work.work.warps * work.work.matrix / (machine.units * model.SIMDS_PER_CU)
        timed = model.launch_time(machine, work)
        compute += timed.compute_s * 1e6
        per_launch.append(
            LaunchEstimate(
                programs=work.programs,
                slots=work.slots_per_unit * machine.units,
                bytes_us=timed.bytes_s * 1e6,
                compute_us=timed.compute_s * 1e6,
                us=timed.seconds * 1e6,
            )
        )
    total_bytes = layer_bytes(params)
    return Estimate(
        bytes_floor_us=total_bytes / machine.peak_bytes_per_s * 1e6,
        mfma_us=mfma / machine.clock_hz * 1e6,
        compute_us=compute,
        launches=len(launches),
        machine=machine,
        activations_us=(total_bytes - weight_bytes(params)) / machine.bandwidth_bytes_per_s * 1e6,
        floor2_us=model.floor_seconds(machine, total_bytes, 2) * 1e6,
        per_launch=per_launch,
    )


def assumptions(
    gap_us: float | None = None, fraction: float | None = None, machine: model.Machine = model.MI355X
) -> str:
    """The lines under the case table: what the ESTIMATE adds up, and the constants it used."""
    machine = machine.with_options(gap_us, fraction)
    return (
        "ESTIMATE (static, not a time) = launches x gap + per launch max(weight bytes at the bandwidth its "
        "programs in flight reach, rounds of resident programs: issue, MFMA and exposed load latency) + "
        "activations at the achievable bandwidth; floor (2) = every byte at the achievable bandwidth + 2 gaps; "
        "uniform routing, no L2/MALL reuse, no atomics or XCDs modelled.\n"
        f"constants: {machine.describe()}"
    )
