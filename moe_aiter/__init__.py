"""The aiter path's helpers (docs/aiter.md): the backend that runs aiter's 2-stage pipeline,
the override table's rules and its injection into aiter's config, and aiter's kernel catalogue."""
