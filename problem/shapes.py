"""Which layer shapes the package computes (SPEC 1, 2), one set of rules for the input tuple's config
and the runner's cases, and Shape, the sizes as the kernels see them. Imports no torch, so that the
runner checks its cases before torch loads."""

from typing import NamedTuple

SIZES = ("d_hidden", "d_expert", "n_routed_experts", "n_experts_per_token", "n_shared_experts", "bs")
# d_hidden and d_expert: the problem pads both to this multiple (SPEC 1), and the package computes
# the unpadded layer only, as every official shape is
SIZE_MULTIPLE = 256


def shape_problem(sizes: dict, name=str) -> str | None:
    """Why `sizes` (each of SIZES, and any other key only type-checked) is no shape the package
    computes, or None; `name` spells a key the caller's way."""
    for key, value in sizes.items():
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{name(key)} must be an int, got {type(value).__name__} {value!r}"
    for key in SIZES:
        least = 0 if key == "n_shared_experts" else 1
        if sizes[key] < least:
            return f"{name(key)} must be at least {least}, got {sizes[key]}"
    for key in ("d_hidden", "d_expert"):
        if sizes[key] % SIZE_MULTIPLE:
            return (
                f"{name(key)} ({sizes[key]}) must be a multiple of {SIZE_MULTIPLE}: the package computes the "
                "unpadded layer only"
            )
    top_k, routed = sizes["n_experts_per_token"], sizes["n_routed_experts"]
    if top_k > routed:
        return (
            f"{name('n_experts_per_token')} ({top_k}) must be at most {name('n_routed_experts')} ({routed}): "
            "each token picks distinct routed experts"
        )
    return None


class Shape(NamedTuple):
    """A layer's sizes as the kernels see them, the shared experts counted among the experts and
    among each token's picks: the key of every per-shape table, in this one order."""

    n_tokens: int
    d_hidden: int
    d_inter: int
    n_experts: int
    topk: int

    @classmethod
    def of(cls, hidden_states, w1, topk_ids) -> "Shape":
        """The shape of an input tuple: hidden_states [M, H], w1 [E, 2I, H/2], topk_ids [M, k]."""
        n_tokens, d_hidden = hidden_states.shape
        n_experts, two_inter = w1.shape[:2]
        return cls(n_tokens, d_hidden, two_inter // 2, n_experts, topk_ids.shape[1])

    @classmethod
    def of_config(cls, config: dict) -> "Shape":
        """The shape of an input tuple's config dict (SPEC 2: total_top_k counts the shared experts)."""
        experts = config["n_routed_experts"] + config["n_shared_experts"]
        return cls(config["bs"], config["d_hidden"], config["d_expert"], experts, config["total_top_k"])
