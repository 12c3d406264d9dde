"""The tiles the check compiles per case: the path's table tile and every alternate that
tile_configs names for the shape (the selection's candidates). Their ranking by the ESTIMATE is
bench.gfx950.run.rank_variants (it compiles); this module imports no other of bench.gfx950's.
"""

from __future__ import annotations

import json
from pathlib import Path

TABLE = "table"  # the name of the tile table's own entry, always the first variant


def variants(params: dict, path: str = "native", extra: dict | None = None) -> list[tuple[str, object]]:
    """(name, tiles) per variant of a case: the table's tile first, then the alternates in their order,
    then `extra` (name -> fields to replace in the table's tile: variants tried before they are named
    in tile_configs)."""
    from bench.runner.case_args import case_shape
    from moe_triton import tiles_amd, tiles_nvidia

    shape = case_shape(params)
    if path == "native":
        table = tiles_amd.native_tile_config(shape)
        alternates = tiles_amd.NATIVE_ALTERNATES.get(shape, {})
    else:
        table = tiles_nvidia.tile_config(shape)
        alternates = tiles_nvidia.ALTERNATES.get(shape, {})
    found = [(TABLE, table), *alternates.items()]
    found += [(name, table.replace(**fields)) for name, fields in (extra or {}).items()]
    names = [name for name, _ in found]
    clash = sorted({name for name in names if names.count(name) > 1})
    if clash:
        raise ValueError(f"variants of {shape}: {', '.join(clash)} named twice (the table tile is {TABLE!r})")
    return found


def config_fields(path: str = "native") -> tuple[str, ...]:
    """The fields a variant of this path may set."""
    from moe_triton import tiles

    return (tiles.NativeTileConfig if path == "native" else tiles.TileConfig).field_names()


def extra_variants(path: Path, fields: tuple[str, ...]) -> dict[str, dict]:
    """--extra-variants' file: name -> {field: value}, every field one of the path's tile fields."""
    found = json.loads(path.read_text())
    if not isinstance(found, dict) or not all(isinstance(v, dict) for v in found.values()):
        raise ValueError(f"{path}: expected an object of name -> {{field: value}}")
    for name, changes in found.items():
        unknown = sorted(set(changes) - set(fields))
        if unknown:
            raise ValueError(f"{path}: {name}: no tile field {', '.join(unknown)} (fields: {', '.join(fields)})")
    return found
