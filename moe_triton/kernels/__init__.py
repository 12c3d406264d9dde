"""The Triton kernels; the launchers beside this package (moe_triton/decode.py, fp8.py, native.py,
routing.py) launch them."""
