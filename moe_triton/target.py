"""What the Triton backend compiles for, asked in one place, and the launch options that follow from it."""

import contextlib
import functools
import os

import torch
import triton

from moe_triton.env import native_forced


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def fast_decode(device: torch.device) -> bool:
    """The weight decode's PTX path on NVIDIA GPUs (docs/triton.md, "How the GEMMs read the weights")."""
    return device.type == "cuda" and torch.version.hip is None and not interpreting()


@functools.cache
def _properties(index: int):
    return torch.cuda.get_device_properties(index)


def device_properties(device: torch.device):
    """torch's properties of a GPU, asked once per GPU (this runs on every call)."""
    return _properties(device.index if device.index is not None else torch.cuda.current_device())


def gluon_kernels(device: torch.device) -> bool:
    """Whether the Gluon kernels (wgmma, setmaxnreg) run here: an sm_90 GPU (H100, H200)."""
    if not (fast_decode(device) and torch.cuda.is_available()):
        return False
    props = device_properties(device)
    return (props.major, props.minor) == (9, 0)


def native_default(device: torch.device) -> bool:
    """The native path on a gfx950 device (scaled MXFP4 MFMAs) unless MOE_TRITON_NATIVE says 1 (always), 0 (never)."""
    forced = native_forced()
    if forced is not None:
        return forced
    is_rocm = device.type == "cuda" and torch.version.hip is not None
    return is_rocm and device_properties(device).gcnArchName.startswith("gfx950")


@functools.cache
def _target(driver):
    """A Triton driver's target, asked once per driver: the query is a HIP call on every layer call."""
    return driver.get_current_target()


def gfx950_converts() -> bool:
    """Whether the native kernels compile for gfx950 (an MI355X, or bench/gfx950's compile-only
    driver) and so use its fp4 convert instruction, not the emulation (docs/gfx950.md)."""
    return targets_amd() and str(_target(triton.runtime.driver.active).arch).startswith("gfx950")


def silu_judge() -> str:
    """The judge whose silu the kernels reproduce (docs/numerics.md, "The silu on each target")."""
    return "ck" if targets_amd() else "torch"


def silu_options() -> dict:
    """The launch arguments of a kernel that computes h: its judge, and for CK's no FP fusion."""
    judge = silu_judge()
    return {"JUDGE": judge, **({"enable_fp_fusion": False} if judge == "ck" else {})}


def targets_amd() -> bool:
    """Whether the kernels compile for AMD GPUs (a ROCm GPU, or bench/gfx950's compile-only driver)."""
    return not interpreting() and _target(triton.runtime.driver.active).backend == "hip"


def amd_options(nonkdim: int, waves_per_eu: int) -> dict:
    """The AMD backend's launch options, where the kernels compile for AMD GPUs; none elsewhere."""
    if not targets_amd():
        return {}
    return {"matrix_instr_nonkdim": nonkdim, "waves_per_eu": waves_per_eu}


# Programmatic dependent launch on the NVIDIA path; pdl_set switches it for tools.
PDL = True


def pdl_enabled() -> bool:
    """PDL as it is now, read through a function so that pdl_set reaches the plans' key."""
    return PDL


@contextlib.contextmanager
def pdl_set(on: bool):
    """PDL on or off while the block runs (tools that time kernels one by one)."""
    global PDL
    saved, PDL = PDL, on
    try:
        yield
    finally:
        PDL = saved


def pdl_options(fast: bool) -> dict:
    """The PDL kernel argument (kernels/routing.py, after_previous_launch) and launch option."""
    return {"PDL": True, "launch_pdl": True} if fast and PDL else {"PDL": False}
