"""bench/h200/decode_rate.py: its decode modes against the torch model under the interpreter (the portable decode),
and the three K steps compiled for sm_90 here: the same copies and wgmmas, the stand-in decode's loop under half the
instructions of the decode's, the decode of span 128's under the decode's."""

import pytest
import torch
from gluon_compile import compiled_by

from bench.h200 import decode_rate


@pytest.mark.cpu_only
def test_the_decode_mode_gives_the_torch_models_product():
    assert decode_rate.check(torch.device("cpu"), fast=False)


@pytest.mark.cpu_only
def test_the_check_fails_on_a_wrong_product(monkeypatch):
    # the model's scales one binade off: the check must see it
    real = decode_rate.expected
    monkeypatch.setattr(decode_rate, "expected", lambda *args, **kw: 2 * real(*args, **kw))
    assert not decode_rate.check(torch.device("cpu"), fast=False)


@pytest.mark.cpu_only
def test_the_check_fails_where_the_span_128_decode_is_taken_for_span_32(monkeypatch):
    real = decode_rate.expected
    monkeypatch.setattr(decode_rate, "expected", lambda w, s, a, fast, span=32: real(w, s, a, fast, 32))
    assert not decode_rate.check(torch.device("cpu"), fast=False)


@pytest.mark.cpu_only
def test_the_k_steps_compile_for_sm90_with_the_same_copies_and_wgmmas():
    compiled = compiled_by("bench.h200.decode_rate", "compiled_for_sm90")
    light, decode, decode128 = compiled["light"], compiled["decode"], compiled["decode128"]
    # one K step of 256 a loop: 16 k16 wgmmas, the words', scales' and activations' asynchronous copies
    assert decode["wgmmas"] == light["wgmmas"] == decode128["wgmmas"] == 16, compiled
    assert decode["copies"] == light["copies"] == decode128["copies"] > 0, compiled
    assert light["loop"] < decode["loop"] / 2, (light, decode)
    # one scale byte for four words instead of one a word
    assert decode128["loop"] < decode["loop"] * 0.95, (decode, decode128)
    for mode in (light, decode, decode128):
        assert mode["spills"] == 0 and mode["registers"] <= 128, mode
