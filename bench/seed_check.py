"""`python -m bench.seed_check`: custom_kernel on many leaderboard-style seeds per case (GPU).

The leaderboard's leaderboard mode regenerates the inputs with seed + 13 before every timed call
and checks each output; this does the same for --seeds seeds per case, untimed, in one process,
so that what the submission chose at its first call per shape (MOE_SELECT, docs/selection.md) is
checked on inputs it never saw. Prints one line per case: passes, the worst error as a fraction
of the tolerance (selection.selector.worst_error: 1 is the edge) and the choice.
"""

import sys
import time


def main(argv=None) -> int:
    from bench.runner.preflight import UsageParser, positive_int

    p = UsageParser(prog="python -m bench.seed_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", default=["official"], help="case selectors as for python -m bench")
    p.add_argument("--seeds", type=positive_int, default=100, help="seeds per case (seed + 13 k, k = 1..N)")
    args = p.parse_args(argv)
    import torch

    from bench.runner.case_args import LEADERBOARD_SEED_STEP, UsageError, select_cases

    try:
        cases = select_cases(args.cases)
    except UsageError as exc:
        return p.fail(f"--cases: {exc}")
    from reference import compare, generate_input, ref_kernel
    from selection.selector import worst_error
    from submission import custom_kernel, selection_choice

    failed = 0
    for case in cases:
        t0, passed, worst = time.perf_counter(), 0, 0.0
        for k in range(1, args.seeds + 1):
            params = {**case.params, "seed": case.params["seed"] + LEADERBOARD_SEED_STEP * k}
            data = generate_input(**params)
            output = custom_kernel(data)
            expected = ref_kernel(data)  # after the submission, as the runner checks
            ok, message = compare(output, expected)
            passed += ok
            worst = max(worst, worst_error(output, expected))
            if not ok:
                print(f"{case.label} seed {params['seed']}: {message.splitlines()[0]}", flush=True)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        failed += passed < args.seeds
        choice = selection_choice(data[-1]) or "static"
        print(
            f"{case.label} {case.shape}: {passed}/{args.seeds} passed, worst error {worst:.2f} of the tolerance, "
            f"choice {choice}, {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
