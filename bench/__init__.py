"""Local evaluation runner for the amd-moe-mxfp4 leaderboard: `python -m bench --help`.

Modules: selection (cases, seeds, backend names), timing (statistics, stop rules, timers, cache
flush), evaluate (the per-case loops of each mode), worker (one backend in one process),
backends (loading submission files), preflight (checks before a run), estimate (the CPU
interpreter's run time), roofline (floors and device ceilings), report (tables, JSON/CSV/Markdown,
chart), checks (--check's rules), backend_rows and choice_rows (table rows that pin what a run
measured), cli (the command line); job (the whole leaderboard job around eval.py) and seed_check
(custom_kernel on many leaderboard-style seeds). Beside them: gfx950/ (the offline gfx950 compile
check, `python -m bench.gfx950`) and tune/ (the tuners). docs/runner.md describes them.
"""
