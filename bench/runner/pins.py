"""Table rows that pin what a timed run measured, printed after the tables: the rows that pin the
selection's choices (the report's `choice` column) for a fixed submission, the tile table's for an
alternate tile (TUNED on NVIDIA, NATIVE_TUNED on gfx950). Pinned, a bundle made with MOE_SELECT=0
in its environment runs what the selection found, without selecting. The backend is no table's:
aiter where it imports on an MI355X, else triton (submission.default_backend)."""

from __future__ import annotations

from collections.abc import Sequence


def pin_rows(rows: Sequence[dict], amd: bool) -> dict[str, list[str]]:
    """{table: Python lines} from report rows that passed with a choice, one shape each (its first
    row); amd says which tile table an alternate tile belongs to."""
    from bench.runner.case_args import case_shape
    from moe_triton.tiles_amd import NATIVE_ALTERNATES
    from moe_triton.tiles_nvidia import ALTERNATES

    tile_table, alternates = ("NATIVE_TUNED", NATIVE_ALTERNATES) if amd else ("TUNED", ALTERNATES)
    tables: dict[str, list[str]] = {tile_table: [], "not pinnable": []}
    seen = set()
    for r in rows:
        choice = r.get("choice")
        key = case_shape(r)
        if not choice or r["status"] != "pass" or key in seen:
            continue
        seen.add(key)
        note = f"  # selected by {r['backend']}, {r['mean_us']:.1f} us" if r.get("mean_us") else ""
        backend, _, alternate = choice.partition(":")
        tiles = alternates.get(key, {}).get(alternate) if backend == "triton" and alternate else None
        if tiles is not None:
            tables[tile_table].append(f"    {key}: {tiles!r},{note}")
        if amd and backend == "triton":
            why = "the static backend is aiter where it imports: MOE_BACKEND=triton runs it"
            tables["not pinnable"].append(f"    # {key}: {choice} ({why}){note}")
        elif tiles is None and (backend not in ("aiter", "triton") or alternate):
            tables["not pinnable"].append(f"    # {key}: {choice} (no table row selects it){note}")
    return {name: lines for name, lines in tables.items() if lines}


def pins_text(tables: dict[str, list[str]]) -> str:
    heads = {"not pinnable": "# choices that no table row can pin"}
    return "".join(
        heads.get(name, f"# rows for {name}") + "\n" + "\n".join(lines) + "\n" for name, lines in tables.items()
    )
