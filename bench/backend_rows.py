"""The rows of selection.backend_table.MI355X_BACKENDS that a timed run of both the aiter and the triton
backend supports: per shape, the faster backend that passed, with both times."""

from __future__ import annotations

from collections.abc import Sequence


def backend_rows(rows: Sequence[dict]) -> list[str]:
    """Python lines for MI355X_BACKENDS from report rows (report.build_row), one per shape that
    both backends ran and passed; empty unless both ran."""
    from problem.cases import table_key

    times: dict[tuple, dict[str, float]] = {}
    for r in rows:
        if r["backend"] in ("aiter", "triton") and r["status"] == "pass" and r["mean_us"] is not None:
            times.setdefault(table_key(r), {})[r["backend"]] = r["mean_us"]
    lines = []
    for key, t in times.items():
        if len(t) == 2:
            best = min(t, key=t.get)
            lines.append(f"    {key}: {best!r},  # aiter {t['aiter']:.1f} us, triton {t['triton']:.1f} us")
    return lines
