"""Peer adapters for bench.h200.fp8_check's time mode: other libraries' MoE layers as prepare/run."""
