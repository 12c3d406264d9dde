"""The local runner, `python -m bench` (docs/runner.md).

cli (the command line), case_args (--cases, --cases-file, seeds), backends (--backend,
MOE_BACKEND, loading submission files), preflight (the checks before a run), interpreter_time (the
CPU interpreter's run time, estimated), worker (one backend in one process), evaluate (the
per-case loops of each mode), timing (statistics, stop rules, timers, cache flush), checks
(--check's rules), report (tables, JSON/CSV/Markdown, chart), pins (the table rows that pin what a
run measured).
"""
