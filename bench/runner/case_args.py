"""Which cases to run (`--cases`, `--cases-file`): the official lists, SMOKE, user-given shapes, and their seeds.

Case selectors (any number, in order; duplicates are kept):
  tests | benchmarks | smoke         a whole list: problem/cases.py's, or SMOKE below (aliases: test, bench, benchmark)
  official                          tests then benchmarks;  all: tests, benchmarks, smoke
  benchmarks:0,3  bench:2-4         entries of a list by 0-based index (ranges inclusive)
  dhidden=7168,dexpert=256,nroutedexperts=256,nexpertspertoken=8,nsharedexperts=1,bs=16[,seed=5]
                                    a user-given case (the runner's own "key: value; ..." form works too)

A user-given shape that the package cannot compute is refused as it is read, by the rules of
problem/shapes.py that custom_kernel applies to its config: sizes at least 1 (shared experts 0),
dhidden and dexpert multiples of 256, nexpertspertoken at most nroutedexperts.

Seeds follow the runner: with a secret b (POPCORN_SEED, or --seed), every case seed a becomes
a + (a+b)(a+b+1)/2; in leaderboard mode each timed repetition regenerates its inputs after
adding 13 to the seed (bench.runner.evaluate). Every seed, given or combined, lies in 0..2**63-1.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from problem.shapes import SIZES, Shape, shape_problem

CASE_KEYS = ("dhidden", "dexpert", "nroutedexperts", "nexpertspertoken", "nsharedexperts", "bs", "seed")
SHAPE_KEYS = CASE_KEYS[:-1]
DEFAULT_CUSTOM_SEED = 42
LEADERBOARD_SEED_STEP = 13
# torch.manual_seed takes up to 2**64-1; the leaderboard mode adds LEADERBOARD_SEED_STEP per repetition
MAX_SEED = 2**63 - 1

_GROUP_ALIASES = {
    "tests": "tests",
    "test": "tests",
    "benchmarks": "benchmarks",
    "benchmark": "benchmarks",
    "bench": "benchmarks",
    "smoke": "smoke",
}
_GROUP_PREFIX = {"tests": "test", "benchmarks": "bench", "smoke": "smoke", "custom": "custom"}


class UsageError(ValueError):
    """An option the runner (or a tool taking its options) cannot use: a case, seed, backend,
    folder or limit; the message names it and says what is accepted."""


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


def case_shape(case: Mapping) -> Shape:
    """The Shape of a case (problem/cases.py's keys): the shared experts among the experts and each token's picks."""
    shared = case["nsharedexperts"]
    experts, topk = case["nroutedexperts"] + shared, case["nexpertspertoken"] + shared
    return Shape(case["bs"], case["dhidden"], case["dexpert"], experts, topk)


def combine_seed(a: int, b: int) -> int:
    """The runner's Cantor pairing of a public case seed a with a secret seed b."""
    return int(a + (a + b) * (a + b + 1) // 2)


def secret_seed(cli_seed: int | None, environ: Mapping[str, str] | None = None) -> int | None:
    """--seed if given, else POPCORN_SEED from the environment (empty or unset: None)."""
    if cli_seed is not None:
        check_seed(int(cli_seed), "--seed")
        return int(cli_seed)
    raw = (os.environ if environ is None else environ).get("POPCORN_SEED", "")
    if not raw.strip():
        return None
    try:
        seed = int(raw)
    except ValueError:
        raise UsageError(f"POPCORN_SEED must be an integer, got {raw!r}") from None
    check_seed(seed, "POPCORN_SEED")
    return seed


# Small enough for Triton's CPU interpreter: a few seconds each (`--cases smoke`, and the tests' cases).
SMOKE = [
    dict(dhidden=512, dexpert=256, nroutedexperts=8, nexpertspertoken=4, nsharedexperts=1, bs=8, seed=1),
    dict(dhidden=256, dexpert=512, nroutedexperts=4, nexpertspertoken=2, nsharedexperts=1, bs=5, seed=2),
    dict(dhidden=768, dexpert=256, nroutedexperts=16, nexpertspertoken=6, nsharedexperts=1, bs=33, seed=3),
]


def _official_lists() -> dict[str, list[dict]]:
    from problem.cases import BENCHMARKS, TESTS

    return {"tests": TESTS, "benchmarks": BENCHMARKS, "smoke": SMOKE}


def _parse_indices(text: str, size: int, selector: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"(-?\d+)(?:-(\d+))?", part)
        if not m:
            raise UsageError(f"case selector {selector!r}: {part!r} is not an index or a range like 2-4")
        lo = int(m[1])
        hi = int(m[2]) if m[2] is not None else lo
        if hi < lo:
            raise UsageError(f"case selector {selector!r}: range {part} is reversed; write it {hi}-{lo}")
        for i in range(lo, hi + 1):
            if not 0 <= i < size:
                raise UsageError(f"case selector {selector!r}: index {i} out of range 0..{size - 1}")
            out.append(i)
    return out


CLI_CASE_EXAMPLE = "dhidden=7168,dexpert=256,nroutedexperts=256,nexpertspertoken=8,nsharedexperts=1,bs=16,seed=1"
FILE_CASE_EXAMPLE = "dhidden: 7168; dexpert: 256; nroutedexperts: 256; nexpertspertoken: 8; nsharedexperts: 1; bs: 16"


def _case_params(text: str, form: str) -> dict:
    """generate_input arguments of one case; UsageError says what is wrong (`form`: the syntax hint)."""
    params: dict = {}
    for part in re.split(r"[;,]", text):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"([A-Za-z_]\w*)\s*[=:]\s*([+-]?\d+)", part)
        if not m:
            raise UsageError(f"cannot read {part!r}; expected {form}")
        key = m[1].lower()
        if key not in CASE_KEYS:
            raise UsageError(f"unknown key {m[1]!r}; keys are {', '.join(CASE_KEYS)}")
        params[key] = int(m[2])
    params.setdefault("seed", DEFAULT_CUSTOM_SEED)
    missing = [k for k in CASE_KEYS if k not in params]
    if missing:
        raise UsageError(f"missing {', '.join(missing)}")
    problem = shape_problem({size: params[size.replace("_", "")] for size in SIZES}, name=lambda s: s.replace("_", ""))
    if problem:
        raise UsageError(problem)
    check_seed(params["seed"], "seed")
    return {k: params[k] for k in CASE_KEYS}


def check_seed(seed: int, what: str) -> None:
    """A seed torch takes, with room for the leaderboard's steps (see the module docstring)."""
    if not 0 <= seed <= MAX_SEED:
        raise UsageError(
            f"{what} must be 0 .. 2**63-1 (torch's seeds, with room for the leaderboard's steps), got {seed}"
        )


def parse_case_spec(text: str) -> dict:
    """'k=v,k=v' or the runner's 'k: v; k: v' into generate_input arguments (seed optional)."""
    try:
        return _case_params(text, "key=integer")
    except UsageError as exc:
        raise UsageError(f"case {text!r}: {exc}") from None


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
        raise UsageError(
            f"unknown case {raw!r}: use tests, benchmarks, smoke, official, all, a list with indices "
            f"(e.g. benchmarks:0,3 or bench:2-4), or a case like {CLI_CASE_EXAMPLE}"
        )
    out = []
    for group, index, params in picked:
        if secret is not None:
            seed = params["seed"]
            params["seed"] = combine_seed(int(seed), secret)
            check_seed(
                params["seed"],
                f"case {_GROUP_PREFIX[group]}{index}: seed {seed} combined with the secret seed {secret}",
            )
        out.append(Case(group=group, index=index, params=params))
    return out


def read_cases_file(path: str | Path) -> list[str]:
    """Case specs from a file in the runner's format, one 'key: value; key: value' case per line
    (blank lines and # comments skipped); errors name the file and line."""
    fmt = f"one case per line, e.g. {FILE_CASE_EXAMPLE!r}"
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"--cases-file {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"--cases-file {path}: not a text file (byte {exc.start} is not UTF-8); {fmt}") from None
    if "\x00" in text:
        raise UsageError(f"--cases-file {path}: not a text file (it holds NUL bytes); {fmt}")
    specs = []
    for number, line in enumerate(text.splitlines(), start=1):
        spec = line.strip()
        if not spec or spec.startswith("#"):
            continue
        try:
            _case_params(spec, "key: integer")
        except UsageError as exc:
            raise UsageError(f"--cases-file {path}:{number}: {exc}; {fmt}") from None
        specs.append(spec)
    if not specs:
        raise UsageError(f"--cases-file {path}: no cases in it (only blank or # lines); {fmt}")
    return specs
