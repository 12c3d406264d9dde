"""`python -m bench.gfx950.replay`: whether the native path's plan replay (moe_triton/plan.py) calls
each compiled kernel's launcher on gfx950 (the MI355X) as Triton's own JIT launch would, argument for
argument, for every launch of the native path on the given cases and their tiles. CPU only: the
compile-only gfx950 driver (bench.gfx950.driver) compiles every kernel with the HIP backend and runs
nothing; the inputs are empty CPU tensors of the cases' shapes (no values read).

Per case and tiles (the table's and each alternate the MI355X's selection may pick): a first call
records the shape's plan, with its direct launches on as on a ROCm GPU; a second call, on other
input tensors, replays it; a third, on those same tensors through a fresh plan, launches every
kernel through the JIT (`kernel[grid](...)`) as the launcher writes it. Both are recorded where
triton 3.6 and 3.9 meet: the launcher object that CompiledKernel.run returns, which JITFunction.run
and the replay each call as launcher(grid x, y, z, stream, function, packed metadata, launch
metadata, enter hook, exit hook, *kernel arguments). Compared: the compiled kernel (its metadata
object), the grid, stream, function and packed metadata, the launch metadata (by content), the
hooks (by identity) and every kernel argument, tensors by data_ptr (the output tensor, new in each
call, by its role) and other values by type and value. Then inputs that the JIT would specialise
otherwise (off 16 bytes; in a storage over 2 GiB, where the HIP backend drops its 32-bit buffer
offsets) must leave the replay to the JIT. Exit status 1 on any difference.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

PROG = "python -m bench.gfx950.replay"
# The launcher's leading arguments, before the kernel's own (triton 3.6 to 3.9).
LEADING = (
    "grid x",
    "grid y",
    "grid z",
    "stream",
    "function",
    "kernel metadata",
    "launch metadata",
    "launch enter hook",
    "launch exit hook",
)


@dataclass
class LauncherCall:
    """One call of a compiled kernel's launcher: the kernel's metadata object, its argument names
    and the call's positional arguments as given."""

    metadata: object
    arg_names: list
    arguments: tuple

    @property
    def kernel(self) -> str:
        return self.metadata.name


def record_launchers(driver) -> list[LauncherCall]:
    """Every later launcher call of this compile-only driver's kernels, appended to the list returned.
    A CompiledKernel makes its launcher from driver.launcher_cls when it loads, for the JIT launch and
    the plan's replay alike."""
    calls: list[LauncherCall] = []
    base = driver.launcher_cls

    class RecordingLauncher(base):
        def __call__(self, *arguments):
            calls.append(LauncherCall(self.metadata, list(self.src.fn.arg_names), arguments))
            return super().__call__(*arguments)

    driver.launcher_cls = RecordingLauncher
    return calls


def _same(a, b, out_a, out_b) -> bool:
    """a (the JIT's) and b (the replay's) are the same launcher argument: tensors by data_ptr, the
    call's output by its role; containers and plain objects (LazyDict, the launch metadata) by
    content; callables (the hook chains) by identity; everything else by type and value."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        role_a = "out" if a.data_ptr() == out_a.data_ptr() else a.data_ptr()
        role_b = "out" if b.data_ptr() == out_b.data_ptr() else b.data_ptr()
        return role_a == role_b
    if type(a) is not type(b):
        return False
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y, out_a, out_b) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k], out_a, out_b) for k in a)
    if callable(a):
        return a is b
    if hasattr(a, "__dict__"):
        return _same(vars(a), vars(b), out_a, out_b)
    return a == b


def differences(jit: list[LauncherCall], replay: list[LauncherCall], out_jit, out_replay) -> list[str]:
    """Where the replay's launcher calls differ from the JIT's, one line each (none: equal)."""
    if len(jit) != len(replay):
        return [f"{len(replay)} launcher calls in the replay against the JIT's {len(jit)}"]
    found = []
    for k, (a, b) in enumerate(zip(jit, replay, strict=True)):
        if a.metadata is not b.metadata:
            found.append(f"launch {k}: kernel {b.kernel} ({b.metadata.hash[:8]}), the JIT's {a.metadata.hash[:8]}")
            continue
        names = [*LEADING, *a.arg_names]
        if not len(a.arguments) == len(b.arguments) == len(names):
            found.append(
                f"launch {k} ({a.kernel}): {len(b.arguments)} arguments, the JIT's {len(a.arguments)}, "
                f"the launcher's {len(names)}"
            )
            continue
        for name, x, y in zip(names, a.arguments, b.arguments, strict=True):
            if not _same(x, y, out_jit, out_replay):
                found.append(f"launch {k} ({a.kernel}): {name}: replay {y!r}, JIT {x!r}")
    return found


def _inputs(params: dict):
    from bench.gfx950.run import compile_inputs
    from problem.validation import validate_inputs

    data = compile_inputs(params)
    validate_inputs(data)
    hidden, w1, w2, w1_scale, w2_scale, *_, topk_weights, topk_ids, _config = data
    return [hidden, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids]


class Caller:
    """The package's native launcher under one compile-only gfx950 driver for the whole run (the JIT
    keeps each CompiledKernel, and with it the launcher it made, across calls)."""

    def __init__(self, driver):
        from bench.gfx950.run import _launcher
        from moe_triton import plan

        self.calls = record_launchers(driver)
        self.plan, self.fused = plan, _launcher()  # fused_moe_triton, its kernels compiled (not interpreted)

    def call(self, inputs, tiles):
        """One layer call on the native path; returns (its output, its launcher calls)."""
        start = len(self.calls)
        out = self.fused(*inputs, tiles=tiles, native=True)
        return out, self.calls[start:]

    def first_call(self, inputs, tiles):
        """A first call of the shape and tiles: its plan, recorded through JIT launches, its direct
        launches on as a ROCm device's plan has them (device type 'cuda'; the CPU tensors here give
        none)."""
        self.plan.clear_plans()
        self.call(inputs, tiles)
        recorded = self.plan.latest_plan()
        if not all(launch.compiled is not None for launch in recorded.launches):
            raise RuntimeError("a launch of the plan returned no CompiledKernel")
        recorded.direct = True
        return recorded

    def jit_call(self, inputs, tiles):
        """The call through a fresh plan: every launch a JIT launch, as the launcher writes it."""
        self.plan.clear_plans()
        return self.call(inputs, tiles)


def compare_case(caller: Caller, params: dict, tiles) -> tuple[int, list[str]]:
    """(launches, differences) of one case and tiles: a replay on other inputs against the JIT's
    launches on those inputs."""
    plan = caller.first_call(_inputs(params), tiles)
    other = _inputs(params)
    out_replay, replay = caller.call(other, tiles)
    found = [] if plan.tried else ["the replay took the JIT launch (no direct launch)"]
    out_jit, jit = caller.jit_call(other, tiles)
    return len(jit), found + differences(jit, replay, out_jit, out_replay)


def respecialised_inputs(params: dict) -> dict[str, list]:
    """Inputs of a case that the JIT specialises otherwise than fresh ones: topk_weights 4 bytes off
    16 (no divisibility by 16), and in a storage over 2 GiB (the HIP backend's buffer loads with
    32-bit offsets, `tt.pointer_range`, only for storages up to 2^31 - 1 bytes; never touched here)."""
    import torch

    found = {}
    for name, elements in (("off 16 bytes", 1), ("in a storage over 2 GiB", 2**31 // 4)):
        inputs = _inputs(params)
        weights = inputs[5]
        inputs[5] = torch.empty(elements + weights.numel(), dtype=weights.dtype)[elements:].view(weights.shape)
        found[name] = inputs
    return found


def compare_respecialised(caller: Caller, params: dict, tiles) -> list[str]:
    """Differences where inputs that the JIT specialises otherwise follow the plan: each must leave
    the replay to the JIT launch. A direct replay of them, forced, must differ from the JIT (the
    comparison sees it)."""
    found = []
    for name, inputs in respecialised_inputs(params).items():
        plan = caller.first_call(_inputs(params), tiles)
        out_replay, replay = caller.call(inputs, tiles)
        if plan.tried:
            found.append(f"{name}: the replay launched directly")
        out_jit, jit = caller.jit_call(inputs, tiles)
        found += [f"{name}: {line}" for line in differences(jit, replay, out_jit, out_replay)]
        plan = caller.first_call(_inputs(params), tiles)
        plan.specialised = caller.plan.specialisation(inputs, plan.amd)  # as if the plan had not seen the difference
        out_forced, forced = caller.call(inputs, tiles)
        if not differences(jit, forced, out_jit, out_forced):
            found.append(f"{name}: a forced direct replay passed what the JIT passes: the comparison missed it")
    return found


def parse_args(argv):
    from bench.runner.preflight import UsageParser

    p = UsageParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--cases",
        nargs="+",
        default=["all"],
        help="case selectors as for python -m bench: all (default: the official shapes and smoke), official, "
        "tests, benchmarks, smoke, smoke:0, ...",
    )
    p.add_argument(
        "--tiles",
        nargs="+",
        default=["all"],
        metavar="NAME",
        help="per case the table's tiles (table) and those of its variants of these names where it has them "
        "(its alternates, moe_triton.tiles_amd.NATIVE_ALTERNATES, and --extra-variants); all (default): every one",
    )
    p.add_argument(
        "--extra-variants",
        type=Path,
        metavar="JSON",
        help="also, per case, these variants of the table's tile: a JSON file of name -> {field: value}, as for "
        "python -m bench.gfx950",
    )
    p.add_argument(
        "--respecialised",
        default="smoke:0",
        metavar="CASE",
        help="the case whose table tiles get inputs that the JIT specialises otherwise ('' for none; default smoke:0)",
    )
    return p.parse_args(argv)


def _plan(args) -> tuple[list, list] | str:
    """([(case, name, tiles)] to compare, [(case, tiles)] to respecialise), or the error's line."""
    from bench.gfx950.variants import config_fields, extra_variants, variants
    from bench.runner.case_args import UsageError, select_cases
    from moe_triton.tiles_amd import NATIVE_VARIANTS

    try:
        extra = extra_variants(args.extra_variants, config_fields()) if args.extra_variants else {}
    except (OSError, ValueError) as exc:
        return f"--extra-variants: {exc}"
    known = {"all", "table", *NATIVE_VARIANTS, *extra}
    unknown = sorted(set(args.tiles) - known)
    if unknown:
        return f"--tiles: no variant {', '.join(unknown)} (one of {', '.join(sorted(known))})"
    try:
        cases = select_cases(args.cases)
    except UsageError as exc:
        return f"--cases: {exc}"
    try:
        special = select_cases([args.respecialised]) if args.respecialised else []
    except UsageError as exc:
        return f"--respecialised: {exc}"
    try:
        compared = [
            (case, name, tiles)
            for case in cases
            for name, tiles in variants(case.params, "native", extra)
            if "all" in args.tiles or name in args.tiles
        ]
    except ValueError as exc:  # two variants of a case under one name
        return str(exc)
    return compared, [(case, variants(case.params, "native")[0][1]) for case in special]


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Off before Triton and the kernels' modules are imported (they decorate at import), and back as it
    # was after.
    with mock.patch.dict(os.environ, {"TRITON_INTERPRET": "0"}):
        planned = _plan(args)
        if isinstance(planned, str):
            print(f"{PROG}: error: {planned}", file=sys.stderr)
            return 2
        return _replay(*planned)


def _replay(compared: list, special: list) -> int:
    """The comparisons of main, its exit status."""
    import triton

    from bench.gfx950.driver import compile_only_gfx950

    failed, launches = [], 0
    with compile_only_gfx950() as driver:
        caller = Caller(driver)
        for case, name, tiles in compared:
            count, found = compare_case(caller, case.params, tiles)
            launches += count
            failed += [f"{case.label}/{name}: {line}" for line in found]
        for case, tiles in special:
            failed += [f"{case.label}/table: {line}" for line in compare_respecialised(caller, case.params, tiles)]
    for line in failed:
        print(f"FAIL {line}")
    if failed:
        return 1
    labels = ", ".join(case.label for case, _ in special)
    respecialised = f"; respecialised inputs of {labels} left to the JIT" if special else ""
    print(
        f"PASS: {launches} launches of {len(compared)} case tiles replayed as the JIT launches them on gfx950"
        f"{respecialised} (triton {triton.__version__})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
