"""`python -m bench.h200.gluon_probe`: does this triton's Gluon build the pieces the Gluon stages
need for sm_90 (warp specialization, TMA, mbarriers, asynchronous wgmma), and how fast they are put
together, before the MoE kernels are written with them.

The probe is a plain bf16 GEMM C = A B: a loader partition (one warp) fills a ring of STAGES
shared-memory slots with TMA behind `ready` mbarriers and waits on `empty` ones; the default
partition (one or two warpgroups, VARIANTS) waits for a slot, runs wgmma on it asynchronously, waits
for the MMA (that step's with lag 0, the previous step's with lag 1) and frees the slot it read,
then stores C through shared memory with TMA. On an NVIDIA GPU it checks C against
torch on a small product (C's memory poisoned with NaN first) and times 4096^3 beside torch's matmul
(triton.testing.do_bench); without one it compiles the kernel for sm_90 (bench/h200/sm90.py's
compile-only driver) and prints what the SASS holds. Works with triton 3.6 and 3.9 (the TMA copies
were renamed in between).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

ROOT = Path(__file__).resolve().parents[2]

# triton 3.6 names the TMA copies async_copy_global_to_shared / async_copy_shared_to_global; later
# ones async_load / async_store (and refuse the old names).
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global

SASS_MARKS = {
    "wgmma": "HGMMA",
    "tma_load": "UTMALDG",
    "tma_store": "UTMASTG",
    "mbarrier": "SYNCS",
    "register_split": "USETMAXREG",  # setmaxnreg: the loader gives registers to the MMA warpgroup
}


@gluon.jit
def _loader(a_desc, b_desc, a_ring, b_ring, ready, empty, k_steps, BLOCK_K: gl.constexpr, STAGES: gl.constexpr):
    block_m: gl.constexpr = a_desc.block_type.shape[0]
    block_n: gl.constexpr = b_desc.block_type.shape[1]
    for i in range(k_steps):
        slot = i % STAGES
        # a fresh barrier has completed the phase before its first: the first round does not wait
        mbarrier.wait(empty.index(slot), ((i // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(slot), a_desc.block_type.nbytes + b_desc.block_type.nbytes)
        tma_load(a_desc, [gl.program_id(0) * block_m, i * BLOCK_K], ready.index(slot), a_ring.index(slot))
        tma_load(b_desc, [i * BLOCK_K, gl.program_id(1) * block_n], ready.index(slot), b_ring.index(slot))


@gluon.jit
def _mma(c_desc, a_ring, b_ring, ready, empty, c_smem, k_steps, STAGES: gl.constexpr, LAG: gl.constexpr):
    block_m: gl.constexpr = c_desc.block_type.shape[0]
    block_n: gl.constexpr = c_desc.block_type.shape[1]
    layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[gl.num_warps(), 1], instr_shape=[16, block_n, 16]
    )
    acc = gl.zeros([block_m, block_n], gl.float32, layout)
    for i in range(k_steps):
        slot = i % STAGES
        mbarrier.wait(ready.index(slot), (i // STAGES) & 1)
        acc = warpgroup_mma(a_ring.index(slot), b_ring.index(slot), acc, is_async=True)
        # LAG 1: step i's MMA stays in flight while step i + 1 is waited for and issued; the slot
        # freed is the one whose MMA the wait retired
        acc, _, _ = warpgroup_mma_wait(LAG, deps=[acc, a_ring.index(slot), b_ring.index(slot)])
        mbarrier.arrive(empty.index((i + STAGES - LAG) % STAGES), count=1, pred=i >= LAG)
    acc = warpgroup_mma_wait(0, deps=[acc])
    c_smem.store(acc.to(gl.bfloat16))
    fence_async_shared()
    tma_store(c_desc, [gl.program_id(0) * block_m, gl.program_id(1) * block_n], c_smem)
    tma.store_wait(0)


@gluon.jit
def ws_gemm_kernel(a_desc, b_desc, c_desc, K, BLOCK_K: gl.constexpr, STAGES: gl.constexpr, LAG: gl.constexpr):
    a_ring = gl.allocate_shared_memory(a_desc.dtype, [STAGES] + a_desc.block_type.shape, a_desc.layout)
    b_ring = gl.allocate_shared_memory(b_desc.dtype, [STAGES] + b_desc.block_type.shape, b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, c_desc.block_type.shape, c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for slot in gl.static_range(STAGES):
        mbarrier.init(ready.index(slot), count=1)
        mbarrier.init(empty.index(slot), count=1)
    fence_async_shared()
    k_steps = gl.cdiv(K, BLOCK_K)
    gl.warp_specialize(
        [
            (_mma, (c_desc, a_ring, b_ring, ready, empty, c_smem, k_steps, STAGES, LAG)),
            (_loader, (a_desc, b_desc, a_ring, b_ring, ready, empty, k_steps, BLOCK_K, STAGES)),
        ],
        [1],  # the loader's warps
        [40],  # and its registers a thread: the MMA warpgroup gets the rest
    )


def ws_gemm(a, b, c, block_m=128, block_n=128, block_k=64, stages=3, lag=0, mma_warps=4):
    """c = a @ b (bf16 [M, K] x [K, N] -> [M, N]; M, N multiples of the blocks); lag 0 waits for
    each step's MMA before the next, lag 1 keeps one in flight; mma_warps 8: two MMA warpgroups
    (block_m 256 gives each 128 rows)."""
    layouts = [
        gl.NVMMASharedLayout.get_default_for(shape, gl.bfloat16)
        for shape in ([block_m, block_k], [block_k, block_n], [block_m, block_n])
    ]
    descs = [
        TensorDescriptor.from_tensor(t, shape, layout)
        for t, shape, layout in zip(
            (a, b, c), ([block_m, block_k], [block_k, block_n], [block_m, block_n]), layouts, strict=True
        )
    ]
    grid = (a.shape[0] // block_m, b.shape[1] // block_n)
    ws_gemm_kernel[grid](*descs, a.shape[1], block_k, stages, lag, num_warps=mma_warps)
    return c


def inputs(m, n, k, device):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=g).to(torch.bfloat16).to(device)
    b = torch.randn(k, n, generator=g).to(torch.bfloat16).to(device)
    return a, b, torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)


# The schedules timed: one MMA warpgroup with 128 rows (3 slots; 4 with the lag) or two with 256.
VARIANTS = {
    "wg1-lag0": dict(block_m=128, mma_warps=4, stages=3, lag=0),
    "wg1-lag1": dict(block_m=128, mma_warps=4, stages=4, lag=1),
    "wg2-lag0": dict(block_m=256, mma_warps=8, stages=3, lag=0),
    "wg2-lag1": dict(block_m=256, mma_warps=8, stages=3, lag=1),
}


def compiled_for_sm90(variant: str) -> dict:
    """Compile one of VARIANTS for sm_90 on this machine; what its SASS holds."""
    from bench.h200.sass import disassemble
    from bench.h200.sm90 import compiling_for_sm90

    with compiling_for_sm90() as driver:
        ws_gemm(*inputs(512, 512, 1024, "cpu"), **VARIANTS[variant])
    kernel = driver.launches[-1].kernel
    text = disassemble(kernel.asm["cubin"])
    counts = {name: len(re.findall(rf"\b{mark}\b", text)) for name, mark in SASS_MARKS.items()}
    return {"warps": kernel.metadata.num_warps, "shared": kernel.metadata.shared, **counts}


def check_and_time() -> list[str]:
    import triton.testing

    m = n = k = 4096
    a, b, c = inputs(m, n, k, "cuda")
    product = (a @ b).float()
    torch_ms = triton.testing.do_bench(lambda: a @ b)
    lines = [f"torch, 4096^3: {torch_ms * 1e3:.1f} us, {2 * m * n * k / torch_ms / 1e9:.0f} TFLOP/s"]
    for name, variant in VARIANTS.items():
        small = inputs(512, 512, 1024, "cuda")
        ws_gemm(*small, **variant)
        exact = (small[0].float() @ small[1].float()).bfloat16()
        off = int((small[2] != exact).sum())
        c.fill_(float("nan"))
        ms = triton.testing.do_bench(lambda: ws_gemm(a, b, c, **variant))  # noqa: B023 (timed at once)
        error = (c.float() - product).abs().max().item()
        lines.append(
            f"{name}, 4096^3: {ms * 1e3:.1f} us, {2 * m * n * k / ms / 1e9:.0f} TFLOP/s, max |c - torch| {error:.3g}; "
            f"512x512x1024: {off} of {exact.numel()} off torch's fp32 product in bf16"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from bench.runner.preflight import doc_parser

    parser = doc_parser("python -m bench.h200.gluon_probe", __doc__)
    parser.parse_args(argv)
    if torch.cuda.is_available():
        print("\n".join(check_and_time()))
    else:
        os.environ["TRITON_INTERPRET"] = "0"
        for name in VARIANTS:
            print(f"{name}, compiled for sm_90: {compiled_for_sm90(name)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
