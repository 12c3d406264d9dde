"""The selection at the first call per shape (selection/selector.py, selection/choice_file.py, selection/candidates.py,
selection/prerun.py, submission.custom_kernel). Mock candidates where the logic is tested: each returns the
reference's output, displaced by a chosen fraction of the tolerance, or raises; the timer and the
clock are fakes. One end-to-end test runs the real CPU candidates under the interpreter."""

import json
import re
from pathlib import Path

import pytest
import torch

import submission
from bench.runner.case_args import case_shape
from moe_triton.tiles_amd import NATIVE_ALTERNATES
from moe_triton.tiles_nvidia import ALTERNATES, GLUON_TUNED, SELECTION_WINNERS, TUNED, tile_config
from problem.cases import BENCHMARKS, TESTS, TINY, case_name
from problem.shapes import Shape
from reference import ATOL, RTOL, check_implementation, generate_input, make_config, ref_kernel
from selection import candidates as cands
from selection import choice_file, prerun
from selection import selector as sel


@pytest.fixture(scope="module")
def data():
    return generate_input(**TINY[0])


@pytest.fixture(scope="module")
def expected(data):
    return ref_kernel(data)


class Clock:
    """A fake clock that candidates advance by their cost."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class Bench:
    """Mock candidates over one input: calls counted per name, fake medians per name."""

    def __init__(self, expected, clock=None):
        self.expected = expected
        self.clock = clock or Clock()
        self.calls: dict[str, int] = {}
        self.medians: dict = {}
        self.lines: list[str] = []

    def candidate(self, name, error=0.0, median=1e-3, raises=None, cost=0.0, output=None) -> cands.Candidate:
        """Returns the reference plus `error` times the tolerance (fp32, so the error is exact)."""

        def run(_data):
            self.calls[name] = self.calls.get(name, 0) + 1
            self.clock.t += cost
            if raises is not None:
                raise raises
            if output is not None:
                return output(_data)
            ref = self.expected.float()
            return ref + error * (ATOL + RTOL * ref.abs())

        self.medians[run] = median
        return cands.Candidate(name, run, f"mock {name}")

    def measure(self, run, _data, reps):
        assert reps == 3
        return [self.medians[run]] * reps

    def selector(self, candidates, store=None, capturing=lambda: False) -> sel.Selector:
        return sel.Selector(
            lambda _config: list(candidates),
            store=store,
            measure=self.measure,
            reps=3,
            clock=self.clock,
            capturing=capturing,
            log=self.lines.append,
        )


def test_raising_and_wrong_candidates_are_dropped_and_the_line_says_why(data, expected):
    b = Bench(expected)
    s = b.selector(
        [
            b.candidate("static", median=3e-3),
            b.candidate("raises", median=1e-3, raises=RuntimeError("no kernel image\nmore")),
            b.candidate("wrong", median=1e-3, error=3.0),
            b.candidate("fast", median=2e-3),
        ]
    )
    out = s(data)
    assert s.choice(data[-1]) == "fast"
    assert torch.equal(out, expected.float())
    (line,) = b.lines
    assert line.startswith(f"moe-mxfp4 select {sel.shape_name(data[-1])}: static 3000.0 us, ")
    assert "raises raised RuntimeError: no kernel image," in line
    assert "wrong wrong (" in line and "mismatch" in line
    assert line.split(" in ")[0].endswith("-> fast")


def test_a_candidate_within_tolerance_but_past_the_margin_is_dropped(data, expected):
    b = Bench(expected)
    s = b.selector([b.candidate("static", median=3e-3), b.candidate("loose", error=0.7, median=1e-3)])
    s(data)
    assert s.choice(data[-1]) == "static"
    assert "loose error 0.70 of tolerance > margin 0.50" in b.lines[0]


def test_the_incumbent_sets_the_margin_and_is_never_dropped_for_its_error(data, expected):
    b = Bench(expected)
    s = b.selector(
        [
            b.candidate("static", error=0.9, median=1e-3),
            b.candidate("closer", error=0.8, median=2e-3),
            b.candidate("worse", error=0.95, median=0.5e-3),
        ]
    )
    s(data)
    assert s.choice(data[-1]) == "static"
    assert "closer 2000.0 us" in b.lines[0] and "worse error 0.95 of tolerance > margin 0.90" in b.lines[0]


def test_the_choice_is_cached_and_later_calls_run_one_candidate_once(data, expected):
    b = Bench(expected)
    s = b.selector([b.candidate("static", median=2e-3), b.candidate("alt", median=1e-3)])
    s(data)
    assert b.calls == {"static": 1, "alt": 2}  # each checked once; the winner runs again for the output
    b.calls.clear()
    for _ in range(3):
        s(data)
    assert b.calls == {"alt": 3}
    assert len(b.lines) == 1  # nothing printed on later calls


def test_the_budget_skips_candidates_once_spent_but_never_the_incumbent(data, expected, monkeypatch):
    b = Bench(expected)
    mocks = [b.candidate(n, cost=8.0, median=m) for n, m in (("a", 4e-3), ("b", 3e-3), ("c", 2e-3), ("d", 1e-3))]
    monkeypatch.setenv(sel.BUDGET_ENV, "20")
    s = b.selector(mocks)
    s(data)
    # a: 0-8 s, b: 8-16 s; c would end at 24 s, past the budget: skipped, as is d
    assert "c skipped (budget), d skipped (budget) -> b" in b.lines[0] and s.choice(data[-1]) == "b"
    monkeypatch.setenv(sel.BUDGET_ENV, "0")
    b2 = Bench(expected)
    s2 = b2.selector([b2.candidate(n, cost=8.0) for n in "abcd"])
    s2(data)
    assert "b skipped (budget), c skipped (budget), d skipped (budget) -> a" in b2.lines[0]


@pytest.mark.parametrize("bad", ["-1", "soon", "nan"])
def test_a_bad_budget_is_refused_naming_the_variable(monkeypatch, bad):
    monkeypatch.setenv(sel.BUDGET_ENV, bad)
    with pytest.raises(ValueError, match=f"^{sel.BUDGET_ENV}: expected seconds >= 0, got '{bad}'$"):
        sel.budget_s()


def test_the_returned_output_is_the_chosen_candidates_even_when_a_later_one_overwrites_its_buffer(data, expected):
    """As aiter's path returns a cached buffer: the winner runs again after the others."""
    b = Bench(expected)
    shared = torch.empty(expected.shape, dtype=torch.float32, device=expected.device)

    def into_shared(_data):
        shared.copy_(expected.float())
        return shared

    def poisons_shared(_data):
        shared.fill_(float("nan"))
        return expected.float().clone()

    s = b.selector(
        [
            b.candidate("cached", median=1e-3, output=into_shared),
            b.candidate("poisoner", median=2e-3, output=poisons_shared),
        ]
    )
    out = s(data)
    assert s.choice(data[-1]) == "cached"
    assert out is shared and torch.equal(out, expected.float())


def test_a_later_raise_falls_back_to_the_next_survivor_from_then_on(data, expected):
    b = Bench(expected)
    broken = {"now": False}

    def flaky(_data):
        b.calls["flaky"] = b.calls.get("flaky", 0) + 1
        if broken["now"]:
            raise RuntimeError("device lost")
        return expected.float()

    b.medians[flaky] = 1e-3
    s = b.selector([b.candidate("static", median=2e-3), cands.Candidate("flaky", flaky)])
    s(data)
    assert s.choice(data[-1]) == "flaky"
    broken["now"] = True
    b.calls.clear()
    assert torch.equal(s(data), expected.float())
    assert b.lines[-1] == (
        f"moe-mxfp4 select {sel.shape_name(data[-1])}: flaky raised RuntimeError: device lost; falling back to static"
    )
    s(data)
    assert b.calls == {"flaky": 1, "static": 2} and s.choice(data[-1]) == "static" and len(b.lines) == 2


def test_a_sole_survivor_that_raises_raises(data, expected):
    b = Bench(expected)
    broken = {"now": False}

    def only(_data):
        if broken["now"]:
            raise RuntimeError("gone")
        return expected.float()

    b.medians[only] = 1e-3
    s = b.selector([cands.Candidate("static", only), b.candidate("bad", raises=RuntimeError("x"))])
    s(data)
    broken["now"] = True
    with pytest.raises(RuntimeError, match="gone"):
        s(data)


def test_when_nothing_passes_the_static_choice_runs(data, expected):
    b = Bench(expected)
    s = b.selector([b.candidate("static", error=5.0), b.candidate("alt", raises=ValueError("no"))])
    out = s(data)
    assert s.choice(data[-1]) == "static" and "-> static (none passed)" in b.lines[0]
    assert not check_implementation(data, out.to(torch.bfloat16))[0]  # the static output, as without selection


def test_a_sole_candidate_runs_without_reference_or_timing(data, expected, monkeypatch):
    monkeypatch.setattr(sel, "ref_kernel", lambda _data: pytest.fail("no reference for one candidate"))
    b = Bench(expected)
    s = b.selector([b.candidate("static")])
    assert s.known(data[-1]) == ("static", "the only candidate")
    s(data)
    assert b.calls == {"static": 1} and b.lines[0].endswith(": static (the only candidate)")


def test_a_failing_reference_means_no_selection_and_the_static_choice(data, expected, monkeypatch):
    def no_reference(_data):
        raise MemoryError("out of memory")

    monkeypatch.setattr(sel, "ref_kernel", no_reference)
    b = Bench(expected)
    s = b.selector([b.candidate("static"), b.candidate("alt", median=1e-6)])
    assert torch.equal(s(data), expected.float())
    assert s.choice(data[-1]) == "static" and b.calls == {"static": 1}
    assert b.lines == [
        f"moe-mxfp4 select {sel.shape_name(data[-1])}: not selected (MemoryError: out of memory) -> static"
    ]


def test_no_selection_while_a_graph_is_captured(data, expected, monkeypatch):
    b = Bench(expected)
    s = b.selector([b.candidate("static"), b.candidate("alt", median=1e-4)], capturing=lambda: True)
    s(data)
    assert b.calls == {"static": 1} and s.choice(data[-1]) is None and not b.lines
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert sel.graph_capturing()


# ------------------------------------------------------------------ the choice file


STAMP = {"format": 1, "device": "test", "package": "0", "source": "abc", "torch": "t", "triton": "3", "aiter": "-"}


def test_the_choice_file_round_trips_and_writes_atomically(tmp_path):
    path = tmp_path / "moe-mxfp4" / "choices.json"
    store = choice_file.ChoiceFile(path, STAMP)
    assert store.get(Shape(1, 2, 3, 4, 5), "d") is None
    store.put(Shape(1, 2, 3, 4, 5), "d", ["b", "a"], {"a": 2.0, "b": 1.0})
    store.put(Shape(1, 2, 3, 4, 6), "d", ["a"], {"a": 2.0})
    again = choice_file.ChoiceFile(path, STAMP)
    assert again.get(Shape(1, 2, 3, 4, 5), "d") == ["b", "a"] and again.get(Shape(1, 2, 3, 4, 6), "d") == ["a"]
    assert again.get(Shape(1, 2, 3, 4, 5), "other candidates") is None
    assert [p.name for p in path.parent.iterdir()] == ["choices.json"]  # no temporary left behind
    stored = json.loads(path.read_text())["shapes"]
    assert set(stored) == {
        "n_tokens=1,d_hidden=2,d_inter=3,n_experts=4,topk=5",
        "n_tokens=1,d_hidden=2,d_inter=3,n_experts=4,topk=6",
    }


@pytest.mark.parametrize(
    "content, why",
    [
        ("{not json", "corrupt"),
        ('{"stamp": {}, "shapes": []}', "corrupt"),
        ("[1, 2]", "corrupt"),
        (json.dumps({"stamp": {**STAMP, "triton": "3.0"}, "shapes": {"1,2,3,4,5": {}}}), "written for another version"),
    ],
)
def test_a_corrupt_or_foreign_choice_file_is_ignored_with_one_line(tmp_path, capsys, content, why):
    path = tmp_path / "choices.json"
    path.write_text(content)
    store = choice_file.ChoiceFile(path, STAMP)
    assert store.get(Shape(1, 2, 3, 4, 5), "d") is None
    assert store.get(Shape(1, 2, 3, 4, 6), "d") is None
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"moe-mxfp4 select: choice file {path} ignored: {why}")
    store.put(Shape(1, 2, 3, 4, 5), "d", ["a"], {"a": 1.0})  # replaced by a valid one
    assert choice_file.ChoiceFile(path, STAMP).get(Shape(1, 2, 3, 4, 5), "d") == ["a"]


def test_a_stored_choice_is_used_without_selecting_and_a_changed_candidate_list_selects_again(tmp_path, data, expected):
    path = tmp_path / "choices.json"
    b = Bench(expected)
    b.selector(
        [b.candidate("static", median=2e-3), b.candidate("alt", median=1e-3)], choice_file.ChoiceFile(path, STAMP)
    )(data)
    b2 = Bench(expected)
    s2 = b2.selector([b2.candidate("static"), b2.candidate("alt")], choice_file.ChoiceFile(path, STAMP))
    assert s2.known(data[-1]) == ("alt", "stored")
    s2(data)
    assert b2.calls == {"alt": 1} and b2.lines == [
        f"moe-mxfp4 select {sel.shape_name(data[-1])}: alt (stored in {path})"
    ]
    b3 = Bench(expected)
    s3 = b3.selector(
        [b3.candidate("static"), b3.candidate("alt"), b3.candidate("new")], choice_file.ChoiceFile(path, STAMP)
    )
    assert s3.known(data[-1]) is None
    s3(data)
    assert b3.calls["new"] == 1 and " -> " in b3.lines[0]


def test_the_stamp_names_the_device_the_versions_and_the_sources(tmp_path):
    (tmp_path / "submission.py").write_text("x = 1\n")
    first = choice_file.stamp(tmp_path)
    assert first["device"] == ("cpu" if not torch.cuda.is_available() else torch.cuda.get_device_name(0))
    assert first["torch"] == torch.__version__ and first["package"] == choice_file.PACKAGE_VERSION
    (tmp_path / "submission.py").write_text("x = 2\n")
    second = choice_file.stamp(tmp_path)["source"]
    assert second != first["source"]
    # A package's modules are the submission's source too; the tools and tests are not.
    for folder in ("kernels", "bench", "tests"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "__init__.py").write_text('"""A package."""\n')
        (tmp_path / folder / "gemm.py").write_text("y = 1\n")
    third = choice_file.stamp(tmp_path)["source"]
    assert third != second
    (tmp_path / "bench" / "gemm.py").write_text("y = 2\n")
    (tmp_path / "tests" / "gemm.py").write_text("y = 2\n")
    assert choice_file.stamp(tmp_path)["source"] == third
    (tmp_path / "kernels" / "gemm.py").write_text("y = 2\n")
    assert choice_file.stamp(tmp_path)["source"] != third


def test_the_package_version_is_pyprojects():
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', text, re.M).group(1) == choice_file.PACKAGE_VERSION


def test_the_cache_folder_follows_xdg_cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert choice_file.default_path() == tmp_path / "moe-mxfp4" / "choices.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert choice_file.default_path().parts[-3:] == (".cache", "moe-mxfp4", "choices.json")


# ------------------------------------------------------------------ candidates


def test_the_static_choice_is_the_first_candidate_on_every_target():
    config = make_config(7168, 256, 256, 8, 1, 16)
    key = Shape.of_config(config)
    gpu = cands.candidates_for(config, "gpu", every=True)
    assert [c.name for c in gpu] == ["triton", *(f"triton:{n}" for n in ALTERNATES[key])]
    assert gpu[0].detail == repr(tile_config(Shape(16, 7168, 256, 257, 9)))
    # by default the static choice and the alternates that won the shape
    won = cands.candidates_for(config, "gpu")
    assert [c.name for c in won] == ["triton", "triton:regs1-off"] and won[1].detail == repr(
        ALTERNATES[key]["regs1-off"]
    )
    amd = cands.candidates_for(config, "gfx950-aiter")
    assert [c.name for c in amd[:3]] == ["aiter", "aiter-fused", "triton"]
    assert [c.name for c in cands.candidates_for(config, "gfx950")][0] == "triton"
    names = [c.name for c in cands.candidates_for(config, "cpu")]
    assert names[0] == "triton" and len(set(names)) == len(names) == 3


def test_the_static_backend_is_aiter_on_an_mi355x_for_every_shape_unless_moe_backend_names_another(monkeypatch):
    monkeypatch.setattr(submission, "default_backend", lambda: "aiter")  # the cached probe of an MI355X with aiter
    monkeypatch.delenv("MOE_BACKEND", raising=False)
    assert submission.selected_backend() == "aiter"
    monkeypatch.setenv("MOE_BACKEND", "triton")
    assert submission.selected_backend() == "triton"


def test_a_cases_shape_is_its_configs_and_its_tensors():
    from bench.runner.case_args import SMOKE

    for case in TESTS + BENCHMARKS + SMOKE:
        shape = {k: v for k, v in case.items() if k != "seed"}
        assert case_shape(case) == Shape.of_config(make_config(**shape))
    for case in SMOKE:
        data = generate_input(**case)
        assert Shape.of(data[0], data[5], data[10]) == case_shape(case) == Shape.of_config(data[-1])
    assert Shape.of_config(make_config(7168, 256, 256, 8, 1, 16)) == Shape(16, 7168, 256, 257, 9)


def test_the_tile_lookups_take_a_shape_and_refuse_a_plain_tuple():
    from moe_triton.tiles_amd import native_tile_config
    from moe_triton.tiles_nvidia import static_tiles

    shape = Shape(n_tokens=16, d_hidden=7168, d_inter=256, n_experts=257, topk=9)
    assert tile_config(shape) == TUNED[shape] and static_tiles(shape, gluon=False) == TUNED[shape]
    for lookup in (tile_config, native_tile_config, lambda s: static_tiles(s, gluon=True)):
        with pytest.raises(TypeError, match=r"^shape: expected a problem.shapes.Shape, got tuple \(7168, 256"):
            lookup((7168, 256, 257, 9, 16))


def test_the_alternates_are_runners_up_of_tuned_shapes_and_differ_from_the_table():
    assert set(ALTERNATES) == set(TUNED)
    for key, alternates in ALTERNATES.items():
        assert 1 <= len(alternates) <= 3
        assert all(t != TUNED[key] for t in alternates.values()), key
        assert len(set(alternates.values())) == len(alternates)


def test_the_default_candidates_on_a_gpu_are_the_static_choice_and_the_selections_winners():
    assert set(SELECTION_WINNERS) <= set(ALTERNATES)
    # on an sm_90 GPU the Gluon stage 1's shapes also keep the decode table's tile
    sm90 = cands.gluon_kernels(torch.device("cuda"))
    for case in TESTS + BENCHMARKS:
        config = make_config(**{k: v for k, v in case.items() if k != "seed"})
        key = Shape.of_config(config)
        names = [c.name for c in cands.candidates_for(config, "gpu")]
        decode = ["triton:decode"] if sm90 and key in GLUON_TUNED else []
        assert names == ["triton", *decode, *(f"triton:{n}" for n in SELECTION_WINNERS.get(key, ()))]
        assert set(SELECTION_WINNERS.get(key, ())) <= set(ALTERNATES.get(key, {}))


def test_the_candidate_set_comes_from_the_environment_and_bad_values_are_refused():
    assert sel.candidate_set({}) == sel.candidate_set({"MOE_SELECT_CANDIDATES": ""}) == "won"
    assert sel.candidate_set({"MOE_SELECT_CANDIDATES": "all"}) == "all"
    with pytest.raises(ValueError, match="^MOE_SELECT_CANDIDATES: expected one of won, all, got 'most'$"):
        sel.candidate_set({"MOE_SELECT_CANDIDATES": "most"})


def test_a_shape_whose_static_choice_is_the_gluon_stage_1_keeps_the_decode_table_as_a_candidate(monkeypatch):
    config = make_config(7168, 2048, 32, 8, 1, 512)
    key = Shape.of_config(config)
    monkeypatch.setattr(cands, "gluon_kernels", lambda device: True)
    found = {c.name: c.detail for c in cands.candidates_for(config, "gpu")}
    assert list(found)[:2] == ["triton", "triton:decode"]
    assert found["triton"] == repr(GLUON_TUNED[key]) and found["triton:decode"] == repr(TUNED[key])
    monkeypatch.setattr(cands, "gluon_kernels", lambda device: False)  # another GPU: the decode table alone
    assert [c.name for c in cands.candidates_for(config, "gpu")] == ["triton"]
    monkeypatch.setattr(cands, "gluon_kernels", lambda device: True)  # every: the decode tile, then every alternate
    names = [c.name for c in cands.candidates_for(config, "gpu", every=True)]
    assert names == ["triton", "triton:decode", *(f"triton:{n}" for n in ALTERNATES[key])]


def test_shape_names_are_the_case_names():
    for case in TESTS + BENCHMARKS:
        config = make_config(**{k: v for k, v in case.items() if k != "seed"})
        assert sel.shape_name(config) == case_name(case)


# ------------------------------------------------------------------ submission and pre-run


@pytest.fixture
def stub_selector(monkeypatch, expected):
    """submission.selector replaced by a counting stub, the static runner by the reference's output."""
    seen = {"selector": 0, "static": 0}

    def fake_selector():
        def run(_data):
            seen["selector"] += 1
            return expected

        return run

    def static(_data):
        seen["static"] += 1
        return expected

    monkeypatch.setattr(submission, "selector", fake_selector)
    monkeypatch.setitem(submission.BACKEND_RUNNERS, "triton", static)
    monkeypatch.delenv("MOE_BACKEND", raising=False)
    return seen


@pytest.mark.parametrize(
    "env, path",
    [
        ({"MOE_SELECT": "0"}, "static"),
        ({"MOE_SELECT": "1", "MOE_BACKEND": "triton"}, "static"),
        ({}, "static"),  # auto: off under the CPU interpreter
        ({"MOE_SELECT": ""}, "static"),  # empty is auto, as an empty MOE_BACKEND is none
        ({"MOE_SELECT": "1"}, "selector"),
    ],
)
def test_moe_select_and_moe_backend_decide_whether_custom_kernel_selects(monkeypatch, stub_selector, data, env, path):
    if torch.cuda.is_available():
        pytest.skip("auto selects on a GPU")
    monkeypatch.delenv("MOE_SELECT", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    submission.custom_kernel(data)
    assert stub_selector == {"selector": int(path == "selector"), "static": int(path == "static")}


def test_a_bad_moe_select_is_refused_in_one_line(monkeypatch, stub_selector, data):
    monkeypatch.setenv("MOE_SELECT", "yes")
    with pytest.raises(ValueError, match=r"^MOE_SELECT: expected one of auto, 1, 0, got 'yes'$"):
        submission.custom_kernel(data)


def test_the_prerun_stops_at_its_deadline_and_cuts_the_last_budget(data, expected, monkeypatch):
    monkeypatch.setenv(sel.BUDGET_ENV, "20")
    clock = Clock()
    b = Bench(expected, clock)
    mocks = [b.candidate("static", cost=40.0), b.candidate("alt", cost=1.0)]
    s = b.selector(mocks)
    budgets = []
    prepare = s.prepare
    s.prepare = lambda d, budget=None: budgets.append(budget) or prepare(d, budget)
    cases = [{**TINY[0], "bs": bs} for bs in (4, 5, 6, 7)]
    lines = []
    prerun.prerun("triton", True, lambda: s, cases=cases, clock=clock, deadline_s=95.0, out=lines.append)
    assert budgets == [20.0, 20.0, 15.0]
    names = [case_name(c) for c in cases]
    assert lines[1] == f"moe-mxfp4 pre-run {names[0]}: static (selected in 40.0 s)"
    assert lines[4] == f"moe-mxfp4 pre-run {names[3]}: skipped (pre-run deadline 95 s)"
    assert lines[-1] == "moe-mxfp4 pre-run done in 120.0 s"
    assert b.calls == {"static": 3}  # checked once per shape (the pre-run returns no output); alt skipped


def test_the_prerun_skips_stored_shapes_and_says_so_without_selection(tmp_path, expected, monkeypatch):
    path = tmp_path / "choices.json"
    b = Bench(expected)
    s = b.selector(
        [b.candidate("static", median=2e-3), b.candidate("alt", median=1e-3)], choice_file.ChoiceFile(path, STAMP)
    )
    lines = []
    prerun.prerun("triton", True, lambda: s, cases=TINY, out=lines.append)
    assert lines[1].startswith(f"moe-mxfp4 pre-run {case_name(TINY[0])}: alt (selected in ")
    b2 = Bench(expected)
    s2 = b2.selector([b2.candidate("static"), b2.candidate("alt")], choice_file.ChoiceFile(path, STAMP))
    lines = []
    prerun.prerun("triton", True, lambda: s2, cases=TINY, out=lines.append)
    assert lines[1] == f"moe-mxfp4 pre-run {case_name(TINY[0])}: alt (stored)" and not b2.calls
    lines = []
    prerun.prerun("triton", False, lambda: pytest.fail("no selector without selection"), out=lines.append)
    assert len(lines) == 1 and lines[0].startswith("moe-mxfp4 submission: backend triton; no selection")
    # without given cases it says what it selects for: TINY on the CPU, the official shapes on a GPU
    lines = []
    monkeypatch.setattr(prerun, "platform", lambda: "cpu")
    prerun.prerun("triton", True, lambda: s2, out=lines.append)
    assert lines[0] == (
        "moe-mxfp4 submission: backend triton; selecting for problem.cases.TINY (1 small shape) under the CPU "
        "interpreter, which would take hours on the official shapes"
    )
    monkeypatch.setattr(prerun, "platform", lambda: "gpu")
    assert prerun._what(None) == "the 10 official shapes (gpu)" and len(prerun.prerun_cases()) == 10


@pytest.mark.parametrize(
    "env, line",
    [
        ({"MOE_SELECT": "2"}, "MOE_SELECT: expected one of auto, 1, 0, got '2'"),
        ({"MOE_SELECT": "yes"}, "MOE_SELECT: expected one of auto, 1, 0, got 'yes'"),
        (
            {"MOE_BACKEND": "bogus"},
            "MOE_BACKEND: unknown backend 'bogus'; choose one of aiter, aiter-fused, triton, reference",
        ),
        ({"MOE_SELECT_BUDGET_S": "abc"}, "MOE_SELECT_BUDGET_S: expected seconds >= 0, got 'abc'"),
        # refused while nothing selects too: the typo shows before the evaluation
        ({"MOE_SELECT": "0", "MOE_SELECT_BUDGET_S": "-1"}, "MOE_SELECT_BUDGET_S: expected seconds >= 0, got '-1'"),
        ({"MOE_TRITON_NATIVE": "2"}, "MOE_TRITON_NATIVE: expected 0 or 1, got '2'"),
        ({"MOE_SELECT_CANDIDATES": "fp8"}, "MOE_SELECT_CANDIDATES: expected one of won, all, got 'fp8'"),
    ],
)
def test_the_prerun_refuses_a_bad_setting_in_one_line_with_status_2(monkeypatch, capsys, env, line):
    for key in ("MOE_SELECT", "MOE_BACKEND", sel.BUDGET_ENV, sel.CANDIDATES_ENV, "MOE_TRITON_NATIVE"):
        monkeypatch.delenv(key, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    never = lambda: pytest.fail("no selector for a bad setting")
    assert prerun.main(submission.selected_backend, submission.selection_on, never, prog="submission.py", argv=[]) == 2
    out, err = capsys.readouterr()
    assert err == f"submission.py: error: {line}\n" and out == ""


@pytest.mark.parametrize("backend", ["aiter", "aiter-fused"])
def test_the_prerun_refuses_an_aiter_backend_where_aiter_cannot_run(monkeypatch, capsys, backend):
    """MOE_BACKEND=aiter on a machine without aiter exited 0, saying "backend aiter"."""
    monkeypatch.setattr(submission, "platform", lambda: "cpu")
    monkeypatch.setenv("MOE_BACKEND", backend)
    never = lambda: pytest.fail("no selector for a bad setting")
    assert prerun.main(submission.selected_backend, submission.selection_on, never, prog="submission.py", argv=[]) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"submission.py: error: MOE_BACKEND={backend}: no ROCm gfx950 GPU here; ") and not out
    assert len(err.splitlines()) == 1


def test_the_prerun_says_what_it_does_and_refuses_arguments(capsys):
    """`python submission.py --help` ran the pre-run."""
    never = lambda: pytest.fail("--help runs nothing")
    with pytest.raises(SystemExit) as done:
        prerun.main(never, never, never, prog="submission.py", argv=["--help"])
    out, err = capsys.readouterr()
    assert done.value.code == 0 and not err
    assert out.startswith("usage: submission.py [-h]\n") and "pre-run" in out and "exit status" in out
    assert all(name in out for name in (*submission.SETTINGS, "XDG_CACHE_HOME"))
    with pytest.raises(SystemExit) as done:
        prerun.main(never, never, never, prog="submission.py", argv=["--deadline", "60"])
    assert done.value.code == 2
    assert capsys.readouterr().err == "submission.py: error: unrecognized arguments: --deadline 60\n"


def test_ctrl_c_in_the_prerun_is_one_line_and_status_130(monkeypatch, capsys):
    class Interrupted:
        def known(self, config):
            return None

        def prepare(self, data, budget=None):
            raise KeyboardInterrupt

    monkeypatch.setattr(prerun, "platform", lambda: "cpu")
    monkeypatch.delenv(sel.BUDGET_ENV, raising=False)
    monkeypatch.delenv("MOE_TRITON_NATIVE", raising=False)
    assert prerun.main(lambda: "triton", lambda: True, Interrupted, prog="submission.py", argv=[]) == 130
    out, err = capsys.readouterr()
    assert err == "submission.py: interrupted (Ctrl-C)\n" and "selecting for problem.cases.TINY" in out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's candidates (a GPU's: bench.seed_check, bench.job)")
def test_end_to_end_the_real_cpu_candidates_select_and_the_output_is_correct(monkeypatch, tmp_path, capfd):
    """MOE_SELECT=1 under the interpreter: the decode table tile, a larger routing block, the native
    path, each checked and timed; the returned output passes the leaderboard's check, the inputs
    are untouched, the choice file holds the order, and a second call prints nothing."""
    monkeypatch.setenv("MOE_SELECT", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("MOE_BACKEND", raising=False)
    monkeypatch.delenv(sel.BUDGET_ENV, raising=False)
    submission.selector.cache_clear()
    data = generate_input(**TINY[0])
    before = [t.clone() for t in data[:-1]]
    try:
        out = submission.custom_kernel(data)
        ok, message = check_implementation(data, out)
        assert ok, message
        assert all(
            torch.equal(a.view(torch.uint8), b.view(torch.uint8)) for a, b in zip(before, data[:-1], strict=True)
        )
        err = capfd.readouterr().err.splitlines()
        lines = [line for line in err if line.startswith("moe-mxfp4 select")]
        assert len(lines) == 1, err
        names = [c.name for c in cands.candidates_for(data[-1], "cpu")]
        assert lines[0].startswith(f"moe-mxfp4 select {case_name(TINY[0])}: {names[0]} ")
        assert all(f" {n} " in lines[0] for n in names) and " -> " in lines[0]
        chosen = submission.selector().choice(data[-1])
        stored = json.loads((tmp_path / "moe-mxfp4" / "choices.json").read_text())["shapes"]
        assert stored[choice_file.key_text(Shape.of_config(data[-1]))]["order"][0] == chosen
        again = generate_input(**{**TINY[0], "seed": 77})
        assert check_implementation(again, submission.custom_kernel(again))[0]
        assert not [line for line in capfd.readouterr().err.splitlines() if line.startswith("moe-mxfp4 select")]
    finally:
        submission.selector.cache_clear()


RANKING = "bench/results/gfx950/native-triton-3.6.0-ranking.json"  # bench/gfx950/write_results.sh


def test_the_native_alternates_follow_the_offline_estimates_ranking():
    """The budget skips the last candidates first: NATIVE_ALTERNATES lists each shape's variants
    in the order of the ESTIMATE's ranking for triton 3.6 (ties keep the table's order). The
    ranking names its cases by the runner's labels (its "key", written before "shape", holds the
    sizes in another order)."""
    ranking = json.loads((Path(__file__).resolve().parents[1] / RANKING).read_text())
    shapes = {
        f"{group}{i}": case_shape(c)
        for group, cases in (("test", TESTS), ("bench", BENCHMARKS))
        for i, c in enumerate(cases)
    }
    seen = 0
    for label, case in ranking["cases"].items():
        names = list(NATIVE_ALTERNATES.get(shapes[label], {}))
        if not names:
            continue
        estimate = dict(case["variants"])
        assert sorted(names, key=lambda n: estimate[n]) == names, label
        seen += 1
    assert seen == len(NATIVE_ALTERNATES)
