"""MOE_TRITON_NATIVE, read by one rule for the launcher and the runner's up-front checks; imports nothing,
so that the runner checks it before Triton is imported."""

import os


def native_forced(environ=None) -> bool | None:
    """MOE_TRITON_NATIVE: True (1: the native path everywhere), False (0: never), None (unset, empty: by device)."""
    forced = (os.environ if environ is None else environ).get("MOE_TRITON_NATIVE", "")
    if forced not in ("", "0", "1"):
        raise ValueError(f"MOE_TRITON_NATIVE: expected 0 or 1, got {forced!r}")
    return None if not forced else forced == "1"
