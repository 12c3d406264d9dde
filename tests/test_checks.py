"""`python -m bench --check`: the package's a4w4 reference, the leaderboard's (aiter's fused_moe in
the same process, here the aiter test double) and both, which flags a row that passes only
because the reference reads the same table."""

import pytest

from bench.runner import checks, cli
from moe_aiter import backend as aiter_backend
from moe_aiter import inject as so
from moe_triton.target import interpreting
from reference import generate_input
from tests import aiter_double
from tests import aiter_names as names

SMOKE0 = dict(dhidden=512, dexpert=256, nroutedexperts=8, nexpertspertoken=4, nsharedexperts=1, bs=8, seed=1)


def _mismatched_row():
    """A row for the SMOKE0 key pairing the 32-row sort with the 128-row stage-1 kernel: whatever
    it computes, aiter's fused_moe computes the same."""
    key = so.aiter_key(8, 256, 9, model_dim=512, topk=5)
    row = dict(zip(so.AITER_KEY_FIELDS, key, strict=True))
    kernels = dict(kernelName1=names.CK_S1_128, kernelName2=names.CK_S2_32)
    return dict(row, block_m=32, ksplit=0, **kernels, us=1.0, run_1stage=0)


@pytest.fixture
def double_with_mismatched_row(monkeypatch, tmp_path):
    monkeypatch.setenv("MOE_AITER_QUANT", "aiter")
    aiter_double.reset_backend()
    dbl = aiter_double.install(monkeypatch, tmp_path, csv_rows=[_mismatched_row()])
    yield dbl
    aiter_double.reset_backend()


def test_both_flags_a_row_that_passes_only_because_the_reference_reads_it(double_with_mismatched_row):
    data = generate_input(**SMOKE0)
    out = aiter_backend.fused_moe_aiter(data)
    assert checks.make_check("leaderboard")(data, out)[0]
    assert not checks.make_check("a4w4")(data, out)[0]
    ok, message = checks.make_check("both")(data, out)
    assert not ok and message.startswith(f"{checks.DISAGREE}: passes the leaderboard's check")


def test_both_passes_a_correct_output(monkeypatch, tmp_path):
    monkeypatch.setenv("MOE_AITER_QUANT", "aiter")
    aiter_double.reset_backend()
    aiter_double.install(monkeypatch, tmp_path)
    data = generate_input(**SMOKE0)
    assert checks.make_check("both")(data, aiter_backend.fused_moe_aiter(data)) == (True, "")
    aiter_double.reset_backend()


@pytest.mark.parametrize(("check", "rc"), [("a4w4", 1), ("leaderboard", 0), ("both", 1)])
def test_cli_routes_the_check(double_with_mismatched_row, capsys, check, rc):
    # The device this process's Triton runs on: an in-process (--inline) run on --device cpu sets
    # TRITON_INTERPRET too late for kernels a GPU test of the same process compiled already.
    device = "cpu" if interpreting() else "cuda"
    argv = ["--inline", "--backend", "aiter", "--cases", "smoke:0", "--device", device, "--roofline", "off", "-q"]
    assert cli.main(argv + ["--check", check]) == rc
    assert (checks.DISAGREE in capsys.readouterr().out) == (check == "both")


def test_leaderboard_check_without_aiter_is_a_clear_error():
    try:
        import aiter  # noqa: F401
    except Exception:  # noqa: BLE001
        with pytest.raises(RuntimeError, match="--check leaderboard needs aiter"):
            checks.make_check("leaderboard")
    else:
        pytest.skip("aiter imports here")
