"""The runner's correctness checks (`python -m bench --check`).

a4w4 (default): reference.ref_kernel, this package's a4w4 reference of the layer.
leaderboard: what the leaderboard compares with: aiter's own fused_moe (the template's single
  call), run after the submission in the same process, so it reads whatever rows the submission
  injected into aiter's table (the task's reference.py calls aiter's fused_moe, which reads it; docs/aiter.md).
  Needs aiter.
both: both, leaderboard first (as the leaderboard runs it right after the submission); the case
  passes only when both pass, and a case where they disagree says so: passing the leaderboard's
  check alone means the row passes only because the reference reads the same table.
"""

from __future__ import annotations

from collections.abc import Callable

CHECKS = ("a4w4", "leaderboard", "both")
DISAGREE = "checks disagree"


def _leaderboard_check(data, output) -> tuple[bool, str]:
    from moe_aiter.backend import fused_moe_aiter_template
    from reference import compare

    return compare(output, fused_moe_aiter_template(data))


def _both_check(data, output) -> tuple[bool, str]:
    from reference import check_implementation

    lb_ok, lb_msg = _leaderboard_check(data, output)
    own_ok, own_msg = check_implementation(data, output)
    if lb_ok and own_ok:
        return True, ""
    if lb_ok:
        return False, f"{DISAGREE}: passes the leaderboard's check (aiter fused_moe), fails a4w4: {own_msg}"
    if own_ok:
        return False, f"{DISAGREE}: passes a4w4, fails the leaderboard's check (aiter fused_moe): {lb_msg}"
    return False, f"fails both checks; leaderboard: {lb_msg}; a4w4: {own_msg}"


def make_check(name: str) -> Callable:
    """check(data, output) -> (ok, message) for a --check value."""
    if name == "a4w4":
        from reference import check_implementation

        return check_implementation
    if name not in CHECKS:
        raise ValueError(f"--check {name!r}: expected one of {', '.join(CHECKS)}")
    import importlib

    try:
        importlib.import_module("aiter.fused_moe")
    except Exception as exc:  # noqa: BLE001 - ImportError, or aiter's own failure without ROCm
        raise RuntimeError(f"--check {name} needs aiter: import aiter.fused_moe failed: {exc}") from None
    return _leaderboard_check if name == "leaderboard" else _both_check
