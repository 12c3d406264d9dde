"""What the Triton backend compiles for, asked in one place: the interpreter, the NVIDIA fast decode,
gfx950 and its fp4 converts, whose silu the kernels reproduce, and the launch options that follow
from the target (AMD's, programmatic dependent launch, register caps). Every path's launcher
(decode.py, native.py, routing.py) reads these; this module imports none of them.
"""

import contextlib
import functools
import os

import torch
import triton

from moe_triton.env import native_forced


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def fast_decode(device: torch.device) -> bool:
    """The weight decode's PTX path (one bf16x2 multiply per code pair, activations carrying
    2^FAST_EXP) on NVIDIA GPUs; the portable, exact fp32 path everywhere else (ROCm, the
    interpreter)."""
    return device.type == "cuda" and torch.version.hip is None and not interpreting()


@functools.cache
def _is_sm90(index: int) -> bool:
    return torch.cuda.get_device_capability(index) == (9, 0)


def gluon_kernels(device: torch.device) -> bool:
    """Whether the Gluon kernels (kernels/gluon_stage1.py, gluon_stage2.py: wgmma, setmaxnreg) run
    here: the fast NVIDIA path on an sm_90 GPU (H100, H200)."""
    if not (fast_decode(device) and torch.cuda.is_available()):
        return False
    return _is_sm90(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _is_gfx950(index: int) -> bool:
    return torch.cuda.get_device_properties(index).gcnArchName.startswith("gfx950")


def native_default(device: torch.device) -> bool:
    """The native path where the hardware has scaled MXFP4 MFMAs (a gfx950 device), unless
    MOE_TRITON_NATIVE says otherwise (1: always, 0: never)."""
    forced = native_forced()
    if forced is not None:
        return forced
    is_rocm = device.type == "cuda" and torch.version.hip is not None
    return is_rocm and _is_gfx950(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _targets_amd(driver) -> bool:
    """Whether a Triton driver compiles for AMD GPUs; asked once per driver object, since the
    query reads the device's properties (a HIP call) and this runs on every layer call."""
    return driver.get_current_target().backend == "hip"


@functools.cache
def _targets_gfx950(driver) -> bool:
    target = driver.get_current_target()
    return target.backend == "hip" and str(target.arch).startswith("gfx950")


def gfx950_converts() -> bool:
    """Whether the native kernels compile for gfx950 (a ROCm MI355X, or the compile-only gfx950
    driver of bench/gfx950/run.py), where they encode MXFP4 with its fp4 convert instruction
    (mxfp4/convert.py); elsewhere (NVIDIA GPUs, other AMD GPUs, the interpreter) they run its
    emulation."""
    return not interpreting() and _targets_gfx950(triton.runtime.driver.active)


def silu_judge() -> str:
    """Whose silu the kernels that compute h reproduce bit for bit (moe_triton/kernels/silu.py,
    docs/numerics.md): "ck" where Triton compiles for AMD GPUs (the MI355X's judge is aiter's CK
    stage 1), "torch" elsewhere (reference.py on NVIDIA GPUs and under the CPU interpreter)."""
    return "ck" if not interpreting() and _targets_amd(triton.runtime.driver.active) else "torch"


def silu_options() -> dict:
    """The launch arguments of a kernel that computes h: its judge and, for aiter's CK (AMD), no FP
    fusion (moe_triton/kernels/silu.py says why)."""
    judge = silu_judge()
    return {"JUDGE": judge, **({"enable_fp_fusion": False} if judge == "ck" else {})}


def targets_amd() -> bool:
    """Whether the kernels compile for AMD GPUs: the active Triton driver is AMD's (a ROCm GPU, or the
    compile-only gfx950 driver of bench/gfx950/run.py), and the interpreter is off."""
    return not interpreting() and _targets_amd(triton.runtime.driver.active)


def amd_options(nonkdim: int, waves_per_eu: int) -> dict:
    """The AMD backend's launch options, where the kernels compile for AMD GPUs; none elsewhere."""
    if not targets_amd():
        return {}
    return {"matrix_instr_nonkdim": nonkdim, "waves_per_eu": waves_per_eu}


# Programmatic dependent launch on the NVIDIA path; pdl_set switches it for tools.
PDL = True


def pdl_enabled() -> bool:
    """PDL as it is now: read through this function by the modules that key plans on it, so that
    pdl_set reaches them."""
    return PDL


@contextlib.contextmanager
def pdl_set(on: bool):
    """PDL on or off while the block runs, as it was afterwards (tools that time kernels one by one:
    with it, a kernel's time includes its wait for the previous one)."""
    global PDL
    saved, PDL = PDL, on
    try:
        yield
    finally:
        PDL = saved


def pdl_options(fast: bool) -> dict:
    """The kernel argument that compiles the wait for the previous kernel into every kernel
    (moe_triton.kernels.routing.after_previous_launch) and the launch option, where PDL applies."""
    return {"PDL": True, "launch_pdl": True} if fast and PDL else {"PDL": False}


def register_cap(fast: bool, max_regs: int) -> dict:
    """The launch option that caps a kernel's registers per thread (ptxas .maxnreg), on the
    NVIDIA path and where the tiles set one (0: the compiler's choice)."""
    return {"maxnreg": max_regs} if fast and max_regs else {}
