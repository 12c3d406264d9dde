"""The MXFP4 format (SPEC 3): codec.py in plain torch (both quantizers, dequantize, the weight and
scale shuffles), encode.py the same encoder inside Triton kernels."""
