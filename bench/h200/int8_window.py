"""`python -m bench.h200.int8_window`: how often the int8 path's window holds on the task's data.

Twice an e2m1 value is an integer in [-12, 12]; shifted left by d = (block scale byte - base) for d
in 0..3 it is at most 96 and fits int8, so a chunk of C blocks whose scale bytes all lie in
[base, base + 3] (base: the chunk's smallest) sums exactly in int32 and needs one fp32 multiply-add
per chunk; a chunk outside that window falls back to promotion per block. The exponent of a
product is sa + sw, so a product's chunk takes the fast path when both operands' windows hold.

For each official shape asked for (generate_input, seeds from the case and after it), this reads the
scale bytes of a1 (SPEC 3.3's quantization of the hidden states), of the weights (w1_scale,
w2_scale) and of a2 (the quantized h of reference.py's pipeline, per expert), and prints per chunk
size the fraction of (row, chunk) windows that hold, per operand, and the fraction of the
(activation row, weight row, chunk) products of each GEMM that routing makes whose two windows hold.
A chunk size that does not divide a row's blocks leaves a shorter last chunk.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
CHUNKS = (2, 4, 8, 16, 28, 56)
WINDOW = 3  # d = scale byte - base in 0..WINDOW: (2 x e2m1) << d stays within int8 (at most 96)


def window_holds(scales: torch.Tensor, chunk: int) -> torch.Tensor:
    """bool [rows, ceil(blocks / chunk)]: whether every scale byte of a row's chunk of `chunk`
    consecutive blocks lies within WINDOW of the chunk's smallest; scales: [rows, blocks] bytes."""
    if scales.dim() != 2:
        raise ValueError(f"scales: expected [rows, blocks], got shape {tuple(scales.shape)}")
    if chunk < 1:
        raise ValueError(f"chunk: must be at least 1, got {chunk}")
    s = scales.view(torch.uint8) if scales.dtype != torch.uint8 and scales.element_size() == 1 else scales
    s = s.to(torch.int16)
    rows, blocks = s.shape
    n_chunks = -(-blocks // chunk)
    # the short last chunk is padded with its own last byte, which moves neither its min nor its max
    padded = torch.cat([s, s[:, -1:].expand(rows, n_chunks * chunk - blocks)], dim=1)
    windows = padded.reshape(rows, n_chunks, chunk)
    return windows.amax(dim=-1) - windows.amin(dim=-1) <= WINDOW


def joint_fraction(act_hits: torch.Tensor, weight_hits: torch.Tensor, pairs: list[tuple[torch.Tensor, int]]) -> float:
    """The fraction of (activation row, weight row, chunk) products whose two windows hold.
    act_hits: [activation rows, chunks]; weight_hits: [experts, weight rows, chunks]; pairs:
    (activation rows, expert) per expert that routing hits."""
    held = total = 0.0
    for rows, expert in pairs:
        per_chunk = weight_hits[expert].float().mean(dim=0)  # [chunks]: the weight rows that hold
        held += float((act_hits[rows].float() * per_chunk).sum()) * weight_hits.shape[1]
        total += rows.numel() * weight_hits.shape[1] * weight_hits.shape[2]
    return held / total


def layer_scales(data) -> dict:
    """The scale bytes of one input tuple: a1 [tokens, blocks], w1 and w2 [experts, rows, blocks],
    a2 [slots, blocks] and the pairs of each GEMM ((a1 rows, expert) and (a2 rows, expert))."""
    from mxfp4.codec import dequantize, quantize_activation
    from reference import slot_outputs

    hidden, w1, w2, w1_scale, w2_scale, *_, topk_ids, _config = data
    n_experts, two_inter, _ = w1.shape
    topk = topk_ids.shape[1]
    recorded = []

    def quantize(x):
        packed, scales = quantize_activation(x)
        recorded.append(scales)
        return dequantize(packed, scales)

    a2, pairs1, pairs2, start = [], [], [], 0
    # quantize is called for a1, then once per expert hit for its h rows, in slot_outputs' order
    for slots, _y in slot_outputs(data, quantize=quantize):
        expert = int(topk_ids.reshape(-1)[slots[0]])
        pairs1.append((slots // topk, expert))
        a2.append(recorded[-1])
        pairs2.append((torch.arange(start, start + slots.numel()), expert))
        start += slots.numel()
    return {
        "a1": recorded[0],
        "w1": w1_scale.view(torch.uint8).reshape(n_experts, two_inter, -1),
        "w2": w2_scale.view(torch.uint8).reshape(n_experts, w2.shape[1], -1),
        "a2": torch.cat(a2),
        "pairs1": pairs1,
        "pairs2": pairs2,
    }


def hit_rates(scales: dict, chunks=CHUNKS) -> dict[int, dict[str, float]]:
    """Per chunk size: the fraction of windows that hold for a1, w1, w2 and a2 rows, and of the
    products of stage 1 (a1 x w1) and stage 2 (a2 x w2)."""
    rates = {}
    for chunk in chunks:
        hits = {name: window_holds(scales[name].flatten(0, -2), chunk) for name in ("a1", "w1", "w2", "a2")}
        w1_hits = hits["w1"].reshape(*scales["w1"].shape[:2], -1)
        w2_hits = hits["w2"].reshape(*scales["w2"].shape[:2], -1)
        rates[chunk] = {name: float(h.float().mean()) for name, h in hits.items()}
        rates[chunk]["stage1"] = joint_fraction(hits["a1"], w1_hits, scales["pairs1"])
        rates[chunk]["stage2"] = joint_fraction(hits["a2"], w2_hits, scales["pairs2"])
    return rates


COLUMNS = ("a1", "w1", "stage1", "a2", "w2", "stage2")


def table(results: list[tuple[str, int, dict]]) -> list[str]:
    """A markdown table, header first: one row per (shape, seed, chunk size)."""
    lines = ["| shape | seed | chunk (blocks) | " + " | ".join(COLUMNS) + " |", "|---|---|---|" + "---|" * len(COLUMNS)]
    for name, seed, rates in results:
        for chunk, r in rates.items():
            lines.append(f"| {name} | {seed} | {chunk} | " + " | ".join(f"{r[c]:.3f}" for c in COLUMNS) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.runner.preflight import UsageParser
    from problem.cases import BENCHMARKS, case_name
    from reference import generate_input

    names = {case_name(c): c for c in BENCHMARKS}
    parser = UsageParser(
        prog="python -m bench.h200.int8_window",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--shapes",
        nargs="+",
        default=["I512-E32+1-k8+1-bs512", "I2048-E32+1-k8+1-bs512"],
        help="parts of official benchmark names (default: the E-33 bs-512 shapes, I-512 and I-2048)",
    )
    parser.add_argument("--seeds", type=int, default=2, help="seeds per shape: the case's and the next ones")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        return parser.fail(f"--seeds: must be at least 1, got {args.seeds}")
    cases = [case for name, case in names.items() if any(part in name for part in args.shapes)]
    if not cases:
        return parser.fail(f"--shapes: no official benchmark name contains any of {args.shapes}")
    print("\n".join(table([])), flush=True)
    for case in cases:
        for seed in range(case["seed"], case["seed"] + args.seeds):
            sizes = {k: v for k, v in case.items() if k != "seed"}
            rates = hit_rates(layer_scales(generate_input(**sizes, seed=seed)))
            print("\n".join(table([(case_name(case), seed, rates)])[2:]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
