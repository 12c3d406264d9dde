"""The tools around the submission; none of them is bundled.

runner/ the local runner, `python -m bench` (docs/runner.md); job.py, `python -m bench.job`, the
whole leaderboard job around the task's eval.py; seed_check.py, `python -m bench.seed_check`,
custom_kernel on many leaderboard-style seeds; roofline.py, the floors of docs/spec.md section 6
(the runner's and the gfx950 estimate's). tune/ the tuners, gfx950/ the offline gfx950 compile
check and the MI355X cost model, h200/ the H200's measurements and the cost model's H200 twin.
NOTES.md and RESULTS.md index notes/ and results/.
"""
