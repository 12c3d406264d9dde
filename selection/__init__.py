"""The first-call selection (docs/selection.md): candidates per target, checking and timing them,
the stored choices, the runner's pre-run, and the static backend table per shape."""
