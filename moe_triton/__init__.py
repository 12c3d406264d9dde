"""The Triton backend of the layer: fused_moe.py is its entry point (fused_moe_triton), decode.py
and native.py launch each path, routing.py the routing, plan.py records and replays a
shape's launches, target.py says what it compiles for; kernels/ holds the kernels (routing, the
decode path's GEMMs, the native gfx950 GEMMs), tiles*.py the tile choices per target
(docs/triton.md, docs/gfx950.md)."""
