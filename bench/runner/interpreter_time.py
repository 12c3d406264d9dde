"""How long a run takes under Triton's CPU interpreter, estimated before it starts.

The interpreter runs every program of a launch in numpy, so a call costs about the same per
weight element decoded, and every routing block decodes the whole of its expert's weights:
a call ~ KERNEL_NS x routing blocks x 3 I H. Generating a case (randn and the weight quantizer in
torch) and checking it (the torch reference) cost per weight element of all E experts. The
constants were measured on this project's CPU machine (AMD EPYC, 2 threads shared with other
work, torch 2.13, triton 3.9 interpreter) on four cases from H512-I256-E8+1 to H2048-I512-E32+1:
1.36-1.73 us per element and block; other machines differ, so the figures are estimates.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from bench.runner.case_args import Case
from bench.runner.timing import Limits

KERNEL_NS = 1600.0  # one interpreted call, per weight element per routing block
GENERATE_NS = 16.0  # generate_input, per weight element of all experts
CHECK_NS = 15.0  # the torch reference and the comparison, per weight element of all experts (7-25)


def expected_blocks(n_tokens: int, n_routed: int, per_token: int, n_shared: int, block_m: int) -> float:
    """Routing blocks of block_m rows under uniform routing: each token picks per_token distinct
    routed experts, so an expert's rows are Binomial(n_tokens, per_token / n_routed)."""
    p = min(1.0, per_token / n_routed)
    shared = n_shared * math.ceil(n_tokens / block_m)
    if p >= 1.0:
        return n_routed * math.ceil(n_tokens / block_m) + shared
    pmf = (1.0 - p) ** n_tokens
    blocks = 0.0
    for rows in range(n_tokens):
        pmf *= (n_tokens - rows) / (rows + 1) * p / (1.0 - p)
        blocks += pmf * math.ceil((rows + 1) / block_m)
    return n_routed * blocks + shared


def call_seconds(params: dict) -> float:
    """One interpreted custom_kernel call of the case."""
    from bench.runner.case_args import case_shape
    from moe_triton.tiles_nvidia import tile_config

    h, i, m = params["dhidden"], params["dexpert"], params["bs"]
    routed, shared, per_token = params["nroutedexperts"], params["nsharedexperts"], params["nexpertspertoken"]
    block_m = tile_config(case_shape(params)).block_m
    return KERNEL_NS * 1e-9 * expected_blocks(m, routed, per_token, shared, block_m) * 3 * i * h


def _overhead_seconds(params: dict) -> tuple[float, float]:
    """(generate, check) of the case."""
    weights = (params["nroutedexperts"] + params["nsharedexperts"]) * 3 * params["dexpert"] * params["dhidden"]
    return GENERATE_NS * 1e-9 * weights, CHECK_NS * 1e-9 * weights


def _timed_reps(call: float, limits: Limits) -> int:
    """Repetitions the stop rule allows at `call` seconds each (the error rule ignored: the
    interpreter's calls vary by more than 0.1%)."""
    budget = min(limits.max_time_s, limits.max_wall_s)
    return min(limits.max_reps, max(limits.min_reps, math.ceil(budget / call)))


def case_seconds(params: dict, mode: str, limits: Limits | None) -> float:
    """One case in a mode: generate, the checked call, and in the timed modes the repetitions
    (leaderboard mode regenerates and checks each)."""
    call = call_seconds(params)
    generate, check = _overhead_seconds(params)
    once = generate + call + check
    if mode not in ("benchmark", "leaderboard") or limits is None:
        return once
    reps = _timed_reps(call, limits)
    return once + reps * (call + (generate + check if mode == "leaderboard" else 0.0))


def run_seconds(cases: Sequence[Case], mode: str, limits: Limits | None, warmup: Limits | None) -> list[float]:
    """Per case, for one interpreted backend; the warm-up (on the first case) counts to the first."""
    out = [case_seconds(c.params, mode, limits) for c in cases]
    if out and warmup is not None and mode in ("benchmark", "leaderboard"):
        out[0] += case_seconds(cases[0].params, "benchmark", warmup)
    return out


def duration_text(seconds: float) -> str:
    """e.g. '40 s', '3.5 min', '2.1 h'."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
