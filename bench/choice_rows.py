"""The table rows that pin the selection's choices (the report's `choice` column) for a fixed
submission: selection.backend_table.MI355X_BACKENDS for the backend, the tile table for an alternate tile
(TUNED on NVIDIA, NATIVE_TUNED on gfx950). Pinned, a bundle made with MOE_SELECT=0 in its
environment runs what the selection found, without selecting."""

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
