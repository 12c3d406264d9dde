"""bench/h200/decode_rate.py: its decode mode against the torch model under the interpreter (the portable decode),
and both K steps compiled for sm_90 here: the same copies and wgmmas, the stand-in decode's loop under half the
instructions of the decode's."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bench.h200 import decode_rate

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.cpu_only
def test_the_decode_mode_gives_the_torch_models_product():
    assert decode_rate.check(torch.device("cpu"), fast=False)


@pytest.mark.cpu_only
def test_the_check_fails_on_a_wrong_product(monkeypatch):
    # the model's scales one binade off: the check must see it
    real = decode_rate.expected
    monkeypatch.setattr(decode_rate, "expected", lambda *args, **kw: 2 * real(*args, **kw))
    assert not decode_rate.check(torch.device("cpu"), fast=False)


COMPILE = "import json; from bench.h200.decode_rate import compiled_for_sm90 as c; print(json.dumps(c()))"


@pytest.mark.cpu_only
def test_both_k_steps_compile_for_sm90_with_the_same_copies_and_wgmmas():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", COMPILE], cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    light, decode = (json.loads(done.stdout.strip().splitlines()[-1])[m] for m in ("light", "decode"))
    # one K step of 256 a loop: 16 k16 wgmmas, the words', scales' and activations' asynchronous copies
    assert decode["wgmmas"] == light["wgmmas"] == 16 and decode["copies"] == light["copies"] > 0, (light, decode)
    assert light["loop"] < decode["loop"] / 2, (light, decode)
    for mode in (light, decode):
        assert mode["spills"] == 0 and mode["registers"] <= 128, mode
