"""The Triton kernels; moe_triton/fused_moe.py launches them."""
