"""bench/h200/decode_rate.py: its decode mode against the torch model under the interpreter (the portable decode),
and both K steps compiled for sm_90 here: the same copies and wgmmas, the stand-in decode's loop under half the
instructions of the decode's."""

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
def test_both_k_steps_compile_for_sm90_with_the_same_copies_and_wgmmas():
    compiled = compiled_by("bench.h200.decode_rate", "compiled_for_sm90")
    light, decode = compiled["light"], compiled["decode"]
    # one K step of 256 a loop: 16 k16 wgmmas, the words', scales' and activations' asynchronous copies
    assert decode["wgmmas"] == light["wgmmas"] == 16 and decode["copies"] == light["copies"] > 0, (light, decode)
    assert light["loop"] < decode["loop"] / 2, (light, decode)
    for mode in (light, decode):
        assert mode["spills"] == 0 and mode["registers"] <= 128, mode
