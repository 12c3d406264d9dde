"""Tables of the gfx950 check: one row per launched kernel, one per case (the ESTIMATE), on the
console (rich) and as Markdown (for bench/RESULTS.md)."""

from __future__ import annotations

import math

from bench.gfx950.model import LEADERBOARD_BEST_US
from bench.gfx950.variants import TABLE

KERNEL_COLUMNS = (
    ("case", "case"),
    ("variant", "variant"),
    ("kernel", "kernel"),
    ("grid", "grid"),
    ("programs/slots", "programs"),
    ("ESTIMATE us", "launch_us"),
    ("warps/stages", "ws"),
    ("dot tile", "tile"),
    ("MFMAs (static)", "mfma"),
    ("K loop", "loop"),
    ("instr/step", "instr"),
    ("MFMA/step", "mfma_iter"),
    ("VALU/step", "valu"),
    ("VALU/MFMA", "valu_per_mfma"),
    ("VGPR", "vgpr"),
    ("AGPR", "agpr"),
    ("SGPR", "sgpr"),
    ("LDS KiB", "lds"),
    ("scratch", "scratch"),
    ("spills", "spills"),
    ("waves/SIMD", "waves"),
    ("replication", "replication"),
    ("limits", "verdict"),
)
CASE_COLUMNS = (
    ("case", "case"),
    ("variant", "variant"),
    ("shape", "shape"),
    ("path", "note"),
    ("launches", "launches"),
    ("bytes floor us", "bytes_us"),
    ("MFMA us", "mfma_us"),
    ("compute us", "compute_us"),
    ("ESTIMATE us", "estimate_us"),
    ("floor (2) us", "floor2_us"),
    ("ESTIMATE / floor (2)", "floor_ratio"),
    ("aiter MI355X us", "aiter_us"),
)


def _short(name: str) -> str:
    return name.removesuffix("_kernel").removeprefix("moe_")


def kernel_row(case, rep, launch, variant: str = "-", part=None) -> dict:
    """part: the launch's LaunchEstimate (expected programs that do work, resident slots, its share of
    the ESTIMATE without the gap), if any."""
    loop = rep.loop
    return {
        "case": case.label,
        "variant": variant,
        "kernel": _short(launch.function),
        "grid": "x".join(map(str, launch.grid)),
        "programs": f"{part.programs:.0f}/{part.slots:g}" if part else "-",
        "launch_us": f"{part.us:.1f}" if part else "-",
        "ws": f"{rep.num_warps}/{rep.num_stages}",
        "tile": " + ".join(f"{d.m}x{d.n}x{d.k}" for d in rep.dots) or "-",
        "mfma": ", ".join(f"{m.removeprefix('v_mfma_').replace('f32_', '')} x{n}" for m, n in sorted(rep.mfma.items()))
        or "-",
        "loop": "-"
        if not loop
        else ("kernel" if loop.whole_kernel else "loop") + (f"/{loop.steps}" if loop.steps > 1 else ""),
        "instr": loop.instructions if loop else "-",
        "mfma_iter": loop.mfma if loop else "-",
        "valu": loop.valu if loop else "-",
        "valu_per_mfma": f"{loop.valu / loop.mfma:.1f}" if loop else "-",
        "vgpr": rep.res.vgpr,
        "agpr": rep.res.agpr,
        "sgpr": rep.res.sgpr,
        "lds": f"{rep.lds / 1024:.1f}",
        "scratch": rep.res.scratch,
        "spills": rep.res.vgpr_spill + rep.res.sgpr_spill,
        "waves": f"{rep.waves:g}",
        "replication": f"x{rep.replication:g}" if rep.dots else "-",
        "verdict": "FAIL" if rep.violations else "ok",
        "violations": rep.violations,
        "kernel_name": launch.function,
    }


def case_row(case, note: str, est, aiter_us: float | None, variant: str = "-", broken: bool = False) -> dict:
    return {
        "case": case.label,
        "variant": variant,
        "shape": case.shape,
        "note": note,
        "launches": est.launches,
        "bytes_us": f"{est.bytes_floor_us:.1f}",
        "mfma_us": f"{est.mfma_us:.1f}",
        "compute_us": f"{est.compute_us:.1f}",
        "estimate_us": f"{est.estimate_us:.1f}",
        "floor2_us": f"{est.floor2_us:.1f}",
        "floor_ratio": f"{est.floor_ratio:.2f}",
        "aiter_us": f"{aiter_us:.1f}" if aiter_us else "-",
        "_estimate": est.estimate_us,
        "_floor_ratio": est.floor_ratio,
        "_aiter": aiter_us,
        "_broken": broken,
        "error": "",
    }


def failed_case_row(case, error: str, variant: str = "-") -> dict:
    return {"case": case.label, "variant": variant, "shape": case.shape, "note": f"FAILED: {error}", "error": error}


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def summary(case_rows) -> str:
    """Geomeans over the cases that have an aiter time (the benchmarks), on the table's tiles and on
    each case's lowest-ESTIMATE variant within the limits, beside aiter and the leaderboard's best."""
    timed = [r for r in case_rows if r.get("_aiter") and r.get("_estimate")]
    if not timed:
        return f"leaderboard best: {LEADERBOARD_BEST_US} us geomean over its 7 benchmarks"
    best: dict[str, dict] = {}
    for r in timed:
        if r["_broken"] and r["variant"] != TABLE:
            continue
        if r["case"] not in best or r["_estimate"] < best[r["case"]]["_estimate"]:
            best[r["case"]] = r
    table = [r for r in timed if r["variant"] in (TABLE, "-")]
    est, low = geomean(r["_estimate"] for r in table), geomean(r["_estimate"] for r in best.values())
    ait = geomean(r["_aiter"] for r in best.values())
    ratios = ", ".join(f"{label} {r['_floor_ratio']:.2f}" for label, r in best.items())
    return (
        f"geomean over {len(best)} benchmark cases: ESTIMATE {est:.1f} us on the table's tiles, {low:.1f} us on "
        f"each case's lowest-ESTIMATE variant within the limits (static, not measured), aiter {ait:.1f} us, "
        f"leaderboard best {LEADERBOARD_BEST_US} us; lowest variant's ESTIMATE / floor (2): {ratios}"
    )


def _columns(columns, rows):
    """The kernel table's columns less the variant and estimate ones where no row has them (aiter_compile's)."""
    unset = [key for key in ("variant", "programs", "launch_us") if all(r.get(key, "-") == "-" for r in rows)]
    return tuple(c for c in columns if c[1] not in unset)


def _cell(row: dict, key: str) -> str:
    return str(row.get(key, ""))


# Left out in this order when a table does not fit the console (the Markdown keeps every column).
KERNEL_DROP_ORDER = (
    "replication",
    "agpr",
    "sgpr",
    "scratch",
    "programs",
    "launch_us",
    "instr",
    "valu",
    "ws",
    "grid",
    "loop",
    "tile",
    "variant",
    "lds",
    "mfma",
)
CASE_DROP_ORDER = ("launches", "mfma_us", "compute_us", "bytes_us", "floor2_us", "note", "shape")


def _console():
    """The terminal's width (or COLUMNS); 100 columns where stdout is a file or a pipe (the test
    command's log): the Markdown of --md has every column."""
    import os

    from rich.console import Console

    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=100)
    return console


def _table(title: str, columns, rows, left: tuple, failed):
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True)
    for head, key in columns:
        t.add_column(head, justify="left" if key in left else "right", no_wrap=True)
    for r in rows:
        t.add_row(*(_cell(r, k) for _, k in columns), style="red" if failed(r) else None)
    return t


def _print_fitted(console, title: str, columns, rows, left: tuple, failed, drop_order) -> None:
    """The table with columns left out (drop_order) until it fits the console, named in a caption."""
    from bench.runner.report import fit_columns

    cols, dropped = fit_columns(console, list(columns), lambda c: _table(title, c, rows, left, failed), drop_order)
    console.print(_table(title, cols, rows, left, failed))
    if dropped:  # a line of its own: a caption would wrap at the table's width
        console.print(f"not shown at {console.width} columns: {', '.join(dropped)} (--md FILE writes them)")


def print_kernel_table(title: str, kernel_rows, console=None) -> None:
    _print_fitted(
        console or _console(),
        f"{title}: per launch",
        _columns(KERNEL_COLUMNS, kernel_rows),
        kernel_rows,
        ("case", "variant", "kernel", "mfma"),
        lambda r: r["violations"],
        KERNEL_DROP_ORDER,
    )


def print_tables(title: str, kernel_rows, case_rows, footnote: str = "", console=None, launches: str = "all") -> None:
    """launches: all, or failed (the per-launch table holds only the launches that break the
    limits, a line saying so when none does)."""
    console = console or _console()
    shown = kernel_rows if launches == "all" else [r for r in kernel_rows if r["violations"]]
    if shown:
        print_kernel_table(title, shown, console)
    else:
        console.print(f"per launch: all {len(kernel_rows)} launches within the limits (--launches all shows them)")
    _print_fitted(
        console,
        f"{title}: MI355X ESTIMATE per case (static model, not a measurement)",
        CASE_COLUMNS,
        case_rows,
        ("case", "variant", "shape", "note"),
        lambda r: r.get("error"),
        CASE_DROP_ORDER,
    )
    if footnote:
        console.print(footnote)
    console.print(summary(case_rows))
    for line in violation_lines(kernel_rows, case_rows):
        console.print(f"[red]{line}[/red]")


def _where(row: dict) -> str:
    """case/variant (the case alone where the row names no variant)."""
    return row["case"] if row.get("variant", "-") == "-" else f"{row['case']}/{row['variant']}"


def violation_lines(kernel_rows, case_rows) -> list[str]:
    """One line per broken limit (the same kernel in several cases or variants: once, with them)."""
    seen: dict[tuple, list[str]] = {}
    for r in kernel_rows:
        for v in r["violations"]:
            seen.setdefault((r["kernel_name"], v), []).append(_where(r))
    lines = [f"{name}: {v} ({', '.join(dict.fromkeys(where))})" for (name, v), where in seen.items()]
    return lines + [f"{_where(r)} ({r['shape']}): {r['error']}" for r in case_rows if r.get("error")]


def _md_table(columns, rows) -> list[str]:
    lines = ["| " + " | ".join(h for h, _ in columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    lines += ["| " + " | ".join(_cell(r, k).replace("|", "/") for _, k in columns) + " |" for r in rows]
    return lines


def markdown_kernels(title: str, kernel_rows) -> str:
    lines = [f"### {title}", "", "Per launch (K-loop counts per K step of one wave):", ""]
    return "\n".join(lines + _md_table(_columns(KERNEL_COLUMNS, kernel_rows), kernel_rows) + [""])


def markdown(title: str, kernel_rows, case_rows, footnote: str = "") -> str:
    lines = [markdown_kernels(title, kernel_rows), "MI355X ESTIMATE per case (static model, not a measurement):", ""]
    lines += _md_table(CASE_COLUMNS, case_rows)
    lines += [part for line in footnote.splitlines() for part in ("", line)] if footnote else []
    lines += ["", summary(case_rows), ""]
    broken = violation_lines(kernel_rows, case_rows)
    if broken:
        lines += ["Broken limits:", ""] + [f"- {line}" for line in broken] + [""]
    return "\n".join(lines)
