"""Scratch buffers reused between calls, keyed by (name, shape, dtype, device), in an LRU of MAX_ENTRIES;
the next call with a buffer's key overwrites it, so callers that return one (the layer output) say so."""

from collections import OrderedDict

import torch

MAX_ENTRIES = 64

_pool: "OrderedDict[tuple, torch.Tensor]" = OrderedDict()


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


def pooled() -> list[torch.Tensor]:
    """Every cached buffer (for checks that poison scratch before a call)."""
    return list(_pool.values())
