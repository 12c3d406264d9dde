"""Scratch buffers reused between calls, keyed by (name, shape, dtype, device), in an LRU of MAX_ENTRIES;
the next call with a buffer's key overwrites it, so callers that return one (the layer output) say so."""

from collections import OrderedDict

import torch

MAX_ENTRIES = 64

_pool: "OrderedDict[tuple, torch.Tensor]" = OrderedDict()
_counters: dict[tuple, torch.Tensor] = {}


def get_buffer(name: str, shape: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A cached, uninitialised tensor for this key; shape a tuple of ints and device a torch.device,
    keyed as they are (this runs on every call)."""
    key = (name, shape, dtype, device)
    buf = _pool.get(key)
    if buf is None:
        buf = torch.empty(shape, dtype=dtype, device=device)
        _pool[key] = buf
        while len(_pool) > MAX_ENTRIES:
            _pool.popitem(last=False)
    else:
        _pool.move_to_end(key)
    return buf


def get_counters(name: str, shape: tuple, device: torch.device) -> torch.Tensor:
    """A cached int32 tensor, zero when made, which its kernel sets back to zero before it ends (the
    stream-K stage's arrival counters): kept out of the LRU and of pooled(), since a poisoned or
    reallocated one would break the next call."""
    key = (name, shape, device)
    if key not in _counters:
        _counters[key] = torch.zeros(shape, dtype=torch.int32, device=device)
    return _counters[key]


def pooled() -> list[torch.Tensor]:
    """Every cached buffer (for checks that poison scratch before a call)."""
    return list(_pool.values())
