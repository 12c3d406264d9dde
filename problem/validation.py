"""Cheap checks of the 12-item input tuple (SPEC 2), each failure a ValueError naming the argument:
metadata at every call, worked out once per config, and the expert ids at the first call per
config only (docs/spec.md, "2. The input tuple", says why)."""

import functools
from collections import Counter

import torch

from mxfp4.codec import E8M0_DTYPE, FP4_DTYPE, MX_BLOCK
from problem.shapes import Shape, shape_problem
from reference import make_config, pad_to, require_unpadded

ARG_NAMES = (
    "hidden_states",
    "gate_up_weight",
    "down_weight",
    "gate_up_weight_scale",
    "down_weight_scale",
    "gate_up_weight_shuffled",
    "down_weight_shuffled",
    "gate_up_weight_scale_shuffled",
    "down_weight_scale_shuffled",
    "topk_weights",
    "topk_ids",
    "config",
)
CONFIG_KEYS = tuple(make_config(*(1,) * 6))  # the keys of generate_input's config, in its order
_PACKED = (FP4_DTYPE, torch.uint8)
_SCALES = (E8M0_DTYPE, torch.uint8)


def _check(name: str, t, dtypes: tuple, shape: tuple) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: expected a tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        raise ValueError(f"{name}: dtype {t.dtype}, expected one of {', '.join(map(str, dtypes))}")
    if tuple(t.shape) != shape:
        raise ValueError(f"{name}: shape {tuple(t.shape)}, expected {shape} from config")
    if not t.is_contiguous():
        raise ValueError(f"{name}: must be contiguous")


def expected_layout(config: dict) -> tuple:
    """(accepted dtypes, shape) of each tensor of the tuple, in ARG_NAMES order, as a valid config
    implies them (SPEC 2); the first dtype is the one the runner's generate_input gives."""
    n_tokens, d_hidden, d_inter, n_experts, topk = Shape.of_config(config)
    w1s_shape, w2s_shape = (n_experts * 2 * d_inter, d_hidden // MX_BLOCK), (n_experts * d_hidden, d_inter // MX_BLOCK)
    return (
        ((torch.bfloat16,), (n_tokens, d_hidden)),
        (_PACKED, (n_experts, 2 * d_inter, d_hidden // 2)),
        (_PACKED, (n_experts, d_hidden, d_inter // 2)),
        (_SCALES, w1s_shape),
        (_SCALES, w2s_shape),
        (_PACKED, (n_experts, 2 * d_inter, d_hidden // 2)),
        (_PACKED, (n_experts, d_hidden, d_inter // 2)),
        (_SCALES, (pad_to(w1s_shape[0], 256), pad_to(w1s_shape[1], 8))),
        (_SCALES, (pad_to(w2s_shape[0], 256), pad_to(w2s_shape[1], 8))),
        ((torch.float32,), (n_tokens, topk)),
        ((torch.int32,), (n_tokens, topk)),
    )


def validate_inputs(data) -> None:
    """Raise ValueError, naming the argument, unless data is a consistent, unpadded input tuple.
    The config is taken as the truth; each tensor is checked against the shape it implies."""
    if not isinstance(data, (tuple, list)) or len(data) != len(ARG_NAMES):
        raise ValueError(f"data: expected a tuple of {len(ARG_NAMES)} items ({', '.join(ARG_NAMES)})")
    config = data[-1]
    if not isinstance(config, dict):
        raise ValueError(f"config: expected a dict, got {type(config).__name__}")
    missing = [k for k in CONFIG_KEYS if k not in config]
    if missing:
        raise ValueError(f"config: missing keys {missing}")
    key = tuple(config[k] for k in CONFIG_KEYS)
    try:
        layout = _layout(*key)
    except TypeError:  # a value that cannot key the cache (not an int): checked the same way, uncached
        layout = _layout.__wrapped__(*key)
    tensors = data[:-1]
    for t, (name, dtypes, shape) in zip(tensors, layout, strict=True):
        if not isinstance(t, torch.Tensor) or t.dtype not in dtypes or t.shape != shape or not t.is_contiguous():
            _check(name, t, dtypes, shape)  # raises, with the message for what is wrong
        if t.device != tensors[0].device:
            _check_devices(tensors)
    if key not in _ids_checked and _check_expert_ids(tensors[10], tensors[1].shape[0]):
        _ids_checked.add(key)


# The configs (CONFIG_KEYS values) whose topk_ids have been read once: the shapes seen.
_ids_checked: set[tuple] = set()


def _check_expert_ids(topk_ids: torch.Tensor, n_experts: int) -> bool:
    """Raise unless every id lies in 0..n_experts-1; False where the ids cannot be read now (a
    meta tensor, or a CUDA graph being captured, which a synchronisation would break)."""
    if topk_ids.is_meta or (topk_ids.is_cuda and torch.cuda.is_current_stream_capturing()):
        return False
    low, high = torch.stack(torch.aminmax(topk_ids)).tolist()
    if low < 0 or high >= n_experts:
        raise ValueError(
            f"topk_ids: expert id {low if low < 0 else high} out of range 0..{n_experts - 1} "
            f"(n_routed_experts + n_shared_experts = {n_experts})"
        )
    return True


@functools.lru_cache(maxsize=64, typed=True)
def _layout(*values) -> tuple:
    """(name, accepted dtypes, shape) per tensor for a consistent config's CONFIG_KEYS values (one
    that is not raises, uncached). Typed, so that 512.0 or True never hits the entry of 512 or 1."""
    config = dict(zip(CONFIG_KEYS, values, strict=True))
    problem = shape_problem(config)
    if problem:
        raise ValueError(f"config: {problem}")
    require_unpadded(config)
    topk = config["total_top_k"]
    if config["n_experts_per_token"] + config["n_shared_experts"] != topk:
        raise ValueError(
            f"config: total_top_k ({topk}) != n_experts_per_token + n_shared_experts "
            f"({config['n_experts_per_token']} + {config['n_shared_experts']})"
        )
    layout = zip(ARG_NAMES[:-1], expected_layout(config), strict=True)
    return tuple((name, dtypes, shape) for name, (dtypes, shape) in layout)


def _check_devices(tensors) -> None:
    """All on one device; the error names the tensors away from the others, not those that stayed."""
    common, _ = Counter(t.device for t in tensors).most_common(1)[0]
    for name, t in zip(ARG_NAMES[:-1], tensors, strict=True):
        if t.device != common:
            raise ValueError(f"{name}: on {t.device}, while the other inputs are on {common}")
