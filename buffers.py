"""Scratch buffers reused between calls, keyed by (name, shape, dtype, device).

The pool is a small LRU: a new shape evicts the least recently used entry once MAX_ENTRIES are
held, so a process that sees many shapes stays bounded. A buffer handed out is overwritten by the
next call that asks for the same key; callers that return one (the layer output) say so.
A buffer asked for with kept_zero starts zeroed and is never zeroed here again: the kernels that
use it return it to zero before their call ends (the native path's split-K arrival counters), so
tools that fill the pool with garbage leave the names in KEPT_ZERO alone.
"""

from collections import OrderedDict

import torch

MAX_ENTRIES = 64

_pool: "OrderedDict[tuple, torch.Tensor]" = OrderedDict()
KEPT_ZERO: set[str] = set()


def get_buffer(
    name: str, shape: tuple, dtype: torch.dtype, device: torch.device, zero: bool = False, kept_zero: bool = False
) -> torch.Tensor:
    """A cached tensor for this key (allocated on first use); zeroed on every call when zero=True,
    only when allocated when kept_zero=True (module docstring). shape is a tuple of ints and device
    a torch.device (as tensor.device gives): the key is built from them as they are, since this
    runs on every call."""
    key = (name, shape, dtype, device)
    buf = _pool.get(key)
    if buf is None:
        if kept_zero:
            KEPT_ZERO.add(name)
        buf = (torch.zeros if kept_zero else torch.empty)(shape, dtype=dtype, device=device)
        _pool[key] = buf
        while len(_pool) > MAX_ENTRIES:
            _pool.popitem(last=False)
    else:
        _pool.move_to_end(key)
    if zero:
        buf.zero_()
    return buf


def clear() -> None:
    """Drop every cached buffer."""
    _pool.clear()


def pool_size() -> int:
    return len(_pool)
