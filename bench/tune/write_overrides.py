"""Writing the override table's data module (shape_overrides.py), which moe_aiter/inject.py
reads and the bundle carries like any project module.

A row is a dict of ROW_FIELDS: the shape (padded tokens, model_dim, inter_dim, experts, topk), aiter's row fields
(block_m, ksplit, kernelName1, kernelName2), the CK stage 2 used when FlyDSL is unavailable,
and where the row comes from: `us` (the measured mean, None when never timed), `date`,
`versions` and `source`.
"""

from __future__ import annotations

import json
from pathlib import Path

ROW_FIELDS = (
    "token",
    "model_dim",
    "inter_dim",
    "expert",
    "topk",
    "block_m",
    "ksplit",
    "kernelName1",
    "kernelName2",
    "fallback_kernelName2",
    "us",
    "date",
    "versions",
    "source",
)

_HEADER = '''\
"""The shape-keyed override table of aiter's 2-stage fused-MoE config: one row per official
shape, data. The aiter backend injects it into aiter.fused_moe.cfg_2stages at its first call
(moe_aiter/inject.py: the rules a row must follow, the keying, the injection); `python -m
bench.tune.aiter_rows` rewrites this file (bench/tune/write_overrides.py).

{how}

Each row: aiter's key fields of the shape (padded tokens, model_dim, inter_dim, experts, topk; the
others are fixed by moe_aiter.inject.aiter_key), aiter's row fields, the CK stage 2 used
when FlyDSL is unavailable, and its provenance: `us` is the mean time measured by
`python -m bench.tune.aiter_rows` (None: never timed), with `date`, `versions` and `source`.
"""

# ruff: noqa: E501

OVERRIDE_ROWS = (
'''


def _literal(value) -> str:
    """A Python literal in the style ruff format keeps (double-quoted strings)."""
    if isinstance(value, str):
        return json.dumps(value)
    if value is None or isinstance(value, (bool, int)):
        return repr(value)
    if isinstance(value, float):
        return repr(round(value, 3))
    raise TypeError(f"override row value {value!r}: expected str, int, float or None")


def render(rows: list[dict], how: str) -> str:
    """The source text of the data module for `rows` (sorted by expert, inter_dim, token)."""
    lines = [_HEADER.format(how=how)]
    for row in sorted(rows, key=lambda r: (-r["expert"], r["model_dim"], r["inter_dim"], r["topk"], r["token"])):
        missing = [f for f in ROW_FIELDS if f not in row]
        if missing:
            raise ValueError(f"override row {row}: missing {missing}")
        lines.append("    {\n")
        lines += [f"        {json.dumps(f)}: {_literal(row[f])},\n" for f in ROW_FIELDS]
        lines.append("    },\n")
    lines.append(")\n")
    return "".join(lines)


def write(path: str | Path, rows: list[dict], how: str) -> Path:
    path = Path(path)
    path.write_text(render(rows, how))
    return path
