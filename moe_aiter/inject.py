"""The override rows (shape_overrides.py) keyed as aiter f3be04a keys cfg_2stages, checked against the
rules a row must follow and injected into aiter.fused_moe at run time; why the rules hold, with
aiter's file:line: docs/aiter_overrides.md, "How aiter f3be04a uses a row". Imports no aiter.
"""

import importlib
import inspect
import re

from moe_aiter.catalogue import (
    AITER_COMMIT,
    CK_A4W4_GEMM1_INSTANCES,
    CK_A4W4_GEMM2_INSTANCES,
    ck_moe_kernel_name,
)
from shape_overrides import OVERRIDE_ROWS

OVERRIDE_CU_NUM = 256  # MI355X
OVERRIDE_MODEL_DIM = 7168
OVERRIDE_TOPK = 9
# ksplit > 1 rows run bf16 activations, outside the judged tolerance (docs/aiter_overrides.md).
OVERRIDE_ALLOW_BF16_ACTIVATIONS = False

# The key fields this problem fixes, aiter's enums and dtypes as str().
_FIXED_KEY_FIELDS = {
    "act_type": "ActivationType.Silu",
    "dtype": "torch.bfloat16",
    "q_dtype_a": "torch.float4_e2m1fn_x2",
    "q_dtype_w": "torch.float4_e2m1fn_x2",
    "q_type": "QuantType.per_1x32",
    "use_g1u1": True,
    "doweight_stage1": False,
}
# aiter/fused_moe.py:692-706, the key of cfg_2stages in order: the sizes, then the fixed fields.
AITER_KEY_FIELDS = ("cu_num", "token", "model_dim", "inter_dim", "expert", "topk", *_FIXED_KEY_FIELDS)
OVERRIDE_ROW_FIELDS = ("block_m", "ksplit", "kernelName1", "kernelName2", "run_1stage")

# get_2stage_cfgs's parameters at f3be04a (aiter/fused_moe.py:675-691): the key's sizes but cu_num, its
# fields from dtype to use_g1u1, then these.
_CFG_PARAMS = (
    *AITER_KEY_FIELDS[1:6],
    *AITER_KEY_FIELDS[7:12],
    "activation",
    "doweight_stage1",
    "hidden_pad",
    "intermediate_pad",
    "is_shuffled",
)


def aiter_key(
    token: int,
    inter_dim: int,
    expert: int,
    cu_num: int = OVERRIDE_CU_NUM,
    model_dim: int = OVERRIDE_MODEL_DIM,
    topk: int = OVERRIDE_TOPK,
) -> tuple:
    """aiter f3be04a's 13-field cfg_2stages key (aiter/fused_moe.py:748-762)."""
    sizes = (cu_num, token, model_dim, inter_dim, expert, topk)  # in AITER_KEY_FIELDS' order
    return (*map(int, sizes), *_FIXED_KEY_FIELDS.values())


def table_from_rows(rows) -> tuple[dict, dict]:
    """(overrides, FlyDSL fallbacks) keyed by aiter_key from rows of shape_override_rows' format."""
    overrides, fallbacks = {}, {}
    for row in rows:
        key = aiter_key(row["token"], row["inter_dim"], row["expert"], model_dim=row["model_dim"], topk=row["topk"])
        overrides[key] = {**{f: row[f] for f in OVERRIDE_ROW_FIELDS[:4]}, "run_1stage": False}
        if row.get("fallback_kernelName2"):
            fallbacks[key] = row["fallback_kernelName2"]
    return overrides, fallbacks


# The table, and the CK stage 2 that stands in for a FlyDSL kernelName2 where FlyDSL is unavailable.
OVERRIDES, FLYDSL_FALLBACK_KERNEL2 = table_from_rows(OVERRIDE_ROWS)

_CK_NAME_RE = re.compile(
    r"^moe_ck2stages_gemm(?P<stage>[12])_(?P<block_size>\d+)"
    r"x(?P<MPerBlock>\d+)x(?P<NPerBlock>\d+)x(?P<KPerBlock>\d+)_\d+x\d+_"
)
_FLYDSL_NAME_RE = re.compile(
    r"^flydsl_moe(?P<stage>[12])_a(?P<a_dtype>[a-z0-9]+)_w(?P<b_dtype>[a-z0-9]+)_(?P<out_dtype>[a-z0-9]+)"
    r"_t(?P<tile_m>\d+)x(?P<tile_n>\d+)x(?P<tile_k>\d+)(?:_(?P<mode>atomic|reduce))?$"
)


def parse_ck_moe_kernel_name(name: str) -> dict | None:
    """Tile fields of a CK 2-stage kernel name, or None if it is not one."""
    match = _CK_NAME_RE.match(name)
    return {k: int(v) for k, v in match.groupdict().items()} if match else None


def parse_flydsl_moe_kernel_name(name: str) -> dict | None:
    """FlyDSL registry entry (the fields of aiter/ops/flydsl/moe_kernels.py:51-60, :80-90) for a name."""
    match = _FLYDSL_NAME_RE.match(name)
    if not match:
        return None
    numbers = ("stage", "tile_m", "tile_n", "tile_k")
    params = {k: int(v) if k in numbers else v for k, v in match.groupdict().items() if k != "mode"}
    params["MPerBlock"] = params["tile_m"]
    if params["stage"] == 2:
        params["mode"] = match["mode"] or "atomic"
    return params


def _ck_name_problems(key: tuple, stage: int, name: str, block_m: int, what: str) -> list[str]:
    """Why a CK stage-`stage` kernel name does not fit a row (empty when it does)."""
    ck = parse_ck_moe_kernel_name(name)
    if ck is None or ck["stage"] != stage:
        return [f"{key}: kernelName{stage} {name!r} is {what} kernel name"]
    instances = CK_A4W4_GEMM1_INSTANCES if stage == 1 else CK_A4W4_GEMM2_INSTANCES
    if name not in {ck_moe_kernel_name(stage, inst) for inst in instances}:
        return [f"{key}: kernelName{stage} {name!r} is not an a4w4 gemm{stage} instance at aiter {AITER_COMMIT[:7]}"]
    if ck["MPerBlock"] != block_m:
        return [f"{key}: kernelName{stage} MPerBlock {ck['MPerBlock']} != block_m {block_m}"]
    return []


def _flydsl_problems(key: tuple, name: str, block_m: int, registry: dict | None, fallback: str | None) -> list[str]:
    """Why a FlyDSL kernelName2, and the CK stage 2 standing in for it, do not fit a row."""
    problems = []
    fly = parse_flydsl_moe_kernel_name(name)
    if fly is None:
        problems.append(f"{key}: kernelName2 {name!r} is not a FlyDSL kernel name")
    else:
        if (fly["stage"], fly["a_dtype"], fly["b_dtype"], fly["out_dtype"]) != (2, "fp4", "fp4", "bf16"):
            problems.append(f"{key}: kernelName2 {name!r} is not a stage-2 fp4 x fp4 -> bf16 FlyDSL kernel")
        if fly["tile_m"] != block_m:
            problems.append(f"{key}: kernelName2 tile_m {fly['tile_m']} != block_m {block_m}")
        if registry is not None and name not in registry:
            problems.append(f"{key}: kernelName2 {name!r} is not registered in FlyDSL's _KERNEL_PARAMS")
    if fallback is not None and _ck_name_problems(key, 2, fallback, block_m, "not a CK stage-2"):
        problems.append(f"{key}: FlyDSL fallback {fallback!r} is not an a4w4 gemm2 instance of MPerBlock {block_m}")
    return problems


def row_problems(key: tuple, row: dict, flydsl_registry: dict | None = None, fallbacks: dict | None = None) -> list:
    """Everything wrong with one override row (empty when valid); ksplit > 1 rows only while
    OVERRIDE_ALLOW_BF16_ACTIVATIONS; FlyDSL names in flydsl_registry (aiter's _KERNEL_PARAMS) where
    given; fallbacks default to FLYDSL_FALLBACK_KERNEL2."""
    problems = []
    if not isinstance(key, tuple) or len(key) != len(AITER_KEY_FIELDS):
        return [f"key {key!r}: expected a {len(AITER_KEY_FIELDS)}-tuple {AITER_KEY_FIELDS}"]
    missing = [f for f in OVERRIDE_ROW_FIELDS if f not in row]
    if missing:
        return [f"{key}: missing fields {missing}"]
    for field in ("kernelName1", "kernelName2"):
        if not isinstance(row[field], str):
            problems.append(f"{key}: {field} must be a str ('' = aiter's default), got {row[field]!r}")
    for field in ("block_m", "ksplit"):
        if isinstance(row[field], bool) or not isinstance(row[field], int):
            problems.append(f"{key}: {field} must be an int, got {row[field]!r}")
    if problems:
        return problems
    block_m, ksplit, name1, name2 = row["block_m"], row["ksplit"], row["kernelName1"], row["kernelName2"]
    if row["run_1stage"]:
        problems.append(f"{key}: run_1stage rows are not supported by this table")
    if ksplit > 1:
        # cktile branch (aiter/fused_moe.py:929-955): block_m forced to 16 below 2048 tokens, names unused.
        if not OVERRIDE_ALLOW_BF16_ACTIVATIONS:
            problems.append(
                f"{key}: ksplit={ksplit} runs bf16 activations (no MXFP4 quantization), outside the judged tolerance"
            )
        if name1 or name2:
            problems.append(f"{key}: ksplit={ksplit} selects the cktile stages, which take no kernel names")
        expected_bm = 16 if key[1] < 2048 else 32 if key[1] < 16384 else 64
        if block_m != expected_bm:
            problems.append(f"{key}: ksplit={ksplit} runs with block_m {expected_bm} whatever the row says")
        return problems
    if block_m <= 0 or block_m % 32:
        problems.append(f"{key}: block_m={block_m} must be a positive multiple of 32 when activations are quantized")
    if name1:
        problems += _ck_name_problems(key, 1, name1, block_m, "not a CK stage-1")
    elif block_m not in (32, 64, 128):
        problems.append(f"{key}: no heuristic CK stage 1 for block_m={block_m} (gen_instances.py:276-293)")
    if name2.startswith("flydsl_"):
        fallback = (FLYDSL_FALLBACK_KERNEL2 if fallbacks is None else fallbacks).get(key)
        problems += _flydsl_problems(key, name2, block_m, flydsl_registry, fallback)
    elif name2:
        problems += _ck_name_problems(key, 2, name2, block_m, "neither a CK stage-2 nor a FlyDSL")
    elif block_m not in (32, 64, 128):
        problems.append(f"{key}: no heuristic CK stage 2 for block_m={block_m} (gen_instances.py:628-660)")
    return problems


def validate(overrides: dict | None = None, flydsl_registry: dict | None = None, fallbacks: dict | None = None) -> None:
    """Raise ValueError listing every invalid row (defaults: OVERRIDES, FLYDSL_FALLBACK_KERNEL2)."""
    table = OVERRIDES if overrides is None else overrides
    problems = [p for key, row in table.items() for p in row_problems(key, row, flydsl_registry, fallbacks)]
    if problems:
        raise ValueError("invalid aiter override rows:\n  " + "\n  ".join(problems))


def register_flydsl(moe_kernels_module, overrides: dict | None = None) -> list:
    """Add the FlyDSL kernels named by `overrides` that aiter's _KERNEL_PARAMS lacks; returns the names added."""
    registry = moe_kernels_module._KERNEL_PARAMS
    added = []
    for row in (OVERRIDES if overrides is None else overrides).values():
        name = row.get("kernelName2", "")
        if isinstance(name, str) and name.startswith("flydsl_") and name not in registry:
            params = parse_flydsl_moe_kernel_name(name)
            if params is None:
                raise ValueError(f"cannot register FlyDSL kernel {name!r}: unparsable name")
            registry[name] = params
            added.append(name)
    return added


def check_aiter_layout(fused_moe_module) -> None:
    """Raise RuntimeError unless aiter.fused_moe has f3be04a's table layout and get_2stage_cfgs."""
    where = f"aiter.fused_moe ({getattr(fused_moe_module, '__file__', '?')})"
    if not hasattr(fused_moe_module, "cfg_2stages"):
        raise RuntimeError(f"{where} has no cfg_2stages; this override table targets aiter {AITER_COMMIT}")
    table = fused_moe_module.cfg_2stages
    if table is not None and not isinstance(table, dict):
        raise RuntimeError(
            f"{where}.cfg_2stages is a {type(table).__name__}, not the dict of aiter {AITER_COMMIT[:7]}; "
            "refusing to inject overrides into an unknown table layout"
        )
    for key in table or ():
        if not isinstance(key, tuple) or len(key) != len(AITER_KEY_FIELDS):
            raise RuntimeError(f"{where}.cfg_2stages key {key!r} is not the 13-field key of aiter {AITER_COMMIT[:7]}")
        if any(isinstance(f, str) and f.lower().startswith("gfx") for f in key):
            raise RuntimeError(
                f"{where}.cfg_2stages key {key!r} carries a gfx field; not aiter {AITER_COMMIT[:7]}'s layout"
            )
    cfg = getattr(fused_moe_module, "get_2stage_cfgs", None)
    if cfg is None or not hasattr(cfg, "cache_clear"):
        raise RuntimeError(f"{where}.get_2stage_cfgs is missing or not lru_cached")
    params = tuple(inspect.signature(cfg).parameters)
    if params != _CFG_PARAMS:
        raise RuntimeError(f"{where}.get_2stage_cfgs takes {params}, not aiter {AITER_COMMIT[:7]}'s {_CFG_PARAMS}")
    if table is None and not hasattr(getattr(fused_moe_module, "AITER_CONFIGS", None), "AITER_CONFIG_FMOE_FILE"):
        raise RuntimeError(f"{where} has no AITER_CONFIGS.AITER_CONFIG_FMOE_FILE to load the tuned table from")


def load_aiter_table(csv_path: str) -> dict:
    """The dict aiter f3be04a builds from a tuned-fmoe CSV (aiter/fused_moe.py:708-714)."""
    import pandas as pd

    df = pd.read_csv(csv_path)
    if "_tag" in df.columns:
        # aiter's fillna(""), written so that an all-empty (float) column does not warn under pandas 3
        df = df[df["_tag"].isna() | (df["_tag"] == "")]
    return df.set_index(list(AITER_KEY_FIELDS)).to_dict("index")


def _asked(fused_moe_module, name: str, default, convert):
    """convert(fused_moe_module.name()), or default where the module lacks it or it raises."""
    try:
        return convert(getattr(fused_moe_module, name)())
    except Exception:
        return default


def _flydsl_registry(fused_moe_module, overrides):
    """(FlyDSL usable, registry or None): registers the missing names when the module imports."""
    try:
        moe_kernels = importlib.import_module("aiter.ops.flydsl.moe_kernels")
    except Exception:
        return False, None
    register_flydsl(moe_kernels, overrides)
    return _asked(fused_moe_module, "is_flydsl_available", False, bool), moe_kernels._KERNEL_PARAMS


def inject(
    fused_moe_module, cu_num: int | None = None, overrides: dict | None = None, fallbacks: dict | None = None
) -> dict:
    """Put the override rows (default OVERRIDES, FLYDSL_FALLBACK_KERNEL2) into aiter.fused_moe.cfg_2stages
    keyed with `cu_num` (default get_cu_num(), else 256) and clear get_2stage_cfgs' cache; returns the
    live table. Idempotent; what it keeps and substitutes: docs/aiter.md, "The pipeline"."""
    table_rows = OVERRIDES if overrides is None else overrides
    fallbacks = FLYDSL_FALLBACK_KERNEL2 if fallbacks is None else fallbacks
    validate(table_rows, fallbacks=fallbacks)
    check_aiter_layout(fused_moe_module)
    flydsl_ok, registry = _flydsl_registry(fused_moe_module, table_rows)
    if registry is not None:
        validate(table_rows, registry, fallbacks=fallbacks)
    cu = int(cu_num) if cu_num is not None else _asked(fused_moe_module, "get_cu_num", OVERRIDE_CU_NUM, int)
    table = fused_moe_module.cfg_2stages
    if table is None:
        table = load_aiter_table(fused_moe_module.AITER_CONFIGS.AITER_CONFIG_FMOE_FILE)
    for key, row in table_rows.items():
        live = dict(row)
        if live["kernelName2"].startswith("flydsl_") and not flydsl_ok:
            fallback = fallbacks.get(key)
            if not fallback:
                raise RuntimeError(f"FlyDSL is unavailable and row {key} has no CK stage-2 fallback")
            live["kernelName2"] = fallback
        table[(cu,) + tuple(key[1:])] = live
    fused_moe_module.cfg_2stages = table
    fused_moe_module.get_2stage_cfgs.cache_clear()
    return table
