"""shape_overrides: the table, its aiter f3be04a key format, row validation, injection into the
aiter test double (tests/aiter_double.py) and the tuned-fmoe CSV export."""

import functools
import math
import os
import warnings

import aiter_double
import aiter_names as names
import pandas as pd
import pytest
import torch

from bench.tune import aiter_csv
from moe_aiter import inject as so
from problem.cases import BENCHMARKS

SPEC_KEY = (
    256,
    16,
    7168,
    256,
    257,
    9,
    "ActivationType.Silu",
    "torch.bfloat16",
    "torch.float4_e2m1fn_x2",
    "torch.float4_e2m1fn_x2",
    "QuantType.per_1x32",
    True,
    False,
)


def padded_m(m: int) -> int:
    return 1 << (m - 1).bit_length()  # get_padded_M below 1024


def benchmark_keys(cu_num=256):
    keys = []
    for c in BENCHMARKS:
        keys.append(
            so.aiter_key(
                padded_m(c["bs"]),
                c["dexpert"],
                c["nroutedexperts"] + c["nsharedexperts"],
                cu_num=cu_num,
                model_dim=c["dhidden"],
                topk=c["nexpertspertoken"] + c["nsharedexperts"],
            )
        )
    return keys


@pytest.fixture
def dbl(monkeypatch, tmp_path):
    return aiter_double.install(monkeypatch, tmp_path)


# ---------------------------------------------------------------------------------------------
# the table and its keys
# ---------------------------------------------------------------------------------------------
def test_one_row_per_benchmark_shape():
    assert set(so.OVERRIDES) == set(benchmark_keys())
    assert len(so.OVERRIDES) == len(BENCHMARKS)


def test_key_format_is_aiters():
    assert so.aiter_key(16, 256, 257) == SPEC_KEY
    assert so.aiter_key(16, 256, 257, cu_num=304)[0] == 304
    # the string fields are str() of aiter's enums and torch dtypes (aiter/fused_moe.py:748-762)
    dt = aiter_double.DTYPES
    assert SPEC_KEY[6:11] == (
        str(aiter_double.ActivationType.Silu),
        str(dt.bf16),
        str(dt.fp4x2),
        str(dt.fp4x2),
        str(aiter_double.QuantType.per_1x32),
    )
    assert so.AITER_KEY_FIELDS == tuple(aiter_double.DOUBLE_CSV_COLUMNS[:13])
    assert aiter_csv.AITER_FMOE_CSV_COLUMNS == tuple(aiter_double.DOUBLE_CSV_COLUMNS)


def test_rows_are_plain_data():
    for key, row in so.OVERRIDES.items():
        assert set(row) == set(so.OVERRIDE_ROW_FIELDS)
        assert isinstance(row["kernelName1"], str) and isinstance(row["kernelName2"], str)
        assert row["run_1stage"] is False
        assert key[0] == 256 and key[2] == 7168 and key[5] == 9


def test_rows_pair_block_m_with_kernel_tiles():
    """The docstring's finding: block_m == CK MPerBlock == FlyDSL tile_m on the quantized path."""
    for key, row in so.OVERRIDES.items():
        assert row["ksplit"] <= 1  # activations are quantized on every row
        assert row["block_m"] % 32 == 0
        assert so.parse_ck_moe_kernel_name(row["kernelName1"])["MPerBlock"] == row["block_m"]
        assert so.parse_flydsl_moe_kernel_name(row["kernelName2"])["tile_m"] == row["block_m"]
        fallback = so.FLYDSL_FALLBACK_KERNEL2[key]
        assert so.parse_ck_moe_kernel_name(fallback)["MPerBlock"] == row["block_m"]


def test_kernel_names_exist_at_f3be04a(dbl):
    ck1 = aiter_double._dbl_ck_names(1)
    ck2 = aiter_double._dbl_ck_names(2)
    for row in so.OVERRIDES.values():
        if row["kernelName1"]:
            assert ck1[row["kernelName1"]] == row["block_m"]
            assert row["kernelName2"] in dbl.moe_kernels._KERNEL_PARAMS  # registered without help
    assert set(so.FLYDSL_FALLBACK_KERNEL2.values()) <= set(ck2)
    # the names aiter's own dsv3 table uses resolve the same way
    assert names.CK_S1_32 in ck1 and names.CK_S2_32 in ck2
    assert names.FLY_S2_16 not in dbl.moe_kernels._KERNEL_PARAMS


def test_name_parsers():
    assert so.parse_ck_moe_kernel_name(names.CK_S1_128) == dict(
        stage=1, block_size=256, MPerBlock=128, NPerBlock=128, KPerBlock=128
    )
    assert so.parse_flydsl_moe_kernel_name(names.FLY_S2_16) == dict(
        stage=2,
        a_dtype="fp4",
        b_dtype="fp4",
        out_dtype="bf16",
        tile_m=16,
        tile_n=128,
        tile_k=128,
        mode="atomic",
        MPerBlock=16,
    )
    assert so.parse_flydsl_moe_kernel_name("flydsl_moe1_afp4_wfp4_bf16_t32x256x256")["stage"] == 1
    assert so.parse_ck_moe_kernel_name("flydsl_moe2_x") is None
    assert so.parse_flydsl_moe_kernel_name(names.CK_S1_32) is None


# ---------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------
def test_table_validates():
    so.validate()


def with_row(key, **changes):
    table = dict(so.OVERRIDES)
    table[key] = dict(table[key], **changes)
    return table


KEY_128 = so.aiter_key(128, 256, 257)
KEY_16 = so.aiter_key(16, 512, 33)


@pytest.mark.parametrize(
    "key, changes, message",
    [
        (KEY_128, dict(kernelName1=names.CK_S1_128), "MPerBlock 128 != block_m 32"),  # the seed submission's rows
        (KEY_128, dict(kernelName2=names.FLY_S2_16), "tile_m 16 != block_m 32"),
        (KEY_128, dict(block_m=16, kernelName1="", kernelName2=""), "multiple of 32"),
        (KEY_128, dict(kernelName1=math.nan), "must be a str"),
        (KEY_128, dict(kernelName2=None), "must be a str"),
        (KEY_128, dict(block_m=32.0), "must be an int"),
        (KEY_128, dict(kernelName1=names.CK_S1_32.replace("_v3_", "_v1_")), "not an a4w4 gemm1 instance"),
        (KEY_128, dict(kernelName1=names.CK_S2_32), "not a CK stage-1"),
        (KEY_128, dict(kernelName2=names.CK_S2_64), "MPerBlock 64 != block_m 32"),
        (KEY_128, dict(kernelName2="flydsl_moe2_afp8_wfp4_bf16_t32x128x256_atomic"), "fp4 x fp4 -> bf16"),
        (KEY_128, dict(kernelName2="something_else"), "neither"),
        (KEY_128, dict(run_1stage=True), "run_1stage"),
        (KEY_16, dict(ksplit=2, block_m=16, kernelName1="", kernelName2=""), "bf16 activations"),
    ],
)
def test_validate_rejects(key, changes, message):
    with pytest.raises(ValueError, match=message):
        so.validate(with_row(key, **changes))


def test_ksplit_rows_only_when_bf16_activations_are_allowed(monkeypatch):
    cktile = dict(ksplit=2, block_m=16, kernelName1="", kernelName2="")
    monkeypatch.setattr(so, "OVERRIDE_ALLOW_BF16_ACTIVATIONS", True)
    so.validate(with_row(KEY_16, **cktile))
    with pytest.raises(ValueError, match="block_m 16 whatever"):
        so.validate(with_row(KEY_16, **dict(cktile, block_m=32)))
    with pytest.raises(ValueError, match="take no kernel names"):
        so.validate(with_row(KEY_16, **dict(cktile, kernelName1=names.CK_S1_32)))


def test_the_seed_submissions_rows_are_all_rejected():
    """(tokens, inter, experts): block_m, ksplit, stage 1, stage 2 as the seed submission had them."""
    start = {
        (16, 256, 257): (16, 2, "", ""),
        (128, 256, 257): (32, 0, names.CK_S1_128, names.FLY_S2_16),
        (512, 256, 257): (32, 0, names.CK_S1_128, names.FLY_S2_16),
        (16, 512, 33): (32, 2, "", ""),
        (128, 512, 33): (32, 0, names.CK_S1_128, names.FLY_S2_16),
        (512, 512, 33): (64, 0, names.CK_S1_128, names.FLY_S2_16),
        (512, 2048, 33): (32, 0, names.CK_S1_128, names.FLY_S2_16),
    }
    for shape, (block_m, ksplit, name1, name2) in start.items():
        row = dict(block_m=block_m, ksplit=ksplit, kernelName1=name1, kernelName2=name2, run_1stage=False)
        assert so.row_problems(so.aiter_key(*shape), row), shape


def test_validate_rejects_bad_keys_and_unregistered_flydsl(dbl):
    with pytest.raises(ValueError, match="13-tuple"):
        so.validate({("gfx950",) + SPEC_KEY: dict(so.OVERRIDES[SPEC_KEY])})
    name = "flydsl_moe2_afp4_wfp4_bf16_t32x64x256_atomic"  # well-formed, not in f3be04a's registry
    table = with_row(KEY_128, kernelName2=name)
    so.validate(table)  # without a registry only the name's fields are checked
    with pytest.raises(ValueError, match="not registered"):
        so.validate(table, dbl.moe_kernels._KERNEL_PARAMS)


# ---------------------------------------------------------------------------------------------
# injection into the double
# ---------------------------------------------------------------------------------------------
def live_row(fm, key):
    return fm.cfg_2stages[key]


def metadata_for(fm, key):
    (_cu, token, model_dim, inter_dim, expert, topk, *_rest) = key
    a = aiter_double
    return fm.get_2stage_cfgs(
        token,
        model_dim,
        inter_dim,
        expert,
        topk,
        torch.bfloat16,
        a.FP4,
        a.FP4,
        a.QuantType.per_1x32,
        True,
        a.ActivationType.Silu,
        False,
        0,
        0,
        True,
    )


def test_inject_loads_packaged_table_keeps_other_rows(dbl):
    fm = dbl.fused_moe
    assert fm.cfg_2stages is None
    table = so.inject(fm)
    assert fm.cfg_2stages is table
    packaged = aiter_double.packaged_rows()
    other = so.aiter_key(1, 256, 257)
    assert live_row(fm, other)["kernelName1"] == packaged[1]["kernelName1"]  # untouched
    assert so.aiter_key(16384, 256, 257) not in table  # the _tag row is dropped, as aiter does
    for key, row in so.OVERRIDES.items():
        assert {f: live_row(fm, key)[f] for f in so.OVERRIDE_ROW_FIELDS} == row
    assert len(table) == 1 + len(so.OVERRIDES)  # the packaged row for KEY_128 was replaced


def test_inject_clears_cache_and_is_idempotent(dbl):
    fm = dbl.fused_moe
    before = metadata_for(fm, KEY_128)  # aiter's packaged row: CK 64x32 stage 1
    assert before.stage1.keywords["kernelName"] != names.CK_S1_32
    assert fm.get_2stage_cfgs.cache_info().currsize == 1
    table = so.inject(fm)
    assert fm.get_2stage_cfgs.cache_info().currsize == 0
    snapshot = {k: dict(v) for k, v in table.items()}
    again = so.inject(fm)
    assert again is table and {k: dict(v) for k, v in again.items()} == snapshot
    md = metadata_for(fm, KEY_128)
    assert md.stage1.keywords["kernelName"] == names.CK_S1_32 and md.block_m == 32


def test_inject_into_an_already_loaded_table(dbl):
    fm = dbl.fused_moe
    metadata_for(fm, KEY_128)  # aiter loads its table on first use
    loaded = fm.cfg_2stages
    assert so.inject(fm) is loaded


def test_metadata_branch_per_official_shape(dbl):
    fm = dbl.fused_moe
    so.inject(fm)
    for key, row in so.OVERRIDES.items():
        md = metadata_for(fm, key)
        if row["ksplit"] > 1:
            assert md.stage1.func.__name__ == "cktile_moe_stage1" and md.stage1.keywords["split_k"] == row["ksplit"]
            assert md.stage2.func.__name__ == "cktile_moe_stage2"
            assert md.block_m == 16
        else:
            assert md.stage1.func.__name__ == "ck_moe_stage1"
            assert md.stage1.keywords["kernelName"] == row["kernelName1"]
            assert md.stage2.func.__name__ == "_flydsl_stage2_wrapper"
            assert md.stage2.keywords["kernelName"] == row["kernelName2"]
            assert md.block_m == row["block_m"] and md.ksplit == row["ksplit"]


def test_inject_without_flydsl_uses_ck_stage2(monkeypatch, tmp_path):
    dbl = aiter_double.install(monkeypatch, tmp_path, flydsl_available=False)
    fm = dbl.fused_moe
    so.inject(fm)
    for key, row in so.OVERRIDES.items():
        if row["ksplit"] > 1:
            continue
        assert live_row(fm, key)["kernelName2"] == so.FLYDSL_FALLBACK_KERNEL2[key]
        md = metadata_for(fm, key)
        assert isinstance(md.stage2, functools.partial) and md.stage2.func.__name__ == "ck_moe_stage2_fwd"
        assert md.stage2.keywords["kernelName"] == so.FLYDSL_FALLBACK_KERNEL2[key]


def test_inject_uses_the_devices_cu_num(monkeypatch, tmp_path):
    dbl = aiter_double.install(monkeypatch, tmp_path, cu_num=304)
    table = so.inject(dbl.fused_moe)
    assert all((304,) + k[1:] in table for k in so.OVERRIDES)
    table = so.inject(dbl.fused_moe, cu_num=256)
    assert all(k in table for k in so.OVERRIDES)


def test_register_flydsl(dbl):
    registry = dbl.moe_kernels._KERNEL_PARAMS
    n = len(registry)
    assert so.register_flydsl(dbl.moe_kernels) == []  # the table only names registered kernels
    table = {KEY_128: dict(so.OVERRIDES[KEY_128], kernelName2=names.FLY_S2_16)}
    assert so.register_flydsl(dbl.moe_kernels, table) == [names.FLY_S2_16]
    assert registry[names.FLY_S2_16] == so.parse_flydsl_moe_kernel_name(names.FLY_S2_16)
    assert so.register_flydsl(dbl.moe_kernels, table) == []
    assert len(registry) == n + 1


def test_inject_registers_a_missing_flydsl_kernel(dbl):
    name = "flydsl_moe2_afp4_wfp4_bf16_t32x64x256_atomic"
    table = with_row(KEY_128, kernelName2=name)
    so.inject(dbl.fused_moe, overrides=table)
    assert dbl.moe_kernels.get_flydsl_kernel_params(name)["tile_n"] == 64


def test_inject_validates_first(dbl):
    with pytest.raises(ValueError, match="MPerBlock 128"):
        so.inject(dbl.fused_moe, overrides=with_row(KEY_128, kernelName1=names.CK_S1_128))
    assert dbl.fused_moe.cfg_2stages is None


@pytest.mark.parametrize(
    "table, message",
    [
        (({}, {}), "is a tuple"),
        ({("gfx950",) + SPEC_KEY[1:]: {}}, "gfx field"),
        ({SPEC_KEY + ("gfx950",): {}}, "13-field"),
    ],
)
def test_inject_refuses_other_table_layouts(dbl, table, message):
    dbl.fused_moe.cfg_2stages = table
    with pytest.raises(RuntimeError, match=message):
        so.inject(dbl.fused_moe)


def test_inject_refuses_other_get_2stage_cfgs(dbl):
    fm = dbl.fused_moe
    original = fm.get_2stage_cfgs
    fm.get_2stage_cfgs = original.__wrapped__  # not lru_cached
    with pytest.raises(RuntimeError, match="lru_cached"):
        so.inject(fm)

    @functools.lru_cache
    def get_2stage_cfgs(token, model_dim, inter_dim, expert, topk, dtype, gfx):
        return None

    fm.get_2stage_cfgs = get_2stage_cfgs
    with pytest.raises(RuntimeError, match="takes"):
        so.inject(fm)


# ---------------------------------------------------------------------------------------------
# CSV export
# ---------------------------------------------------------------------------------------------
def test_write_csv_round_trips_through_aiters_loader(tmp_path):
    path = aiter_csv.write_csv(tmp_path / "overrides.csv")
    df = pd.read_csv(path)
    assert tuple(df.columns) == aiter_csv.AITER_FMOE_CSV_COLUMNS
    table = so.load_aiter_table(path)  # what aiter/fused_moe.py:708-714 builds
    assert set(table) == set(so.OVERRIDES)
    for key, row in so.OVERRIDES.items():
        got = table[key]
        assert (got["block_m"], got["ksplit"], got["run_1stage"]) == (row["block_m"], row["ksplit"], 0)
        for field in ("kernelName1", "kernelName2"):
            assert got[field] == row[field] or (row[field] == "" and pd.isna(got[field]))
    fallback = df[df["_tag"] == "flydsl_fallback"]
    assert len(fallback) == sum(1 for r in so.OVERRIDES.values() if r["kernelName2"].startswith("flydsl_"))
    assert set(fallback["kernelName2"]) == set(so.FLYDSL_FALLBACK_KERNEL2.values())


@pytest.mark.parametrize("flydsl", [True, False])
def test_csv_drives_the_double_as_aiter_config(monkeypatch, tmp_path, flydsl):
    path = aiter_csv.write_csv(tmp_path / "overrides.csv")
    rows = pd.read_csv(path, keep_default_na=False).to_dict("records")
    dbl = aiter_double.install(monkeypatch, tmp_path, flydsl_available=flydsl, csv_rows=rows)
    for key, row in so.OVERRIDES.items():
        md = metadata_for(dbl.fused_moe, key)
        assert md.block_m == (16 if row["ksplit"] > 1 else row["block_m"])
        if row["ksplit"] <= 1:
            want = row["kernelName2"] if flydsl else so.FLYDSL_FALLBACK_KERNEL2[key]
            assert md.stage2.keywords["kernelName"] == want


def test_csv_rows_win_aiters_merge(tmp_path):
    """AITER_CONFIG_FMOE=a.csv:b.csv merges, sorts by `us` and keeps the first row per key
    (aiter/jit/core.py:182-247): our rows carry us = 0."""
    ours = pd.read_csv(aiter_csv.write_csv(tmp_path / "ours.csv"))
    packaged = pd.read_csv(aiter_double.write_tuned_csv(tmp_path / "packaged.csv", aiter_double.packaged_rows()))
    merged = pd.concat([packaged, ours], ignore_index=True)
    merged["_tag"] = merged["_tag"].fillna("")
    keys = list(so.AITER_KEY_FIELDS[1:]) + ["cu_num", "_tag"]
    merged = merged.sort_values("us").drop_duplicates(subset=keys, keep="first")
    merged.to_csv(tmp_path / "merged.csv", index=False)
    table = so.load_aiter_table(tmp_path / "merged.csv")
    assert table[KEY_128]["kernelName1"] == names.CK_S1_32


def test_an_empty_tag_column_loads_and_merges_without_pandas_warnings(tmp_path):
    """A table whose `_tag` column is empty reads it as float; aiter's fillna("") on it is a
    Pandas4Warning under pandas 3 (an error later), in the package's loader and in the double."""
    configs = tmp_path / "aiter" / "configs"
    configs.mkdir(parents=True)
    (configs / "untuned_fmoe.csv").write_text(",".join(so.AITER_KEY_FIELDS[1:]) + "\n")
    rows = [dict(r, _tag="") for r in aiter_double.packaged_rows()]
    first = aiter_double.write_tuned_csv(tmp_path / "first.csv", rows[:1])
    second = aiter_double.write_tuned_csv(tmp_path / "second.csv", rows[1:])
    assert pd.read_csv(first)["_tag"].dtype == float
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(so.load_aiter_table(first)) == 1
        merged = aiter_double.merged_config_file(tmp_path, f"{first}{os.pathsep}{second}", tmp_path / "m.csv")
        assert len(so.load_aiter_table(merged)) == len(rows)
