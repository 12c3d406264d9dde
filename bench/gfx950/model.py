"""The static cost model of a kernel launch: one structure, two sets of constants. H200 predicts what
the H200 measured (bench.h200.twin checks it against bench/results/h200/calibrate-2026-12-01);
MI355X estimates the MI355X, where nothing has run. docs/gfx950.md, "The MI355X estimate", gives
every constant's source or fit and what the model does not capture.

A launch of N programs (expected; averaged over the routing's spread of N, see `averaged`) takes
  gap + max(bytes term, compute term)
bytes term    its bytes at `bandwidth`: a unit (CU / SM) with B bytes in flight streams B / L0
              (Little's law), the active units together min_k(units x B / L0, achievable) (a
              smooth minimum of sharpness k); B = the programs resident per unit x each one's
              bytes in flight.
              No partial-round term: a last partial round of programs streams as fast as the
              bytes in flight allow (the H200's sweep shows no step at k x 132 programs).
compute term  rounds of the resident programs (`launch_cycles`): full rounds at the full
              occupancy, the last partial one at its own, each at least one program's chain.
              One program of W warps (waves), per sub-partition (SMSP / SIMD) sharing w of them:
                max(w x issue / E, w x matrix, a x issue + matrix x max(1, W / 4) + memory)
              issue: its issue cycles (NVIDIA: one per instruction; AMD: 4 per wave64 VALU
              instruction, 1 per other); matrix: its MMA cycles on its sub-partition's matrix
              unit; memory: K steps x L_step / (stages - 1), the load latency a K step leaves
              exposed with stages - 1 tiles in flight; E: the sustained issue fraction; a: the
              cycles one warp waits per issue cycle of its own dependent chain; a program's
              4-warp groups take turns on the matrix units (they meet at a barrier each step).
A call: its start (behind the harness's flush) + its launches + the activations' bytes at the
achievable bandwidth, and no less than all its bytes and the flush's dirty bytes at the achievable
bandwidth (the cache's write-back shares the DRAM with the call's reads).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# ---------------------------------------------------------------- the MI355X (gfx950) as compiled for
#
# Occupancy (waves per SIMD), CDNA3/4: each SIMD has 512 VGPRs per lane shared by VGPRs and AGPRs,
# allocated in granules of 8, and holds at most 8 waves; a CU has 4 SIMDs and 160 KiB of LDS shared
# by its workgroups; a workgroup of W waves spreads over the 4 SIMDs.
#   vgpr_waves = min(8, floor(512 / ceil8(VGPRs incl. AGPRs)))
#   workgroups per CU = min(floor(4 * vgpr_waves / W), floor(160 KiB / LDS per workgroup))
#   waves per SIMD = min(vgpr_waves, workgroups per CU * W / 4)      (0: the LDS does not fit)
SIMDS_PER_CU = 4
LDS_PER_CU = 160 * 1024
VGPRS_PER_SIMD_LANE = 512
VGPR_GRANULE = 8
MAX_WAVES_PER_SIMD = 8
VALU_CYCLES = 4  # a wave64 VALU instruction on a 16-lane SIMD
OTHER_CYCLES = 1  # scalar, memory and LDS issue

# Dense matrix rate per SIMD and cycle, from the datasheet peaks (MXFP4/FP6 about 10 PFLOP/s, FP8 5,
# BF16 2.5) over 256 CUs x 4 SIMDs x 2.4 GHz.
FLOPS_PER_SIMD_CYCLE = {"fp4": 4096, "fp6": 4096, "bf6": 4096, "fp8": 2048, "bf8": 2048, "bf16": 1024, "f16": 1024}

LEADERBOARD_BEST_US = 69.9  # the amd-moe-mxfp4 leaderboard's first place, geomean over its 7 benchmarks
# The sixth place (aiter's CK and FlyDSL kernels, 4 launches per call), measured on the MI355X, us, aligned
# with problem.cases.BENCHMARKS: what the hardware reaches at least (docs/gfx950.md).
SIXTH_PLACE_US = (90.8, 104.0, 140.0, 62.0, 90.0, 105.0, 185.0)

# ---------------------------------------------------------------- the H200 (sm_90) as compiled for
H200_REGISTERS_PER_SM = 65536
H200_REGISTER_GRANULE = 256  # registers per warp are allocated in units of 256 (8 per thread)
H200_MAX_WARPS_PER_SM = 64
H200_MAX_PROGRAMS_PER_SM = 32
H200_SHARED_PER_SM = 233472  # 228 KiB
H200_SHARED_RESERVED = 1024  # per program, by the driver
H200_MMA_FLOPS_PER_SMSP_CYCLE = 1024  # dense bf16: 4096 per SM and cycle (989 TFLOP/s at 1.83 GHz, 132 SMs)


TUNABLE = (
    "achievable_fraction",
    "latency_s",
    "knee",
    "gap_s",
    "call_s",
    "dirty_bytes",
    "issue_efficiency",
    "issue_latency",
    "step_latency_cycles",
)  # the fields `python -m bench.gfx950 --constant FIELD=VALUE` may replace


@dataclass(frozen=True)
class Machine:
    """The constants of the model for one chip (module docstring; docs/gfx950.md for each one's source)."""

    name: str
    units: int  # CUs / SMs
    clock_hz: float
    peak_bytes_per_s: float  # the datasheet's DRAM bandwidth
    achievable_fraction: float  # of the peak: what many programs in flight reach
    latency_s: float  # L0: a load's round trip (bandwidth rule: a unit streams its bytes in flight / L0)
    knee: float  # k: sharpness of the minimum of the units' sum and the achievable bandwidth
    gap_s: float  # per launch, dependent launches in one stream
    call_s: float  # a call's start behind the harness's flush and the events around it, beyond its launches
    dirty_bytes: float  # what the flush leaves dirty in the cache, written back while the call streams
    issue_efficiency: float  # E
    issue_latency: float  # a
    step_latency_cycles: float  # L_step
    vector_cycles: int  # issue cycles of a vector instruction (AMD VALU: 4; NVIDIA: 1)
    other_cycles: int = 1
    sub_partitions: int = 4  # SIMDs per CU, SMSPs per SM

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return self.achievable_fraction * self.peak_bytes_per_s

    def with_options(self, gap_us: float | None = None, fraction: float | None = None, **fields) -> Machine:
        """The same machine with the command line's gap, achievable fraction or other fields (by name)."""
        from dataclasses import replace

        if gap_us is not None:
            fields["gap_s"] = gap_us * 1e-6
        if fraction is not None:
            fields["achievable_fraction"] = fraction
        return replace(self, **fields)

    def describe(self) -> str:
        """The constants in one line (printed under the ESTIMATE's table)."""
        return (
            f"{self.name}: {self.units} units x {self.sub_partitions} at {self.clock_hz / 1e9:g} GHz; bandwidth "
            f"{self.achievable_fraction:g} x {self.peak_bytes_per_s / 1e12:g} TB/s, L0 {self.latency_s * 1e6:.3g} us, "
            f"k {self.knee:g}; gap {self.gap_s * 1e6:g} us, call {self.call_s * 1e6:g} us, dirty "
            f"{self.dirty_bytes / 1e6:g} MB; issue E "
            f"{self.issue_efficiency:g}, a {self.issue_latency:g}, L_step {self.step_latency_cycles:g} cycles, "
            f"vector {self.vector_cycles} / other {self.other_cycles} cycles"
        )


# The H200: 132 SMs; its clock under these kernels' load (ncu's gpc__cycles_elapsed per second, median
# over the GEMM launches of ncu.csv); 4.8 TB/s datasheet HBM3e. Fitted by `python -m bench.h200.fit`
# on bench/results/h200/calibrate-2026-12-01: the gap on gap.json (slope), the bandwidth rule, the call's
# start and the flush's dirty bytes on sweep.json, E, a and L_step on the GEMM launches of ncu.csv (with
# the static SASS counts of bench/results/h200/twin-static-triton-3.6.0.json).
H200 = Machine(
    name="H200",
    units=132,
    clock_hz=1.7716e9,
    peak_bytes_per_s=4.8e12,
    achievable_fraction=0.936,
    latency_s=0.553e-6,
    knee=2.61,
    gap_s=1.464e-6,
    call_s=4.48e-6,
    dirty_bytes=24.1e6,
    issue_efficiency=0.713,
    issue_latency=2.16,
    step_latency_cycles=2318.0,
    vector_cycles=1,
    other_cycles=1,
)

# The MI355X (docs/gfx950.md, "The MI355X estimate", gives each one's range): datasheet 256 CUs, 2.4 GHz,
# 8 TB/s; the achievable fraction 0.95: the sixth place's 742 MB at E-257 bs-128 in 104 us less 4 gaps of
# 1.5 us (0.89 with no gaps; MI300X reaches 0.73-0.81 of its peak); L0 650 cycles (500-800 for an
# HBM load at one wave per CU, measured on an MI308X: github.com/tingqli/pyhip docs/mem_latency.md); k the
# H200's; the gap the H200's measured 1.46 us, rounded (no MI355X figure; the sixth place leaves at most
# 2.8 us per launch at 8 TB/s); no call start or dirty bytes (the sixth place's times hold them); issue:
# the ISA's rates (one instruction per SIMD and cycle, 4 cycles per wave64 VALU instruction, a dependent
# one issuing back to back: E 1, a 1); L_step the H200's fitted L_step over its L0, times this L0.
MI355X_LATENCY_S = 650 / 2.4e9
MI355X = Machine(
    name="MI355X",
    units=256,
    clock_hz=2.4e9,
    peak_bytes_per_s=8e12,
    achievable_fraction=0.95,
    latency_s=MI355X_LATENCY_S,
    knee=H200.knee,
    gap_s=1.5e-6,
    call_s=0.0,
    dirty_bytes=0.0,
    issue_efficiency=1.0,
    issue_latency=1.0,
    step_latency_cycles=round(H200.step_latency_cycles / H200.clock_hz / H200.latency_s * MI355X_LATENCY_S * 2.4e9),
    vector_cycles=VALU_CYCLES,
    other_cycles=OTHER_CYCLES,
)


# ---------------------------------------------------------------- occupancy


def waves_per_simd(total_vgpr: int, lds_bytes: int, num_warps: int) -> float:
    """The gfx950 occupancy formula of the comment above SIMDS_PER_CU."""
    granules = max(1, math.ceil(total_vgpr / VGPR_GRANULE)) * VGPR_GRANULE
    vgpr_waves = min(MAX_WAVES_PER_SIMD, VGPRS_PER_SIMD_LANE // granules)
    by_vgpr = SIMDS_PER_CU * vgpr_waves // num_warps
    by_lds = LDS_PER_CU // lds_bytes if lds_bytes else by_vgpr
    return min(vgpr_waves, min(by_vgpr, by_lds) * num_warps / SIMDS_PER_CU)


def programs_per_sm(registers: int, shared: int, num_warps: int) -> int:
    """Programs an H200 SM holds at once (CUDA's occupancy rules: registers per warp in granules of 256,
    64 warps, 32 programs, 228 KiB of shared memory with 1 KiB reserved per program)."""
    per_warp = max(1, math.ceil(registers * 32 / H200_REGISTER_GRANULE)) * H200_REGISTER_GRANULE
    by_registers = H200_REGISTERS_PER_SM // per_warp // num_warps
    by_shared = H200_SHARED_PER_SM // (shared + H200_SHARED_RESERVED)
    return min(H200_MAX_PROGRAMS_PER_SM, H200_MAX_WARPS_PER_SM // num_warps, by_registers, by_shared)


def mfma_cycles(shape: tuple[int, int, int], operand_format: str) -> float:
    """Cycles one MFMA keeps its SIMD's matrix core busy, at the datasheet rate of its format."""
    m, n, k = shape
    return 2 * m * n * k / FLOPS_PER_SIMD_CYCLE[operand_format]


# ---------------------------------------------------------------- bytes: bandwidth vs bytes in flight


def bandwidth(machine: Machine, units_active: float, bytes_in_flight_per_unit: float) -> float:
    """Bytes per second that `units_active` units with that many bytes in flight each stream (module
    docstring): Little's law per unit, then a smooth minimum with the achievable bandwidth."""
    if units_active <= 0 or bytes_in_flight_per_unit <= 0:
        return 0.0
    total = units_active * bytes_in_flight_per_unit / machine.latency_s
    cap, k = machine.bandwidth_bytes_per_s, machine.knee
    return (total**-k + cap**-k) ** (-1 / k)


def stream_seconds(
    machine: Machine, nbytes: float, programs: float, slots_per_unit: float, bytes_per_program: float
) -> float:
    """Seconds to stream `nbytes` by `programs` programs, each with bytes_per_program in flight, at most
    slots_per_unit of them resident per unit (fewer programs than units: one per unit)."""
    if nbytes <= 0:
        return 0.0
    if programs <= 0 or bytes_per_program <= 0:
        return nbytes / machine.bandwidth_bytes_per_s
    units = min(programs, machine.units)
    resident = max(1.0, min(slots_per_unit, programs / machine.units))
    return nbytes / bandwidth(machine, units, resident * bytes_per_program)


# ---------------------------------------------------------------- compute: resident programs in rounds


@dataclass
class ProgramWork:
    """One program's work on its warps' (waves') sub-partitions, in cycles of one warp."""

    issue: float  # issue cycles
    matrix: float  # matrix-unit cycles on its sub-partition
    memory: float  # exposed load latency (K steps x L_step / (stages - 1))
    warps: int


def program_cycles(machine: Machine, work: ProgramWork, sharing: float) -> float:
    """Wall cycles of one program while `sharing` warps (waves) share each sub-partition (module
    docstring): the sub-partition's issue and matrix throughput, or the program's own chain."""
    groups = max(1.0, work.warps / machine.sub_partitions)
    chain = machine.issue_latency * work.issue + work.matrix * groups + work.memory
    w = max(sharing, 1e-9)
    return max(w * work.issue / machine.issue_efficiency, w * work.matrix, chain)


def launch_cycles(machine: Machine, programs: float, slots_per_unit: float, work: ProgramWork) -> float:
    """Cycles of `programs` equal programs, slots_per_unit resident per unit: full rounds at full
    occupancy, then the last partial round at its own occupancy (at least one program's chain)."""
    if programs <= 0:
        return 0.0
    slots = max(1.0, slots_per_unit)
    per_round = slots * machine.units
    full = math.floor(programs / per_round + 1e-9)
    rest = programs - full * per_round
    warps_per_program = work.warps / machine.sub_partitions
    cycles = full * program_cycles(machine, work, slots * warps_per_program)
    if rest > 1e-9:
        cycles += program_cycles(machine, work, min(slots, rest / machine.units) * warps_per_program)
    return cycles


# ---------------------------------------------------------------- the routing's blocks

# E[f(X)] for X ~ Normal: 21 points from -3 to +3 standard deviations, weights the normal density there
# (normalised). Fine enough that a step of f (a round boundary) moves the mean in steps of at most 12% of
# its height; a 5-point Gauss-Hermite rule would move it by half at once.
_NODES = tuple(-3 + 0.3 * j for j in range(21))
_DENSITY = tuple(math.exp(-x * x / 2) for x in _NODES)
_WEIGHTS = tuple(d / sum(_DENSITY) for d in _DENSITY)


def averaged(f, mean: float, variance: float) -> float:
    """E[f(X)] for X ~ Normal(mean, variance), clipped at 0: a launch's time over the routing's spread of
    its block count, so that no round boundary near the mean makes a step (the count varies by seed)."""
    sd = math.sqrt(max(variance, 0.0))
    if sd == 0:
        return f(mean)
    return sum(w * f(max(0.0, mean + sd * x)) for x, w in zip(_NODES, _WEIGHTS, strict=True))


def binomial_pmf(n: int, p: float) -> list[float]:
    return [math.comb(n, x) * p**x * (1 - p) ** (n - x) for x in range(n + 1)]


def _taken(count: int, block_m: int, rows: int, tail_m: int) -> int:
    """Blocks of an expert with `count` rows that a launch of `rows`-row tiles takes (SPEC: blocks with at
    most tail_m real rows go to the tail launch)."""
    full, last = divmod(count, block_m)
    blocks = [block_m] * full + ([last] if last else [])
    if not tail_m:
        return len(blocks)
    return sum((b <= tail_m) == (rows < block_m) for b in blocks)


def blocks_moments(
    n_tokens: int,
    n_routed: int,
    routed_topk: int,
    n_shared: int,
    block_m: int,
    rows: int | None = None,
    tail_m: int = 0,
) -> tuple[float, float]:
    """(mean, variance) of the routing blocks a launch takes under uniform routing (each token picks
    routed_topk of n_routed experts, independently per expert; the shared experts take every token)."""
    rows = rows or block_m
    pmf = binomial_pmf(n_tokens, routed_topk / n_routed)
    taken = [_taken(x, block_m, rows, tail_m) for x in range(n_tokens + 1)]
    mean = sum(p * t for p, t in zip(pmf, taken, strict=True))
    second = sum(p * t * t for p, t in zip(pmf, taken, strict=True))
    shared = n_shared * _taken(n_tokens, block_m, rows, tail_m)
    return n_routed * mean + shared, n_routed * (second - mean * mean)


def expected_experts_hit(n_tokens: int, n_routed: int, routed_topk: int, n_shared: int) -> float:
    return n_routed * (1 - (1 - routed_topk / n_routed) ** n_tokens) + n_shared


# ---------------------------------------------------------------- a launch


@dataclass
class LaunchWork:
    """What the model needs of one launch: its programs (mean and variance over the routing), how many
    a unit holds, one program's work, and the weight bytes it streams with what each program keeps in
    flight."""

    programs: float
    programs_variance: float
    slots_per_unit: float
    work: ProgramWork
    nbytes: float = 0.0
    bytes_per_program: float = 0.0


@dataclass
class LaunchTime:
    bytes_s: float  # the bytes term at the mean program count
    compute_s: float  # the compute term at the mean program count
    seconds: float  # max of the two, averaged over the program count's spread (without the gap)


def launch_time(machine: Machine, launch: LaunchWork) -> LaunchTime:
    def terms(programs: float) -> tuple[float, float]:
        streamed = stream_seconds(machine, launch.nbytes, programs, launch.slots_per_unit, launch.bytes_per_program)
        return streamed, launch_cycles(machine, programs, launch.slots_per_unit, launch.work) / machine.clock_hz

    bytes_s, compute_s = terms(launch.programs)
    seconds = averaged(lambda n: max(terms(n)), launch.programs, launch.programs_variance)
    return LaunchTime(bytes_s=bytes_s, compute_s=compute_s, seconds=seconds)


def call_seconds(machine: Machine, launch_seconds: list[float], activation_bytes: float, total_bytes: float) -> float:
    """A call (module docstring): its start, each launch with its gap and the activations' bytes at the
    achievable bandwidth; at least every byte and the flush's dirty bytes at that bandwidth."""
    launched = machine.call_s + sum(machine.gap_s + s for s in launch_seconds)
    streamed = machine.call_s + len(launch_seconds) * machine.gap_s
    streamed += (total_bytes + machine.dirty_bytes) / machine.bandwidth_bytes_per_s
    return max(launched + activation_bytes / machine.bandwidth_bytes_per_s, streamed)


def floor_seconds(machine: Machine, nbytes: float, launches: int) -> float:
    """The model's floor: every byte at the achievable bandwidth and `launches` gaps."""
    return machine.call_s + launches * machine.gap_s + nbytes / machine.bandwidth_bytes_per_s
