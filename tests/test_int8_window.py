"""bench/h200/int8_window.py: the int8 path's window (a chunk's scale bytes within 3 of its
smallest) on crafted scales, and the fraction of products whose two windows hold."""

import pytest
import torch

from bench.h200.int8_window import hit_rates, joint_fraction, window_holds


def scales(*rows):
    return torch.tensor(rows, dtype=torch.uint8)


def test_a_span_of_exactly_three_holds_and_four_does_not():
    s = scales([127, 130, 128, 129], [127, 131, 128, 129], [120, 120, 120, 120])
    assert window_holds(s, 4).tolist() == [[True], [False], [True]]


def test_the_window_is_taken_from_each_chunks_own_smallest_byte():
    # 100..103 then 200..203: each chunk of 4 holds, a chunk of 8 spans 103
    s = scales([100, 103, 101, 102, 200, 203, 202, 201])
    assert window_holds(s, 4).tolist() == [[True, True]]
    assert window_holds(s, 8).tolist() == [[False]]
    assert window_holds(s, 2).tolist() == [[True, True, True, True]]


def test_a_chunk_of_one_block_always_holds():
    s = scales([0, 255, 7, 140])
    assert window_holds(s, 1).all()


def test_a_short_last_chunk_is_judged_on_its_own_blocks():
    s = scales([10, 11, 12, 13, 50, 54], [10, 11, 12, 13, 50, 53])
    assert window_holds(s, 4).tolist() == [[True, False], [True, True]]


def test_e8m0_scales_are_read_as_their_bytes():
    s = scales([127, 131]).view(torch.float8_e8m0fnu)
    assert window_holds(s, 2).tolist() == [[False]]


@pytest.mark.parametrize(
    "bad, chunk, message",
    [(torch.zeros(4, dtype=torch.uint8), 2, "scales: expected"), (torch.zeros(2, 4, dtype=torch.uint8), 0, "chunk:")],
)
def test_bad_arguments_are_named(bad, chunk, message):
    with pytest.raises(ValueError, match=message):
        window_holds(bad, chunk)


def test_a_product_holds_where_both_operands_windows_hold():
    act = torch.tensor([[True, False], [True, True]])  # two activation rows, two chunks
    weights = torch.tensor([[[True, True], [False, True]], [[True, True], [True, True]]])  # 2 experts x 2 rows
    # activation row 0 meets expert 0: chunk 0 holds for one weight row of two, chunk 1 for none
    # (its own window fails); row 1 meets expert 1: all four products hold
    pairs = [(torch.tensor([0]), 0), (torch.tensor([1]), 1)]
    assert joint_fraction(act, weights, pairs) == pytest.approx((1 + 0 + 4) / 8)


def test_hit_rates_per_operand_and_per_stage():
    held, broken = [127] * 8, [120, 124, 127, 127, 127, 127, 127, 127]  # the first chunk of 4 spans 7
    data = {
        "a1": scales(held, broken),
        "w1": scales(held, held).reshape(1, 2, 8),
        "w2": scales(held).reshape(1, 1, 8),
        "a2": scales(broken),
        "pairs1": [(torch.tensor([0, 1]), 0)],
        "pairs2": [(torch.tensor([0]), 0)],
    }
    rates = hit_rates(data, chunks=(4,))[4]
    assert rates["a1"] == 0.75 and rates["w1"] == 1.0 and rates["a2"] == 0.5
    assert rates["stage1"] == 0.75 and rates["stage2"] == 0.5
