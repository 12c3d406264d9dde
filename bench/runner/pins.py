"""Table rows that pin what a timed run measured, printed after the tables.

backend_rows: the rows of selection.backend_table.MI355X_BACKENDS that a run of both the aiter and
the triton backend supports (per shape, the faster backend that passed, with both times).
pin_rows: the rows that pin the selection's choices (the report's `choice` column) for a fixed
submission: MI355X_BACKENDS for the backend, the tile table for an alternate tile (TUNED on
NVIDIA, NATIVE_TUNED on gfx950). Pinned, a bundle made with MOE_SELECT=0 in its environment runs
what the selection found, without selecting."""

from __future__ import annotations

from collections.abc import Sequence


def pin_rows(rows: Sequence[dict], amd: bool) -> dict[str, list[str]]:
    """{table: Python lines} from report rows that passed with a choice, one shape each (its first
    row); amd says which tile table an alternate tile belongs to."""
    from moe_triton.tiles_amd import NATIVE_ALTERNATES
    from moe_triton.tiles_nvidia import ALTERNATES
    from problem.cases import table_key

    tile_table, alternates = ("NATIVE_TUNED", NATIVE_ALTERNATES) if amd else ("TUNED", ALTERNATES)
    tables: dict[str, list[str]] = {"MI355X_BACKENDS": [], tile_table: [], "not pinnable": []}
    seen = set()
    for r in rows:
        choice = r.get("choice")
        key = table_key(r)
        if not choice or r["status"] != "pass" or key in seen:
            continue
        seen.add(key)
        note = f"  # selected by {r['backend']}, {r['mean_us']:.1f} us" if r.get("mean_us") else ""
        backend, _, alternate = choice.partition(":")
        if amd and backend in ("aiter", "triton"):
            tables["MI355X_BACKENDS"].append(f"    {key}: {backend!r},{note}")
        tiles = alternates.get(key, {}).get(alternate) if backend == "triton" and alternate else None
        if tiles is not None:
            tables[tile_table].append(f"    {key}: {tiles!r},{note}")
        elif backend not in ("aiter", "triton") or alternate:
            tables["not pinnable"].append(f"    # {key}: {choice} (no table row selects it){note}")
    return {name: lines for name, lines in tables.items() if lines}


def pins_text(tables: dict[str, list[str]]) -> str:
    heads = {"not pinnable": "# choices that no table row can pin"}
    return "".join(
        heads.get(name, f"# rows for {name}") + "\n" + "\n".join(lines) + "\n" for name, lines in tables.items()
    )


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
