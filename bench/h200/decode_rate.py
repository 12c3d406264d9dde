"""`python -m bench.h200.decode_rate`: how fast the decode path's weight stream can run on this NVIDIA GPU, without
routing: the decode stage 1's programs (64 weight rows each over all of K, its tile: 4 warps, K steps of 256, three
stages, 128 registers, one wgmma wait a step, a 16-row activation tile) on the stage-1 weight bytes of a benchmark
shape (its experts hit times gate_up's rows), in four modes:

  stream  the same bytes read by a plain streaming kernel (bench.h200.calibrate's), one program a weight tile;
  light   the decode stage 1's K step with a stand-in for the decode: the same loads and MMA, four instructions
          a weight word instead of about twenty-one, meaningless values;
  decode  the decode stage 1's K step itself (kernels/decode.py's _weight_step, the fast decode);
  decode128  the same with the activations in k_slot order of span 128 (the tiles' slot_span1 128): a thread
          decodes one 32-block's four words of each 128 columns, one scale byte for the four.

Each is timed the way bench/tune/tiles.py times a kernel (an L2 flush, events around one launch, the median).
stream against light says what the K step's structure (copies, barriers, the MMA and its wait) costs beside the
bytes, light against decode what the decode's instructions cost, decode against decode128 what the scale bytes a word
cost. The decode modes are first checked against a torch
model of its product on a small set. Writes decode_rate.json and .md under --out.
"""

from __future__ import annotations

import statistics
import sys

import triton
import triton.language as tl

from moe_triton.kernels.decode import FAST_EXP, _weight_step, _whole_dot, in_slot_order, k_slot, weight_tile

COLS = 64  # weight rows a program: wgmma's M, the decode stage 1's 2 x block_n1 32
ROWS = 16  # activation rows: E-257 bs-16's routing block
BLOCK_K = 256
# Stage-1 weight rows of the benchmark shapes' experts hit (reference routing; bench/notes/nvidia-speed.md):
# E-257 bs-16 and bs-128, 2 x d_inter 256 rows each
SETS = {"E-257 bs-16": 105 * 512, "E-257 bs-128": 252 * 512}
K_DIM = 7168
SCALE_BYTES = (118, 124)  # the benchmark weights' e8m0 range, so every product is exact on the fast path


@triton.jit
def _light_step(acc, a, w_ptr, w_scale_ptr, w_rows, k_dim, k0, BLOCK_K: tl.constexpr, COLS: tl.constexpr):
    """_weight_step's K step with a stand-in for the decode: the same loads (words and scales), the same layout into
    the MMA, but four instructions a word instead of about twenty-one (each word and three XORs of it taken as bf16
    pairs, the scale XOR-ed into the first); the values are meaningless (NVIDIA PTX only)."""
    G: tl.constexpr = BLOCK_K // 32
    words, ws = weight_tile(w_ptr, w_scale_ptr, w_rows, k_dim, k0, BLOCK_K)
    x = tl.reshape(words, (COLS, G, 4)) ^ tl.reshape(ws, (COLS, G, 1)).to(tl.int32)
    codes = tl.join(tl.join(_as_pairs(x), _as_pairs(x ^ 0x1111)), tl.join(_as_pairs(x ^ 0x2222), _as_pairs(x ^ 0x3333)))
    w = in_slot_order(codes, COLS, BLOCK_K, 32)
    return tl.dot(w, tl.trans(a), acc)


@triton.jit
def _as_pairs(x):
    """int32 -> its two bf16 halves [..., 2], no instruction (NVIDIA PTX)."""
    return tl.inline_asm_elementwise(
        "mov.b32 $0, $1;", "=r,r,r", [tl.join(x, x)], dtype=tl.bfloat16, is_pure=True, pack=2
    )


@triton.jit
def decode_rate_kernel(
    w_ptr,
    s_ptr,
    a_ptr,
    out_ptr,
    k_dim,
    LIGHT: tl.constexpr,
    ROWS: tl.constexpr,
    COLS: tl.constexpr,
    BLOCK_K: tl.constexpr,
    FAST: tl.constexpr,
    INTERPRET: tl.constexpr,
    SPAN: tl.constexpr,
):
    """Program p: out [N, ROWS] fp32 rows [COLS p, COLS p + COLS) = weight rows of w ([N, k_dim / 2] fp4 bytes) and s
    ([N, k_dim / 32] e8m0), decoded (times 2^-FAST_EXP with FAST), times the columns of a ([ROWS, k_dim] bf16) in
    k_slot order of SPAN, as the decode stage 1 computes it; with LIGHT the stand-in decode (_light_step) instead."""
    w_rows = (tl.program_id(0) * COLS + tl.arange(0, COLS)).to(tl.int64)
    acc = tl.zeros((COLS, ROWS), dtype=tl.float32)
    for k0 in range(0, k_dim, BLOCK_K):
        a = tl.load(a_ptr + tl.arange(0, ROWS)[:, None] * k_dim + (k0 + tl.arange(0, BLOCK_K))[None, :])
        if LIGHT:
            acc = _light_step(acc, a, w_ptr, s_ptr, w_rows, k_dim, k0, BLOCK_K, COLS)
        else:
            acc = _weight_step(acc, a, w_ptr, s_ptr, w_rows, k_dim, k0, BLOCK_K, COLS, FAST, INTERPRET, SPAN)
        acc = _whole_dot(acc, ROWS, COLS // 2, FAST)
    tl.store(out_ptr + w_rows[:, None] * ROWS + tl.arange(0, ROWS)[None, :], acc)


@triton.jit
def _slots_kernel(out_ptr, N: tl.constexpr, SPAN: tl.constexpr):
    tl.store(out_ptr + tl.arange(0, N), k_slot(tl.arange(0, N), SPAN))


def weight_set(rows: int, k_dim: int, device, seed: int = 0):
    """(fp4 bytes [rows, k_dim / 2] uint8, e8m0 scales [rows, k_dim / 32] uint8 in SCALE_BYTES, bf16 activations
    [ROWS, k_dim]): random codes, the benchmark weights' scale range."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    w = torch.randint(0, 256, (rows, k_dim // 2), dtype=torch.uint8, generator=g)
    s = torch.randint(*SCALE_BYTES, (rows, k_dim // 32), dtype=torch.uint8, generator=g)
    a = torch.randn((ROWS, k_dim), generator=g).to(torch.bfloat16)
    return w.to(device), s.to(device), a.to(device)


def launch(w, s, a, out, light: bool, fast: bool, interpret: bool, span: int = 32) -> None:
    rows, k_dim = w.shape[0], w.shape[1] * 2
    options = {} if interpret else {"num_warps": 4, "num_stages": 3, "maxnreg": 128}
    decode_rate_kernel[(rows // COLS,)](
        w, s, a, out, k_dim, light, ROWS, COLS, BLOCK_K, fast, interpret, span, **options
    )


def expected(w, s, a, fast: bool, span: int = 32):
    """decode_rate_kernel's output without LIGHT at SPAN span, from mxfp4.codec in torch (fp64 [rows, ROWS], on the
    CPU)."""
    import torch

    from mxfp4.codec import dequantize

    k_dim = w.shape[1] * 2
    slots = torch.empty(k_dim, dtype=torch.int32, device=a.device)
    _slots_kernel[(1,)](slots, k_dim, span)
    weights = dequantize(w.cpu(), s.cpu()).double() * (2.0**-FAST_EXP.value if fast else 1.0)
    return weights @ a.cpu()[:, slots.cpu().long()].double().T


def check(device, fast: bool) -> bool:
    """Both decode modes on 8 programs of K 1024 against expected, within the fp32 sums' rounding (1024 exact
    products added in another order than torch's), the output poisoned first."""
    import torch

    w, s, a = weight_set(8 * COLS, 1024, device, seed=1)
    for span in (32, 128):
        out = torch.full((w.shape[0], ROWS), float("nan"), device=device)
        launch(w, s, a, out, False, fast, device.type == "cpu", span)
        want = expected(w, s, a, fast, span)
        if not torch.allclose(out.cpu().double(), want, rtol=1e-5, atol=1e-5 * float(want.abs().max())):
            return False
    return True


def time_set(name: str, rows: int, reps: int, device) -> list[dict]:
    """Each mode on one weight set: median us, and the rate in TB/s of the bytes it reads."""
    import torch

    from bench.h200.calibrate import stream_kernel
    from bench.tune.tiles import time_call

    w, s, a = weight_set(rows, K_DIM, device)
    n_bytes = w.numel() + s.numel()
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=device)
    programs = rows // COLS
    out = torch.empty((rows, ROWS), device=device)
    floats, sums = w.view(torch.float32), torch.empty(programs, device=device)
    runs = {
        "stream": lambda: stream_kernel[(programs,)](floats, sums, floats.numel() // programs, BLOCK=2048, num_warps=4),
        "light": lambda: launch(w, s, a, out, True, True, False),
        "decode": lambda: launch(w, s, a, out, False, True, False),
        "decode128": lambda: launch(w, s, a, out, False, True, False, 128),
    }
    table = []
    for mode, run in runs.items():
        us = statistics.median(time_call(run, reps, flush))
        read = w.numel() if mode == "stream" else n_bytes  # the stream reads the words alone
        table.append({"set": name, "mode": mode, "us": us, "tb_per_s": read / (us * 1e-6) / 1e12, "bytes": read})
        print(f"{name} {mode}: {us:.1f} us {table[-1]['tb_per_s']:.2f} TB/s", flush=True)
    return table


def compiled_for_sm90() -> dict:
    """The three K steps compiled for sm_90 on this machine (E-257 bs-16's set): per mode the K loop's instruction count
    and its copies (LDGSTS) and wgmmas (HGMMA), the registers and the spill instructions."""
    import re

    import torch

    from bench.h200.sass import disassemble, instructions, k_loop, opcode, resources
    from bench.h200.sm90 import compiling_for_sm90

    w, s, a = weight_set(SETS["E-257 bs-16"], K_DIM, torch.device("cpu"))
    out = torch.empty((w.shape[0], ROWS))
    with compiling_for_sm90() as driver:
        for light, span in ((True, 32), (False, 32), (False, 128)):
            launch(w, s, a, out, light, True, False, span)
    compiled = {}
    for mode, launched in zip(("light", "decode", "decode128"), driver.launches, strict=True):
        kernel = launched.kernel
        text = disassemble(kernel.asm["cubin"])
        body = k_loop(instructions(text))
        ops = [opcode(t) for t in body]
        compiled[mode] = {
            "loop": len(body),
            "copies": sum(op.startswith("LDGSTS") for op in ops),
            "wgmmas": sum(op.startswith("HGMMA") for op in ops),
            "registers": resources(kernel.asm["cubin"]).registers,
            "spills": len(re.findall(r"\b(STL|LDL)\b", text)),
        }
    return compiled


def measured(reps: int, device) -> tuple[bool, str, list[dict], list[str]]:
    """The decode modes checked, then every mode timed on each set: checked_probe_main's run."""
    checked = check(device, True)
    rows = [row for name, n in SETS.items() for row in time_set(name, n, reps, device)]
    table = ["| set | mode | us | TB/s |", "|---|---|---:|---:|"]
    table += [f"| {r['set']} | {r['mode']} | {r['us']:.1f} | {r['tb_per_s']:.2f} |" for r in rows]
    return checked, "the decode modes", rows, table


def main(argv: list[str] | None = None) -> int:
    from bench.h200.harness import checked_probe_main

    purpose = "times the decode path's fast decode"
    return checked_probe_main("decode_rate", __doc__, argv, 20, "timed launches per mode and set", purpose, measured)


if __name__ == "__main__":
    sys.exit(main())
