"""Bad input is rejected by custom_kernel with a ValueError naming the argument, before any work."""

import re

import pytest
import torch

import submission
from bench.runner.case_args import SMOKE
from problem import validation
from problem.validation import ARG_NAMES, validate_inputs
from reference import generate_input
from submission import custom_kernel, selected_backend


@pytest.fixture(scope="module")
def data():
    return generate_input(**SMOKE[0])


def replace(data, index, value):
    items = list(data)
    items[index] = value
    return tuple(items)


def test_valid_input_passes(data):
    validate_inputs(data)


@pytest.mark.parametrize("index", range(11), ids=ARG_NAMES[:11])
def test_wrong_dtype_is_named(data, index):
    t = data[index]
    wrong = t.view(torch.uint8).to(torch.float16) if t.element_size() == 1 else t.to(torch.float16)
    bad = replace(data, index, wrong)
    with pytest.raises(ValueError, match=ARG_NAMES[index]):
        custom_kernel(bad)


@pytest.mark.parametrize("index", range(11), ids=ARG_NAMES[:11])
def test_wrong_shape_is_named(data, index):
    t = data[index]
    bad = replace(data, index, t[..., :-1].contiguous() if t.dim() > 1 else t[:-1])
    with pytest.raises(ValueError, match=f"{ARG_NAMES[index]}: shape"):
        custom_kernel(bad)


@pytest.mark.parametrize("index", [0, 1, 3, 9, 10], ids=[ARG_NAMES[i] for i in (0, 1, 3, 9, 10)])
def test_non_contiguous_is_named(data, index):
    t = data[index]
    strided = torch.empty((*t.shape[:-1], 2 * t.shape[-1]), dtype=t.dtype, device=t.device)[..., ::2]
    strided.copy_(t)
    with pytest.raises(ValueError, match=f"{ARG_NAMES[index]}: must be contiguous"):
        custom_kernel(replace(data, index, strided))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (dict(bs=3), r"hidden_states: shape \(8, 512\), expected \(3, 512\) from config"),
        (dict(d_hidden=1024, d_hidden_pad=1024), "hidden_states: shape"),
        (dict(d_expert=512, d_expert_pad=512), "gate_up_weight: shape"),
        (dict(d_hidden_pad=768), "config: d_hidden_pad .* padded shapes are not supported"),
        (dict(d_hidden=320, d_hidden_pad=320), r"config: d_hidden \(320\) must be a multiple of 256"),
        (dict(d_expert=0, d_expert_pad=0), "config: d_expert must be at least 1, got 0"),
        (dict(bs=-2), "config: bs must be at least 1, got -2"),
        (dict(n_shared_experts=-1), "config: n_shared_experts must be at least 0, got -1"),
        (
            dict(n_experts_per_token=9, total_top_k=10),
            r"config: n_experts_per_token \(9\) must be at most n_routed_experts \(8\)",
        ),
        (dict(total_top_k=2), "config: total_top_k"),
        (dict(n_routed_experts=99), "gate_up_weight: shape"),
        # the type first: "512" was refused as a padded shape (its d_hidden_pad, 512, differs)
        (dict(d_hidden="512"), "^config: d_hidden must be an int, got str '512'$"),
        (dict(bs=8.0), "^config: bs must be an int, got float 8.0$"),
        (dict(n_shared_experts=True), "^config: n_shared_experts must be an int, got bool True$"),
        (dict(total_top_k=[5]), r"^config: total_top_k must be an int, got list \[5\]$"),
    ],
)
def test_inconsistent_config_is_named(data, changes, message):
    with pytest.raises(ValueError, match=message):
        custom_kernel(replace(data, 11, {**data[11], **changes}))


def test_missing_config_key_and_wrong_tuple(data):
    config = dict(data[11])
    del config["d_expert"]
    with pytest.raises(ValueError, match="config: missing keys"):
        custom_kernel(replace(data, 11, config))
    with pytest.raises(ValueError, match="data: expected a tuple of 12 items"):
        custom_kernel(data[:11])
    with pytest.raises(ValueError, match="topk_ids: expected a tensor, got list"):
        custom_kernel(replace(data, 10, data[10].tolist()))


def test_unknown_backend_is_named(monkeypatch, data):
    monkeypatch.setenv("MOE_BACKEND", "cuda-magic")
    with pytest.raises(ValueError, match="MOE_BACKEND: unknown backend 'cuda-magic'"):
        custom_kernel(data)
    monkeypatch.setenv("MOE_BACKEND", "reference")
    assert selected_backend() == "reference"


@pytest.mark.parametrize("backend", ["aiter", "aiter-fused"])
@pytest.mark.parametrize(
    "target, why", [("cpu", "no ROCm gfx950 GPU here"), ("gpu", "no ROCm gfx950 GPU here"), ("gfx950", "aiter is not")]
)
def test_an_aiter_backend_where_aiter_cannot_run_is_named(monkeypatch, data, backend, target, why):
    """MOE_BACKEND=aiter raised ModuleNotFoundError from inside the backend."""
    monkeypatch.setattr(submission, "platform", lambda: target)
    monkeypatch.setenv("MOE_BACKEND", backend)
    with pytest.raises(ValueError, match=f"^MOE_BACKEND={backend}: {why}"):
        custom_kernel(data)


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("MOE_SELECT", "yes", "MOE_SELECT: expected one of auto, 1, 0, got 'yes'"),
        ("MOE_SELECT_BUDGET_S", "abc", "MOE_SELECT_BUDGET_S: expected seconds >= 0, got 'abc'"),
        ("MOE_SELECT_BUDGET_S", "-1", "MOE_SELECT_BUDGET_S: expected seconds >= 0, got '-1'"),
        ("MOE_SELECT_CANDIDATES", "some", "MOE_SELECT_CANDIDATES: expected one of won, all, got 'some'"),
        ("MOE_TRITON_NATIVE", "yes", "MOE_TRITON_NATIVE: expected 0 or 1, got 'yes'"),
        ("MOE_BACKEND", "cuda", "MOE_BACKEND: unknown backend 'cuda'"),
    ],
)
@pytest.mark.parametrize("backend", [None, "reference"])
def test_every_setting_is_checked_whether_or_not_it_is_used(monkeypatch, data, name, value, message, backend):
    """MOE_SELECT_BUDGET_S=abc passed unnoticed while nothing selected (MOE_BACKEND set, or no GPU)."""
    for key in submission.SETTINGS:
        monkeypatch.delenv(key, raising=False)
    if backend:
        monkeypatch.setenv("MOE_BACKEND", backend)
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
        custom_kernel(data)


@pytest.mark.parametrize("bad", [999, 9, -1])
def test_expert_ids_out_of_range_are_refused_at_the_first_call_of_a_shape(data, bad, monkeypatch):
    """Every id 999 gave an all-zero output, and ref_kernel an IndexError; the ids are read at the
    first call per shape only (later calls are never synchronised), so the shapes seen are forgotten."""
    monkeypatch.setattr(validation, "_ids_checked", set())
    ids = data[10].clone()
    ids[3, 1] = bad
    with pytest.raises(ValueError, match=rf"^topk_ids: expert id {bad} out of range 0\.\.8 \(n_routed_experts"):
        custom_kernel(replace(data, 10, ids))
    assert not validation._ids_checked  # refused: the next call of the shape is checked again
    validate_inputs(data)
    assert validation._ids_checked
    validate_inputs(replace(data, 10, ids))  # later calls read metadata only


@pytest.mark.parametrize("index", [0, 2, 10], ids=[ARG_NAMES[i] for i in (0, 2, 10)])
def test_device_mismatch_names_the_tensor_that_moved(data, index):
    """The meta device stands for a second device: the checks read metadata only."""
    moved = replace(data, index, data[index].to("meta"))
    others = data[1].device
    with pytest.raises(ValueError, match=rf"^{ARG_NAMES[index]}: on meta, while the other inputs are on {others}$"):
        validate_inputs(moved)
    everything_moved = tuple(t.to("meta") for t in data[:-1]) + (data[-1],)
    validate_inputs(everything_moved)
