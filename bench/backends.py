"""Loading a submission file (the package's submission.py or a bundled one) as its own module.

Every load gets a fresh, unique module name, so a second submission (another backend of the
package's submission.py, or dist/submission.py) never replaces the first in sys.modules.
MOE_BACKEND is set (or removed) for the load and stays so while that backend runs; `backend_env`
restores the previous value afterwards.
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

_counter = itertools.count()


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
