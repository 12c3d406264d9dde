"""What to run: cases (official lists, SMOKE, user-given), seeds, and backends.

Case selectors (any number, in order; duplicates are kept):
  tests | benchmarks | smoke         a whole list from problem/cases.py (aliases: test, bench, benchmark)
  official                          tests then benchmarks;  all: tests, benchmarks, smoke
  benchmarks:0,3  bench:2-4         entries of a list by 0-based index (ranges inclusive)
  dhidden=7168,dexpert=256,nroutedexperts=256,nexpertspertoken=8,nsharedexperts=1,bs=16[,seed=5]
                                    a user-given case (the runner's own "key: value; ..." form works too)

Seeds follow the runner: with a secret b (POPCORN_SEED, or --seed), every case seed a becomes
a + (a+b)(a+b+1)/2; in leaderboard mode each timed repetition regenerates its inputs after
adding 13 to the seed (bench.evaluate).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

CASE_KEYS = ("dhidden", "dexpert", "nroutedexperts", "nexpertspertoken", "nsharedexperts", "bs", "seed")
SHAPE_KEYS = CASE_KEYS[:-1]
DEFAULT_CUSTOM_SEED = 42
LEADERBOARD_SEED_STEP = 13

MODES = ("test", "benchmark", "leaderboard", "profile", "host")
MOE_BACKENDS = ("aiter", "aiter-fused", "triton", "reference")  # the values of MOE_BACKEND
# auto: the package's default backend with its static table (MOE_SELECT=0); select: the same with
# the first-call selection (MOE_SELECT=1), so that one run can time both.
NAMED_BACKENDS = ("auto", "select", *MOE_BACKENDS)
SELECT_ENV = {"auto": "0", "select": "1"}

_GROUP_ALIASES = {
    "tests": "tests",
    "test": "tests",
    "benchmarks": "benchmarks",
    "benchmark": "benchmarks",
    "bench": "benchmarks",
    "smoke": "smoke",
}
_GROUP_PREFIX = {"tests": "test", "benchmarks": "bench", "smoke": "smoke", "custom": "custom"}


class SelectionError(ValueError):
    """A case, seed or backend the runner cannot understand; the message says what is accepted."""


@dataclass
class Case:
    group: str  # tests | benchmarks | smoke | custom
    index: int  # position in its group (custom cases: order of appearance)
    params: dict  # generate_input keyword arguments; "seed" already combined with the secret

    @property
    def label(self) -> str:
        return f"{_GROUP_PREFIX[self.group]}{self.index}"

    @property
    def shape(self) -> str:
        from problem.cases import case_name

        return case_name(self.params)

    def shape_key(self) -> tuple:
        return tuple(int(self.params[k]) for k in SHAPE_KEYS)


def combine_seed(a: int, b: int) -> int:
    """The runner's Cantor pairing of a public case seed a with a secret seed b."""
    return int(a + (a + b) * (a + b + 1) // 2)


def secret_seed(cli_seed: int | None, environ: Mapping[str, str] | None = None) -> int | None:
    """--seed if given, else POPCORN_SEED from the environment (empty or unset: None)."""
    if cli_seed is not None:
        return int(cli_seed)
    raw = (os.environ if environ is None else environ).get("POPCORN_SEED", "")
    if not raw.strip():
        return None
    try:
        return int(raw)
    except ValueError:
        raise SelectionError(f"POPCORN_SEED must be an integer, got {raw!r}") from None


def _official_lists() -> dict[str, list[dict]]:
    from problem.cases import BENCHMARKS, SMOKE, TESTS

    return {"tests": TESTS, "benchmarks": BENCHMARKS, "smoke": SMOKE}


def _parse_indices(text: str, size: int, selector: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(-?\d+)(?:-(\d+))?", part)
        if not m:
            raise SelectionError(f"case selector {selector!r}: {part!r} is not an index or a range like 2-4")
        lo = int(m[1])
        hi = int(m[2]) if m[2] is not None else lo
        for i in range(lo, hi + 1):
            if not 0 <= i < size:
                raise SelectionError(f"case selector {selector!r}: index {i} out of range 0..{size - 1}")
            out.append(i)
    return out


CLI_CASE_EXAMPLE = "dhidden=7168,dexpert=256,nroutedexperts=256,nexpertspertoken=8,nsharedexperts=1,bs=16,seed=1"
FILE_CASE_EXAMPLE = "dhidden: 7168; dexpert: 256; nroutedexperts: 256; nexpertspertoken: 8; nsharedexperts: 1; bs: 16"


def _case_params(text: str, form: str) -> dict:
    """generate_input arguments of one case; SelectionError says what is wrong (`form`: the syntax hint)."""
    params: dict = {}
    for part in re.split(r"[;,]", text):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"([A-Za-z_]\w*)\s*[=:]\s*([+-]?\d+)", part)
        if not m:
            raise SelectionError(f"cannot read {part!r}; expected {form}")
        key = m[1].lower()
        if key not in CASE_KEYS:
            raise SelectionError(f"unknown key {m[1]!r}; keys are {', '.join(CASE_KEYS)}")
        params[key] = int(m[2])
    params.setdefault("seed", DEFAULT_CUSTOM_SEED)
    missing = [k for k in CASE_KEYS if k not in params]
    if missing:
        raise SelectionError(f"missing {', '.join(missing)}")
    for key in SHAPE_KEYS:
        if params[key] <= 0 and not (key == "nsharedexperts" and params[key] == 0):
            raise SelectionError(f"{key} must be positive")
    return {k: params[k] for k in CASE_KEYS}


def parse_case_spec(text: str) -> dict:
    """'k=v,k=v' or the runner's 'k: v; k: v' into generate_input arguments (seed optional)."""
    try:
        return _case_params(text, "key=integer")
    except SelectionError as exc:
        raise SelectionError(f"case {text!r}: {exc}") from None


def _looks_like_spec(text: str) -> bool:
    return bool(re.search(r"[A-Za-z_]\w*\s*(=|:\s*[+-]?\d)", text)) and any(k in text.lower() for k in CASE_KEYS)


def select_cases(selectors: Iterable[str], secret: int | None = None, lists: Mapping | None = None) -> list[Case]:
    """Cases for the selectors, seeds combined with the secret (see the module docstring)."""
    lists = _official_lists() if lists is None else lists
    picked: list[tuple[str, int, dict]] = []
    n_custom = 0
    for raw in selectors:
        sel = raw.strip()
        if not sel:
            continue
        low = sel.lower()
        if low in ("official", "all"):
            groups = ["tests", "benchmarks"] + (["smoke"] if low == "all" else [])
            for g in groups:
                picked += [(g, i, dict(c)) for i, c in enumerate(lists[g])]
            continue
        head, _, tail = low.partition(":")
        group = _GROUP_ALIASES.get(head.strip())
        if group is not None and (not tail or re.fullmatch(r"[\d,\s-]+", tail)):
            entries = lists[group]
            idx = _parse_indices(tail, len(entries), sel) if tail else range(len(entries))
            picked += [(group, i, dict(entries[i])) for i in idx]
            continue
        if _looks_like_spec(sel):
            picked.append(("custom", n_custom, parse_case_spec(sel)))
            n_custom += 1
            continue
        raise SelectionError(
            f"unknown case {raw!r}: use tests, benchmarks, smoke, official, all, a list with indices "
            f"(e.g. benchmarks:0,3 or bench:2-4), or a case like {CLI_CASE_EXAMPLE}"
        )
    out = []
    for group, index, params in picked:
        if secret is not None:
            params["seed"] = combine_seed(int(params["seed"]), secret)
        out.append(Case(group=group, index=index, params=params))
    return out


def read_cases_file(path: str | Path) -> list[str]:
    """Case specs from a file in the runner's format, one 'key: value; key: value' case per line
    (blank lines and # comments skipped); errors name the file and line."""
    fmt = f"one case per line, e.g. {FILE_CASE_EXAMPLE!r}"
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SelectionError(f"--cases-file {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SelectionError(f"--cases-file {path}: not a text file (byte {exc.start} is not UTF-8); {fmt}") from None
    if "\x00" in text:
        raise SelectionError(f"--cases-file {path}: not a text file (it holds NUL bytes); {fmt}")
    specs = []
    for number, line in enumerate(text.splitlines(), start=1):
        spec = line.strip()
        if not spec or spec.startswith("#"):
            continue
        try:
            _case_params(spec, "key: integer")
        except SelectionError as exc:
            raise SelectionError(f"--cases-file {path}:{number}: {exc}; {fmt}") from None
        specs.append(spec)
    if not specs:
        raise SelectionError(f"--cases-file {path}: no cases in it (only blank or # lines); {fmt}")
    return specs


@dataclass
class BackendSpec:
    label: str  # as shown in tables: a backend name or the path given
    path: Path  # the submission file loaded
    moe_backend: str | None = None  # MOE_BACKEND for that file; None leaves it unset
    env: dict = field(default_factory=dict)  # more environment for it (MOE_SELECT)


def parse_backend(text: str, root: str | Path) -> BackendSpec:
    """A backend name (auto, aiter, aiter-fused, triton, reference) run through the package's
    submission.py, or a path to a submission file (e.g. dist/submission.py), optionally with
    @NAME to set MOE_BACKEND for it."""
    root = Path(root)
    raw = text.strip()
    names = ", ".join(NAMED_BACKENDS)
    if raw in NAMED_BACKENDS:
        if not (root / "submission.py").is_file():
            raise SelectionError(f"backend {raw!r} runs the package's submission.py, which is missing from {root}")
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
            raise SelectionError(f"backend {raw!r}: no such file {file_part}")
        if at and name not in NAMED_BACKENDS[1:]:
            raise SelectionError(f"backend {raw!r}: after @ expected one of {', '.join(NAMED_BACKENDS[1:])}")
        if name == "select":
            return BackendSpec(raw, path.resolve(), None, {"MOE_SELECT": "1"})
        return BackendSpec(label=raw, path=path.resolve(), moe_backend=name if at else None)
    raise SelectionError(f"unknown backend {raw!r}: expected one of {names}, or a path to a submission .py file")


def parse_backends(items: Iterable[str], root: str | Path) -> list[BackendSpec]:
    specs: list[BackendSpec] = []
    for item in items:
        for part in item.split(","):
            if part.strip():
                specs.append(parse_backend(part, root))
    if not specs:
        raise SelectionError("no backend given")
    labels = [s.label for s in specs]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise SelectionError(f"backend given twice: {', '.join(dupes)}")
    return specs


def backend_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """MOE_BACKEND (what submission.py reads), checked: None when unset or empty."""
    value = (os.environ if environ is None else environ).get("MOE_BACKEND", "").strip()
    if not value:
        return None
    if value not in MOE_BACKENDS:
        raise SelectionError(
            f"MOE_BACKEND={value!r} is not a backend: expected one of {', '.join(MOE_BACKENDS)} "
            f"(or unset it and pass --backend)"
        )
    return value


def check_select_env(environ: Mapping[str, str] | None = None) -> None:
    """MOE_SELECT and MOE_SELECT_BUDGET_S by the submission's own rules (selection/selector.py), for backends
    that leave MOE_SELECT to the environment; a bad value is a usage error naming the variable."""
    from selection.selector import SELECT_VALUES, budget_s, select_mode

    env = os.environ if environ is None else environ
    try:
        select_mode(env)
    except ValueError:
        raise SelectionError(f"MOE_SELECT={env['MOE_SELECT']!r}: expected one of {', '.join(SELECT_VALUES)}") from None
    try:
        budget_s(env)
    except ValueError:
        raise SelectionError(f"MOE_SELECT_BUDGET_S={env['MOE_SELECT_BUDGET_S']!r}: expected seconds >= 0") from None


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
        elif spec.moe_backend != env_backend:
            notes.append(f"MOE_BACKEND={env_backend} ignored for --backend {spec.label}")
    labels = [s.label for s in specs]
    dupes = sorted({x for x in labels if labels.count(x) > 1})
    if dupes:
        raise SelectionError(f"backend given twice once MOE_BACKEND={env_backend} is applied: {', '.join(dupes)}")
    return notes
