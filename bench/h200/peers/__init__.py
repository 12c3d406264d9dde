"""Peer adapters, other libraries' MoE layers as prepare/run: bench.h200.rivals times them beside the
package."""
