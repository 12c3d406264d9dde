"""Which backend custom_kernel runs per shape on an MI355X, where aiter is the default: "aiter"
(the override pipeline) or "triton" (there the native MXFP4 path, moe_native_kernels).

Keys are (d_hidden, d_inter, n_experts, topk, n_tokens), as in tile_configs. A shape not listed
runs aiter. The table stays empty until a measurement on an MI355X says otherwise:
`python -m bench --mode benchmark --backend aiter triton` there prints the rows that belong here
(bench/runner/pins.py), each with the two times it is based on.
"""

MI355X_BACKENDS: dict[tuple[int, int, int, int, int], str] = {}


def shape_key(config: dict) -> tuple[int, int, int, int, int]:
    """The table key of an input tuple's config dict (SPEC 2)."""
    n_experts = config["n_routed_experts"] + config["n_shared_experts"]
    return (config["d_hidden"], config["d_expert"], n_experts, config["total_top_k"], config["bs"])


def backend_for(config: dict) -> str:
    return MI355X_BACKENDS.get(shape_key(config), "aiter")
