"""The override rows as a config file for aiter, instead of injecting them (docs/aiter.md):
`python -m bench.tune.aiter_csv [CSV]` writes the rows (moe_aiter.inject.OVERRIDES) as a tuned_fmoe
CSV and prints the AITER_CONFIG_FMOE value that adds it to the files aiter merges:

    export AITER_CONFIG_FMOE=$(python -m bench.tune.aiter_csv moe_overrides.csv)
"""

from __future__ import annotations

import csv
import os
import sys
from importlib.util import find_spec
from pathlib import Path

from moe_aiter.inject import AITER_KEY_FIELDS, FLYDSL_FALLBACK_KERNEL2, OVERRIDE_CU_NUM, OVERRIDES, validate

# The columns of aiter/configs/tuned_fmoe.csv (line 1) plus `_tag` (as in dsv3_fp4_tuned_fmoe.csv).
AITER_FMOE_CSV_COLUMNS = AITER_KEY_FIELDS + (
    "block_m",
    "ksplit",
    "us1",
    "kernelName1",
    "err1",
    "us2",
    "kernelName2",
    "err2",
    "us",
    "run_1stage",
    "tflops",
    "bw",
    "_tag",
)


def write_csv(
    path,
    cu_num: int = OVERRIDE_CU_NUM,
    overrides: dict | None = None,
    with_fallback: bool = True,
    fallbacks: dict | None = None,
):
    """Write the rows in aiter's tuned_fmoe CSV format (+ `_tag`), for AITER_CONFIG_FMOE.

    Timing columns are 0, so that in a merged list (AITER_CONFIG_FMOE=aiter_config_fmoe(path),
    aiter/jit/core.py:182-247, which keeps the lowest `us` per key) these rows win. With
    with_fallback, each FlyDSL row also gets a `flydsl_fallback` row naming its CK stage 2, used by
    aiter when FlyDSL is unavailable (aiter/fused_moe.py:719-738). Empty kernel names (ksplit > 1
    rows) read back as NaN in pandas; aiter does not look at them on that branch. Returns path.
    """
    table_rows = OVERRIDES if overrides is None else overrides
    fallbacks = FLYDSL_FALLBACK_KERNEL2 if fallbacks is None else fallbacks
    validate(table_rows, fallbacks=fallbacks)
    records = []
    for key, row in table_rows.items():
        base = dict(zip(AITER_KEY_FIELDS, (int(cu_num),) + tuple(key[1:]), strict=True))
        base["use_g1u1"] = int(base["use_g1u1"])
        base["doweight_stage1"] = int(base["doweight_stage1"])
        record = {
            **base,
            "block_m": row["block_m"],
            "ksplit": row["ksplit"],
            "us1": 0,
            "kernelName1": row["kernelName1"],
            "err1": "",
            "us2": 0,
            "kernelName2": row["kernelName2"],
            "err2": "",
            "us": 0,
            "run_1stage": int(bool(row["run_1stage"])),
            "tflops": 0,
            "bw": 0,
            "_tag": "",
        }
        records.append(record)
        fallback = fallbacks.get(key)
        if with_fallback and fallback and row["kernelName2"].startswith("flydsl_"):
            records.append({**record, "kernelName2": fallback, "_tag": "flydsl_fallback"})
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(AITER_FMOE_CSV_COLUMNS), lineterminator="\n")
        writer.writeheader()
        writer.writerows(records)
    return path


def aiter_config_fmoe(csv_path, aiter_root=None) -> str:
    """The AITER_CONFIG_FMOE value that adds the CSV at `csv_path` to the files aiter merges without it.

    Unset, aiter f3be04a merges aiter/configs/tuned_fmoe.csv with every model_configs file whose
    name holds `tuned_fmoe` and whose path does not hold `untuned` (aiter/jit/core.py:255-269; the
    dsv3 fp4 table lives there); set, it merges only the files listed (:273). So the list is
    those files, then this CSV. aiter_root: the folder holding the `aiter` package (aiter's
    AITER_ROOT_DIR), found with importlib (without importing aiter) when None.
    """
    if aiter_root is None:
        spec = find_spec("aiter")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError("aiter is not installed here; pass its folder (--aiter-root)")
        aiter_root = Path(next(iter(spec.submodule_search_locations))).parent
    configs = Path(aiter_root) / "aiter" / "configs"
    model_files = sorted(
        str(p) for p in (configs / "model_configs").glob("*tuned_fmoe*") if p.is_file() and "untuned" not in str(p)
    )
    return os.pathsep.join([str(configs / "tuned_fmoe.csv"), *model_files, str(Path(csv_path).resolve())])


def main(argv: list[str] | None = None) -> int:
    from bench.runner.preflight import UsageParser

    parser = UsageParser(prog="python -m bench.tune.aiter_csv", description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", default="moe_overrides.csv", help="the CSV to write (default %(default)s)")
    parser.add_argument("--aiter-root", help="the folder holding the aiter package (default: found by importlib)")
    args = parser.parse_args(argv)
    try:
        value = aiter_config_fmoe(args.csv, args.aiter_root)
        write_csv(args.csv)
    except (OSError, RuntimeError) as exc:
        return parser.fail(f"{args.csv}: {exc.strerror or exc}" if isinstance(exc, OSError) else str(exc))
    print(value)
    return 0


if __name__ == "__main__":
    sys.exit(main())
