"""bench/h200/int8_probe.py: the decode's bit logic (prmt emulated in numpy) on every code and shift,
the host layouts against it, the torch model, and the kernel compiled for sm_90 here (the CPU)."""

import numpy as np
import pytest
import torch
from gluon_compile import compiled_by

from bench.h200 import int8_probe
from mxfp4.codec import E2M1_VALUES


def test_prmt_selects_bytes_and_copies_signs_where_bit_3_is_set():
    a, b = np.array([0x83020100], dtype=np.uint32), np.array([0x07060504], dtype=np.uint32)
    assert int(int8_probe.prmt(a, b, np.array([0x7654], dtype=np.uint32))[0]) == 0x07060504
    assert int(int8_probe.prmt(a, b, np.array([0x3210], dtype=np.uint32))[0]) == 0x83020100
    # selector 0xB picks byte 3 (0x83) in sign mode: 0xFF; 0x9 picks byte 1 (0x01): 0x00
    assert int(int8_probe.prmt(a, b, np.array([0x9B], dtype=np.uint32))[0]) == 0x000000FF


@pytest.mark.parametrize("d", range(4))
def test_the_decode_gives_twice_every_e2m1_value_shifted_by_d(d):
    # every code in every nibble position: word i holds code (i + j) % 16 at nibble j
    codes = (np.arange(16)[:, None] + np.arange(8)[None, :]) % 16
    words = (codes.astype(np.uint64) << (4 * np.arange(8, dtype=np.uint64))).sum(1).astype(np.uint32)
    decoded = int8_probe.decode_model(words, np.full(16, d))
    expected = np.array([int(2 * E2M1_VALUES[c]) << d for c in codes.ravel()]).reshape(16, 8)
    assert decoded.dtype == np.int8
    assert (decoded.astype(int) == expected).all()
    assert np.abs(decoded).max() == 12 << d


def test_the_kernel_words_decode_into_the_kernels_k_order():
    g = torch.Generator().manual_seed(1)
    codes = torch.randint(0, 16, (3, 256), generator=g, dtype=torch.uint8)
    d = torch.randint(0, 4, (3, 8), generator=g, dtype=torch.uint8)
    words = int8_probe.kernel_words(codes).numpy().view(np.uint32)  # [3, 32]: 16 a K step
    # word 4 j + t of step S belongs to block 4 S + t: the shift byte t of the step's packed word
    shifts = int8_probe.packed_shifts(d).T.numpy().view(np.uint32)  # [3, 2]
    t = np.arange(32) % 4
    word_d = (shifts[:, np.arange(32) // 16] >> (8 * t)) & 3
    decoded = int8_probe.decode_model(words, word_d)  # [3, 32, 8]: word, then its 8 codes
    # in registers: word (S, j, t) half h byte b -> position 128 S + 32 j + 16 h + 4 t + b
    in_registers = decoded.reshape(3, 2, 4, 4, 2, 4).transpose(0, 1, 2, 4, 3, 5).reshape(3, 256)
    expected = int8_probe.kernel_order(int8_probe.shifted_values(codes, d))
    assert (in_registers.astype(int) == expected.numpy()).all()


def test_kernel_order_is_a_permutation_within_each_k_step():
    x = torch.arange(2 * 256).reshape(2, 256)
    ordered = int8_probe.kernel_order(x)
    assert (ordered.sort(dim=1).values == x).all()
    assert not (ordered == x).all()
    assert (ordered[:, :128].sort(dim=1).values == x[:, :128]).all()


def test_the_model_is_the_exact_product_rounded_once_per_chunk():
    inputs = int8_probe.probe_inputs(8, 16, 512, 8, "cpu", seed=3)
    got = int8_probe.model(inputs, 8)
    w = int8_probe.shifted_values(inputs["w_codes"], inputs["w_d"]).double()
    a = inputs["a"].double()
    acc = torch.zeros(8, 16, dtype=torch.float32)
    for c in range(2):  # 512 / (32 x 8)
        part = w[:, 256 * c : 256 * c + 256] @ a[:, 256 * c : 256 * c + 256].T
        assert part.abs().max() < 2**22  # the bias conversion's exact range
        exact = part * inputs["w_scale"][c].double()[:, None] * inputs["a_scale"][c].double()[None, :]
        acc = (acc.double() + exact).float()  # one rounding per chunk
    assert torch.equal(got, acc)


def test_the_window_bound_on_a_chunk_sum():
    # the largest |sum| of a chunk of MAX_CHUNK blocks, 96 x 96 per product, stays in the bias's range
    assert int8_probe.MAX_CHUNK * 32 * 96 * 96 < 2**22
    assert int8_probe.decode_model(np.array([0x77777777], dtype=np.uint32), np.array([3])).max() == 96


@pytest.mark.parametrize(
    "kwargs, message",
    [(dict(decode="fp8"), "decode:"), (dict(chunk=16), "chunk:"), (dict(chunk=3), "chunk:")],
)
def test_bad_launch_arguments_are_named(kwargs, message):
    operands = {"words": torch.zeros(128, 16, dtype=torch.int32), "a": torch.zeros(128, 128, dtype=torch.int8)}
    with pytest.raises(ValueError, match=message):
        int8_probe.decoded_gemm(operands, torch.empty(128, 128), **kwargs)


def test_a_shape_off_the_tiles_is_named():
    operands = {"words": torch.zeros(100, 16, dtype=torch.int32), "a": torch.zeros(128, 128, dtype=torch.int8)}
    with pytest.raises(ValueError, match="shape:"):
        int8_probe.decoded_gemm(operands, torch.empty(100, 128))


@pytest.mark.cpu_only
def test_the_int8_kernel_compiles_for_sm90_with_register_a_int8_wgmmas():
    # in a fresh process without the interpreter: the bf16 variant's decode (moe_triton) was made
    # for the interpreter when this process imported it
    compiled = compiled_by("bench.h200.int8_probe", "compiled_for_sm90", "int8-chunk8")
    assert compiled["mma_kinds"] == {"IGMMA.64x128x32.S8.S8": 8}  # 4 a K step in each MMA warpgroup
    ops = compiled["loop_ops"]
    assert ops["IGMMA"] == 4 and ops["PRMT"] == 32  # 8 words a thread a step, 4 byte permutes each
    assert ops["FFMA"] == 128  # the promotion: two fused multiply-adds per accumulator element
