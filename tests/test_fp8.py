"""The fp8 path (moe_triton/kernels/fp8.py, moe_triton/fp8.py) on the CPU: the e4m3 decode of every
e2m1 code at every fold d of the window against the decoded values bit for bit (the portable
integer path the interpreter runs, and a model of the PTX lookup's instructions), the window's
edges, and the layer against reference.ref_kernel under the interpreter (bit for bit where both
sums are exact, the leaderboard's tolerance where crafted scales drive the fallback), with
poisoned scratch and inputs never modified. On a GPU the same layer tests run compiled."""

from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from layer_checks import assert_matches_reference, small_case

from buffers import _pool
from moe_triton import fp8 as fp8_launcher
from moe_triton import routing
from moe_triton.fused_moe import fused_moe_triton
from moe_triton.kernels import fp8 as kernels
from moe_triton.target import interpreting
from moe_triton.tiles import Fp8TileConfig
from problem.cases import SMOKE
from reference import check_implementation, generate_input

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
WINDOW = range(-5, 7)  # the folds d the decode takes (docs/triton.md, "The fp8 path")
# Small fp8 tiles for the interpreter: the fp8 path in both stages.
BOTH = Fp8TileConfig(16, 64, 128, 4, 2, 64, 128, 4, 2, 2)


def run(data, tiles):
    hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
    return fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, tiles=tiles, native=False)


def slot(j: int) -> int:
    """kernels._fp8_slot within a 32-block."""
    return 16 * ((j >> 2) & 1) + 4 * (j >> 3) + (j & 3)


# --------------------------------------------------------------------------- the decode, bit for bit


@triton.jit
def _decode_rows(words_ptr, scales_ptr, top_ptr, out_ptr, ROWS: tl.constexpr):
    r = tl.arange(0, ROWS)
    words = tl.load(words_ptr + r[:, None] * 4 + tl.arange(0, 4)[None, :])
    scales = tl.load(scales_ptr + r[:, None] + tl.arange(0, 1)[None, :])
    codes = kernels._fp4_to_e4m3(words, scales, tl.load(top_ptr + r), ROWS, 32, False)
    values = kernels._fp4_values(words, scales, ROWS, 32, False)
    tl.store(out_ptr + r[:, None] * 64 + tl.arange(0, 32)[None, :], codes.to(tl.float32))
    tl.store(out_ptr + r[:, None] * 64 + 32 + tl.arange(0, 32)[None, :], values)


def all_codes_words() -> torch.Tensor:
    """4 int32 words holding the 16 e2m1 codes twice, code j % 16 at position j."""
    nibbles = torch.arange(32, dtype=torch.int64) % 16
    words = (nibbles.view(4, 8) << (4 * torch.arange(8))).sum(dim=1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def decode_rows(bytes_and_tops):
    """(e4m3 bytes, exact values) of all_codes_words at each (scale byte, base byte), one row each."""
    bytes_and_tops = list(bytes_and_tops) + [bytes_and_tops[-1]] * (16 - len(bytes_and_tops))
    rows = len(bytes_and_tops)
    words = all_codes_words().repeat(rows, 1)
    scales = torch.tensor([b for b, _ in bytes_and_tops], dtype=torch.uint8)
    tops = torch.tensor([t for _, t in bytes_and_tops], dtype=torch.int32)
    out = torch.empty((rows, 64), dtype=torch.float32)
    _decode_rows[(1,)](words, scales, tops, out, ROWS=rows)
    return out[:, :32].to(torch.int32), out[:, 32:]


@pytest.mark.skipif(not interpreting(), reason="the portable decode runs under the interpreter")
def test_every_code_at_every_fold_decodes_to_its_value_bit_for_bit():
    top = 120
    cases = [(top + d - 6, top) for d in WINDOW]  # byte - top + 6 = d
    codes, values = decode_rows(cases)
    for row, d in enumerate(WINDOW):
        for j in range(32):
            c = j % 16
            expected = (-1 if c & 8 else 1) * E2M1[c & 7] * 2.0**d
            want = torch.tensor([expected]).to(torch.float8_e4m3fn).view(torch.uint8).item()
            got = codes[row, slot(j)].item()
            # -0 folds to the e4m3 -0 (0x80); +0 to 0.
            assert got == want, (d, c, hex(got), hex(want))
            assert torch.tensor([got], dtype=torch.uint8).view(torch.float8_e4m3fn).float().item() == expected
            # The fallback's exact values: code x 2^(byte - 127).
            assert values[row, slot(j)].item() == expected * 2.0 ** (top - 6 - 127)


def prmt(a: int, b: int, selector: int) -> int:
    """PTX prmt.b32 (default mode): byte i of the result is byte (selector nibble i & 7) of b:a,
    or that byte's sign bit replicated when the nibble's bit 3 is set."""
    pool = (a & 0xFFFFFFFF) | ((b & 0xFFFFFFFF) << 32)
    out = 0
    for i in range(4):
        nib = (selector >> (4 * i)) & 0xF
        byte = (pool >> (8 * (nib & 7))) & 0xFF
        if nib & 8:
            byte = 0xFF if byte & 0x80 else 0
        out |= byte << (8 * i)
    return out


def ptx_lookup(word: int, t0: int, t1: int) -> tuple[int, int]:
    """The instructions of kernels._e4m3_lookup, one by one."""
    m = word & 0x77777777
    h = m >> 16
    p0, p1 = prmt(t0, t1, m), prmt(t0, t1, h)
    w4 = (word << 4) & 0xFFFFFFFF
    s0, s1 = prmt(w4, word, 0xD9C8) & 0x80808080, prmt(w4, word, 0xFBEA) & 0x80808080
    return p0 | s0, p1 | s1


def test_the_ptx_lookup_is_the_portable_decode():
    # The PTX string's instructions, modelled above: a change there must change the model.
    asm = Path(kernels.__file__).read_text()
    for line in (
        "and.b32 m, $2, 0x77777777;",
        "shr.b32 h, m, 16;",
        "prmt.b32 p0, $6, $10, m;",
        "prmt.b32 p1, $6, $10, h;",
    ):
        assert line in asm
    for line in ("shl.b32 w4, $2, 4;", "prmt.b32 s0, w4, $2, 0xD9C8;", "prmt.b32 s1, w4, $2, 0xFBEA;"):
        assert line in asm
    words = [int(w) & 0xFFFFFFFF for w in all_codes_words()]
    for d in WINDOW:
        top = 150
        s = top + d - 6
        # The two tables as _fp4_to_e4m3 builds them (int32 arithmetic, wrapping).
        t0 = (s * 0x08080800 + (12 - top) * 0x08080800 + 0x0C080000) & 0xFFFFFFFF
        t1 = (s * 0x08080808 + (12 - top) * 0x08080808 + 0x1C181410) & 0xFFFFFFFF
        for t, word in enumerate(words):
            lo, hi = ptx_lookup(word, t0, t1)
            for i in range(8):
                c = (word >> (4 * i)) & 0xF
                want = (c & 8) << 4 | (0 if c & 7 == 0 else (d + 6) * 8 + (0 if c & 7 == 1 else 4 * (c & 7)))
                got = ((lo if i < 4 else hi) >> (8 * (i % 4))) & 0xFF
                assert got == want, (d, t, i, hex(got), hex(want))


# --------------------------------------------------------------------------------- the window


@triton.jit
def _row_bases_kernel(scale_ptr, top_ptr, bad_ptr, k_dim, ROWS: tl.constexpr):
    rows = tl.arange(0, ROWS)
    top, bad = kernels._row_bases(scale_ptr, rows, k_dim, ROWS)
    tl.store(top_ptr + rows, top)
    tl.store(bad_ptr + rows, bad.to(tl.int32))


@pytest.mark.skipif(not interpreting(), reason="a unit kernel under the interpreter")
def test_the_weight_window_is_twelve_octaves_below_the_rows_largest_byte():
    rows = torch.full((8, 40), 120, dtype=torch.uint8)  # 40 blocks: the row scan's two chunks
    rows[1, 33] = 120 - 11  # the window's lowest byte: fits
    rows[2, 3] = 120 - 12  # one below it
    rows[3, :], rows[3, 0] = 191, 191 - 11  # the largest base the window takes, with its lowest byte
    rows[4, :] = 192  # one above
    rows[5, :] = 64  # the smallest base
    rows[6, :] = 63
    rows[7, 7] = 255  # a NaN scale
    top, bad = torch.empty(8, dtype=torch.int32), torch.empty(8, dtype=torch.int32)
    _row_bases_kernel[(1,)](rows, top, bad, 40 * 32, ROWS=8)
    assert top.tolist() == [120, 120, 120, 191, 192, 64, 63, 255]
    assert bad.tolist() == [0, 0, 1, 0, 1, 0, 1, 1]


# --------------------------------------------------------------------------------- the layer


def test_a_smoke_case_matches_the_reference():
    data = generate_input(**SMOKE[1])
    assert_matches_reference(data, run(data, BOTH))


def test_tiles_that_do_not_divide_the_shape_with_poisoned_scratch_and_inputs_unchanged(monkeypatch):
    # The table's form (the fp8 stage 1, the decode path's stage 2): d_inter 768 is 1.5 stage-1
    # tiles of 512 columns (block_k1 128: 73,728 bytes of shared memory on sm_90, compiled); stage-2
    # programs of 3 tiles of 256 columns cover d_hidden 512 and a tile past its end. Every scratch
    # buffer starts as 0xFF bytes.
    real = fp8_launcher.get_buffer

    def poisoned(*args, **kwargs):
        buf = real(*args, **kwargs)
        buf.view(torch.uint8).fill_(0xFF)
        return buf

    monkeypatch.setattr(fp8_launcher, "get_buffer", poisoned)
    monkeypatch.setattr(routing, "get_buffer", poisoned)  # the routing arrays
    data = generate_input(**small_case(dhidden=512, dexpert=768, bs=5, seed=4))
    before = [t.clone() for t in data if isinstance(t, torch.Tensor)]
    out = run(data, Fp8TileConfig(16, 512, 128, 4, 2, 256, 256, 4, 2, 3, decode_stage2=True))
    for t, b in zip((t for t in data if isinstance(t, torch.Tensor)), before, strict=True):
        assert torch.equal(t.view(torch.uint8), b.view(torch.uint8))
    assert_matches_reference(data, out)


# block_k1 256 at block_n1 512: 409,600 bytes of shared memory in stage 1 (sm_90, compiled), over the
# H200's 232,448.
TOO_LARGE = Fp8TileConfig(16, 512, 256, 4, 2, 256, 256, 4, 2, 3, decode_stage2=True)


@pytest.mark.skipif(interpreting() or not torch.cuda.is_available(), reason="a GPU's limits")
def test_a_tile_the_gpu_cannot_launch_is_refused_in_one_line():
    data = generate_input(**small_case(dhidden=512, dexpert=768, bs=5, seed=4))
    with pytest.raises(ValueError, match=r"^tiles: moe_fp8_stage1_kernel needs shared memory 409,600 and this GPU"):
        run(data, TOO_LARGE)


def test_out_of_resources_at_launch_becomes_a_value_error_naming_the_kernel(monkeypatch):
    from triton.runtime.errors import OutOfResources

    class Refusing:
        __name__ = "moe_fp8_stage1_kernel"

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                raise OutOfResources(409600, 232448, "shared memory")

            return launch

    with pytest.raises(ValueError) as raised:
        fp8_launcher._launch(Refusing(), (1,))
    assert str(raised.value) == (
        "tiles: moe_fp8_stage1_kernel needs shared memory 409,600 and this GPU has 232,448; "
        "choose smaller block or stage fields"
    )


def crafted(seed: int = 23):
    """An input whose scales send some programs of every launch to the fallback: token 0 has a
    block 20 octaves below the rest of its row (outside a1's window), token 1 a block 11 octaves
    below (inside, at its edge) and token 2 is 2^-80 (a base below the window's range); the gate
    row 0 of every expert has a block 20 octaves low (stage 1's weights), and so does row 0 of
    every expert's down projection (stage 2's weights); the up rows of h's first 32 columns are
    2^-40 (a2 blocks far below the others of their K step)."""
    data = list(generate_input(**small_case(bs=5, seed=seed)))
    hidden, w1s, w2s = data[0].clone(), data[3].view(torch.uint8).clone(), data[4].view(torch.uint8).clone()
    hidden[0, 64:96] *= 2.0**-20
    hidden[1, 96:128] *= 2.0**-11
    hidden[2] *= 2.0**-80
    n_experts, two_inter, d_hidden = data[1].shape[0], data[1].shape[1], hidden.shape[1]
    inter = two_inter // 2
    for e in range(n_experts):
        w1s[e * two_inter, 2] -= 20
        w1s[e * two_inter + inter : e * two_inter + inter + 32] -= 40
        w2s[e * d_hidden, 1] -= 20
    data[0], data[3], data[4] = hidden, w1s.view(data[3].dtype), w2s.view(data[4].dtype)
    return tuple(data)


def test_inputs_outside_the_window_take_the_exact_fallback():
    # Stage-2 programs of 3 tiles of 128 columns: d_hidden 256 and a tile past its end.
    data = crafted()
    out = run(data, BOTH._replace(block_n2=128, n_tiles2=3))
    ok, msg = check_implementation(data, out)
    assert ok, msg
    # The detection itself: tokens 0 and 2 are marked outside the window, token 1 is not.
    (bases,) = [b for (name, shape, *_), b in _pool.items() if name == "fp8_a1_base" and shape == (5,)]
    outside = (bases[:3] == kernels.OUT_OF_WINDOW.value).tolist()
    assert outside == [True, False, True]


@pytest.mark.parametrize("field", ["block_k1", "block_k2", "acc_k", "tail_m"])
def test_tiles_the_kernels_cannot_take_are_refused_in_one_line(field):
    bad = {"block_k1": 48, "block_k2": 96, "acc_k": 512, "tail_m": 24}[field]
    data = generate_input(**small_case())
    with pytest.raises(ValueError, match=field):
        run(data, BOTH._replace(**{field: bad}))
