"""The tools around the submission; none of them is bundled.

runner/ the local runner, `python -m bench` (docs/runner.md); job.py, `python -m bench.job`, the
whole leaderboard job around the task's eval.py; seed_check.py, `python -m bench.seed_check`,
custom_kernel on many leaderboard-style seeds; roofline.py, the floors of docs/spec.md section 6
(the runner's and the gfx950 estimate's). tune/ the tuners, gfx950/ the offline gfx950 compile
check and MI355X estimate, h200/ H200-only measurement scripts. NOTES.md and RESULTS.md index
notes/ and results/.
"""
