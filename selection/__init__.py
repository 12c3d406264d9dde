"""The first-call selection (docs/selection.md): candidates, their checks and timing, stored choices, the pre-run."""
