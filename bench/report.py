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
from bench.selection import Case

TIMED_MODES = ("benchmark", "leaderboard")


def aiter_times() -> dict[tuple, float]:
    """Shape (without seed) -> aiter's MI355X time in us, from cases.py."""
    from bench.selection import SHAPE_KEYS
    from cases import AITER_MI355X_US, BENCHMARKS

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
        "checked": result.get("checked", 0),
        "runs": st.get("runs"),
        "mean_us": _us(st.get("mean")),
        "std_us": _us(st.get("std")),
        "err_us": _us(st.get("err")),
        "best_us": _us(st.get("best")),
        "worst_us": _us(st.get("worst")),
        "call_us": _us(result.get("call_ns")),
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
            }
        )
    return out


# ---------------------------------------------------------------- formatting


def _f(v, fmt="{:.1f}", none="-"):
    return none if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _status_cell(r: dict) -> str:
    return {"pass": "pass", "fail": "FAIL", "error": "ERROR", "skipped": "skipped"}.get(r["status"], r["status"])


def table_columns(mode: str) -> list[tuple[str, str]]:
    """(header, key) of the per-case table."""
    if mode in TIMED_MODES:
        return [
            ("case", "case"),
            ("shape", "shape"),
            ("backend", "backend"),
            ("status", "status"),
            ("mean us", "mean_us"),
            ("std us", "std_us"),
            ("best us", "best_us"),
            ("runs", "runs"),
            ("floor us", "floor_us"),
            ("x floor", "x_floor"),
            ("aiter MI355X us", "aiter_us"),
            ("x aiter", "x_aiter"),
        ]
    return [
        ("case", "case"),
        ("shape", "shape"),
        ("backend", "backend"),
        ("status", "status"),
        ("call us", "call_us"),
        ("experts hit", "experts_hit"),
        ("floor us", "floor_us"),
        ("message", "message"),
    ]


def _cell(r: dict, key: str) -> str:
    v = r.get(key)
    if key == "status":
        return _status_cell(r)
    if key in ("x_floor", "x_aiter"):
        return _f(v, "{:.2f}x")
    if key in ("runs", "experts_hit"):
        return _f(v, "{:.0f}")
    if key == "message":
        text = (v or "").strip().splitlines()
        return text[0][:80] if text else ""
    if isinstance(v, float):
        return _f(v)
    return "-" if v is None else str(v)


def summary_columns() -> list[tuple[str, str]]:
    return [
        ("backend", "backend"),
        ("passed", "passed"),
        ("geomean us", "geomean_us"),
        ("geomean floor us", "geomean_floor_us"),
        ("geomean x floor", "geomean_x_floor"),
        ("geomean aiter MI355X us", "geomean_aiter_us"),
        ("geomean x aiter", "geomean_x_aiter"),
    ]


def _summary_cell(s: dict, key: str) -> str:
    if key == "passed":
        return f"{s['passed']}/{s['total']}"
    if key.startswith("geomean_x"):
        return _f(s[key], "{:.2f}x")
    if key == "backend":
        return s[key]
    return _f(s[key])


def print_tables(console, rows: Sequence[dict], summary: Sequence[dict], mode: str, title: str = "") -> None:
    from rich.table import Table

    t = Table(title=title or f"{mode} results", show_lines=False)
    cols = table_columns(mode)
    for head, key in cols:
        t.add_column(
            head,
            justify="left" if key in ("case", "shape", "backend", "status", "message") else "right",
            overflow="fold",
        )
    prev_case = None
    for r in rows:
        if prev_case is not None and r["case"] != prev_case:
            t.add_section()
        prev_case = r["case"]
        style = None if r["status"] == "pass" else "red"
        t.add_row(*[_cell(r, k) for _, k in cols], style=style)
    console.print(t)
    if mode in TIMED_MODES:
        s = Table(title="geomean over passed cases")
        for head, key in summary_columns():
            s.add_column(head, justify="left" if key == "backend" else "right")
        for row in summary:
            s.add_row(*[_summary_cell(row, k) for _, k in summary_columns()])
        console.print(s)
    for r in rows:
        if r["status"] != "pass" and r["message"]:
            console.print(f"[red]{r['backend']} {r['case']} ({r['shape']}) {r['status']}:[/red]\n{r['message']}")


def markdown(rows: Sequence[dict], summary: Sequence[dict], mode: str, meta: dict) -> str:
    cols = table_columns(mode)
    lines = [f"### {mode}: {meta.get('device', '')}", ""]
    info = [f"{k}: {meta[k]}" for k in ("date", "git", "flush", "ceilings_text", "seed") if meta.get(k)]
    if info:
        lines += ["; ".join(info), ""]
    lines.append("| " + " | ".join(h for h, _ in cols) + " |")
    lines.append(
        "|"
        + "|".join("---" if k in ("case", "shape", "backend", "status", "message") else "---:" for _, k in cols)
        + "|"
    )
    for r in rows:
        lines.append("| " + " | ".join(_cell(r, k).replace("|", "/") for _, k in cols) + " |")
    if mode in TIMED_MODES:
        lines += [
            "",
            "| " + " | ".join(h for h, _ in summary_columns()) + " |",
            "|---|" + "---:|" * (len(summary_columns()) - 1),
        ]
        for s in summary:
            lines.append("| " + " | ".join(_summary_cell(s, k) for _, k in summary_columns()) + " |")
    return "\n".join(lines) + "\n"


def chart(rows: Sequence[dict], mode: str, path: Path, title: str) -> Path | None:
    """Grouped bars (one per backend) of the time per case, log scale, with the floor (black)
    and the aiter MI355X time (red, dashed) marked over each group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = "mean_us" if mode in TIMED_MODES else "call_us"
    cases = list(dict.fromkeys(r["case"] for r in rows))
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    if not cases or not any(r.get(key) for r in rows):
        return None
    by = {(r["case"], r["backend"]): r for r in rows}
    shapes = {r["case"]: r["shape"] for r in rows}
    width = 0.8 / max(1, len(backends))
    fig, ax = plt.subplots(figsize=(max(9.0, 1.3 * len(cases) + 5), 5.0))
    for j, b in enumerate(backends):
        xs, ys = [], []
        for i, c in enumerate(cases):
            r = by.get((c, b))
            if r and r.get(key) and r["status"] == "pass":
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(r[key])
        mine = [r for r in rows if r["backend"] == b and r["status"] == "pass"]
        g_t, g_x = geomean(r.get(key) for r in mine), geomean(r.get("floor_us") for r in mine)
        label = b
        if g_t and len(mine) == len(cases):
            label += f" (geomean {g_t:.0f} us" + (f", {g_t / g_x:.1f}x floor)" if g_x else ")")
        bars = ax.bar(xs, ys, width=width * 0.95, label=label)
        for x, y in zip(xs, ys, strict=True):
            ax.annotate(
                f"{y:.0f}",
                (x, y),
                ha="center",
                va="bottom",
                fontsize=7,
                rotation=90,
                xytext=(0, 2),
                textcoords="offset points",
                color=bars.patches[0].get_facecolor(),
            )
    floor_label = aiter_label = True
    for i, c in enumerate(cases):
        floors = [by[(c, b)]["floor_us"] for b in backends if (c, b) in by and by[(c, b)].get("floor_us")]
        if floors:
            ax.hlines(
                sum(floors) / len(floors),
                i - 0.45,
                i + 0.45,
                colors="black",
                linewidth=2,
                label="roofline floor (this device)" if floor_label else None,
            )
            floor_label = False
        aiter = next((by[(c, b)]["aiter_us"] for b in backends if (c, b) in by and by[(c, b)].get("aiter_us")), None)
        if aiter and mode in TIMED_MODES:
            ax.hlines(
                aiter,
                i - 0.45,
                i + 0.45,
                colors="red",
                linestyles="dashed",
                linewidth=1.5,
                label="aiter on MI355X" if aiter_label else None,
            )
            aiter_label = False
    ax.set_xticks(range(len(cases)))
    ax.set_xticklabels([f"{c}\n{shapes[c]}" for c in cases], fontsize=7, rotation=20, ha="right")
    ax.set_yscale("log")
    tops = [r[key] for r in rows if r.get(key)] + [r["floor_us"] for r in rows if r.get("floor_us")]
    ax.set_ylim(top=max(tops) * 4)  # room for the value labels
    ax.set_ylabel("time per call (us)" if mode in TIMED_MODES else "first call (us)")
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
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
    """<mode>.json, <mode>.csv, <mode>.md, <mode>.png (timed and test modes) or <mode>.txt (profile tables)."""
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
    return written
