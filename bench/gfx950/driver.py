"""A compile-only Triton driver for AMD gfx950 (MI355X), or for NVIDIA sm_90 (H200): every JIT launch
compiles with the real HIP (or CUDA) backend and specialises as it would on the GPU (constexprs,
num_warps, num_stages, divisibility of arguments), but nothing runs.

The launcher's tensors stay on the CPU (torch.empty: no values are read). Each launch is recorded
with its compiled kernel and grid. Triton checks LDS only when loading a kernel, which here loads
nothing, so a kernel over the device's LDS compiles and is reported by the caller instead.
Works with triton 3.5, 3.6 and 3.9: it uses the driver interface those share (DriverBase,
driver.set_active, launcher_cls(src, metadata), utils.load_binary / get_device_properties).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase
from triton.runtime.driver import driver as driver_config

TARGET = GPUTarget("hip", "gfx950", 64)
SM90 = GPUTarget("cuda", 90, 32)
# What CompiledKernel asks of the device when it 'loads', per target: no limit it could fail (LDS and
# shared memory are checked by the callers), the unit count and warp size of the chip.
_PROPERTIES = {
    "hip": {"max_shared_mem": 1 << 40, "multiprocessor_count": 256, "warpSize": 64},
    "cuda": {"max_shared_mem": 1 << 40, "multiprocessor_count": 132, "warpSize": 32, "max_num_regs": 65536},
}


def _device(target: GPUTarget) -> str:
    """The key of the JIT's per-device kernel cache: one name per target for every compile-only
    launch, so that a kernel specialised the same way compiles once per process and target."""
    return f"{target.arch}-compile-only"


@dataclass
class Launch:
    """One kernel launch: the compiled kernel (asm, metadata), its grid and its constexprs by name."""

    kernel: object  # triton.compiler.CompiledKernel
    grid: tuple[int, int, int]
    constexprs: dict = field(default_factory=dict)

    @property
    def function(self) -> str:
        """The @triton.jit function's name (the kernel's name may carry a repr of its constexprs)."""
        return self.kernel.src.fn.__name__


class _Utils:
    """What CompiledKernel asks of the device when it 'loads': no module, no limit it could fail."""

    def __init__(self, target: GPUTarget = TARGET):
        self.target = target

    def get_device_properties(self, device):
        return {**_PROPERTIES[self.target.backend], "arch": self.target.arch}

    def load_binary(self, name, kernel, shared, device):
        return None, None, 0, 0, 1024  # module, function, registers, spills, max threads

    def unload_module(self, module):
        pass


class CompileOnlyDriver(DriverBase):
    """Active while compiling: the target is the given one (gfx950 by default) and a launch records
    itself instead of running."""

    def __init__(self, target: GPUTarget = TARGET):
        self.target, self.device = target, _device(target)
        self.utils = _Utils(target)
        self.launches: list[Launch] = []
        driver = self

        class Launcher:
            def __init__(self, src, metadata):
                self.src, self.metadata = src, metadata

            def __call__(self, grid_x, grid_y, grid_z, *_rest):
                driver.launches.append(
                    Launch(
                        kernel=_compiled(self.src, self.metadata, driver.device),
                        grid=(grid_x, grid_y, grid_z),
                        constexprs=_named_constexprs(self.src),
                    )
                )

        self.launcher_cls = Launcher

    @staticmethod
    def is_active():
        return False  # never picked on its own; set_active installs it

    def map_python_to_cpp_type(self, ty: str) -> str:
        return ty

    def get_current_target(self):
        return self.target

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")

    def get_current_device(self):
        return self.device

    def get_current_stream(self, device=None):
        return 0

    def set_current_device(self, device):
        pass

    def get_benchmarker(self):
        raise RuntimeError(f"the {self.target.arch} compile-only driver runs nothing, so it cannot time anything")


def _compiled(src, metadata, device: str):
    """The CompiledKernel a launcher was made for: the JIT cache entry holding this very metadata."""
    cache = src.fn.device_caches[device][0]
    for kernel in cache.values():
        if getattr(kernel, "metadata", None) is metadata:
            return kernel
    raise RuntimeError(f"{metadata.name}: compiled kernel not found in the JIT cache")


def _named_constexprs(src) -> dict:
    names = src.fn.arg_names
    return {names[key[0]]: value for key, value in src.constants.items() if len(key) == 1}


# The environment inside compile_only_gfx950: compiled kernels, and FP fusion stated as the default it
# is today. Triton 3.9 warns at every compile that leaves enable_fp_fusion to that default (which
# 3.10 turns off); the package's launches do, so the check states it (a value given wins).
_COMPILE_ENV = {"TRITON_INTERPRET": "0"}
_COMPILE_ENV_DEFAULTS = {"TRITON_DEFAULT_FP_FUSION": "1"}


def compile_only_gfx950():
    """compile_only for gfx950 (the MI355X)."""
    return compile_only(TARGET)


@contextlib.contextmanager
def compile_only(target: GPUTarget):
    """Yield the active compile-only driver for `target`; the previous driver (often none on a CPU
    machine, where asking for one raises) is put back afterwards, and the environment
    (_COMPILE_ENV) too."""
    previous_driver = driver_config._active  # the attribute set_active sets; may be None
    saved = {k: os.environ.get(k) for k in (*_COMPILE_ENV, *_COMPILE_ENV_DEFAULTS)}
    os.environ.update(_COMPILE_ENV)
    for key, value in _COMPILE_ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    active = CompileOnlyDriver(target)
    driver_config.set_active(active)
    try:
        yield active
    finally:
        driver_config._active = previous_driver
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
