"""The MXFP4 format (SPEC 3): codec.py in plain torch, encode.py and convert.py inside Triton kernels."""
