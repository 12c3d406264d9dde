"""`python -m bench.seed_check`: custom_kernel on many leaderboard-style seeds per case (GPU).

The leaderboard's leaderboard mode regenerates the inputs with seed + 13 before every timed call
and checks each output; this does the same for --seeds seeds per case, untimed, in one process,
so that what the submission chose at its first call per shape (MOE_SELECT, docs/selection.md) is
checked on inputs it never saw. Each input is run on every path of --paths (the reference once,
after them, as the runner checks). Prints one line per case and path: passes, the worst error as
a fraction of the tolerance (selection.selector.worst_error: 1 is the edge) and its 99th
percentile over the seeds, and the choice; --json writes the same with the failing seeds.
Interrupted (Ctrl-C, or SIGTERM from a time limit), it reports the seeds done so far, exit status 130.
"""

import json
import signal
import sys
import time
from pathlib import Path

PATHS = ("shipped", "native", "decode")
NO_GPU = (
    "no CUDA or ROCm GPU here; seed_check runs the kernels on a GPU (TRITON_INTERPRET=1 runs them under "
    "Triton's CPU interpreter, small cases only; python -m bench --device cpu checks a case there)"
)


def _runner(path: str):
    """custom_kernel as submitted (shipped), or the Triton backend's native or decode path forced at
    its table tile."""
    from selection.candidates import run_triton
    from submission import custom_kernel

    if path == "shipped":
        return custom_kernel
    return lambda data: run_triton(data, native=path == "native")


def _parser():
    from bench.runner.preflight import non_negative_int, seeds_parser

    p = seeds_parser("python -m bench.seed_check", __doc__, 100, "seeds per case (base + 13 k, k = 1..N)")
    p.add_argument(
        "--seed-base", type=non_negative_int, default=None, help="the seeds' base (default: each case's own seed)"
    )
    p.add_argument(
        "--paths",
        nargs="+",
        choices=PATHS,
        default=["shipped"],
        help="shipped: custom_kernel (the first-call selection on a GPU); native, decode: that Triton path forced",
    )
    p.add_argument("--json", type=Path, default=None, help="write the results (failing seeds included) here")
    return p


def _run_seeds(case, base: int, seeds: int, runners: dict) -> tuple[dict, dict, object, bool]:
    """Every path of runners on the case's inputs for seeds base + 13 k: (worst error per seed by path,
    failing seeds by path, the last input's config, interrupted by Ctrl-C)."""
    from bench.runner.case_args import LEADERBOARD_SEED_STEP
    from problem.validation import validate_inputs
    from reference import compare, generate_input, ref_kernel
    from selection.selector import worst_error

    worst = {path: [] for path in runners}
    failing = {path: [] for path in runners}
    config = None
    try:
        for k in range(1, seeds + 1):
            params = {**case.params, "seed": base + LEADERBOARD_SEED_STEP * k}
            data = generate_input(**params)
            validate_inputs(data)
            config = data[-1]
            outputs = {path: run(data) for path, run in runners.items()}
            expected = ref_kernel(data)  # after the submission, as the runner checks
            for path, output in outputs.items():
                ok, message = compare(output, expected)
                worst[path].append(worst_error(output, expected))
                if not ok:
                    failing[path].append(params["seed"])
                    print(f"{case.label} {path} seed {params['seed']}: {message.splitlines()[0]}", flush=True)
            del data, outputs, expected
    except KeyboardInterrupt:
        return worst, failing, config, True
    return worst, failing, config, False


def _row(case, path: str, base: int, worst: list, failing: list, choice: str) -> dict:
    """A case's result on one path: seeds passed, the failing ones, the worst error and its 99th percentile."""
    import torch

    errors = torch.tensor(worst)
    return {
        "case": case.label,
        "shape": case.shape,
        "path": path,
        "seeds": len(worst),
        "seed_base": base,
        "passed": len(worst) - len(failing),
        "failing_seeds": failing,
        "worst": float(errors.max()),
        "p99": float(errors.quantile(0.99)),
        "choice": choice if path == "shipped" else f"{path} (forced)",
    }


def main(argv=None) -> int:
    from bench.runner.preflight import USAGE_STATUS, parse_cases

    p = _parser()
    args, cases = parse_cases(p, argv)
    if cases is None:
        return USAGE_STATUS
    import torch

    from moe_triton.target import interpreting

    if not torch.cuda.is_available() and not interpreting():  # the interpreter runs them on the CPU
        return p.fail(NO_GPU)
    from submission import selection_choice

    runners = {path: _runner(path) for path in args.paths}
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a time limit's SIGTERM reports as Ctrl-C does
    rows, failed, interrupted = [], 0, False
    for case in cases:
        t0 = time.perf_counter()
        base = case.params["seed"] if args.seed_base is None else args.seed_base
        worst, failing, config, interrupted = _run_seeds(case, base, args.seeds, runners)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        choice = (selection_choice(config) if config else None) or "static"
        for path in runners:
            if not worst[path]:
                continue
            row = _row(case, path, base, worst[path], failing[path], choice)
            rows.append(row)
            failed += bool(failing[path])
            print(
                f"{case.label} {case.shape} {path}: {row['passed']}/{row['seeds']} passed, worst error "
                f"{row['worst']:.2f} of the tolerance (p99 {row['p99']:.2f}), choice {row['choice']}, "
                f"{time.perf_counter() - t0:.0f} s" + (" (interrupted)" if interrupted else ""),
                flush=True,
            )
        if interrupted:
            break
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 130 if interrupted else 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
