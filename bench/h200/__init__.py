"""Measurements only the H200 can make: the cost model's calibration, the NVIDIA paths' checks and
timings against their peers, and the native path's variants checked with Triton's emulations
(native_check). Each script writes its results under --out (or $OUT) and runs within one device
call. Beside them, on the CPU: the cost model's H200 twin (twin, sass, fit), which reads what
calibrate measured."""
