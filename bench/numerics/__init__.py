"""The numerics checks of docs/numerics.md: rules.py reads the compiled code of the kernels that
compute h, silu_code.py compiles every path for sm_90 and gfx950 and applies them (CPU), budget.py
measures how far each difference from the judge moves the output (GPU)."""
