"""The AITER_CONFIG_FMOE route (bench/tune/aiter_csv.py: write_csv + aiter_config_fmoe) gives aiter the same
table as inject, model_configs rows included; listing only tuned_fmoe.csv and the CSV would drop
them (aiter/jit/core.py get_config_file merges only the listed files once the variable is set)."""

import aiter_double
import aiter_names as names
import pytest

from bench.tune import aiter_csv
from moe_aiter import inject as so

COMMON = aiter_double.OFFICIAL_ROW_FIELDS
UNTUNED_COLUMNS = aiter_double.DOUBLE_CSV_COLUMNS[1:13]  # untuned_fmoe.csv: the key without cu_num


def _aiter_root(tmp_path):
    """aiter's config layout: tuned_fmoe.csv (no _tag column), untuned_fmoe.csv, and model_configs
    with a dsv3-like table (an official key, which the overrides replace, and token 1, which must
    survive) and an untuned file (never merged)."""
    root = tmp_path / "aiter_root"
    configs = root / "aiter" / "configs"
    (configs / "model_configs").mkdir(parents=True)
    k1, k2 = names.CK_S1_32_SMALL, names.CK_S2_32
    cols = [c for c in aiter_double.DOUBLE_CSV_COLUMNS if c != "_tag"]
    base = [dict(COMMON, token=64, inter_dim=4096, expert=8, block_m=64, us=640.0, kernelName1=k1, kernelName2=k2)]
    _write(configs / "tuned_fmoe.csv", cols, base)
    dsv3 = [
        dict(COMMON, token=16, inter_dim=256, expert=257, block_m=32, us=30.0, kernelName1=k1, kernelName2=k2),
        dict(COMMON, token=1, inter_dim=256, expert=257, block_m=32, us=20.0, kernelName1=k1, kernelName2=k2),
    ]
    _write(configs / "model_configs" / "dsv3_fp4_tuned_fmoe.csv", aiter_double.DOUBLE_CSV_COLUMNS, dsv3)
    stray = [dict(COMMON, token=2, inter_dim=256, expert=257, block_m=32, us=1.0, kernelName1=k1, kernelName2=k2)]
    _write(configs / "model_configs" / "x_untuned_fmoe.csv", aiter_double.DOUBLE_CSV_COLUMNS, stray)
    _write(configs / "untuned_fmoe.csv", UNTUNED_COLUMNS, [])
    return root


def _write(path, columns, rows):
    lines = [",".join(columns)] + [",".join(str(r.get(c, "")) for c in columns) for r in rows]
    path.write_text("\n".join(lines) + "\n")


def _table(dbl):
    """The table aiter's get_2stage_cfgs loads (first call after cfg_2stages is None)."""
    key = next(iter(so.OVERRIDES))
    dbl.fused_moe.get_2stage_cfgs.cache_clear()
    dbl.fused_moe.get_2stage_cfgs(key[1], key[2], key[3], key[4], key[5], *_cfg_args(dbl))
    return dbl.fused_moe.cfg_2stages


def _cfg_args(dbl):
    import torch

    ai = dbl.aiter
    fp4 = ai.dtypes.fp4x2
    return (torch.bfloat16, fp4, fp4, ai.QuantType.per_1x32, True, ai.ActivationType.Silu, False, 0, 0, True)


def _rows(table):
    return {k: (int(r["block_m"]), int(r["ksplit"]), r["kernelName1"], r["kernelName2"]) for k, r in table.items()}


@pytest.fixture
def routes(monkeypatch, tmp_path):
    """(table by inject, dbl factory) with aiter's config merge emulated over _aiter_root."""
    root = _aiter_root(tmp_path)
    monkeypatch.delenv("AITER_CONFIG_FMOE", raising=False)

    def fresh(sub):
        (tmp_path / sub).mkdir()
        dbl = aiter_double.install(monkeypatch, tmp_path / sub)
        dbl.aiter_root = str(root)
        return dbl

    injected = so.inject(fresh("inject").fused_moe)
    return root, _rows(injected), fresh


@pytest.mark.parametrize("flydsl", [True, False])
def test_exported_route_gives_the_injected_table(routes, monkeypatch, tmp_path, flydsl):
    root, injected, fresh = routes
    csv_path = aiter_csv.write_csv(tmp_path / "moe_overrides.csv")
    monkeypatch.setenv("AITER_CONFIG_FMOE", aiter_csv.aiter_config_fmoe(csv_path, aiter_root=root))
    dbl = fresh("csv")
    exported = _rows(_table(dbl))
    assert exported == injected
    token1 = so.aiter_key(1, 256, 257)
    assert token1 in exported and so.aiter_key(2, 256, 257) not in exported  # dsv3 kept, untuned never merged
    dbl.flydsl_available = flydsl
    dbl.fused_moe.get_2stage_cfgs.cache_clear()
    for key in so.OVERRIDES:  # what aiter runs, FlyDSL or its fallback
        md = dbl.fused_moe.get_2stage_cfgs(key[1], key[2], key[3], key[4], key[5], *_cfg_args(dbl))
        want = so.OVERRIDES[key]["kernelName2"] if flydsl else so.FLYDSL_FALLBACK_KERNEL2[key]
        assert md.stage2.keywords["kernelName"] == want


def test_listing_only_tuned_fmoe_drops_the_model_configs_rows(routes, monkeypatch, tmp_path):
    root, injected, fresh = routes
    csv_path = aiter_csv.write_csv(tmp_path / "moe_overrides.csv")
    monkeypatch.setenv("AITER_CONFIG_FMOE", f"{root}/aiter/configs/tuned_fmoe.csv:{csv_path}")
    exported = _rows(_table(fresh("old")))
    assert so.aiter_key(1, 256, 257) in injected and so.aiter_key(1, 256, 257) not in exported


def test_aiter_config_fmoe_lists_aiters_files_then_ours(tmp_path):
    root = _aiter_root(tmp_path)
    parts = aiter_csv.aiter_config_fmoe(tmp_path / "o.csv", aiter_root=root).split(":")
    assert parts == [
        f"{root}/aiter/configs/tuned_fmoe.csv",
        f"{root}/aiter/configs/model_configs/dsv3_fp4_tuned_fmoe.csv",
        str((tmp_path / "o.csv").resolve()),
    ]


def test_the_documented_command_writes_the_csv_and_prints_the_variable(tmp_path, monkeypatch, capsys):
    """`export AITER_CONFIG_FMOE=$(python -m bench.tune.aiter_csv moe_overrides.csv)` (docs/aiter.md)."""
    root = _aiter_root(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert aiter_csv.main(["moe_overrides.csv", "--aiter-root", str(root)]) == 0
    value = capsys.readouterr().out.strip()
    assert value == aiter_csv.aiter_config_fmoe("moe_overrides.csv", aiter_root=root)
    assert value.endswith(str(tmp_path / "moe_overrides.csv")) and (tmp_path / "moe_overrides.csv").is_file()


def test_without_aiter_the_command_says_so_in_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(aiter_csv, "find_spec", lambda name: None)
    assert aiter_csv.main([str(tmp_path / "o.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["python -m bench.tune.aiter_csv: error: aiter is not installed here; pass its folder (--aiter-root)"]
    assert not (tmp_path / "o.csv").exists()
