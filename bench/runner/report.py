"""Rows per (backend, case), the geomean summary, and their outputs: rich tables on the console,
<mode>.json, <mode>.csv, <mode>.md (Markdown tables) and <mode>.png (time per case against the
roofline floor and the aiter MI355X time, one bar per backend)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from bench.roofline import Ceilings, floor_ns
from bench.runner.case_args import Case

TIMED_MODES = ("benchmark", "leaderboard")
SUMMARY_MODES = (*TIMED_MODES, "host")  # the modes with a geomean table
# aiter's fused_moe on an MI355X, microseconds, aligned with problem.cases.BENCHMARKS (SPEC 4).
AITER_MI355X_US = [152.7, 239.0, 336.5, 106.2, 141.1, 225.0, 380.4]


def aiter_times() -> dict[tuple, float]:
    """Shape (without seed) -> aiter's MI355X time in us, from the task's list."""
    from bench.runner.case_args import SHAPE_KEYS
    from problem.cases import BENCHMARKS

    return {tuple(int(c[k]) for k in SHAPE_KEYS): float(t) for c, t in zip(BENCHMARKS, AITER_MI355X_US, strict=True)}


def _us(ns):
    return None if ns is None else float(ns) / 1e3


def build_row(
    mode: str, backend: str, case: Case, result: dict, ceilings: Ceilings | None, aiter: dict[tuple, float]
) -> dict:
    st = result.get("stats") or {}
    tr = result.get("traffic") or {}
    row = {
        "mode": mode,
        "backend": backend,
        "case": case.label,
        "shape": case.shape,
        **{
            k: case.params[k]
            for k in ("dhidden", "dexpert", "nroutedexperts", "nexpertspertoken", "nsharedexperts", "bs")
        },
        "seed": case.params["seed"],
        "status": result.get("status", "error"),
        "message": result.get("message", ""),
        "traceback": result.get("traceback", ""),
        "refused": result.get("refused", False),
        "checked": result.get("checked", 0),
        "runs": st.get("runs"),
        "mean_us": _us(st.get("mean")),
        "std_us": _us(st.get("std")),
        "err_us": _us(st.get("err")),
        "best_us": _us(st.get("best")),
        "worst_us": _us(st.get("worst")),
        "call_us": _us(result.get("call_ns")),
        "host_us": _us(result.get("host_ns")),
        "first_call_us": None if result.get("first_call_s") is None else result["first_call_s"] * 1e6,
        "choice": result.get("choice"),
        "experts_hit": tr.get("experts_hit"),
        "mbytes": tr["bytes"] / 1e6 if tr else None,
        "gflop": tr["flops"] / 1e9 if tr else None,
        "floor_us": None,
        "bound": None,
        "x_floor": None,
        "aiter_us": aiter.get(case.shape_key()),
        "x_aiter": None,
        "last_seed": (result.get("seeds") or [None])[-1],
    }
    if tr and ceilings is not None:
        f_ns, bound = floor_ns(tr["bytes"], tr["flops"], ceilings)
        row["floor_us"], row["bound"] = f_ns / 1e3, bound
    t = row["mean_us"] if mode in TIMED_MODES else None
    if t is not None and row["floor_us"]:
        row["x_floor"] = t / row["floor_us"]
    if t is not None and row["aiter_us"]:
        row["x_aiter"] = t / row["aiter_us"]
    if row["status"] != "pass":
        row["x_floor"] = row["x_aiter"] = None
    return row


def geomean(values: Iterable[float]) -> float | None:
    vals = [float(v) for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def summarize(rows: Sequence[dict], backends: Sequence[str]) -> list[dict]:
    """Per backend: passed / total and geomeans over its passed cases (complete = every case passed)."""
    out = []
    for b in backends:
        mine = [r for r in rows if r["backend"] == b]
        ok = [r for r in mine if r["status"] == "pass"]
        out.append(
            {
                "backend": b,
                "passed": len(ok),
                "total": len(mine),
                "complete": len(ok) == len(mine) and bool(mine),
                "geomean_us": geomean(r["mean_us"] for r in ok),
                "geomean_floor_us": geomean(r["floor_us"] for r in ok),
                "geomean_x_floor": geomean(r["x_floor"] for r in ok),
                "geomean_aiter_us": geomean(r["aiter_us"] for r in ok if r["x_aiter"] is not None),
                "geomean_x_aiter": geomean(r["x_aiter"] for r in ok),
                "geomean_call_us": geomean(r["call_us"] for r in ok),
                "geomean_host_us": geomean(r["host_us"] for r in ok),
            }
        )
    return out


# ---------------------------------------------------------------- formatting

TIME_KEYS = ("mean_us", "std_us", "best_us", "floor_us", "aiter_us", "call_us", "host_us", "worst_us", "first_call_us")
TEXT_KEYS = ("case", "shape", "backend", "status", "message", "choice")
# Left out in this order when a table does not fit the terminal (the files keep every column).
DROP_ORDER = (
    "aiter_us",
    "std_us",
    "floor_us",
    "experts_hit",
    "runs",
    "best_us",
    "shape",
    "first_call_us",
    "x_aiter",
    "choice",
)
SUMMARY_DROP_ORDER = ("geomean_aiter_us", "geomean_floor_us", "geomean_x_aiter")
MIN_MESSAGE_WIDTH = 16


def _f(v, fmt="{:.1f}", none="-"):
    return none if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def time_text(us) -> str:
    """A time in microseconds with a unit that keeps it short: '850 ns', '305.4 us', '12.30 ms', '9.41 s'."""
    if us is None or (isinstance(us, float) and math.isnan(us)):
        return "-"
    us = float(us)
    if us < 1:
        return f"{us * 1e3:.0f} ns"
    if us < 1e3:
        return f"{us:.1f} us"
    if us < 1e6:
        return f"{us / 1e3:.2f} ms"
    return f"{us / 1e6:.2f} s"


def _status_cell(r: dict) -> str:
    return {"pass": "pass", "fail": "FAIL", "error": "ERROR", "skipped": "skipped"}.get(r["status"], r["status"])


def _floor_heads(cols: list[tuple[str, str]], cpu: bool) -> list[tuple[str, str]]:
    """On a CPU the floors are the CPU's roofline (the interpreter runs ~10^4 times above it): the
    headers say so."""
    return [(f"{h.removesuffix('floor')}CPU floor" if cpu and h.endswith("floor") else h, k) for h, k in cols]


def table_columns(mode: str, cpu: bool = False) -> list[tuple[str, str]]:
    """(header, key) of the per-case table; cpu: the floors are a CPU's."""
    return _floor_heads(_table_columns(mode), cpu)


def _table_columns(mode: str) -> list[tuple[str, str]]:
    if mode == "host":
        return [
            ("case", "case"),
            ("shape", "shape"),
            ("backend", "backend"),
            ("status", "status"),
            ("host/call", "host_us"),
            ("mean", "mean_us"),
            ("best", "best_us"),
            ("worst", "worst_us"),
            ("runs", "runs"),
            ("message", "message"),
        ]
    if mode in TIMED_MODES:
        return [
            ("case", "case"),
            ("shape", "shape"),
            ("backend", "backend"),
            ("status", "status"),
            ("mean", "mean_us"),
            ("std", "std_us"),
            ("best", "best_us"),
            ("runs", "runs"),
            ("floor", "floor_us"),
            ("x floor", "x_floor"),
            ("aiter MI355X", "aiter_us"),
            ("x aiter", "x_aiter"),
            ("first call", "first_call_us"),
            ("choice", "choice"),
        ]
    return [
        ("case", "case"),
        ("shape", "shape"),
        ("backend", "backend"),
        ("status", "status"),
        ("call", "call_us"),
        ("choice", "choice"),
        ("experts hit", "experts_hit"),
        ("floor", "floor_us"),
        ("message", "message"),
    ]


def first_line(text) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0] if lines else ""


def _cell(r: dict, key: str) -> str:
    v = r.get(key)
    if key == "status":
        return _status_cell(r)
    if key in TIME_KEYS:
        return time_text(v)
    if key in ("x_floor", "x_aiter"):
        return _f(v, "{:.2f}x")
    if key in ("runs", "experts_hit"):
        return _f(v, "{:.0f}")
    if key == "message":
        return first_line(v)
    if isinstance(v, float):
        return _f(v)
    return "-" if v is None else str(v)


def summary_columns(cpu: bool = False, mode: str = "benchmark") -> list[tuple[str, str]]:
    if mode == "host":
        return [("backend", "backend"), ("passed", "passed"), ("geomean host/call", "geomean_host_us")]
    return _floor_heads(_summary_columns(), cpu)


def _summary_columns() -> list[tuple[str, str]]:
    return [
        ("backend", "backend"),
        ("passed", "passed"),
        ("geomean", "geomean_us"),
        ("floor", "geomean_floor_us"),
        ("x floor", "geomean_x_floor"),
        ("aiter MI355X", "geomean_aiter_us"),
        ("x aiter", "geomean_x_aiter"),
    ]


def _summary_cell(s: dict, key: str) -> str:
    if key == "passed":
        return f"{s['passed']}/{s['total']}"
    if key.startswith("geomean_x"):
        return _f(s[key], "{:.2f}x")
    if key == "backend":
        return s[key]
    return time_text(s[key])


def _case_table(rows: Sequence[dict], cols: list[tuple[str, str]], title: str, message_width: int | None = None):
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True)
    for head, key in cols:
        t.add_column(
            head,
            justify="left" if key in TEXT_KEYS else "right",
            no_wrap=True,
            overflow="ellipsis",
            max_width=message_width if key == "message" else None,
        )
    prev_case = None
    grouped = len({r["backend"] for r in rows}) > 1
    for r in rows:
        if grouped and prev_case is not None and r["case"] != prev_case:
            t.add_section()
        prev_case = r["case"]
        t.add_row(*[_cell(r, k) for _, k in cols], style=None if r["status"] == "pass" else "red")
    return t


def fit_columns(console, cols: list[tuple[str, str]], build, drop_order: Sequence[str]):
    """Leave columns out in drop_order until build(columns) fits the console: (columns, headers left out)."""
    from rich.measure import Measurement

    unbounded = console.options.update(max_width=10_000)
    dropped: list[str] = []
    for key in drop_order:
        if Measurement.get(console, unbounded, build(cols)).maximum <= console.width:
            break
        dropped += [h for h, k in cols if k == key]
        cols = [c for c in cols if c[1] != key]
    return cols, dropped


def fit_case_table(console, rows: Sequence[dict], mode: str, title: str, cpu: bool = False):
    """The per-case table at the console's width: one backend goes into the title, then columns
    are left out in DROP_ORDER until it fits, and the message column takes what is left (cut
    with an ellipsis; the full message is printed below). Returns (table, headers left out)."""
    from rich.measure import Measurement

    cols = table_columns(mode, cpu)
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    if len(backends) == 1:
        cols = [c for c in cols if c[1] != "backend"]
        title = f"{title}, {backends[0]}"
    has_message = any(k == "message" for _, k in cols)
    cols, dropped = fit_columns(
        console, [c for c in cols if c[1] != "message"], lambda c: _case_table(rows, c, title), DROP_ORDER
    )
    if has_message and any(first_line(r.get("message")) for r in rows):
        used = Measurement.get(console, console.options.update(max_width=10_000), _case_table(rows, cols, title))
        room = console.width - used.maximum - 3  # a column's padding and separator
        if room >= MIN_MESSAGE_WIDTH:
            return _case_table(rows, cols + [("message", "message")], title, room), dropped
        dropped.append("message")
    return _case_table(rows, cols, title), dropped


def _summary_table(summary: Sequence[dict], cols: list[tuple[str, str]]):
    from rich import box
    from rich.table import Table

    t = Table(title="geomean over passed cases", box=box.SIMPLE_HEAD, show_edge=False, collapse_padding=True)
    for head, key in cols:
        t.add_column(head, justify="left" if key == "backend" else "right", no_wrap=True)
    for row in summary:
        t.add_row(*[_summary_cell(row, k) for _, k in cols])
    return t


def print_tables(
    console,
    rows: Sequence[dict],
    summary: Sequence[dict],
    mode: str,
    title: str = "",
    verbose: bool = False,
    cpu: bool = False,
) -> None:
    """The case table, the summary (timed modes) and each failure's message; the traceback too,
    except for inputs refused by design, whose message says it all (verbose: every traceback).
    cpu: the floors are the CPU's roofline."""
    from rich.text import Text

    table, dropped = fit_case_table(console, rows, mode, title or f"{mode} results", cpu)
    if dropped:
        table.caption = f"not shown at {console.width} columns: {', '.join(dropped)} (see --out's .md and .csv)"
    console.print(table)
    if mode in SUMMARY_MODES:
        cols, dropped = fit_columns(
            console, summary_columns(cpu, mode), lambda c: _summary_table(summary, c), SUMMARY_DROP_ORDER
        )
        table = _summary_table(summary, cols)
        if dropped:
            table.caption = f"not shown: {', '.join(dropped)}"
        console.print(table)
    for r in rows:
        if r["status"] in ("fail", "error") and r["message"]:
            head = f"{r['backend']} {r['case']} ({r['shape']}) {_status_cell(r)}: "
            console.print(Text(head, style="red") + Text(r["message"].strip()))
            if r.get("traceback") and (verbose or not r.get("refused")):
                console.print(Text(r["traceback"], style="dim"))


def markdown(rows: Sequence[dict], summary: Sequence[dict], mode: str, meta: dict) -> str:
    cpu = meta.get("device_kind") == "cpu"
    cols = table_columns(mode, cpu)
    lines = [f"### {mode}: {meta.get('device', '')}", ""]
    info = [f"{k}: {meta[k]}" for k in ("date", "git", "flush", "ceilings_text", "seed") if meta.get(k)]
    if info:
        lines += ["; ".join(info), ""]
    lines.append("| " + " | ".join(h for h, _ in cols) + " |")
    lines.append("|" + "|".join("---" if k in TEXT_KEYS else "---:" for _, k in cols) + "|")
    for r in rows:
        lines.append("| " + " | ".join(_cell(r, k).replace("|", "/") for _, k in cols) + " |")
    if mode in SUMMARY_MODES:
        heads = summary_columns(cpu, mode)
        lines += ["", "| " + " | ".join(h for h, _ in heads) + " |", "|---|" + "---:|" * (len(heads) - 1)]
        for s in summary:
            lines.append("| " + " | ".join(_summary_cell(s, k) for _, k in heads) + " |")
    return "\n".join(lines) + "\n"


LABEL_ROOM = 0.2  # share of the log-scale axis height above the tallest bar, for its value label


def chart_figure(rows: Sequence[dict], mode: str, title: str):
    """Grouped bars (one per backend) of the time per case, log scale, with the floor (black)
    and the aiter MI355X time (red, dashed) marked over each group; the legend sits below the
    axes, so the bars take the figure's width. None when nothing was timed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = "mean_us" if mode in TIMED_MODES else "host_us" if mode == "host" else "call_us"
    cases = list(dict.fromkeys(r["case"] for r in rows))
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    if not cases or not any(r.get(key) for r in rows):
        return None
    by = {(r["case"], r["backend"]): r for r in rows}
    fig, ax = plt.subplots(figsize=(max(7.0, 1.1 * len(cases) + 3), 5.0), layout="constrained")
    width = 0.8 / max(1, len(backends))
    for j, b in enumerate(backends):
        _backend_bars(ax, rows, cases, b, key, offset=width * (j + 0.5) - 0.4, width=width)
    _case_marks(ax, [[by[(c, b)] for b in backends if (c, b) in by] for c in cases], mode)
    _chart_axes(ax, rows, cases, key, mode, title)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(2, len(labels)), fontsize=8, frameon=False)
    return fig


def _backend_bars(ax, rows: Sequence[dict], cases: list, backend: str, key: str, offset: float, width: float) -> None:
    """One backend's bars, each labelled with its time; the legend entry carries the geomean."""
    by_case = {r["case"]: r for r in rows if r["backend"] == backend}
    xs, ys = [], []
    for i, c in enumerate(cases):
        r = by_case.get(c)
        if r and r.get(key) and r["status"] == "pass":
            xs.append(i + offset)
            ys.append(r[key])
    mine = [r for r in rows if r["backend"] == backend and r["status"] == "pass"]
    g_t, g_x = geomean(r.get(key) for r in mine), geomean(r.get("floor_us") for r in mine)
    label = backend
    if g_t and len(mine) == len(cases):
        label += f" (geomean {time_text(g_t)}" + (f", {g_t / g_x:.1f}x floor)" if g_x else ")")
    bars = ax.bar(xs, ys, width=width * 0.95, label=label)
    for x, y in zip(xs, ys, strict=True):
        ax.annotate(
            time_text(y),
            (x, y),
            ha="center",
            va="bottom",
            fontsize=7,
            rotation=90,
            xytext=(0, 2),
            textcoords="offset points",
            color=bars.patches[0].get_facecolor(),
        )


def _case_marks(ax, case_rows: list[list[dict]], mode: str) -> None:
    """Over each case's group: the mean roofline floor (black) and aiter's MI355X time (red, dashed)."""
    floor_label = aiter_label = True
    for i, mine in enumerate(case_rows):
        floors = [r["floor_us"] for r in mine if r.get("floor_us")]
        if floors:
            label = "roofline floor (this device)" if floor_label else None
            ax.hlines(sum(floors) / len(floors), i - 0.45, i + 0.45, colors="black", linewidth=2, label=label)
            floor_label = False
        aiter = next((r["aiter_us"] for r in mine if r.get("aiter_us")), None)
        if aiter and mode in TIMED_MODES:
            label = "aiter on MI355X" if aiter_label else None
            ax.hlines(aiter, i - 0.45, i + 0.45, colors="red", linestyles="dashed", linewidth=1.5, label=label)
            aiter_label = False


def _chart_axes(ax, rows: Sequence[dict], cases: list, key: str, mode: str, title: str) -> None:
    """Case ticks, a log time axis with room above the tallest bar for its label, the title and grid."""
    shapes = {r["case"]: r["shape"] for r in rows}
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([f"{c}\n{shapes[c]}" for c in cases], fontsize=7, rotation=20, ha="right")
    ax.set_xlim(-0.6, len(cases) - 0.4)
    ax.set_yscale("log")
    values = [r[key] for r in rows if r.get(key)] + [r["floor_us"] for r in rows if r.get("floor_us")]
    values += [r["aiter_us"] for r in rows if r.get("aiter_us") and mode in TIMED_MODES]
    low, high = math.log10(min(values) / 2), math.log10(max(values))
    ax.set_ylim(10**low, 10 ** (high + (high - low) * LABEL_ROOM / (1 - LABEL_ROOM)))
    ax.set_ylabel(
        "time per call (us)"
        if mode in TIMED_MODES
        else "host time per call (us)"
        if mode == "host"
        else "first call (us)"
    )
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", which="both", alpha=0.3)


def chart(rows: Sequence[dict], mode: str, path: Path, title: str) -> Path | None:
    """chart_figure saved as a PNG at `path`."""
    import matplotlib.pyplot as plt

    fig = chart_figure(rows, mode, title)
    if fig is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _clean(v):
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    return v


def write_outputs(
    out_dir: Path, mode: str, rows: Sequence[dict], summary: Sequence[dict], meta: dict, profiles: dict | None = None
) -> list[Path]:
    """<mode>.json, <mode>.csv, <mode>.md, <mode>.png (timed and test modes) or <mode>.txt (profile tables).
    A file of an earlier run in out_dir that this one does not write (the chart of a run whose
    cases all failed or were interrupted) is removed, so that the folder describes one run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    doc = {
        "meta": meta,
        "summary": [{k: _clean(v) for k, v in s.items()} for s in summary],
        "rows": [{k: _clean(v) for k, v in r.items()} for r in rows],
    }
    p = out_dir / f"{mode}.json"
    p.write_text(json.dumps(doc, indent=2, default=str))
    written.append(p)
    p = out_dir / f"{mode}.csv"
    pd.DataFrame(list(rows)).to_csv(p, index=False)
    written.append(p)
    p = out_dir / f"{mode}.md"
    p.write_text(markdown(rows, summary, mode, meta))
    written.append(p)
    if mode == "profile":
        p = out_dir / f"{mode}.txt"
        p.write_text("\n\n".join(f"== {k}\n{v}" for k, v in (profiles or {}).items()))
        written.append(p)
    else:
        title = f"{mode} on {meta.get('device', '?')}"
        p = chart(rows, mode, out_dir / f"{mode}.png", title)
        if p is not None:
            written.append(p)
    for stale in (out_dir / f"{mode}.png", out_dir / f"{mode}.txt"):
        if stale not in written:
            stale.unlink(missing_ok=True)
    return written
