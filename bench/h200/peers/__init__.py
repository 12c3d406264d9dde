"""Peer adapters, other libraries' MoE layers as prepare/run: bench.h200.rivals times them beside the
package (and bench.h200.fp8_check's time mode takes one with --peer-adapter)."""
