"""The per-shape backend choice on an MI355X (backend_table) and the bench rows that fill it."""

import pytest

import submission
from bench.runner.pins import backend_rows
from selection import backend_table

CONFIG = dict(d_hidden=7168, d_expert=256, n_routed_experts=256, n_shared_experts=1, total_top_k=9, bs=16)
KEY = (7168, 256, 257, 9, 16)


@pytest.fixture
def on_mi355x(monkeypatch):
    """The platform of an MI355X with aiter (the cached probe replaced)."""
    monkeypatch.setattr(submission, "platform", lambda: "gfx950-aiter")
    monkeypatch.delenv("MOE_BACKEND", raising=False)


def test_aiter_unless_the_table_says_triton(on_mi355x, monkeypatch):
    assert backend_table.shape_key(CONFIG) == KEY
    assert submission.selected_backend(CONFIG) == "aiter"
    monkeypatch.setitem(backend_table.MI355X_BACKENDS, KEY, "triton")
    assert submission.selected_backend(CONFIG) == "triton"
    assert submission.selected_backend({**CONFIG, "bs": 128}) == "aiter"
    monkeypatch.setenv("MOE_BACKEND", "aiter-fused")
    assert submission.selected_backend(CONFIG) == "aiter-fused"


def test_the_table_only_steers_the_aiter_default(monkeypatch):
    monkeypatch.setattr(submission, "default_backend", lambda: "triton")
    monkeypatch.delenv("MOE_BACKEND", raising=False)
    monkeypatch.setitem(backend_table.MI355X_BACKENDS, KEY, "aiter")
    assert submission.selected_backend(CONFIG) == "triton"


def test_every_row_names_a_backend():
    assert set(backend_table.MI355X_BACKENDS.values()) <= {"aiter", "triton"}


def _row(backend, bs, mean_us, status="pass"):
    return dict(
        backend=backend,
        status=status,
        mean_us=mean_us,
        dhidden=7168,
        dexpert=256,
        nroutedexperts=256,
        nsharedexperts=1,
        nexpertspertoken=8,
        bs=bs,
    )


def test_rows_name_the_faster_passing_backend_per_shape():
    rows = [
        _row("aiter", 16, 90.0),
        _row("triton", 16, 80.0),
        _row("aiter", 128, 100.0),
        _row("triton", 128, 120.0),
        _row("aiter", 512, 200.0),
        _row("triton", 512, 150.0, status="fail"),
    ]
    lines = backend_rows(rows)
    assert lines == [
        "    (7168, 256, 257, 9, 16): 'triton',  # aiter 90.0 us, triton 80.0 us",
        "    (7168, 256, 257, 9, 128): 'aiter',  # aiter 100.0 us, triton 120.0 us",
    ]
    assert backend_rows([_row("triton", 16, 80.0), _row("reference", 16, 50.0)]) == []


def test_a_cases_table_key_is_its_configs_shape_key():
    from problem.cases import BENCHMARKS, SMOKE, TESTS, table_key
    from reference import make_config

    for case in TESTS + BENCHMARKS + SMOKE:
        shape = {k: v for k, v in case.items() if k != "seed"}
        assert table_key(case) == backend_table.shape_key(make_config(**shape))
