"""`python -m bench.speed_chart`: the chart of a recorded speed run, drawn from its data file (JSON
next to the chart), so that the picture is redrawn from what bench/results records rather than kept
as an image nobody can regenerate.

The data file names the run (date, device, versions, commit, command, timing, the record it comes
from), the shapes and one series of times per kernel, all measured on that one device. With an
`mi355x` entry, aiter's MI355X times (bench.runner.report.AITER_MI355X_US, the task's own list) go in a
separate panel with their own axis and the data file's note on where they come from: a time on
another device never shares an axis with the run's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.runner.preflight import UsageParser, shown
from bench.runner.report import geomean, time_text

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "bench" / "results" / "h200-speed.json"
FIELDS = ("title", "date", "device", "versions", "commit", "command", "timing", "record", "shapes", "cases", "series")


def load(path: Path) -> dict:
    """The data file, checked: every field present, one time per shape in every series."""
    data = json.loads(path.read_text())
    missing = [k for k in FIELDS if k not in data]
    if missing:
        raise ValueError(f"{path.name} lacks {', '.join(missing)}")
    n = len(data["shapes"])
    if len(data["cases"]) != n or not data["series"]:
        raise ValueError(f"{path.name}: shapes, cases and series do not match")
    for s in data["series"]:
        if len(s["us"]) != n or not all(t > 0 for t in s["us"]):
            raise ValueError(f"{path.name}: series {s['label']!r} needs {n} positive times")
    return data


def mi355x_times(cases: list[str]) -> list[float]:
    """aiter's MI355X time of each case, from the task's list (bench.runner.report.AITER_MI355X_US)."""
    from bench.runner.report import AITER_MI355X_US
    from problem.cases import BENCHMARKS, case_name

    listed = {case_name(c): t for c, t in zip(BENCHMARKS, AITER_MI355X_US, strict=True)}
    unknown = [c for c in cases if c not in listed]
    if unknown:
        raise ValueError(f"no MI355X time listed for {', '.join(unknown)}")
    return [listed[c] for c in cases]


def _bars(ax, shapes: list[str], series: list[tuple[str, list[float]]]) -> None:
    """Grouped bars per shape, each labelled with its time, log scale."""
    width = 0.8 / len(series)
    for j, (label, times) in enumerate(series):
        xs = [i - 0.4 + width * (j + 0.5) for i in range(len(shapes))]
        bars = ax.bar(xs, times, width=width * 0.95, label=label)
        ax.bar_label(
            bars, [time_text(t) for t in times], fontsize=6, rotation=90, padding=2, color=bars[0].get_facecolor()
        )
    ax.set_xticks(range(len(shapes)))
    ax.set_xticklabels(shapes, fontsize=8)
    ax.set_yscale("log")
    low, high = min(min(t) for _, t in series), max(max(t) for _, t in series)
    ax.set_ylim(low / 2, high * 3)
    ax.set_ylabel("time per call, us (log scale; lower is better)")
    ax.grid(axis="y", which="both", alpha=0.3)


def figure(data: dict):
    """The run's panel and, with an `mi355x` entry, aiter's MI355X panel beside it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    aiter = mi355x_times(data["cases"]) if "mi355x" in data else None
    panels = {"width_ratios": [4, 1.6]} if aiter else {}
    fig, axes = plt.subplots(
        1, 2 if aiter else 1, figsize=(13 if aiter else 10, 6), gridspec_kw=panels, layout="constrained"
    )
    run_ax = axes[0] if aiter else axes
    series = [(f"{s['label']}: geomean {time_text(geomean(s['us']))}", s["us"]) for s in data["series"]]
    _bars(run_ax, data["shapes"], series)
    run_ax.set_title(f"{data['device']}, {data['date']} (all bars measured there)", fontsize=9)
    run_ax.legend(fontsize=7, loc="upper left")
    if aiter:
        _bars(axes[1], [shape.replace(" ", "\n") for shape in data["shapes"]], [(data["mi355x"]["label"], aiter)])
        axes[1].set_title(
            f"{data['mi355x']['label']}\ngeomean {time_text(geomean(aiter))} (not measured here)", fontsize=9
        )
    fig.suptitle(
        f"{data['title']} (lower is better): {data['device']}, {data['date']}, commit {data['commit']}\n"
        f"{data['versions']}",
        fontsize=10,
    )
    notes = [f"Timing: {data['timing']} (`{data['command']}`).", f"Data: {data['record']}."]
    if aiter:
        notes.append(f"Right panel: {data['mi355x']['source']}; another device, on its own axis.")
    fig.supxlabel("\n".join(notes), fontsize=7, x=0.01, ha="left")
    return fig


def draw(data_path: Path, out: Path) -> Path:
    """The chart of data_path saved as a PNG at out."""
    import matplotlib.pyplot as plt

    fig = figure(load(data_path))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = UsageParser(prog="python -m bench.speed_chart", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DATA, help="the run's data file (default: %(default)s)")
    parser.add_argument("--out", type=Path, help="the PNG to write (default: the data file's, .png)")
    args = parser.parse_args(argv)
    out = args.out or args.data.with_suffix(".png")
    try:
        written = draw(args.data, out)
    except FileNotFoundError:
        return parser.fail(f"--data: {shown(args.data)} does not exist")
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        return parser.fail(f"--data: {exc}")
    except OSError as exc:
        return parser.fail(f"--out: {exc.strerror or exc}")
    print(f"wrote {shown(written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
