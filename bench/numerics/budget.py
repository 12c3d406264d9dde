"""`python -m bench.numerics.budget`: how far each way of computing the layer differently from the
judge moves the output, as a fraction of the leaderboard's tolerance (GPU; docs/numerics.md).

Per case and seed, against reference.ref_kernel (torch's silu, the slots added in fp32, one bf16
rounding), the worst error (selection.selector.worst_error: 1 is the tolerance's edge) of:
  fast-silu   h from Triton's fast exp and '/' (what every kernel did before gated_h)
  ck-silu     h as aiter's CK stage 1 computes it (moe_triton/kernels/silu.py, JUDGE "ck"): the MI355X
              judge's own silu, set against NVIDIA's
  bf16-adds   the slots' contributions rounded to bf16 and added in bf16 in a random order per
              token, as the stage-2 atomics (ours, and aiter's on the MI355X) add them
  package     custom_kernel itself (the first-call selection on a GPU)
Each line: the case, the variant, the worst error over the seeds and the inputs that fail. Without a
GPU (Triton's interpreter) only ck-silu and bf16-adds run: the interpreter's exp is numpy's, so the
fast spelling cannot be measured there, and the package is too slow on official shapes.
"""

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch

if not torch.cuda.is_available():  # before triton is imported, as submission.py does
    os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from moe_triton.kernels.silu import gated_h  # noqa: E402
from moe_triton.target import interpreting  # noqa: E402

BLOCK = 1024


@triton.jit
def _h_kernel(g_ptr, u_ptr, h_ptr, n, SPELLING: tl.constexpr, INTERPRET: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(g_ptr + offs, mask=mask)
    u = tl.load(u_ptr + offs, mask=mask)
    if SPELLING == "fast":
        h = (g / (1.0 + tl.exp(-g)) * u).to(tl.bfloat16).to(tl.float32)
    else:
        h = gated_h(g, u, SPELLING, INTERPRET)
    tl.store(h_ptr + offs, h, mask=mask)


def spelled_h(gate: torch.Tensor, up: torch.Tensor, spelling: str) -> torch.Tensor:
    """h (fp32 holding bf16 values) of fp32 gate and up, computed by a Triton kernel in the given
    spelling: "fast" (Triton's fast exp and '/'), or gated_h's JUDGE "torch" or "ck"."""
    g, u = gate.contiguous(), up.contiguous()
    h = torch.full_like(g, float("nan"))  # poisoned: every element must be written
    block = BLOCK * 64 if interpreting() else BLOCK  # the interpreter: few large programs
    with np.errstate(all="ignore"):  # the interpreter's numpy exp of a large -g, and inf * 0
        _h_kernel[(triton.cdiv(g.numel(), block),)](
            g, u, h, g.numel(), SPELLING=spelling, INTERPRET=interpreting(), BLOCK=block
        )
    return h


def triton_h(spelling: str):
    """h_of for reference.ref_kernel: spelled_h in bf16."""
    return lambda gate, up: spelled_h(gate, up, spelling).to(torch.bfloat16)


def bf16_adds(data, generator: torch.Generator) -> torch.Tensor:
    """Each slot's contribution rounded to bf16, a token's slots added one by one in bf16 in a
    random order (every token has topk slots)."""
    from reference import slot_outputs

    hidden, *_, topk_ids, _config = data
    n_tokens, topk = topk_ids.shape
    contributions = torch.empty((n_tokens * topk, hidden.shape[1]), dtype=torch.float32, device=hidden.device)
    for slots, y in slot_outputs(data):
        contributions[slots] = y
    contributions = contributions.view(n_tokens, topk, -1)
    order = torch.rand((n_tokens, topk), generator=generator, device=hidden.device).argsort(dim=1)
    out = torch.zeros(hidden.shape, dtype=torch.bfloat16, device=hidden.device)
    for j in range(topk):
        picked = contributions[torch.arange(n_tokens, device=hidden.device), order[:, j]]
        out = (out.float() + picked.to(torch.bfloat16).float()).to(torch.bfloat16)
    return out


def main(argv=None) -> int:
    from bench.runner.case_args import LEADERBOARD_SEED_STEP
    from bench.runner.preflight import USAGE_STATUS, parse_cases, seeds_parser

    p = seeds_parser("python -m bench.numerics.budget", __doc__, 5, "seeds per case (the case's seed + 13 k)")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    args, cases = parse_cases(p, argv)
    if cases is None:
        return USAGE_STATUS
    from reference import compare, generate_input, ref_kernel
    from selection.selector import worst_error
    from submission import custom_kernel

    gpu = torch.cuda.is_available()
    generator = torch.Generator(device="cuda" if gpu else "cpu").manual_seed(0)
    variants = {
        "fast-silu": lambda data: ref_kernel(data, triton_h("fast")),
        "ck-silu": lambda data: ref_kernel(data, triton_h("ck")),
        "bf16-adds": lambda data: bf16_adds(data, generator),
        "package": custom_kernel,
    }
    if not gpu:
        del variants["fast-silu"], variants["package"]
    rows = []
    for case in cases:
        worst = dict.fromkeys(variants, 0.0)
        fails = dict.fromkeys(variants, 0)
        for k in range(1, args.seeds + 1):
            data = generate_input(**{**case.params, "seed": case.params["seed"] + LEADERBOARD_SEED_STEP * k})
            outputs = {name: run(data) for name, run in variants.items()}
            expected = ref_kernel(data)
            for name, out in outputs.items():
                worst[name] = max(worst[name], worst_error(out, expected))
                fails[name] += not compare(out, expected)[0]
        for name in variants:
            rows.append(
                {
                    "case": case.label,
                    "shape": case.shape,
                    "variant": name,
                    "seeds": args.seeds,
                    "worst": worst[name],
                    "failed": fails[name],
                }
            )
            print(
                f"{case.label} {case.shape} {name}: worst {worst[name]:.3f} of the tolerance, "
                f"{fails[name]}/{args.seeds} fail",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
