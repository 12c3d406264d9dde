"""The selection's choices on disk, so that the leaderboard's later runs (benchmark, leaderboard: new
processes in the same job) reuse what the test run measured. The file, its stamp and what is
ignored: docs/selection.md, "What happens at the first call of a shape"."""

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
import triton

from problem.shapes import Shape

FORMAT = 2
PACKAGE_VERSION = "0.1.0"  # pyproject.toml's


def default_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "moe-mxfp4" / "choices.json"


# Folders beside the submission that hold no part of it: the package's tools and tests.
NOT_SOURCE = ("bench", "tests")


def source_digest(folder: Path) -> str:
    """sha256 of the submission's source: the .py files beside it (the bundle too) and in its packages (the
    tools' and tests' excepted), so that a changed kernel or table makes the stored choices another version's."""
    folder = Path(folder)
    files = sorted(folder.glob("*.py"))
    for init in sorted(folder.glob("*/__init__.py")):
        if init.parent.name not in NOT_SOURCE:
            files += sorted(init.parent.rglob("*.py"))
    h = hashlib.sha256()
    for path in files:
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _aiter_version() -> str:
    for dist in ("amd-aiter", "aiter"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            return importlib.metadata.version(dist)
    return "absent"


def stamp(folder: Path) -> dict:
    """What a stored choice is valid for: this device and these versions."""
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return {
        "format": FORMAT,
        "device": device,
        "package": PACKAGE_VERSION,
        "source": source_digest(folder),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "aiter": _aiter_version(),
    }


def key_text(shape: Shape) -> str:
    """A shape's key in the file, e.g. n_tokens=16,d_hidden=7168,d_inter=256,n_experts=257,topk=9."""
    return ",".join(f"{name}={size}" for name, size in shape._asdict().items())


class ChoiceFile:
    """The stored choices of one stamp; read at the first lookup, merged and rewritten per put."""

    def __init__(self, path: Path, stamp: dict):
        self.path = Path(path)
        self.stamp = stamp

    def _read(self, quiet: bool = False) -> dict:
        """The file's entries if it is this stamp's, else {} (with one stderr line, unless quiet or
        the file is absent: a write never reports twice)."""

        def ignored(why: str) -> dict:
            if not quiet:
                print(f"moe-mxfp4 select: choice file {self.path} ignored: {why}", file=sys.stderr)
            return {}

        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            return ignored(str(exc))
        try:
            content = json.loads(text)
            foreign = content.get("stamp") != self.stamp
            entries = content["shapes"]
            if not isinstance(entries, dict):
                raise TypeError("shapes is not an object")
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return ignored(f"corrupt ({exc})")
        return ignored("written for another version") if foreign else entries

    @functools.cached_property
    def entries(self) -> dict:
        return self._read()

    def get(self, shape: Shape, digest: str) -> list[str] | None:
        """The stored order of candidate names for shape, if it was chosen among the same candidates."""
        entry = self.entries.get(key_text(shape))
        if not isinstance(entry, dict) or entry.get("candidates") != digest:
            return None
        order = entry.get("order")
        if not isinstance(order, list) or not order or not all(isinstance(n, str) for n in order):
            return None
        return order

    def put(self, shape: Shape, digest: str, order: list[str], medians_us: dict[str, float]) -> None:
        """Store one shape's choice (merged with what another process wrote meanwhile)."""
        self.entries[key_text(shape)] = {"candidates": digest, "order": order, "median_us": medians_us}
        merged = {**self._read(quiet=True), **self.entries}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".choices-", suffix=".json")
            with os.fdopen(fd, "w") as f:
                json.dump({"stamp": self.stamp, "shapes": merged}, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except OSError as exc:
            print(f"moe-mxfp4 select: choice file {self.path} not written: {exc}", file=sys.stderr)
