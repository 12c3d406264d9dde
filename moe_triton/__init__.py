"""The Triton backend of the layer: fused_moe.py launches it (fused_moe_triton), kernels/ holds the
kernels (routing, the decode path's GEMMs, the native gfx950 GEMMs), tiles*.py the tile choices
per target (docs/triton.md, docs/gfx950.md)."""
