"""The offline gfx950 (MI355X) compile check, CPU only: `python -m bench.gfx950` (run.py)."""
