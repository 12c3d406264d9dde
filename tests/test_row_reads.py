"""bench/h200/row_reads.py: its kernel against the torch model under the interpreter, for every chunk and layout,
and a wrong model seen as wrong."""

import pytest
import torch

from bench.h200 import row_reads


@pytest.mark.cpu_only
def test_every_chunk_and_layout_gives_the_torch_models_xor():
    assert row_reads.check(torch.device("cpu"))


@pytest.mark.cpu_only
def test_the_check_fails_on_a_wrong_model(monkeypatch):
    real = row_reads.expected
    monkeypatch.setattr(row_reads, "expected", lambda w, chunk, scattered: real(w, chunk, not scattered))
    assert not row_reads.check(torch.device("cpu"))


@pytest.mark.cpu_only
def test_both_layouts_read_each_word_once():
    for chunk in row_reads.CHUNKS:
        for scattered in (True, False):
            row, step = row_reads.strides(chunk, scattered)
            words = chunk // 4
            steps = range(row_reads.ROW_WORDS // words)
            read = {r * row + s * step + j for r in range(64) for s in steps for j in range(words)}
            assert read == set(range(64 * row_reads.ROW_WORDS)), (chunk, scattered)


def test_without_a_gpu_it_says_why(capsys):
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert row_reads.main([]) != 0
    assert "no NVIDIA GPU here" in capsys.readouterr().err
