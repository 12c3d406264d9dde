"""`python -m bench.gfx950.search`: the native path's tiles per official shape, ranked by the MI355X ESTIMATE.

The ESTIMATE (bench.gfx950.estimate) is a sum over a call's launches, and the two GEMM launches share
only the routing block and the AMD options (nonkdim, waves_per_eu): so per shape and group of those,
stage 1's tiles and stage 2's are searched apart, then combined with the routing launches of each
launch count (route_launches 2 and 1 with the plain stage 1, 0 with the stage 1 that quantizes and
routes its own block). Space (SPACE): routing blocks by the rows per expert, block_n, block_k, warps
and stages per stage, stage 2's tiles per program; the routing launches at
the lowest of ROUTE_QUANT_BLOCKS per mode.

A stage's candidates are first bounded by the model's cheap terms, no compile (stage_bound): its bytes
term exactly (the tile's bytes in flight), its compute term with only the issue cycles it cannot
avoid (the MFMAs' and the exposed load latency of its K steps; with stage 1 quantizing its rows, one
convert per two elements), at every occupancy from 2 waves per SIMD (the check's limit) to what the
LDS of its tiles in flight allows (8 at most): a lower bound of what the compiled kernel can be
ESTIMATEd at. Those whose LDS cannot give 2 waves per SIMD are dropped. The shape's table tile is
compiled first, then the rest through the check's own driver (bench.gfx950.run.launch_case, the
launcher as the selection runs it) in the order of the bound with the quantization's issue guessed
at QUANT_VALU per element (the compiled converts' ~5-6: docs/gfx950.md), until the next bound reaches
the KEEP-th best ESTIMATE found (the search is then exact under the model) or MAX_COMPILED per list
are compiled (the JSON says which); kernels that break a check limit are no candidates. Kernels
compile once per process and per machine (Triton's caches): shapes of one hidden size share stage
1's, of one d_inter stage 2's.

Writes JSON (per shape: the ranked combinations with their fields, launches, ESTIMATE and its ratio to
the floor at two launches, and the search's counts) and a short Markdown. The ESTIMATE is a static
figure, not a time; docs/gfx950.md, "The tile search", says what was run and chosen.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from itertools import product
from pathlib import Path

from bench.gfx950 import estimate as est
from bench.gfx950 import model
from bench.runner.case_args import case_shape

# The space (docs/gfx950.md gives the reasons). block_k must divide the stage's K; nonkdim 32 at
# blocks of 32 rows and more; routing blocks from a quarter to twice the rows per expert, 16 to 128.
SPACE = {
    "block_m": (16, 32, 64, 128),
    "nonkdim": (16, 32),
    "stage1": {
        "block_n1": (32, 64, 128),
        "block_k1": (128, 256, 512),
        "warps1": (4, 8),
        "stages1": (2, 3, 4),
    },
    "stage2": {
        "block_n2": (64, 128, 256),
        "block_k2": (128, 256, 512),
        "warps2": (4, 8),
        "stages2": (2, 3),
        "n_tiles2": (1, 2, 4, 7, 8),  # 7: d_hidden 7168 is 7 x 1024, so 7 tiles split its columns evenly
    },
}
# 32-blocks per quantizing program of the routing launches (NativeTileConfig.quant_blocks): tiny
# programs take several rounds of the CUs' slots, long ones fewer.
ROUTE_QUANT_BLOCKS = (16, 64, 128, 256)
# The routing launches: name -> (fields, launches per call).
MODES = {
    "route2": ({"route_launches": 2}, 4),
    "route1": ({"route_launches": 1}, 3),
    "quant0": ({"route_launches": 0, "fused_quant": True}, 2),
}
KEEP = 3  # best tiles kept per stage list (and the bound's stop: the KEEP-th best)
MAX_COMPILED = 14  # compiles per stage list at most
QUANT_VALU = 6  # the order's guess of VALU per element that stage 1 quantizes (the bound takes 1/2)
TOP = 8  # combinations written per shape (and the best of each launch count)


@dataclass(frozen=True)
class Group:
    """What the two GEMM launches share: the routing block and the AMD options."""

    block_m: int
    nonkdim: int = 16
    waves_per_eu: int = 0


def block_ms(params: dict) -> list[int]:
    """Routing blocks worth trying: from a quarter to twice the rows per routed expert (16 to 128;
    16 where experts see fewer than 8 rows)."""
    rows = params["bs"] * params["nexpertspertoken"] / params["nroutedexperts"]
    return [m for m in SPACE["block_m"] if rows / 4 <= m <= max(16, 2 * rows)]


def groups(params: dict) -> list[Group]:
    return [Group(m, k) for m in block_ms(params) for k in SPACE["nonkdim"] if k == 16 or m >= 32]


def stage_tiles(stage: int, params: dict) -> list[dict]:
    """Every tile of a stage's space that fits the shape (block_k dividing the stage's K)."""
    space = SPACE[f"stage{stage}"]
    k_dim = params["dhidden"] if stage == 1 else params["dexpert"]
    tiles = [dict(zip(space, values, strict=True)) for values in product(*space.values())]
    return [t for t in tiles if k_dim % t[f"block_k{stage}"] == 0]


def _fp4_tile_bytes(rows: int, k: int) -> float:
    return rows * k * est.FP4_BYTES


def lds_floor(stage: int, tile: dict, block_m: int = 0) -> float:
    """LDS a workgroup needs at least: its tiles in flight, stages - 1 of them, each the weight tile and
    block_m rows of packed activations (0: a stage 1 that quantizes its own rows, whose bf16 tile takes
    another path), with their scales. Triton 3.6 allocates exactly this (the compiled kernels' LDS),
    3.9 one tile more."""
    rows = 2 * tile["block_n1"] if stage == 1 else tile["block_n2"]
    return max(1, tile[f"stages{stage}"] - 1) * _fp4_tile_bytes(rows + block_m, tile[f"block_k{stage}"])


def max_waves(stage: int, tile: dict, block_m: int = 0) -> int:
    """Waves per SIMD that the LDS floor allows (8 at most; the VGPRs may allow fewer)."""
    warps = tile[f"warps{stage}"]
    workgroups = math.floor(model.LDS_PER_CU / lds_floor(stage, tile, block_m))
    return min(model.MAX_WAVES_PER_SIMD, workgroups * warps // model.SIMDS_PER_CU)


def stage_grid(stage: int, params: dict, block_m: int, tile: dict) -> tuple[int, int, int]:
    """The launcher's grid of a GEMM launch (moe_triton.native.stage1, stage2)."""
    blocks = est.capacity(params, block_m)
    if stage == 1:
        return (blocks, _cdiv(params["dexpert"], tile["block_n1"]), 1)
    return (blocks, _cdiv(_cdiv(params["dhidden"], tile["block_n2"]), tile["n_tiles2"]), 1)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def stage_bound(
    stage: int,
    params: dict,
    block_m: int,
    tile: dict,
    machine: model.Machine = model.MI355X,
    quantizes: bool = False,
    valu_per_element: float = 0.5,
) -> float | None:
    """A lower bound (us) of the ESTIMATE's share of this GEMM launch (module docstring), or None where
    the LDS floor leaves fewer than 2 waves per SIMD. quantizes: stage 1 quantizes its rows, at
    valu_per_element VALU per element and wave lane (1/2, one convert per pair, keeps it a bound)."""
    top = max_waves(stage, tile, 0 if quantizes else block_m)
    if top < 2:
        return None
    grid = stage_grid(stage, params, block_m, tile)
    constexprs = {"BLOCK_M": block_m}
    mean, variance = est.gemm_programs(grid, constexprs, params, block_m)
    rows = 2 * tile["block_n1"] if stage == 1 else tile["block_n2"]
    k = tile[f"block_k{stage}"]
    cols, k_dim = (2 * params["dexpert"], params["dhidden"]) if stage == 1 else (params["dhidden"], params["dexpert"])
    steps = block_m * cols * k_dim / (rows * block_m * k) * est.capacity(params, block_m) / math.prod(grid)
    warps, stages = tile[f"warps{stage}"], tile[f"stages{stage}"]
    matrix = steps * 2 * rows * block_m * k / (warps * model.FLOPS_PER_SIMD_CYCLE["fp4"])
    memory = steps * machine.step_latency_cycles / max(1, stages - 1)
    nbytes = est.stage_weight_bytes(f"stage{stage}", params)
    in_flight = max(1, stages - 1) * (_fp4_tile_bytes(rows, k) + _fp4_tile_bytes(block_m, k))
    issue = steps * model.VALU_CYCLES * valu_per_element * block_m * k / (warps * 64) if quantizes else 0.0
    work = model.ProgramWork(issue=issue, matrix=matrix, memory=memory, warps=warps)
    times = []
    for waves in range(2, top + 1):
        slots = model.SIMDS_PER_CU * waves / warps
        launch = model.LaunchWork(mean, variance, slots, work, nbytes, in_flight)
        times.append(model.launch_time(machine, launch).seconds * 1e6)
    return min(times)


def tiles_of(table, group: Group, mode: str, stage1: dict, stage2: dict, quant_blocks: int | None = None):
    """The NativeTileConfig of a combination (fields over the shape's table tile)."""
    fields = {**MODES[mode][0], "block_m": group.block_m, "nonkdim": group.nonkdim, "waves_per_eu": group.waves_per_eu}
    return table.replace(**fields, **stage1, **stage2, quant_blocks=quant_blocks or table.quant_blocks)


def describe(cfg) -> str:
    """A short name of a combination: routing launches, block_m, each stage's tile, the options."""
    mode = {2: "r2", 1: "r1", 0: "q0"}[cfg.route_launches]
    s1 = f"{2 * cfg.block_n1}x{cfg.block_k1}w{cfg.warps1}s{cfg.stages1}"
    s2 = f"{cfg.block_n2}x{cfg.block_k2}w{cfg.warps2}s{cfg.stages2}t{cfg.n_tiles2}"
    extra = "".join(
        (
            f"-nk{cfg.nonkdim}" if cfg.nonkdim != 16 else "",
            f"-wpe{cfg.waves_per_eu}" if cfg.waves_per_eu else "",
            f"-q{cfg.quant_blocks}" if cfg.route_launches and cfg.quant_blocks != 16 else "",
        )
    )
    return f"{mode}-m{cfg.block_m}-{s1}-{s2}{extra}"


@dataclass
class Found:
    """A compiled stage tile: its share of the ESTIMATE (us), its compute term (us) and what it was."""

    us: float
    tile: dict
    compute_us: float = 0.0
    bound: float = 0.0

    def rank(self) -> tuple[float, float]:
        """Lowest share first; within 0.05 us the lower compute term (the more headroom under its bytes)."""
        return (round(self.us, 1), self.compute_us)


def branch_and_bound(
    candidates: list[tuple[float, float, dict]],
    evaluate,
    keep: int = KEEP,
    max_compiled: int = MAX_COMPILED,
    seeds: tuple[dict, ...] = (),
):
    """The `keep` best of (bound, order, tile) candidates by evaluate(tile) -> (us, compute us) or None
    (breaks a limit): the seeds' candidates first, then the others in the order's order, until every
    candidate left has a bound that reaches the keep-th best found (it can at most tie), or
    max_compiled were evaluated. Returns (best Found list, evaluated count, exact: whether the bound
    stopped it)."""
    seeded = [c for c in candidates if c[2] in seeds]
    queue = seeded + sorted((c for c in candidates if c[2] not in seeds), key=lambda c: c[1])
    left = [math.inf] * (len(queue) + 1)  # the lowest bound from each place on
    for i in range(len(queue) - 1, -1, -1):
        left[i] = min(queue[i][0], left[i + 1])
    best: list[Found] = []
    for i, (bound, _, tile) in enumerate(queue):
        if len(best) >= keep and left[i] >= best[keep - 1].us:
            return best, i, True
        if i >= max_compiled:
            return best, i, False
        found = evaluate(tile)
        if found is not None:
            best = sorted([*best, Found(found[0], tile, found[1], bound)], key=Found.rank)[:keep]
    return best, len(queue), True


def combine(
    fixed_us: dict[str, float], stage1: dict[str, list[Found]], stage2: list[Found], gaps_us: float, top: int = TOP
) -> list[tuple[float, str, Found, Found]]:
    """Ranked (ESTIMATE us, mode, stage-1 Found, stage-2 Found) of one group: per mode its routing
    launches (fixed_us: their share and the activations), its stage-1 list (by the mode's stage-1
    kernel: "plain" or "quant0") and the stage-2 list, plus its launches' gaps; ties to fewer launches."""
    out = []
    for mode, (_, launches) in MODES.items():
        if mode not in fixed_us:
            continue
        for s1, s2 in product(stage1["quant0" if mode == "quant0" else "plain"], stage2):
            out.append((fixed_us[mode] + launches * gaps_us + s1.us + s2.us, mode, s1, s2))
    return sorted(out, key=lambda item: (round(item[0], 2), MODES[item[1]][1]))[:top]


def pick(ranked: list[dict], top: int = TOP) -> list[dict]:
    """The `top` lowest ESTIMATEs and, after them, the lowest of each launch count not among them."""
    ranked = sorted(ranked, key=lambda item: item["estimate_us"])
    chosen = ranked[:top]
    for launches in sorted({r["launches"] for r in ranked}):
        if not any(r["launches"] == launches for r in chosen):
            chosen.append(next(r for r in ranked if r["launches"] == launches))
    return chosen


# ---------------------------------------------------------------- the compiling part


class Search:
    """Compiles and ESTIMATEs stage tiles of one case (run.launch_case, check.analyse, estimate.estimate)."""

    def __init__(self, case, machine: model.Machine = model.MI355X, max_compiled: int = MAX_COMPILED):
        from moe_triton.tiles_amd import native_tile_config

        self.case, self.params, self.machine, self.max_compiled = case, case.params, machine, max_compiled
        self.table = native_tile_config(case_shape(self.params))
        self.compiled = 0  # launch_case calls that compiled at least one new kernel
        self.compile_seconds: list[tuple[float, int]] = []  # (seconds, new kernels) per such call

    def call(self, cfg):
        """(launches' (report, launch), the ESTIMATE) of one call on cfg, or None if a kernel failed to compile."""
        from bench.gfx950.check import _reports, analyse
        from bench.gfx950.run import launch_case

        t0 = time.perf_counter()
        try:
            launches, _ = launch_case(self.params, "native", cfg)
        except Exception:  # a tile that does not compile is no candidate
            return None
        new = sum(launch.kernel.metadata.hash not in _reports for launch in launches)
        analysed = [(analyse(launch.kernel), launch) for launch in launches]
        if new:
            self.compiled += 1
            self.compile_seconds.append((time.perf_counter() - t0, new))
        return analysed, est.estimate(self.params, analysed, machine=self.machine)

    def launch_us(self, cfg, index: int) -> tuple[float, float] | None:
        """Launch `index`'s share of the ESTIMATE on cfg and its compute term (us), None if it breaks a
        limit or does not compile."""
        found = self.call(cfg)
        if found is None:
            return None
        analysed, estimate = found
        if analysed[index][0].violations:
            return None
        part = estimate.per_launch[index]
        return part.us, part.compute_us

    def fixed_us(self, group: Group) -> dict[str, tuple[float, int]]:
        """Per mode: its routing launches' shares and the activations' (on the table's stage tiles), at
        the lowest of ROUTE_QUANT_BLOCKS where it has routing launches, and that quant_blocks."""
        out = {}
        for mode, (fields, _) in MODES.items():
            for quant_blocks in ROUTE_QUANT_BLOCKS if fields["route_launches"] else (self.table.quant_blocks,):
                cfg = self.table.replace(
                    **fields, block_m=group.block_m, nonkdim=group.nonkdim, quant_blocks=quant_blocks
                )
                found = self.call(cfg)
                if found is None:
                    continue
                analysed, estimate = found
                routing = analysed[: len(analysed) - 2]
                if any(rep.violations for rep, _ in routing):
                    continue
                us = sum(x.us for x in estimate.per_launch[: len(analysed) - 2]) + estimate.activations_us
                if mode not in out or us < out[mode][0]:
                    out[mode] = (us, quant_blocks)
        return out

    def stage_list(self, stage: int, group: Group, mode: str) -> tuple[list[Found], int, int, bool]:
        """(best Found, candidates bounded, compiled, exact) of one stage's list."""
        base = self.table.replace(**MODES[mode][0], block_m=group.block_m, nonkdim=group.nonkdim)
        index = MODES[mode][1] - (3 - stage)  # stage 1 is the second to last launch, stage 2 the last
        quantizes = stage == 1 and base.fused_quant
        candidates = []
        for tile in stage_tiles(stage, self.params):
            if stage == 2 and tile["n_tiles2"] > -(-self.params["dhidden"] // tile["block_n2"]):
                continue
            bound = stage_bound(stage, self.params, group.block_m, tile, self.machine, quantizes)
            if bound is not None:
                order = stage_bound(stage, self.params, group.block_m, tile, self.machine, quantizes, QUANT_VALU)
                candidates.append((bound, order, tile))
        seed = (stage1_fields if stage == 1 else stage2_fields)(self.table)

        def evaluate(tile: dict) -> tuple[float, float] | None:
            return self.launch_us(base.replace(**tile), index)

        best, compiled, exact = branch_and_bound(candidates, evaluate, max_compiled=self.max_compiled, seeds=(seed,))
        if stage == 2:
            best, compiled = chains_of(best, candidates, evaluate, compiled)
        return best, len(candidates), compiled, exact


def chains_of(best: list[Found], candidates: list, evaluate, compiled: int, keep: int = KEEP):
    """The best stage-2 tiles with every other chain length (n_tiles2) among the candidates tried
    too: the bound cannot tell them apart where the bytes bound them all, yet the chain sets how many
    programs there are and so whether the last round is a short one. Returns (best, compiled)."""
    tiles = [c[2] for c in candidates]
    tried = [f.tile for f in best]
    for found in list(best):
        for n in SPACE["stage2"]["n_tiles2"]:
            tile = {**found.tile, "n_tiles2": n}
            if tile in tried or tile not in tiles:
                continue
            tried.append(tile)
            compiled += 1
            result = evaluate(tile)
            if result is not None:
                best = sorted([*best, Found(result[0], tile, result[1])], key=Found.rank)[:keep]
    return best, compiled


def stage1_fields(cfg) -> dict:
    return {name: getattr(cfg, name) for name in SPACE["stage1"]}


def stage2_fields(cfg) -> dict:
    return {name: getattr(cfg, name) for name in SPACE["stage2"]}


def search_case(case, machine: model.Machine = model.MI355X, log=print, max_compiled: int = MAX_COMPILED) -> dict:
    """The ranked combinations of one case and the search's counts."""
    search = Search(case, machine, max_compiled)
    floor2 = model.floor_seconds(machine, est.layer_bytes(case.params), 2) * 1e6
    ranked, lists = [], []
    for group in groups(case.params):
        fixed = search.fixed_us(group)
        stage1 = {}
        for family, mode in (("plain", "route2"), ("quant0", "quant0")):
            found, bounded, compiled, exact = search.stage_list(1, group, mode)
            stage1[family] = found
            lists.append(_list_row(group, 1, family, bounded, compiled, exact))
        found2, bounded, compiled, exact = search.stage_list(2, group, "route2")
        lists.append(_list_row(group, 2, "any", bounded, compiled, exact))
        shares = {mode: us for mode, (us, _) in fixed.items()}
        for total, mode, s1, s2 in combine(shares, stage1, found2, machine.gap_s * 1e6):
            cfg = tiles_of(search.table, group, mode, s1.tile, s2.tile, fixed[mode][1])
            ranked.append(
                dict(
                    name=describe(cfg),
                    tiles=cfg.as_dict(),
                    launches=MODES[mode][1],
                    estimate_us=round(total, 2),
                    floor_ratio=round(total / floor2, 3),
                )
            )
        log(f"{case.label}: group {group} done, {search.compiled} compiling calls so far")
    chosen = pick(ranked)
    # The chosen combinations compiled whole: the ESTIMATE of the call itself (the sum above, checked).
    for row in chosen:
        found = search.call(search.table.replace(**row["tiles"]))
        analysed, estimate = found
        row["estimate_us"] = round(estimate.estimate_us, 2)
        row["floor_ratio"] = round(estimate.estimate_us / floor2, 3)
        row["broken"] = [v for rep, _ in analysed for v in rep.violations]
    return dict(
        shape=case_shape(case.params)._asdict(),
        floor2_us=round(floor2, 2),
        ranked=sorted(chosen, key=lambda r: r["estimate_us"]),
        lists=lists,
        compile_seconds=search.compile_seconds,
    )


def _list_row(group: Group, stage: int, family: str, bounded: int, compiled: int, exact: bool) -> dict:
    """The JSON's record of one stage list: how many tiles the bound kept, how many compiled, whether
    the bound stopped it."""
    return dict(group=group.__dict__, stage=stage, family=family, bounded=bounded, compiled=compiled, exact=exact)


def markdown(result: dict) -> str:
    lines = [
        f"# {result['title']}",
        "",
        result["estimate"],
        "",
        f"Compiles: {result['kernels']} kernels in {result['compile_s']:.0f} s of compiling calls "
        f"({result['seconds_per_kernel']:.2f} s per kernel, the Triton cache cold: {result['cold']}); "
        f"{result['seconds']:.0f} s in all.",
        "",
        "| case | floor (2) us | rank | combination | launches | ESTIMATE us | / floor (2) |",
        "|---|---|---|---|---|---|---|",
    ]
    for label, entry in result["cases"].items():
        for i, row in enumerate(entry["ranked"], 1):
            lines.append(
                f"| {label} | {entry['floor2_us']} | {i} | {row['name']} | {row['launches']} | "
                f"{row['estimate_us']} | {row['floor_ratio']:.2f} |"
            )
    return "\n".join(lines) + "\n"


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gfx950.search", description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=["official"], help="case selectors as for python -m bench")
    p.add_argument("--json", type=Path, help="write the ranking as JSON here")
    p.add_argument("--md", type=Path, help="write the short Markdown here")
    p.add_argument(
        "--max-compiled",
        type=int,
        default=MAX_COMPILED,
        help=f"stage tiles compiled per list at most (default {MAX_COMPILED}; ~2.65 s each on a cold cache)",
    )
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    os.environ["TRITON_INTERPRET"] = "0"  # before the kernels' modules are imported
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    import triton

    from bench.runner.case_args import UsageError, select_cases

    try:
        cases = select_cases(args.cases)
    except UsageError as exc:
        print(f"python -m bench.gfx950.search: error: --cases: {exc}", file=sys.stderr)
        return 2
    if args.max_compiled < 1:
        print("python -m bench.gfx950.search: error: --max-compiled must be at least 1", file=sys.stderr)
        return 2
    cache = os.environ.get("TRITON_CACHE_DIR", "")
    cold = bool(cache) and not any(Path(cache).glob("*")) if cache else False
    t0 = time.perf_counter()
    cases_out = {}
    for case in cases:
        cases_out[case.label] = search_case(case, log=_progress, max_compiled=args.max_compiled)
    seconds = [s for entry in cases_out.values() for s in entry.pop("compile_seconds")]
    kernels = sum(n for _, n in seconds)
    compile_s = sum(s for s, _ in seconds)
    result = dict(
        title=f"gfx950 tile search, triton {triton.__version__}",
        estimate=est.assumptions(),
        space=SPACE,
        keep=KEEP,
        max_compiled=args.max_compiled,
        kernels=kernels,
        compile_s=round(compile_s, 1),
        seconds_per_kernel=round(compile_s / kernels, 3) if kernels else 0.0,
        cold=cold,
        seconds=round(time.perf_counter() - t0, 1),
        cases=cases_out,
    )
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.write_text(text + "\n")
    if args.md:
        args.md.write_text(markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
