"""The tuners: `python -m bench.tune.tiles` (the Triton tiles, GPU) and `python -m bench.tune.aiter_rows`
(aiter's override rows, MI355X); `python -m bench.tune.aiter_csv` writes the override rows as a config
file for aiter."""
