"""`python -m bench.h200.int8_stage1 [--shapes NAME...] [--out DIR]`: the decode regime's stage 1 on Hopper's
int8 wgmma, probed at the weight-bound shapes before the package is built that way.

The decode stage 1 spends about 4.2 instructions a lane per weight value at E-257 bs-16 (Nsight Compute,
2026-12-06), about 20 a word of 8 codes in the decode (code_pairs, scaled_pairs and the scales), and its
schedulers issue on 60% of the cycles: the decode's instructions are a first-order cost. Twice an e2m1
value is an integer in [-12, 12]; shifted left by d in 0..3 (a block's scale byte minus the smallest of
its chunk's) it fits int8, and int8 wgmma sums exactly in int32 (bench/h200/int8_probe.py, whose decode,
11 instructions a word, this reuses). Here a chunk is two K steps of 128 (8 blocks, at most 8 x 32 x 96 x
96 < 2^22, where the fp32 bias conversion is exact); each chunk's int32 sums enter the fp32 accumulator
with one rounding, times 2^(base - 128) of the weight row and of the token. The sums g and u are exact in
fp32 (docs/numerics.md), so a2 is the decode path's bit for bit wherever every chunk of a weight row and
of an activation row lies within 4 binades; the probe has no fallback for a chunk that does not (the
weights' and a1's windows are counted, and the task's data held them all, bench/notes/nvidia-speed.md).

The kernel is the Gluon stage 1 with one warpgroup (moe_triton/kernels/gluon_stage1.py's one-warpgroup
form: the warpgroup fills its own ring, 64 weight rows of 32 h columns a program, its epilogue) with the
weights decoded into int8 and the activations int8 in the ring. Weight words are copied as they are and
read through a transposed view of the slot, so that thread q of a row's four decodes block q of each K
step (one shift, one table pair a row and step); a wgmma k32 then mixes a step's four blocks. Within a
chunk that is free: every value carries its own block's shift, and the chunk's sums are exact in int32
whatever their order. The activations, prepared here in torch (as a prep kernel would), are laid out to
match (int8_probe.kernel_order): position 32 j + 16 h + 4 q + b of a K step holds element 32 q + 8 j +
4 h + b.

On an NVIDIA GPU, per shape: the package runs the decode table's tile once (its routing and a2), the
probe runs on the same routing, its a2 on the real rows is compared bit for bit with the decode path's,
and the stage-1 kernels' GPU times (bench.tune.tiles.kernel_times, each call after an L2 flush) of the
decode tile, the one-warpgroup bf16 Gluon tile and the probe are written to int8_stage1.json and .md.
Without a GPU it compiles the probe for sm_90 (the first shape's tile) and prints its chunk loop's instructions.

Measured on an H100 (2026-12-06): exact at the five shapes, 1-9% faster than the bf16 one-warpgroup form
and slower than the decode stage 1 at the 16-row blocks (bench/results/h100/int8-stage1-2026-12-06.md).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.h200.int8_probe import (  # noqa: E402 (the repository root first)
    DECODE_ASM,
    HI_TABLE,
    LO_TABLE,
    four,
    kernel_order,
    promote,
)
from moe_triton.kernels.gluon_mma import (  # noqa: E402
    WORDS_LAYOUT,
    allocate_ring,
    fill_slot,
    row_offsets,
    row_range,
    scales_layout,
    step_offsets,
    weight_sources,
)
from moe_triton.kernels.gluon_stage1 import GROUP, ring_row, store_a2  # noqa: E402
from moe_triton.kernels.routing import skip_block  # noqa: E402

BLOCK_K = gl.constexpr(128)
CHUNK_STEPS = gl.constexpr(2)  # K steps a chunk: 8 blocks
# int8_probe's tables: 2 x |e2m1| of magnitude codes 0-3 and 4-7, a byte each
LOW_CODES, HIGH_CODES = gl.constexpr(LO_TABLE), gl.constexpr(HI_TABLE)
SHAPES = ("E256+1-k8+1-bs16", "E256+1-k8+1-bs128", "E256+1-k8+1-bs512", "I512-E32+1-k8+1-bs16")


# ----------------------------------------------------------------------------- the kernel


@gluon.jit
def _int8_weights(w_slot, d_word, acc_layout: gl.constexpr):
    """A K step of the warpgroup's 64 weight rows as wgmma's int8 register operand [64, 128] in int8_probe's K
    order: thread q of a row's four decodes words 4 q .. 4 q + 3 (block q of the step) with that block's shift,
    byte q of d_word (SliceLayout(1) of the words' layout)."""
    w_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=1)
    # column 4 j + q of the loaded words is word 4 q + j of the slot: a thread's words are one block's
    words = w_slot.reshape([64, 4, 4]).permute([0, 2, 1]).reshape([64, 16]).load(w_layout)
    block = gl.arange(0, 16, layout=gl.SliceLayout(0, w_layout)) % 4
    d = (gl.expand_dims(d_word, 1) >> (8 * gl.expand_dims(block, 0))) & 3
    lo, hi = gl.inline_asm_elementwise(
        DECODE_ASM,
        "=r,=r,r,r,r,r,r,r,r,r,r,r,r,r",
        [four(words), four(LOW_CODES << d), four(HIGH_CODES << d)],
        dtype=(gl.int8, gl.int8),
        is_pure=True,
        pack=4,
    )
    v = gl.reshape(gl.join(lo, hi), [64, 4, 4, 4, 2])  # row, word j of the block, thread q, byte b, half h
    v = gl.reshape(gl.permute(v, [0, 1, 4, 2, 3]), [64, 128])  # row, j, h, q, b
    return gl.convert_layout(v, gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=4), assert_trivial=True)


@gluon.jit
def _chunk_base(s0, s1):
    """The smallest of the 8 scale bytes of two int32 words (a row's chunk), as int32."""
    base = s0 & 0xFF
    for k in gl.static_range(1, 4):
        base = gl.minimum(base, (s0 >> (8 * k)) & 0xFF)
    for k in gl.static_range(4):
        base = gl.minimum(base, (s1 >> (8 * k)) & 0xFF)
    return base


@gluon.jit
def moe_int8_stage1_kernel(
    a_ptr,
    a_scale_ptr,
    w_ptr,
    w_scale_ptr,
    a2_ptr,
    sorted_ids_ptr,
    sorted_expert_ids_ptr,
    num_valid_ids_ptr,
    n_tokens,
    d_hidden,
    d_inter,
    BLOCK_M: gl.constexpr,
    ROWS: gl.constexpr,
    STAGES: gl.constexpr,
    CK: gl.constexpr,
):
    """a (int8 [n_tokens, d_hidden], kernel_order) and a_scale (fp32 [n_tokens, d_hidden / 256], the
    token's 2^(base - 128) a chunk), w1's words and scales (int32 views as the Gluon stage 1 takes them) -> a2,
    32 h columns a program; num_warps 4, d_hidden a multiple of 256."""
    block = gl.program_id(0)
    if not skip_block(block, sorted_ids_ptr, num_valid_ids_ptr, n_tokens, BLOCK_M, ROWS, 0):
        col0 = gl.program_id(1) * GROUP
        w_row0 = gl.load(sorted_expert_ids_ptr + block) * 2 * d_inter + col0
        ring = allocate_ring(STAGES, 2 * GROUP, ROWS, BLOCK_K, 1, gl.int8)
        w_ring, s_ring, a_ring, ready, empty = ring
        tokens = gl.load(sorted_ids_ptr + row_range(block * BLOCK_M, ROWS)) & 0xFFFFFF
        w_rows = ring_row(gl.arange(0, 2 * GROUP, layout=gl.SliceLayout(1, WORDS_LAYOUT)), d_inter)
        s_rows = ring_row(gl.arange(0, 2 * GROUP, layout=scales_layout(2 * GROUP)), d_inter)
        words, scales = weight_sources(w_ptr, w_scale_ptr, w_row0 + w_rows, w_row0 + s_rows, d_hidden, BLOCK_K)
        sources = (words, scales, (a_ptr, row_offsets(tokens, d_hidden, BLOCK_K)))
        valid = gl.expand_dims(tokens < n_tokens, 1)
        steps = d_hidden // BLOCK_K
        for i in range(gl.minimum(STAGES, steps)):
            fill_slot(i, ring, sources, step_offsets(i, BLOCK_K), valid, STAGES)
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, ROWS, 32]
        )
        w_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=1)
        acc = gl.zeros([2 * GROUP, ROWS], gl.float32, acc_layout)
        acc_i = gl.zeros([2 * GROUP, ROWS], gl.int32, acc_layout)
        # each token's chunk scale, loaded a chunk ahead
        chunks = d_hidden // (CHUNK_STEPS * BLOCK_K)
        a_tokens = gl.load(sorted_ids_ptr + block * BLOCK_M + gl.arange(0, ROWS, gl.SliceLayout(0, acc_layout)))
        a_tokens = a_tokens & 0xFFFFFF
        a_valid = a_tokens < n_tokens
        sa_ptrs = a_scale_ptr + a_tokens * chunks
        sa = gl.load(sa_ptrs, mask=a_valid, other=0.0)
        for c in range(chunks):
            i = c * CHUNK_STEPS
            slot0 = i % STAGES
            slot1 = (i + 1) % STAGES
            mbarrier.wait(ready.index(slot0), (i // STAGES) & 1)
            mbarrier.wait(ready.index(slot1), ((i + 1) // STAGES) & 1)
            fence_async_shared()  # cp.async wrote the slots through the generic proxy; wgmma reads the async one
            sw0 = s_ring.index(slot0).load(gl.SliceLayout(1, w_layout))
            sw1 = s_ring.index(slot1).load(gl.SliceLayout(1, w_layout))
            base = _chunk_base(sw0, sw1)
            # no byte borrows: every byte is at least the base
            w0 = _int8_weights(w_ring.index(slot0), sw0 - base * 0x01010101, acc_layout)
            acc_i = warpgroup_mma(w0, a_ring.index(slot0).permute([1, 0]), acc_i, use_acc=False, is_async=True)
            w1 = _int8_weights(w_ring.index(slot1), sw1 - base * 0x01010101, acc_layout)
            acc_i = warpgroup_mma(w1, a_ring.index(slot1).permute([1, 0]), acc_i, is_async=True)
            acc_i = warpgroup_mma_wait(0, deps=[acc_i])
            mbarrier.arrive(empty.index(slot0), count=1)
            mbarrier.arrive(empty.index(slot1), count=1)
            for j in range(i + STAGES, gl.minimum(i + STAGES + CHUNK_STEPS, steps)):
                fill_slot(j, ring, sources, step_offsets(j, BLOCK_K), valid, STAGES)
            sw = ((base - 1) << 23).to(gl.float32, bitcast=True)  # 2^(base - 128)
            sw = gl.expand_dims(gl.convert_layout(sw, gl.SliceLayout(1, acc_layout)), 1)
            acc = promote(acc, acc_i, sw, gl.expand_dims(sa, 0))
            sa = gl.load(sa_ptrs + gl.minimum(c + 1, chunks - 1), mask=a_valid, other=0.0)
        store_a2(acc, a2_ptr, block * BLOCK_M, col0, d_inter, 0, ROWS, CK, block >= 0, False, 32)


# ----------------------------------------------------------------------------- host side


def int8_activations(hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """SPEC 3.3's a1 of the hidden states as the probe takes it: (int8 (2 e2m1) << d in kernel_order, fp32
    2^(base - 128) per token and chunk, the (token, chunk) windows wider than 4 binades)."""
    from mxfp4.codec import E2M1_VALUES, quantize_activation

    packed, scales = quantize_activation(hidden)
    doubled = torch.tensor([int(2 * v) for v in E2M1_VALUES], dtype=torch.int32, device=hidden.device)
    codes = torch.stack((packed & 0xF, packed >> 4), dim=-1).flatten(-2)  # element 2 j in the low nibble
    values = doubled[codes.long()]
    s = scales.to(torch.int32)
    chunk_blocks = CHUNK_STEPS * BLOCK_K // 32
    base = s.reshape(s.shape[0], -1, chunk_blocks).amin(-1)
    d = s - base.repeat_interleave(chunk_blocks, dim=1)
    wide = int((d.reshape(s.shape[0], -1, chunk_blocks).amax(-1) > 3).sum())
    a = (values << d.clamp(max=3).repeat_interleave(32, dim=1)).to(torch.int8)
    return kernel_order(a).contiguous(), torch.exp2(base.double() - 128).float().contiguous(), wide


def weight_windows(w1_scale: torch.Tensor) -> int:
    """Weight rows' chunks whose scale bytes span more than 4 binades."""
    s = w1_scale.to(torch.int32).reshape(-1, w1_scale.shape[-1] // 8, 8)
    return int((s.amax(-1) - s.amin(-1) > 3).sum())


def launch(data, tiles, a, a_scale, a2: torch.Tensor, stages: int = 4) -> None:
    """The probe on the routing of tiles' last run (its block_m), writing a2."""
    from moe_triton import target
    from moe_triton.routing import routing_buffers, routing_capacity

    hidden, w1, topk_ids = data[0], data[1], data[10]
    n_tokens, d_hidden = hidden.shape
    d_inter = w1.shape[1] // 2
    n_slots, n_experts = topk_ids.numel(), w1.shape[0]
    routing = routing_buffers(n_slots, n_experts, tiles.block_m, hidden.device)
    n_blocks = routing_capacity(n_slots, n_experts, tiles.block_m)
    words = data[1].view(torch.int32).reshape(-1, d_hidden // 8)
    w_scale = data[3].view(torch.int32).reshape(-1, d_hidden // 128)
    silu = target.silu_options()
    judge = {"CK": silu.pop("JUDGE") == "ck", **silu}
    moe_int8_stage1_kernel[(n_blocks, d_inter // 32)](
        a,
        a_scale,
        words,
        w_scale,
        a2,
        *routing,
        n_tokens,
        d_hidden,
        d_inter,
        BLOCK_M=tiles.block_m,
        ROWS=tiles.block_m,
        STAGES=stages,
        num_warps=4,
        **judge,
    )


def probe_shape(name: str, case: dict, reps: int, flush: torch.Tensor) -> dict:
    from bench.h200.gluon_check import routed_a2
    from bench.h200.harness import leaderboard_input, run_tiles, table_tile
    from bench.tune.tiles import kernel_times
    from moe_triton.routing import routing_capacity
    from moe_triton.tiles_nvidia import gluon_variant

    data = leaderboard_input(case, 0)
    decode = table_tile(case)
    if decode.tail_m:
        raise ValueError(f"{name}: the probe takes tiles without tail blocks")
    one_wg = gluon_variant(decode, 32, stages=6, parts=1, paired=1)
    a, a_scale, a_wide = int8_activations(data[0])
    times = {
        "decode": kernel_times(lambda: run_tiles(data, decode), reps, flush),
        "gluon-n32-s6-p1-paired": kernel_times(lambda: run_tiles(data, one_wg), reps, flush),
    }
    run_tiles(data, decode)
    real, want = routed_a2(data, decode.block_m)
    n_slots, n_experts = data[10].numel(), data[1].shape[0]
    n_rows = routing_capacity(n_slots, n_experts, decode.block_m) * decode.block_m
    a2 = torch.full((n_rows, data[1].shape[1] // 2), float("nan"), dtype=torch.bfloat16, device="cuda")
    launch(data, decode, a, a_scale, a2)
    off = int((a2[real].view(torch.int16) != want.view(torch.int16)).sum())
    results = {}
    for stages in (4, 6):
        results[f"int8-s{stages}"] = kernel_times(lambda s=stages: launch(data, decode, a, a_scale, a2, s), reps, flush)
    return {
        "a_windows_wider_than_4": a_wide,
        "w1_windows_wider_than_4": weight_windows(data[3]),
        "a2_elements_off": off,
        "a2_elements": int(want.numel()),
        "stage1_us": {
            "decode": times["decode"].get("moe_stage1_kernel"),
            "gluon-n32-s6-p1-paired": times["gluon-n32-s6-p1-paired"].get("moe_gluon_stage1_kernel"),
            **{k: v.get("moe_int8_stage1_kernel") for k, v in results.items()},
        },
    }


def run_on_gpu(args) -> int:
    from bench.h200.harness import official_cases

    flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": _triton_version()}
    results, started = {}, time.perf_counter()
    for name, case in official_cases(args.shapes):
        results[name] = probe_shape(name, case, args.reps, flush)
        print(name, results[name], flush=True)
    meta["wall_s"] = round(time.perf_counter() - started, 1)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "int8_stage1.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    lines = [f"int8_stage1: {meta}", "", "| shape | decode | one-warpgroup bf16 | int8 s4 | int8 s6 | a2 off |"]
    lines.append("|---|---|---|---|---|---|")
    for name, r in results.items():
        us = r["stage1_us"]
        names = ("decode", "gluon-n32-s6-p1-paired", "int8-s4", "int8-s6")
        cells = [f"{us[k]:.1f}" if us.get(k) else "-" for k in names]
        lines.append(f"| {name} | {' | '.join(cells)} | {r['a2_elements_off']} of {r['a2_elements']} |")
    (out / "int8_stage1.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if any(r["a2_elements_off"] for r in results.values()) else 0


def _triton_version() -> str:
    import triton

    return triton.__version__


def compiled_for_sm90(shape: str) -> dict:
    """The probe compiled for sm_90 on this machine (an official shape's decode-table tile): what the SASS of
    its chunk loop (two K steps) holds."""
    from bench.h200.sass import disassemble, instructions, k_loop, opcode, resources
    from bench.h200.sm90 import compiling_for_sm90
    from bench.runner.case_args import case_shape
    from moe_triton.tiles_nvidia import tile_config
    from problem.cases import BENCHMARKS, case_name

    case = next(c for c in BENCHMARKS if shape in case_name(c))
    tiles = tile_config(case_shape(case))
    n, h, i, e = case["bs"], case["dhidden"], case["dexpert"], case["nroutedexperts"] + case["nsharedexperts"]
    topk = case["nexpertspertoken"] + case["nsharedexperts"]
    data = [torch.empty(n, h, dtype=torch.bfloat16), torch.empty(e, 2 * i, h // 2, dtype=torch.uint8), None]
    data += [torch.empty(e, 2 * i, h // 32, dtype=torch.uint8)] + [None] * 6 + [torch.empty(n, topk, dtype=torch.int32)]
    a = torch.empty(n, h, dtype=torch.int8)
    with compiling_for_sm90() as driver:
        launch(data, tiles, a, torch.empty(n, h // 256), torch.empty(n * topk * 8, i, dtype=torch.bfloat16))
    kernel = driver.launches[-1].kernel
    text = disassemble(kernel.asm["cubin"])
    body = k_loop(instructions(text))
    res = resources(kernel.asm["cubin"])
    return {
        "registers": res.registers,
        "local": res.local,
        "shared": kernel.metadata.shared,
        "mma_kinds": dict(Counter(m[0] for m in re.findall(r"\b(IGMMA\.\w+(\.\w+)*)", text))),
        "loop_instructions": len(body),
        "per_word": round(len(body) / (CHUNK_STEPS.value * 64 * BLOCK_K.value / 8 / 128), 1),  # words a thread a chunk
        "loop_ops": dict(Counter(opcode(t) for t in body).most_common(16)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.h200.int8_stage1", description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), help="official shapes (substrings of names)")
    parser.add_argument("--reps", type=int, default=10, help="calls timed a kernel")
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="where int8_stage1.json and .md go")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print(json.dumps(compiled_for_sm90(args.shapes[0]), indent=1))
        return 0
    return run_on_gpu(args)


if __name__ == "__main__":
    sys.exit(main())
