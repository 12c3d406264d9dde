"""bench/h200/ab.py, the static tiles against field changes: its variants as typed, the candidates a shape
takes (a refused variant left out with its reason, one equal to the static tiles dropped) and its refusals."""

import pytest
import torch

from bench.h200 import ab
from bench.runner.case_args import case_shape
from moe_triton import target
from moe_triton.tiles_nvidia import GLUON_TUNED, TUNED
from problem.cases import BENCHMARKS
from problem.shapes import Shape


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("overlap=1", ("overlap=1", {"overlap": 1})),
        ("apart=overlap=0,max_regs1=128", ("apart", {"overlap": 0, "max_regs1": 128})),
        ("stages1=3,n_tiles2=2", ("stages1=3,n_tiles2=2", {"stages1": 3, "n_tiles2": 2})),
    ],
)
def test_a_variant_is_named_field_changes(text, want):
    assert ab.parse_variant(text) == want


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("overlap", "'overlap' is not FIELD=VALUE of a tiles field"),
        ("x=overlap=1,colour=2", "'colour=2' is not FIELD=VALUE"),
        ("stream1=1", "'stream1=1' is not FIELD=VALUE of a tiles field"),  # a removed field, unknown as any other
        ("overlap=yes", "overlap takes an integer, not 'yes'"),
    ],
)
def test_a_variant_that_is_not_field_changes_is_refused_in_one_line(text, says):
    with pytest.raises(ValueError, match=f"^--variant {text}: {says}"):
        ab.parse_variant(text)


def test_a_shape_takes_the_variants_its_path_accepts(monkeypatch):
    monkeypatch.setattr(target, "gluon_kernels", lambda device: True)
    case = next(c for c in BENCHMARKS if (c["nroutedexperts"], c["dexpert"]) == (32, 2048))
    variants = [("apart", {"overlap": 0}), ("same", {"overlap": 1}), ("unfolded", {"fold1": 0})]
    tiles, left_out = ab.candidates(case_shape(case), variants)
    static = GLUON_TUNED[case_shape(case)]
    assert tiles == {"static": static, "apart": static.replace(overlap=0)}
    assert left_out[0] == "same: the static tiles themselves", left_out
    assert len(left_out) == 2 and left_out[1].startswith("unfolded: tiles: overlap must be"), left_out


def test_the_neighbours_are_one_field_changes_of_the_tiles():
    tiles = TUNED[Shape(16, 7168, 256, 257, 9)]
    flat = tiles.as_dict()
    assert (flat["stages1"], flat["stages2"], flat["n_tiles2"], flat["max_regs1"], flat["max_regs2"]) == (
        3,
        3,
        8,
        128,
        0,
    )
    names = [name for name, _ in ab.neighbours(tiles)]
    assert names == [
        "stages1=2",
        "stages1=4",
        "stages2=2",
        "stages2=4",
        "n_tiles2=4",
        "n_tiles2=16",
        "overlap=0",
        "route_launches=1",
        "quant_blocks=64",
        "max_regs1=0",
    ]
    for name, changes in ab.neighbours(tiles):
        assert len(changes) == 1 and tiles.replace(**changes) != tiles, name
    # a ring two deep has no shallower neighbour, one tile a program no halved one
    shallow = tiles.replace(stages1=2, stages2=2, n_tiles2=1, max_regs1=0, overlap=0, route_launches=1)
    assert [name for name, _ in ab.neighbours(shallow)] == [
        "stages1=3",
        "stages2=3",
        "n_tiles2=2",
        "overlap=1",
        "route_launches=2",
        "quant_blocks=64",
    ]


def test_a_shape_takes_the_neighbours_its_path_accepts_once_each(monkeypatch):
    monkeypatch.setattr(target, "gluon_kernels", lambda device: True)
    case = next(c for c in BENCHMARKS if (c["nroutedexperts"], c["dexpert"]) == (32, 2048))
    static = GLUON_TUNED[case_shape(case)]
    tiles, left_out = ab.candidates(case_shape(case), [("n_tiles2=8", {"n_tiles2": 8})], with_neighbours=True)
    assert list(tiles)[:2] == ["static", "n_tiles2=8"] and "n_tiles2=8" not in list(tiles)[2:]
    assert tiles["overlap=0"] == static.replace(overlap=0) and tiles["stages1=5"] == static.replace(stages1=5)
    # every neighbour is timed or said why not, once
    said = [line.split(":")[0] for line in left_out]
    assert sorted(list(tiles)[2:] + said) == sorted(n for n, _ in ab.neighbours(static) if n != "n_tiles2=8")
    # both Gluon stages fold the tails there: each fold is toggled, and the overlap refuses stage 1 without its own
    assert tiles["fold2=0"] == static.replace(fold2=0)
    assert any(line.startswith("fold1=0: tiles: overlap must be") for line in left_out), left_out
    assert ab.candidates(case_shape(case), [])[0] == {"static": static}


def test_without_variants_or_neighbours_there_is_nothing_to_time(capsys):
    assert ab.main(["--shapes", "bs16"]) == 2
    assert "--variant or --neighbours: nothing to set against the static tiles" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is for machines without a CUDA GPU")
def test_without_a_gpu_it_says_why(tmp_path, capsys):
    assert ab.main(["--shapes", "bs16", "--variant", "overlap=1", "--out", str(tmp_path / "out")]) == 2
    assert "no CUDA GPU here" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_bad_variant_or_shape_is_one_line(capsys):
    assert ab.main(["--shapes", "bs16", "--variant", "colour=2"]) == 2
    assert capsys.readouterr().err.strip().endswith("'colour=2' is not FIELD=VALUE of a tiles field (docs/tiles.md)")
    assert ab.main(["--shapes", "E999", "--variant", "overlap=1"]) == 2
    assert "--shapes E999: no official shape matches" in capsys.readouterr().err


def test_the_table_shows_every_candidates_whole_tiles():
    # a variant keeps every field of the static row that it does not name: the table's second part says what ran
    static = GLUON_TUNED[next(iter(GLUON_TUNED))]
    variant = static.replace(n_tiles2=1)
    timing = {"median_us": 150.0, "worst": 0.25}
    results = {
        "S": {
            "tiles": {"static": repr(static), "one": repr(variant)},
            "passes": {"static": (timing, timing), "one": (timing, {**timing, "worst": 0.3})},
            "left_out": ["deep: tiles: too much shared memory"],
        }
    }
    lines = ab.table(results)
    assert "| S | one | 150.0 | 150.0 | 0.300 |" in lines
    assert "| S | deep: tiles: too much shared memory | | | |" in lines
    assert f"| S | static | `{static!r}` |" in lines and f"| S | one | `{variant!r}` |" in lines
