"""The tile rows (moe_triton/tiles.py): keyword-only, their stage fields read flat as the launchers
read them, every table row written back by as_dict, from_dict and repr unchanged, and sizes no kernel
takes refused in one line."""

import pytest

from moe_triton.tiles import NativeTileConfig, Stage, TileConfig, Tiles, check_sizes
from moe_triton.tiles_amd import NATIVE_ALTERNATES, NATIVE_TUNED
from moe_triton.tiles_nvidia import ALTERNATES, GLUON_TUNED, TUNED


def _rows() -> list[Tiles]:
    alternates = [t for named in (*ALTERNATES.values(), *NATIVE_ALTERNATES.values()) for t in named.values()]
    return [*TUNED.values(), *GLUON_TUNED.values(), *NATIVE_TUNED.values(), *alternates]


def test_every_row_survives_its_flat_fields_and_its_repr():
    names = {"TileConfig": TileConfig, "NativeTileConfig": NativeTileConfig, "Stage": Stage}
    for row in _rows():
        assert type(row).from_dict(row.as_dict()) == row
        assert eval(repr(row), names) == row, repr(row)  # the row as a table writes it
        assert list(row.as_dict()) == list(type(row).field_names())


def test_the_stage_fields_read_flat_and_replace_takes_flat_names():
    row = TUNED[next(iter(TUNED))]
    assert (row.block_n1, row.block_k1, row.warps1, row.stages1) == tuple(vars(row.stage1).values())
    assert (row.block_n2, row.block_k2, row.warps2, row.stages2) == tuple(vars(row.stage2).values())
    wider = row.replace(block_n1=64, max_regs1=0)
    assert wider.stage1 == Stage(block_n=64, block_k=row.block_k1, warps=row.warps1, stages=row.stages1)
    assert wider.stage2 == row.stage2 and wider.max_regs1 == 0 and row.block_n1 != 64  # the row itself unchanged
    assert TileConfig.field_names()[:10] == (
        "block_m",
        "block_n1",
        "block_k1",
        "warps1",
        "stages1",
        "block_n2",
        "block_k2",
        "warps2",
        "stages2",
        "n_tiles2",
    )
    with pytest.raises(TypeError, match="nonkdim"):
        row.replace(nonkdim=32)  # a native field on a decode row


def test_rows_are_keyword_only_and_the_two_paths_rows_differ():
    stage = Stage(block_n=32, block_k=256, warps=4, stages=2)
    with pytest.raises(TypeError):
        TileConfig(16, stage, stage, 4)
    with pytest.raises(TypeError):
        Stage(32, 256, 4, 2)
    shared = dict(block_m=16, stage1=stage, stage2=stage, n_tiles2=4)
    assert TileConfig(**shared) != NativeTileConfig(**shared)
    assert repr(NativeTileConfig(**shared, nonkdim=32)).endswith("n_tiles2=4, nonkdim=32)")


def test_rows_key_plans_by_value():
    # The plans' key holds the tiles (their hash computed once per row): equal rows share one plan,
    # rows that differ in any field, a stage's included, do not.
    rows = [row for table in (TUNED, GLUON_TUNED, NATIVE_TUNED) for row in table.values()]
    for row in rows:
        copy = row.replace()
        assert copy is not row and copy == row and hash(copy) == hash(row)
        assert {row: 1}[copy] == 1
    table = TUNED[next(iter(TUNED))]
    changed = [table.replace(block_m=64), table.replace(stages1=table.stages1 + 1), table.replace(max_regs2=96)]
    assert len({table, *changed}) == 4


def test_every_row_has_sizes_the_kernels_take():
    for row in _rows():
        check_sizes(row)


@pytest.mark.parametrize(
    "field, value, kind",
    [
        ("block_m", 48, "a power of two"),
        ("block_m", 0, "a power of two"),
        ("block_k1", 96, "a power of two"),
        ("warps2", 3, "a power of two"),
        ("block_n2", 64.0, "a power of two"),
        ("stages1", 0, "a positive integer"),
        ("n_tiles2", -1, "a positive integer"),
    ],
)
def test_a_size_no_kernel_takes_is_refused_in_one_line(field, value, kind):
    for row in (TUNED[next(iter(TUNED))], NATIVE_TUNED[next(iter(NATIVE_TUNED))]):
        with pytest.raises(ValueError, match=f"^tiles: {field} must be {kind}, not {value!r}$"):
            check_sizes(row.replace(**{field: value}))
