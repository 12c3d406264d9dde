"""The backends of a run (`--backend`, MOE_BACKEND, MOE_SELECT) and loading their submission files.

A backend is a name run through the package's submission.py with MOE_BACKEND set (auto leaves it
to the environment, select sets MOE_SELECT=1), or a submission file such as dist/submission.py
(PATH@NAME sets MOE_BACKEND for it). Every load gets a fresh, unique module name, so a second
submission never replaces the first in sys.modules; `backend_env` sets MOE_BACKEND for a load and
restores the previous value afterwards.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import itertools
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from bench.runner.case_args import UsageError

MOE_BACKENDS = ("aiter", "aiter-fused", "triton", "reference")  # the values of MOE_BACKEND
# auto: the package's default backend with its static table (MOE_SELECT=0); select: the same with
# the first-call selection (MOE_SELECT=1), so that one run can time both.
NAMED_BACKENDS = ("auto", "select", *MOE_BACKENDS)
SELECT_ENV = {"auto": "0", "select": "1"}

_counter = itertools.count()


@dataclass
class BackendSpec:
    label: str  # as shown in tables: a backend name or the path given
    path: Path  # the submission file loaded
    moe_backend: str | None = None  # MOE_BACKEND for that file; None leaves it unset
    env: dict = field(default_factory=dict)  # more environment for it (MOE_SELECT)
    from_env: bool = False  # moe_backend came from the environment's MOE_BACKEND, not the command line


def parse_backend(text: str, root: str | Path) -> BackendSpec:
    """A backend name (auto, aiter, aiter-fused, triton, reference) run through the package's
    submission.py, or a path to a submission file (e.g. dist/submission.py), optionally with
    @NAME to set MOE_BACKEND for it."""
    root = Path(root)
    raw = text.strip()
    names = ", ".join(NAMED_BACKENDS)
    if raw in NAMED_BACKENDS:
        if not (root / "submission.py").is_file():
            raise UsageError(f"backend {raw!r} runs the package's submission.py, which is missing from {root}")
        if raw in SELECT_ENV:
            return BackendSpec(raw, root / "submission.py", None, {"MOE_SELECT": SELECT_ENV[raw]})
        return BackendSpec(label=raw, path=root / "submission.py", moe_backend=raw)
    file_part, at, name = raw.rpartition("@") if "@" in raw else (raw, "", "")
    if not at:
        file_part = raw
    if file_part.endswith(".py") or os.sep in file_part or "/" in file_part:
        path = Path(file_part)
        if not path.is_absolute() and not path.exists() and (root / path).exists():
            path = root / path
        if not path.is_file():
            raise UsageError(f"backend {raw!r}: no such file {file_part}")
        if at and name not in NAMED_BACKENDS[1:]:
            raise UsageError(f"backend {raw!r}: after @ expected one of {', '.join(NAMED_BACKENDS[1:])}")
        why = not_a_submission(path)
        if why:
            raise UsageError(f"backend {raw!r}: not a submission file ({why}); `python bundle.py` writes one")
        if name == "select":
            return BackendSpec(raw, path.resolve(), None, {"MOE_SELECT": "1"})
        return BackendSpec(label=raw, path=path.resolve(), moe_backend=name if at else None)
    raise UsageError(f"unknown backend {raw!r}: expected one of {names}, or a path to a submission .py file")


def _top_level_names(body: list[ast.stmt]) -> Iterator[str]:
    """Names a module body binds, looking into module-level if/try/with blocks."""
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            yield from ((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                yield from (n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        for block in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, block, None)
            if isinstance(inner, list) and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                yield from _top_level_names([n for n in inner if isinstance(n, ast.AST)])


def _declared_names(body: list[ast.stmt]) -> Iterator[str]:
    """The names of a literal `__all__` at the top level (a bundle binds its entry's names by running
    the entry's code, and declares them there)."""
    for node in body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]:
            with contextlib.suppress(ValueError):
                yield from ast.literal_eval(node.value)


def not_a_submission(path: Path) -> str | None:
    """Why the file cannot be a submission (it does not compile, or neither binds nor declares in
    `__all__` a custom_kernel at its top level), read without running it; None when it may be one."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError) as exc:
        where = f", line {exc.lineno}" if getattr(exc, "lineno", None) else ""
        return f"it does not compile{where}: {getattr(exc, 'msg', None) or exc}"
    if "custom_kernel" not in {*_top_level_names(tree.body), *_declared_names(tree.body)}:
        return "it defines no custom_kernel"
    return None


def parse_backends(items: Iterable[str], root: str | Path) -> list[BackendSpec]:
    specs: list[BackendSpec] = []
    for item in items:
        for part in item.split(","):
            if part.strip():
                specs.append(parse_backend(part, root))
    if not specs:
        raise UsageError("no backend given")
    labels = [s.label for s in specs]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise UsageError(f"backend given twice: {', '.join(dupes)}")
    return specs


def backend_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """MOE_BACKEND (what submission.py reads), checked: None when unset or empty."""
    value = (os.environ if environ is None else environ).get("MOE_BACKEND", "").strip()
    if not value:
        return None
    if value not in MOE_BACKENDS:
        raise UsageError(
            f"MOE_BACKEND={value!r} is not a backend: expected one of {', '.join(MOE_BACKENDS)} "
            f"(or unset it and pass --backend)"
        )
    return value


def check_submission_env(environ: Mapping[str, str] | None = None) -> None:
    """MOE_SELECT, MOE_SELECT_BUDGET_S, MOE_SELECT_CANDIDATES (selection/selector.py) and
    MOE_TRITON_NATIVE (moe_triton/env.py) by the submission's own rules, before any case runs; a
    bad value is a usage error naming the variable. Neither module imports Triton, which must wait
    for TRITON_INTERPRET."""
    from moe_triton.env import native_forced
    from selection.selector import CANDIDATES_VALUES, SELECT_VALUES, budget_s, candidate_set, select_mode

    env = os.environ if environ is None else environ
    try:
        select_mode(env)
    except ValueError:
        raise UsageError(f"MOE_SELECT={env['MOE_SELECT']!r}: expected one of {', '.join(SELECT_VALUES)}") from None
    try:
        budget_s(env)
    except ValueError:
        raise UsageError(f"MOE_SELECT_BUDGET_S={env['MOE_SELECT_BUDGET_S']!r}: expected seconds >= 0") from None
    try:
        candidate_set(env)
    except ValueError:
        raise UsageError(
            f"MOE_SELECT_CANDIDATES={env['MOE_SELECT_CANDIDATES']!r}: expected one of {', '.join(CANDIDATES_VALUES)}"
        ) from None
    try:
        native_forced(env)
    except ValueError:
        raise UsageError(f"MOE_TRITON_NATIVE={env['MOE_TRITON_NATIVE']!r}: expected 0 or 1 (or unset)") from None


def apply_env_backend(specs: list[BackendSpec], env_backend: str | None) -> list[str]:
    """MOE_BACKEND stands for every backend left to its default (auto, or a file without @NAME),
    as submission.py would read it; a backend named on the command line wins. Returns notes."""
    if env_backend is None:
        return []
    notes = []
    for spec in specs:
        if spec.moe_backend is None:
            spec.label = env_backend if spec.label == "auto" else f"{spec.label}@{env_backend}"
            spec.moe_backend = env_backend
            spec.from_env = True
        elif spec.moe_backend != env_backend:
            notes.append(f"MOE_BACKEND={env_backend} ignored for --backend {spec.label}")
    labels = [s.label for s in specs]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise UsageError(f"backend given twice once MOE_BACKEND={env_backend} is applied: {', '.join(dupes)}")
    return notes


def select_notes(specs: list[BackendSpec], by_default: bool, environ: Mapping[str, str] | None = None) -> list[str]:
    """A note for each backend of the command line that overrides the user's MOE_SELECT: auto and
    select set it (0, 1), and a named backend sets MOE_BACKEND, which turns the selection off.
    Backends that MOE_BACKEND from the environment stands for are the user's own doing."""
    select = (os.environ if environ is None else environ).get("MOE_SELECT", "")
    if not select:
        return []
    notes = []
    for spec in specs:
        given = f"--backend {spec.label}" + (" (the default)" if by_default else "")
        wanted = spec.env.get("MOE_SELECT")
        if spec.from_env:
            continue
        if wanted is not None and wanted != select:
            hint = "--backend select selects" if wanted == "0" else "--backend auto keeps the static tables"
            notes.append(f"MOE_SELECT={select} ignored for {given}, which sets MOE_SELECT={wanted} ({hint})")
        elif spec.moe_backend and select != "0":
            notes.append(f"MOE_SELECT={select} ignored for {given}: MOE_BACKEND={spec.moe_backend} runs it alone")
    return notes


@contextlib.contextmanager
def backend_env(moe_backend: str | None, extra: dict | None = None) -> Iterator[None]:
    """MOE_BACKEND=moe_backend (unset when None) plus `extra`, restored on exit."""
    keys = ["MOE_BACKEND", *(extra or {})]
    saved = {k: os.environ.get(k) for k in keys}
    try:
        if moe_backend is None:
            os.environ.pop("MOE_BACKEND", None)
        else:
            os.environ["MOE_BACKEND"] = moe_backend
        for k, v in (extra or {}).items():
            os.environ[k] = str(v)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def load_module(path: str | Path, root: str | Path, label: str = "submission") -> ModuleType:
    """Execute the file at `path` as a new module (its own folder and the package root on sys.path,
    for `from task import ...` and the package's modules)."""
    path = Path(path).resolve()
    for folder in (str(Path(root).resolve()), str(path.parent)):
        if folder not in sys.path:
            sys.path.insert(0, folder)
    name = f"_moe_bench_{next(_counter)}_{re.sub(r'[^0-9A-Za-z_]', '_', label)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def load_custom_kernel(path: str | Path, root: str | Path, label: str = "submission") -> Callable:
    module = load_module(path, root, label)
    kernel = getattr(module, "custom_kernel", None)
    if not callable(kernel):
        raise AttributeError(f"{path} defines no custom_kernel")
    return kernel
