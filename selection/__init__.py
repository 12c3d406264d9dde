"""The first-call selection (docs/selection.md): the candidates, their checks and timing, the stored
choices and the runner's pre-run."""
