"""`python -m bench.h200.ab`: a shape's static tiles against the same tiles with some fields changed, on an
NVIDIA GPU, in the leaderboard's timing: per official shape and candidate the median us a call over --reps
leaderboard-style inputs (the same inputs for every candidate, each call after the flush that fits the card,
every output checked against reference.ref_kernel), in two passes, the second in the reverse order so that
an order effect shows as a difference between them. A table row changes only after such a run.

  python -m bench.h200.ab --shapes I512-E32+1-k8+1-bs512 I2048-E32+1-k8+1-bs512 --variant overlap=1 --reps 8

Each --variant NAME=FIELD=V[,FIELD=V...] (or FIELD=V[,...], named after itself) is the static tiles
(tiles_nvidia.static_tiles: GLUON_TUNED where it names the shape) with those flat fields (docs/tiles.md); a
variant the path refuses for a shape, equal to its static tiles, or that does not run on this GPU (a ring
too deep for its shared memory, or kernels that do not finish within --try-limit-s: each candidate is first
tried in a process that can be killed, bench/h200/trial.py) is left out of that shape with a line saying so.
--neighbours adds, per shape, the static tiles' one-field neighbours (neighbours(): each ring one slot
shallower and deeper, stage 2's tiles a program halved and doubled, the overlap and the routing launches
toggled, the routing launches' quantizing programs 4 times longer, a Gluon stage's fold toggled where there are
tail tiles, a register cap lifted), a sweep for one warm machine:

  python -m bench.h200.ab --shapes bs16 bs128 --neighbours --reps 8

Writes ab.json and ab.md under --out ($OUT by default) after every shape. `python -m bench.h200.occupancy` takes the
same --shapes, --variant and --neighbours and screens the candidates on the CPU first (compiled for sm_90).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def parse_variant(text: str) -> tuple[str, dict[str, int]]:
    """(name, field changes) of one --variant; a ValueError naming what is wrong."""
    from moe_triton.tiles import TileConfig

    head, _, rest = text.partition("=")
    named = head not in TileConfig.field_names() and "=" in rest
    name, spec = (head, rest) if named else ("", text)
    changes = {}
    for item in spec.split(","):
        field, sep, value = item.partition("=")
        if not sep or field not in TileConfig.field_names():
            raise ValueError(f"--variant {text}: {item!r} is not FIELD=VALUE of a tiles field (docs/tiles.md)")
        try:
            changes[field] = int(value)
        except ValueError:
            raise ValueError(f"--variant {text}: {field} takes an integer, not {value!r}") from None
    return name or spec, changes


def neighbours(tiles) -> list[tuple[str, dict[str, int]]]:
    """tiles' one-field neighbours as (name, changes): the ring depths one less (down to 2) and one more,
    n_tiles2 halved and doubled, overlap and route_launches toggled, the routing launches' quantizing programs
    4 times longer, a Gluon stage's fold toggled where there are tail tiles, a register cap lifted. Whether the
    path takes each is candidates()'s to say."""
    flat = tiles.as_dict()
    changes = []
    for field in ("stages1", "stages2"):
        changes += [{field: flat[field] - 1}] if flat[field] > 2 else []
        changes += [{field: flat[field] + 1}]
    changes += [{"n_tiles2": flat["n_tiles2"] // 2}] if flat["n_tiles2"] > 1 else []
    changes += [{"n_tiles2": flat["n_tiles2"] * 2}, {"overlap": 1 - flat["overlap"]}]
    changes += [{"route_launches": 3 - flat["route_launches"]}, {"quant_blocks": flat["quant_blocks"] * 4}]
    changes += [{f"fold{s}": 1 - flat[f"fold{s}"]} for s in "12" if flat["tail_m"] and flat[f"gluon{s}"]]
    changes += [{field: 0} for field in ("max_regs1", "max_regs2") if flat[field]]
    return [(",".join(f"{k}={v}" for k, v in change.items()), change) for change in changes]


def checked_variant(shape, static, changes: dict, device):
    """static with the field changes, or the path's ValueError where it cannot run them on shape and device."""
    from moe_triton.decode import PATH as DECODE
    from moe_triton.fused_moe import checked_blocks

    tiles = static.replace(**changes)
    checked_blocks(DECODE, shape, tiles, device)
    return tiles


def candidates(shape, variants: list[tuple[str, dict]], with_neighbours: bool = False) -> tuple[dict, list[str]]:
    """The static tiles and each variant (and, with_neighbours, each of the static tiles' neighbours) that
    differs from them and the path accepts for shape (name -> tiles), and a line for each one left out
    (refused, or the static tiles themselves); a neighbour that a variant already names is timed once."""
    import torch

    from moe_triton.tiles_nvidia import static_tiles

    static = static_tiles(shape, gluon=True)
    out, skipped = {"static": static}, []
    named = [name for name, _ in variants]
    variants = variants + [n for n in neighbours(static) if with_neighbours and n[0] not in named]
    for name, changes in variants:
        try:
            tiles = checked_variant(shape, static, changes, torch.device("cuda"))
        except ValueError as error:
            skipped.append(f"{name}: {error}")
            continue
        if tiles == static:
            skipped.append(f"{name}: the static tiles themselves")
        else:
            out[name] = tiles
    return out, skipped


def candidate_parser(prog: str, doc: str):
    """The command line of a tool that takes a shape's candidates as this one does: --shapes, --variant and
    --neighbours (bench.h200.occupancy screens the same candidates on the CPU)."""
    from bench.runner.preflight import doc_parser

    parser = doc_parser(prog, doc)
    parser.add_argument("--shapes", nargs="+", required=True, help="name substrings or indices of official shapes")
    parser.add_argument("--variant", action="append", default=[], help="[NAME=]FIELD=V[,FIELD=V...]")
    parser.add_argument("--neighbours", action="store_true", help="also the static tiles' one-field neighbours")
    return parser


def chosen_candidates(parser, args) -> tuple[list, list] | None:
    """(variants, official cases) of candidate_parser's arguments; None after the parser's one-line error."""
    from bench.h200.harness import official_cases

    try:
        variants = [parse_variant(v) for v in args.variant]
    except ValueError as error:
        parser.fail(str(error))
        return None
    cases = official_cases(args.shapes)
    if not cases:
        parser.fail(f"--shapes {' '.join(args.shapes)}: no official shape matches")
        return None
    return variants, cases


def launchable(case: dict, tiles: dict, limit_s: float) -> tuple[dict, list[str]]:
    """The candidates (name -> tiles) that run on this GPU, each tried once in a process that can be killed
    (bench.h200.trial), and a line for each that does not: refused at its launch (a ring too deep for the GPU's
    shared memory), failed, or not finished within limit_s."""
    from bench.h200.trial import tried

    return tried(case, tiles, limit_s)


def table(results: dict) -> list[str]:
    """The times of each shape's candidates, then every candidate's whole tiles: a variant changes only the
    fields it names, so what it kept of the static row shows there."""
    lines = ["| shape | candidate | pass 1 us | pass 2 us | worst |", "|---|---|---:|---:|---:|"]
    for shape, by_name in results.items():
        for name, (first, second) in by_name["passes"].items():
            worst = max(first["worst"], second["worst"])
            lines.append(f"| {shape} | {name} | {first['median_us']:.1f} | {second['median_us']:.1f} | {worst:.3f} |")
        lines += [f"| {shape} | {line} | | | |" for line in by_name["left_out"]]
    lines += ["", "| shape | candidate | tiles |", "|---|---|---|"]
    for shape, by_name in results.items():
        lines += [f"| {shape} | {name} | `{tiles}` |" for name, tiles in by_name["tiles"].items()]
    return lines


def main(argv: list[str] | None = None) -> int:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.runner.case_args import UsageError
    from bench.runner.preflight import USAGE_STATUS, check_out_dir, positive_float, positive_int

    parser = candidate_parser("python -m bench.h200.ab", __doc__)
    parser.add_argument("--reps", type=positive_int, default=8, help="timed inputs per candidate and pass")
    parser.add_argument(
        "--try-limit-s", type=positive_float, default=120.0, help="a candidate's first call, compiles included"
    )
    parser.add_argument("--out", default=os.environ.get("OUT", str(ROOT / "bench" / "out" / "ab")))
    args = parser.parse_args(argv)

    if not (args.variant or args.neighbours):
        return parser.fail("--variant or --neighbours: nothing to set against the static tiles")
    chosen = chosen_candidates(parser, args)
    if chosen is None:
        return USAGE_STATUS
    variants, cases = chosen
    import torch

    if not torch.cuda.is_available() or torch.version.hip is not None:
        return parser.fail("no CUDA GPU here; it times the decode path's tiles on an NVIDIA GPU")
    try:
        check_out_dir(args.out)
    except UsageError as error:
        return parser.fail(str(error))

    from bench.h200.harness import fitting_device, time_candidates, write_results
    from bench.runner.case_args import case_shape

    started, device, results = time.perf_counter(), fitting_device(), {}
    for name, case in cases:
        tiles, left_out = candidates(case_shape(case), variants, args.neighbours)
        tiles, refused = launchable(case, tiles, args.try_limit_s)
        left_out += refused
        first = time_candidates(case, tiles, args.reps, device)
        second = time_candidates(case, dict(reversed(tiles.items())), args.reps, device)
        passes = {label: (first[label], second[label]) for label in tiles}
        results[name] = {"tiles": {k: repr(t) for k, t in tiles.items()}, "passes": passes, "left_out": left_out}
        write_results(Path(args.out), "ab", results, table(results), started, argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
