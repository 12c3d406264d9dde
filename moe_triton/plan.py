"""Per-shape plans: a shape's first call records its launches, later calls replay them with their own
tensors, saving the host time of the JIT launch (docs/triton.md, "Host time per call" and "The replay
on gfx950")."""

import atexit
import gc
import inspect
import os
from collections import OrderedDict
from collections.abc import Callable
from typing import NamedTuple

import torch
import triton
from triton.compiler import CompiledKernel
from triton.runtime import driver
from triton.runtime.errors import OutOfResources

from moe_triton import target
from problem.shapes import Shape

MAX_PLANS = 16  # shapes whose plans are kept (least recently used dropped first)
# Direct launches on the NVIDIA path; MOE_TRITON_DIRECT=0 keeps the JIT launches (to compare).
DIRECT_LAUNCH = os.environ.get("MOE_TRITON_DIRECT", "1") != "0"
_plans: "OrderedDict[tuple, Plan]" = OrderedDict()
_recording: "list | None" = None  # the launches of the plan being built, while a first call runs
atexit.register(gc.unfreeze)  # planned_call's frozen objects collected at exit (nanobind reports them otherwise)


def launch(fn, grid: tuple, *args, **kwargs) -> None:
    """fn[grid](*args, **kwargs), recorded into the plan being built; a tile too large is a ValueError."""
    try:
        compiled = fn[grid](*args, **kwargs)
    except OutOfResources as exc:
        raise ValueError(
            f"tiles: {fn.__name__} needs {exc.name} {exc.required:,} and this GPU has {exc.limit:,}; "
            "choose smaller block or stage fields"
        ) from None
    if _recording is not None:
        _recording.append((fn, grid, args, kwargs, compiled))


def _hooks_idle() -> bool:
    """No launch hook registered: the launcher may be called without launch metadata."""
    runtime = triton.knobs.runtime
    hooks = (runtime.launch_enter_hook, runtime.launch_exit_hook)  # HookChains (3.6+) or None
    return all(h is None or not getattr(h, "calls", True) for h in hooks)


def specialisation(tensors: tuple, amd: bool) -> tuple:
    """What the JIT specialises a kernel on beyond the tensors' shapes (on AMD the storage under 2 GiB too,
    for buffer ops' 32-bit offsets): a replay on inputs that differ in it would launch the wrong kernel."""
    if amd:
        return tuple((t.dtype, t.data_ptr() % 16 == 0, t.untyped_storage().nbytes() < 2**31) for t in tensors)
    return tuple((t.dtype, t.data_ptr() % 16 == 0) for t in tensors)


class _Launch:
    """One recorded launch: its JIT arguments and kernel parameters, the call's tensors by position."""

    __slots__ = ("fn", "grid_arg", "grid", "args", "kwargs", "slots", "params", "param_slots", "compiled")

    def __init__(self, fn, grid: tuple, args: tuple, kwargs: dict, compiled, call_tensors: tuple):
        where = {id(t): i for i, t in enumerate(call_tensors)}
        self.fn, self.grid_arg, self.grid = fn, grid, tuple(grid) + (1,) * (3 - len(grid))
        self.args, self.kwargs = list(args), kwargs
        self.slots = [(k, where[id(a)]) for k, a in enumerate(args) if id(a) in where]
        signature = inspect.signature(fn.fn)
        bound = signature.bind(*args, **{k: v for k, v in kwargs.items() if k in signature.parameters})
        bound.apply_defaults()
        self.params = list(bound.arguments.values())
        self.param_slots = [(k, where[id(a)]) for k, a in enumerate(self.params) if id(a) in where]
        self.compiled = compiled if isinstance(compiled, CompiledKernel) else None

    def jit(self, tensors: tuple) -> None:
        args = self.args.copy()
        for k, i in self.slots:
            args[k] = tensors[i]
        self.fn[self.grid_arg](*args, **self.kwargs)

    def direct(self, tensors: tuple, stream, exact: bool) -> None:
        """The launcher call that ends JITFunction.run; exact (AMD) passes its launch metadata and hooks
        too, else None for them, which saves 1.3 us a launch while no hook is registered."""
        params = self.params.copy()
        for k, i in self.param_slots:
            params[k] = tensors[i]
        c = self.compiled
        launch_info = (None, None, None)
        if exact:
            runtime = triton.knobs.runtime
            metadata = c.launch_metadata(self.grid_arg, stream, *params)
            launch_info = (metadata, runtime.launch_enter_hook, runtime.launch_exit_hook)
        c.run(*self.grid, stream, c.function, c.packed_metadata, *launch_info, *params)


class Call(NamedTuple):
    """A call's tensors as its launches take them: the weights and scales as bytes, the output and on
    the native path the hidden states as int32 pairs."""

    hidden_states: torch.Tensor
    w1: torch.Tensor
    w2: torch.Tensor
    w1_scale: torch.Tensor
    w2_scale: torch.Tensor
    topk_weights: torch.Tensor
    topk_ids: torch.Tensor
    out: torch.Tensor
    hidden_bits: torch.Tensor | None

    @classmethod
    def of(cls, inputs: tuple, out: torch.Tensor, bits: bool) -> "Call":
        hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids = inputs
        weights = (t.view(torch.uint8) for t in (w1, w2, w1_scale, w2_scale))
        hidden_bits = hidden_states.view(torch.int32) if bits else None
        return cls(hidden_states, *weights, topk_weights, topk_ids, out, hidden_bits)

    def tensors(self) -> tuple:
        return tuple(self) if self.hidden_bits is not None else self[:-1]


class Layer(NamedTuple):
    """What a shape's launches read besides the call's tensors: sizes, tiles, routing blocks, a2."""

    shape: Shape
    cfg: object  # the path's tiles: TileConfig or NativeTileConfig
    n_blocks: int
    a2: tuple

    def stage1_args(self, call: Call, routing: tuple, a1: tuple) -> tuple:
        return (*a1, call.w1, call.w1_scale, *self.a2, *routing)

    def stage2_args(self, call: Call, routing: tuple) -> tuple:
        sizes = (self.shape.n_tokens, self.shape.d_hidden, self.shape.d_inter)
        return (*self.a2, call.w2, call.w2_scale, call.out, call.topk_weights, *routing, *sizes)


class Path(NamedTuple):
    """What a path gives fused_moe.first_call; native: hidden states as int32 pairs, replays on any GPU."""

    tiles: type
    check: Callable
    scratch: Callable
    prep: Callable
    stage1: Callable
    stage2: Callable
    native: bool


class Plan:
    """The recorded launches of one shape (tiles, grids, constexprs, scratch buffers held)."""

    def __init__(self, launches: list[_Launch], out: torch.Tensor, direct: bool, inputs: tuple, amd: bool, bits: bool):
        self.launches, self.out_shape, self.acc_dtype = launches, tuple(out.shape), out.dtype
        self.bits = bits  # the launches take the hidden states as int32 pairs too (the native path)
        self.direct = direct and all(launch.compiled is not None for launch in launches)
        self.amd = amd  # AMD: the JIT specialises on storage sizes; replays pass launch metadata
        self.specialised = specialisation(inputs, amd)  # the first call's inputs, as the JIT saw them
        self.tried = False  # a direct replay has gone through once

    def run(self, hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids) -> torch.Tensor:
        out = torch.empty(self.out_shape, dtype=self.acc_dtype, device=hidden_states.device)
        raw = (hidden_states, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids)
        if self.direct and _hooks_idle() and specialisation(raw, self.amd) == self.specialised:
            stream = driver.active.get_current_stream(driver.active.get_current_device())
            # A direct launch passes pointers: the hidden states stand for their int32 view.
            tensors = (*raw, out, hidden_states) if self.bits else (*raw, out)
            try:
                for launch in self.launches:
                    launch.direct(tensors, stream, exact=self.amd)
                self.tried = True
                return out
            except Exception:
                if self.tried:
                    raise
                self.direct = False  # the launcher is not called as this Triton expects: JIT launches
        tensors = Call.of(raw, out, self.bits).tensors()
        for launch in self.launches:
            launch.jit(tensors)
        return out


def clear_plans() -> None:
    """Forget every plan, so that each shape's next call records anew (tools that compare launches)."""
    _plans.clear()


def latest_plan() -> "Plan | None":
    """The plan that the last call recorded or replayed."""
    return next(reversed(_plans.values()), None)


def planned_call(key: tuple, record, inputs: tuple, interpret: bool) -> torch.Tensor:
    """A call through the key's plan, made by record() -> (plan, output); the interpreter's fp32 as bf16."""
    plan = _plans.get(key)
    if plan is None:
        plan, out = record()
        _plans[key] = plan
        gc.freeze()  # what is alive now, out of later full collections (docs/triton.md, "Host time per call")
        while len(_plans) > MAX_PLANS:
            _plans.popitem(last=False)
    else:
        _plans.move_to_end(key)
        out = plan.run(*inputs)
    return out if not interpret else out.to(torch.bfloat16)


def record_plan(launches, inputs: tuple, native: bool) -> tuple[Plan, torch.Tensor]:
    """A shape's first call: launches(call) runs and is recorded. Returns the plan and the output."""
    global _recording
    device = inputs[0].device
    acc_dtype = torch.float32 if target.interpreting() else torch.bfloat16
    out = torch.empty(inputs[0].shape, dtype=acc_dtype, device=device)
    call = Call.of(inputs, out, native)
    _recording = recorded = []
    try:
        launches(call)
    finally:
        _recording = None
    gpu = device.type == "cuda" and not target.interpreting()
    direct = DIRECT_LAUNCH and (gpu if native else target.fast_decode(device))
    recorded = [_Launch(*launch, call.tensors()) for launch in recorded]
    return Plan(recorded, out, direct, inputs, amd=target.targets_amd(), bits=native), out
