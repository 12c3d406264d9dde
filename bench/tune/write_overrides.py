"""Writing the override table's data module (shape_overrides.py), which moe_aiter/inject.py
reads and the bundle carries like any project module.

A row is a dict of ROW_FIELDS: the shape (padded tokens, model_dim, inter_dim, experts, topk), aiter's row fields
(block_m, ksplit, kernelName1, kernelName2), the CK stage 2 used when FlyDSL is unavailable,
and where the row comes from: `us` (the measured mean, None when never timed), `date`,
`versions` and `source`. The module writes them as a table, one line a row under ROW_FIELDS, each
kernel a constant built from its parts (moe_aiter.catalogue) and each repeated text a constant.
"""

from __future__ import annotations

import json
from collections import Counter
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
KERNEL_FIELDS = ("kernelName1", "kernelName2", "fallback_kernelName2")

_HEADER = '''\
"""The override table of aiter's 2-stage fused-MoE config, one row per official shape, as data:
moe_aiter/inject.py checks the rows and injects them into aiter.fused_moe.cfg_2stages; `python -m
bench.tune.aiter_rows` rewrites this file. The fields: docs/aiter_overrides.md, "The rows".

{how}
"""

# ruff: noqa: E501

from moe_aiter.catalogue import ck_moe_kernel_name, flydsl_moe_kernel_name

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


def kernel_constant(name: str) -> tuple[str, str] | None:
    """(constant, expression) of a kernel name built from its instance or tile, or None for a name
    the catalogue does not know."""
    from moe_aiter.catalogue import CK_A4W4_GEMM1_INSTANCES, CK_A4W4_GEMM2_INSTANCES, ck_moe_kernel_name
    from moe_aiter.inject import parse_flydsl_moe_kernel_name

    for stage, instances in ((1, CK_A4W4_GEMM1_INSTANCES), (2, CK_A4W4_GEMM2_INSTANCES)):
        for inst in instances:
            if ck_moe_kernel_name(stage, inst) == name:
                return f"CK{stage}_{'X'.join(map(str, inst[:4]))}", f"ck_moe_kernel_name({stage}, {inst})"
    fly = parse_flydsl_moe_kernel_name(name)
    if fly is not None and (fly["a_dtype"], fly["b_dtype"], fly["out_dtype"]) == ("fp4", "fp4", "bf16"):
        tile = f"{fly['tile_m']}, {fly['tile_n']}, {fly['tile_k']}"
        mode = fly.get("mode", "")
        constant = f"FLYDSL{fly['stage']}_T{fly['tile_m']}X{fly['tile_n']}X{fly['tile_k']}_{mode.upper()}".rstrip("_")
        return constant, f"flydsl_moe_kernel_name({fly['stage']}, {tile}, {json.dumps(mode)})"
    return None


def _constants(rows: list[dict]) -> dict:
    """{value: (constant, expression)} of the rows' kernels and of each text that repeats."""
    kernels = dict.fromkeys(row[f] for row in rows for f in KERNEL_FIELDS if row[f])
    out = {name: kernel_constant(name) or (f"KERNEL_{i + 1}", json.dumps(name)) for i, name in enumerate(kernels)}
    for field in ("date", "versions", "source"):
        repeated = [v for v, n in Counter(row[field] for row in rows).items() if isinstance(v, str) and n > 1]
        for i, value in enumerate(repeated):
            out.setdefault(value, (field.upper() + (f"_{i + 1}" if len(repeated) > 1 else ""), json.dumps(value)))
    return out


def render(rows: list[dict], how: str) -> str:
    """The source text of the data module for `rows` (sorted by expert, inter_dim, token)."""
    for row in rows:
        missing = [f for f in ROW_FIELDS if f not in row]
        if missing:
            raise ValueError(f"override row {row}: missing {missing}")
    constants = _constants(rows)
    lines = [_HEADER.format(how=how), "# fmt: off\n"]
    lines += [f"{constant} = {expression}\n" for constant, expression in dict(constants.values()).items()]
    fields = ", ".join(map(json.dumps, ROW_FIELDS))
    lines.append(f"\nROW_FIELDS = ({fields})\nOVERRIDE_TABLE = (\n")
    for row in sorted(rows, key=lambda r: (-r["expert"], r["model_dim"], r["inter_dim"], r["topk"], r["token"])):
        values = [constants[row[f]][0] if row[f] in constants else _literal(row[f]) for f in ROW_FIELDS]
        lines.append(f"    ({', '.join(values)}),\n")
    lines.append(")\n# fmt: on\n")
    lines.append("OVERRIDE_ROWS = tuple(dict(zip(ROW_FIELDS, row, strict=True)) for row in OVERRIDE_TABLE)\n")
    return "".join(lines)


def write(path: str | Path, rows: list[dict], how: str) -> Path:
    path = Path(path)
    path.write_text(render(rows, how))
    return path
