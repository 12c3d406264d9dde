"""The Triton backend of the layer, entered through fused_moe.fused_moe_triton; what each module does:
docs/triton.md (the native gfx950 path: docs/gfx950.md)."""
