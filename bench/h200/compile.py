"""`python -m bench.h200.compile`: the decode path compiled for sm_90 on this (CPU) machine, nothing run.

Calls fused_moe_triton on empty CPU tensors of each official shape while a compile-only CUDA driver
is active, with the NVIDIA fast path on (the PTX decodes, dependent launches, register caps), so
every kernel compiles as the launcher would launch it on an H200. Per launch it reads the cubin
(bench.h200.sass, cuobjdump from triton's package): registers per thread, local memory and STL/LDL
(spills), shared memory, the MMA instructions (HGMMA: bf16 wgmma) and the instructions of the main
loop's body. Compiled figures, not measurements.

    python -m bench.h200.compile               # the decode table tiles, every official shape
    python -m bench.h200.compile --alternates  # also every ALTERNATES tile
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from collections import Counter
from pathlib import Path

from bench.h200.sass import disassemble, instructions, opcode, resources

ROOT = Path(__file__).resolve().parents[2]
TARGET = ("cuda", 90, 32)
DEVICE = "sm90-compile-only"


def _compile_only_driver():
    """A Triton driver whose target is sm_90 and whose launches record their compiled kernel."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.driver import DriverBase

    target = GPUTarget(*TARGET)

    class _Utils:
        def get_device_properties(self, device):
            return {"max_shared_mem": 232448, "multiprocessor_count": 132, "arch": 90, "warpSize": 32}

        def load_binary(self, name, kernel, shared, device):
            return None, None, 0, 0, 1024

        def unload_module(self, module):
            pass

    class Driver(DriverBase):
        def __init__(self):
            self.utils = _Utils()
            self.launches = []
            outer = self

            class Launcher:
                def __init__(self, src, metadata):
                    self.src, self.metadata = src, metadata

                def __call__(self, grid_x, grid_y, grid_z, *_rest):
                    cache = self.src.fn.device_caches[DEVICE][0]
                    kernel = next(k for k in cache.values() if getattr(k, "metadata", None) is self.metadata)
                    outer.launches.append((kernel, (grid_x, grid_y, grid_z)))

            self.launcher_cls = Launcher

        @staticmethod
        def is_active():
            return False

        def map_python_to_cpp_type(self, ty):
            return ty

        def get_current_target(self):
            return target

        def get_active_torch_device(self):
            import torch

            return torch.device("cpu")

        def get_current_device(self):
            return DEVICE

        def get_current_stream(self, device=None):
            return 0

        def set_current_device(self, device):
            pass

        def get_benchmarker(self):
            raise RuntimeError("the compile-only driver runs nothing")

    return Driver()


@contextlib.contextmanager
def fast_decode_on():
    """The launchers' NVIDIA fast path on for CPU tensors (they stand for CUDA ones), on an sm_90
    GPU: moe_triton.target's fast_decode and gluon_kernels say True (the launchers call them
    through the module)."""
    from unittest import mock

    from moe_triton import target

    with mock.patch.object(target, "fast_decode", lambda device: True):
        with mock.patch.object(target, "gluon_kernels", lambda device: True):
            yield


@contextlib.contextmanager
def compiling_for_sm90():
    """The compile-only driver active and the launchers' NVIDIA fast path on (they test the device)."""
    from triton.runtime.driver import driver as driver_config

    saved_driver = driver_config._active
    active = _compile_only_driver()
    driver_config.set_active(active)
    try:
        with fast_decode_on():
            yield active
    finally:
        driver_config._active = saved_driver


def loops(lines: list[tuple[int, str]]) -> list[list[str]]:
    """The instructions of every loop of a disassembly: a backward branch's target down to the
    branch."""
    where = {a: i for i, (a, _) in enumerate(lines)}
    found = []
    for i, (addr, text) in enumerate(lines):
        branch = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
        if branch and int(branch.group(1), 16) < addr and int(branch.group(1), 16) in where:
            found.append([t for _, t in lines[where[int(branch.group(1), 16)] : i + 1]])
    return found


def _loop_body(lines: list[tuple[int, str]]) -> list[str]:
    """The main K loop's instructions: the longest of the loops that hold bf16 wgmmas (HGMMA); the
    prepasses are shorter or hold none."""
    found = [body for body in loops(lines) if any(opcode(t) == "HGMMA" for t in body)]
    return max(found, key=len) if found else []


SASS_DIR = os.environ.get("MOE_SASS_DIR", "")  # where to keep each kernel's SASS and PTX (debugging)


def kernel_figures(kernel) -> dict:
    """What one compiled kernel holds: registers, spills, shared memory, MMAs, the loop body."""
    cubin = kernel.asm["cubin"]
    sass, usage = disassemble(cubin), resources(cubin)
    if SASS_DIR:
        stem = Path(SASS_DIR) / kernel.metadata.name[:60]
        stem.with_suffix(".sass").write_text(sass)
        stem.with_suffix(".ptx").write_text(kernel.asm["ptx"])
        stem.with_suffix(".ttgir").write_text(kernel.asm["ttgir"])
    lines = instructions(sass)
    body = _loop_body(lines)
    ops = Counter(opcode(t) for t in body)
    every = Counter(opcode(t) for _, t in lines)
    return {
        "kernel": kernel.src.fn.__name__ if hasattr(kernel.src, "fn") else kernel.metadata.name,
        "regs": usage.registers,
        "local_bytes": usage.local,
        "spill_instructions": every["STL"] + every["LDL"],
        "shared_bytes": kernel.metadata.shared,
        "warps": kernel.metadata.num_warps,
        "hgmma": every["HGMMA"],
        "loop_instructions": len(body),
        "loop_ops": dict(ops.most_common(12)),
    }


def compile_case(case: dict, tiles) -> list[dict]:
    """Compile every launch of one call of a case on the given tiles; one figures dict per launch."""
    import torch

    from moe_triton.fused_moe import fused_moe_triton
    from problem.validation import expected_layout
    from reference import make_config

    keys = ("dhidden", "dexpert", "nroutedexperts", "nexpertspertoken", "nsharedexperts", "bs")
    config = make_config(*(case[k] for k in keys))
    data = [torch.empty(shape, dtype=dtypes[0]) for dtypes, shape in expected_layout(config)]
    hidden, w1, w2, w1_scale, w2_scale, *_, topk_weights, topk_ids = data
    with compiling_for_sm90() as driver:
        fused_moe_triton(hidden, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids, tiles=tiles, native=False)
    return [{**kernel_figures(kernel), "grid": grid} for kernel, grid in driver.launches]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.h200.compile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--alternates", action="store_true", help="also every ALTERNATES tile")
    parser.add_argument("--names", nargs="*", default=[], help="only cases whose name contains one of these")
    args = parser.parse_args(argv)
    os.environ["TRITON_INTERPRET"] = "0"
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.runner.case_args import case_shape
    from moe_triton.tiles_nvidia import ALTERNATES, tile_config
    from problem.cases import BENCHMARKS, TESTS, case_name

    print("| case | tiles | kernel | regs | local B | STL+LDL | shared B | HGMMA | loop instrs | loop: top ops |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    failed = 0
    for case in (*TESTS, *BENCHMARKS):
        name = case_name(case)
        if args.names and not any(n in name for n in args.names):
            continue
        shape = case_shape(case)
        variants = {"table": tile_config(shape)}
        if args.alternates:
            variants.update(ALTERNATES.get(shape, {}))
        for label, tiles in variants.items():
            try:
                rows = compile_case(case, tiles)
            except Exception as exc:  # a tile that does not compile is a result
                failed += 1
                print(f"| {name} | {label} | compile failed: {type(exc).__name__}: {str(exc)[:120]} | | | | | | | |")
                continue
            for r in rows:
                if "stage" not in r["kernel"]:
                    continue
                top = ", ".join(f"{k} {v}" for k, v in list(r["loop_ops"].items())[:6])
                print(
                    f"| {name} | {label} | {r['kernel']} | {r['regs']} | {r['local_bytes']} | {r['spill_instructions']}"
                    f" | {r['shared_bytes']}"
                    f" | {r['hgmma']} | {r['loop_instructions']} | {top} |",
                    flush=True,
                )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
