"""The Triton kernels; the launchers beside this package (moe_triton/decode.py, native.py, routing.py) launch them."""
