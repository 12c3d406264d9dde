"""`python -m bench.gfx950.aiter_compile --aiter-git DIR`: aiter's own Triton MXFP4 MoE GEMMs compiled for
gfx950 the way bench.gfx950 compiles ours, for the comparison of docs/gfx950.md ("Reading
it": instructions per K-loop iteration at a comparable tile, ours within 1.5x of aiter's). CPU only; nothing runs.

aiter's code is not part of this package: the script extracts aiter/ops/triton from the given git
directory (a clone or mirror of ROCm/aiter, at --commit) into a temporary folder, empties the
package __init__ files there (they import the rest of aiter), and calls aiter's own launchers on
empty CPU tensors under the compile-only driver: fused_moe_mxfp4 (the fused_moe mxfp4 kernel) with
the tiles of aiter's gfx950-MOE-MX_FP4.json and one at our tile size, and moe_gemm_a4w4 with the
block_m 16 and 32 configurations its get_kernel_config picks.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

DEFAULT_COMMIT = "f3be04a"
TOKENS, D_HIDDEN, N_COLS, EXPERTS, TOPK = 128, 7168, 512, 257, 9  # stage 1 of H7168-I256-E256+1 at bs 128
COMPARABLE_TILE = {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 256}


def extract(git_dir: Path, commit: str, dest: Path) -> None:
    archive = subprocess.run(
        ["git", "--git-dir", str(git_dir), "archive", commit, "aiter/ops/triton"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    for package in ("aiter", "aiter/ops"):
        (dest / package / "__init__.py").touch()
    for init in dest.rglob("__init__.py"):
        init.write_text("")


def _mxfp4_moe(modules, config: dict) -> None:
    """aiter's fused_moe_mxfp4 on stage 1's shapes: fp4 activations and weights, e8m0 scales."""
    import torch
    import triton.language as tl

    k2 = D_HIDDEN // 2
    rows = TOKENS * TOPK + EXPERTS * config["BLOCK_SIZE_M"]
    modules.fused_moe_mxfp4(
        torch.empty(TOKENS, k2, dtype=torch.uint8),
        torch.empty(EXPERTS, N_COLS, k2, dtype=torch.uint8),
        torch.empty(TOKENS, TOPK, N_COLS, dtype=torch.bfloat16),
        torch.empty(1, dtype=torch.float32),
        torch.empty(EXPERTS, dtype=torch.float32),
        torch.empty(TOKENS, D_HIDDEN // 32, dtype=torch.uint8),
        torch.empty(EXPERTS, N_COLS, D_HIDDEN // 32, dtype=torch.uint8),
        torch.empty(TOKENS, TOPK, dtype=torch.float32),
        torch.empty(TOKENS, TOPK, dtype=torch.int32),
        torch.empty(rows, dtype=torch.int32),
        torch.empty(rows // config["BLOCK_SIZE_M"], dtype=torch.int32),
        torch.empty(1, dtype=torch.int32),
        False,
        TOPK,
        False,
        False,
        config,
        tl.bfloat16,
    )


def _a4w4(modules, block_m: int) -> None:
    """aiter's moe_gemm_a4w4 (gathered rows, column-major weights) with its own config for block_m."""
    import torch

    k2, slots = D_HIDDEN // 2, TOKENS * TOPK
    i32 = dict(dtype=torch.int32)
    expt = modules.ExptData(
        torch.empty(EXPERTS, **i32),
        torch.empty(EXPERTS + 1, **i32),
        torch.empty(EXPERTS + 1, **i32),
        torch.empty(slots // block_m + EXPERTS, **i32),
    )
    routing = modules.RoutingData(block_m, torch.empty(slots), torch.empty(EXPERTS, **i32), EXPERTS, TOPK, expt)
    modules.moe_gemm_a4w4(
        torch.empty(TOKENS, k2, dtype=torch.uint8),
        torch.empty(EXPERTS, N_COLS, k2, dtype=torch.uint8).transpose(1, 2),
        torch.empty(TOKENS, D_HIDDEN // 32, dtype=torch.uint8),
        torch.empty(EXPERTS, N_COLS, D_HIDDEN // 32, dtype=torch.uint8).transpose(1, 2),
        routing_data=routing,
        gather_indx=torch.empty(slots, **i32),
        scatter_indx=torch.empty(slots, **i32),
        gammas=torch.empty(slots),
        swizzle_mx_scale="CDNA4_SCALE" if block_m > 16 else None,
    )


def variants(root: Path) -> list[tuple[str, callable]]:
    table = json.loads((root / "aiter/ops/triton/configs/moe/gfx950-MOE-MX_FP4.json").read_text())
    out = [(f"mxfp4 {name}", lambda m, c=cfg: _mxfp4_moe(m, c)) for name, cfg in table.items()]
    comparable = {**table["small_M"], **COMPARABLE_TILE}
    out.append(("mxfp4 small_M at 32x128x256", lambda m: _mxfp4_moe(m, comparable)))
    out += [(f"a4w4 block_m {bm}", lambda m, bm=bm: _a4w4(m, bm)) for bm in (16, 32)]
    return out


def load_modules(root: Path):
    sys.path.insert(0, str(root))
    from aiter.ops.triton.moe.moe_op_gemm_a4w4 import moe_gemm_a4w4
    from aiter.ops.triton.moe.moe_op_mxfp4 import fused_moe_mxfp4
    from aiter.ops.triton.moe.moe_routing.routing import ExptData, RoutingData

    return SimpleNamespace(
        fused_moe_mxfp4=fused_moe_mxfp4, moe_gemm_a4w4=moe_gemm_a4w4, ExptData=ExptData, RoutingData=RoutingData
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gfx950.aiter_compile", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--aiter-git", type=Path, required=True, help="git directory of ROCm/aiter (a clone's .git or a mirror)"
    )
    p.add_argument("--commit", default=DEFAULT_COMMIT, help=f"aiter commit (default {DEFAULT_COMMIT})")
    p.add_argument("--md", type=Path, help="also write the table as Markdown to this file")
    args = p.parse_args(argv)
    os.environ["TRITON_INTERPRET"] = "0"
    import triton

    from bench.gfx950 import report
    from bench.gfx950.check import analyse
    from bench.gfx950.driver import compile_only_gfx950

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        try:
            extract(args.aiter_git, args.commit, root)
        except subprocess.CalledProcessError as exc:
            print(
                f"--aiter-git: cannot extract aiter/ops/triton at {args.commit}: {exc.stderr.decode().strip()}",
                file=sys.stderr,
            )
            return 2
        with compile_only_gfx950() as driver:  # aiter asks the active driver for the arch at import
            modules = load_modules(root)
            for label, run in variants(root):
                first = len(driver.launches)
                run(modules)
                for launch in driver.launches[first:]:
                    rep = analyse(launch.kernel)
                    if rep.mfma:
                        rows.append(report.kernel_row(SimpleNamespace(label=label), rep, launch))
    title = f"aiter {args.commit} Triton MXFP4 MoE GEMMs on gfx950, triton {triton.__version__}"
    report.print_kernel_table(title, rows)
    if args.md:
        args.md.write_text(report.markdown_kernels(title, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
