"""The aiter path (docs/aiter.md): the backend, the override table's injection, aiter's kernel names."""
