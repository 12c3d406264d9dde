"""`python -m bench.h200.native_check`: every native kernel variant on leaderboard-style seeds (GPU).

Forced native (fused_moe_triton(native=True)) on an NVIDIA GPU, where Triton emulates tl.dot_scaled
and mxfp4.convert emulates gfx950's fp4 convert: per official shape, the table's tile, every
moe_triton.tiles_amd.NATIVE_ALTERNATES entry and --extra-variants' variants of the table tile
(e.g. bench/h200/native_extra_bs512_triton39.json) on --seeds inputs (generate_input with seed +
13 i, i = 1..N), each output compared with reference.ref_kernel by the leaderboard's check
(reference.compare, as check_implementation does; ref_kernel runs once per input, the kernels never
write into their inputs, which is checked). Before every call the scratch buffers are filled with
garbage and a NaN tensor of the output's size is freed, so that an element the kernels leave
unwritten shows.
Writes native_check.md and native_check.json (per shape and variant: launches, passes, the worst
error as a fraction of the tolerance, seconds) under --out (default $OUT); no shape is started
after --max-seconds. Exit status 1 if any check failed or a shape was not run. A correctness
check: no time here is a speed figure of the native path.
"""

import json
import os
import sys
import time
from pathlib import Path


def poison(n_tokens: int, d_hidden: int, device) -> None:
    """Garbage in every scratch buffer of the pool and in freed memory of the output's size."""
    import torch

    import buffers

    for buf in buffers.pooled():
        if buf.dtype == torch.uint8:
            buf.fill_(0x77)
        elif buf.is_floating_point():
            buf.fill_(float("nan"))
        else:
            buf.fill_(-7)
    torch.full((n_tokens, d_hidden), float("nan"), dtype=torch.bfloat16, device=device)


def variants_of(params: dict, names: list[str] | None, extra: dict | None = None) -> dict:
    """The table's tile, NATIVE_ALTERNATES' entries and `extra` (bench.gfx950.variants), by name; only
    `names` where given."""
    from bench.gfx950.variants import variants

    found = dict(variants(params, "native", extra))
    return {name: tiles for name, tiles in found.items() if names is None or name in names}


def check_case(case, seeds: int, names: list[str] | None, extra: dict | None = None) -> list[dict]:
    import torch

    from bench.runner.case_args import LEADERBOARD_SEED_STEP
    from moe_triton.fused_moe import fused_moe_triton
    from reference import compare, generate_input, ref_kernel
    from selection.selector import worst_error

    variants = variants_of(case.params, names, extra)
    rows = {
        name: dict(
            shape=case.shape,
            case=case.label,
            variant=name,
            launches=tiles.route_launches + 2,
            passed=0,
            seeds=seeds,
            worst=0.0,
            seconds=0.0,
            first_failure="",
        )
        for name, tiles in variants.items()
    }
    for i in range(1, seeds + 1):
        params = {**case.params, "seed": case.params["seed"] + LEADERBOARD_SEED_STEP * i}
        data = generate_input(**params)
        hidden, w1, w2, w1s, w2s, *_, topk_weights, topk_ids, _config = data
        inputs = [t.clone() for t in (hidden, topk_weights, topk_ids)]
        expected = ref_kernel(data)
        for name, tiles in variants.items():
            row = rows[name]
            poison(*hidden.shape, hidden.device)
            t0 = time.perf_counter()
            out = fused_moe_triton(hidden, w1, w2, w1s, w2s, topk_weights, topk_ids, tiles, native=True)
            if out.is_cuda:
                torch.cuda.synchronize()
            row["seconds"] += time.perf_counter() - t0
            ok, message = compare(out, expected)
            unchanged = all(map(torch.equal, inputs, (hidden, topk_weights, topk_ids)))
            ok = ok and unchanged
            row["passed"] += ok
            row["worst"] = max(row["worst"], worst_error(out, expected))
            if not ok and not row["first_failure"]:
                why = message.splitlines()[0] if unchanged else "an input was modified"
                row["first_failure"] = f"seed {params['seed']}: {why}"
    return list(rows.values())


def markdown(rows: list[dict], seconds: float) -> str:
    lines = [
        "# Native variants on leaderboard-style seeds (forced native, emulated dot_scaled and fp4 convert)",
        "",
        f"`python -m bench.h200.native_check`, {seconds:.0f} s. Worst error: max |out - ref| / (atol + rtol |ref|), "
        "1 is the edge of the tolerance. Seconds: the calls only (compiles included), not a speed figure.",
        "",
        "| case | shape | variant | launches | passed | worst error / tolerance | seconds | first failure |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['shape']} | {r['variant']} | {r['launches']} | {r['passed']}/{r['seeds']} | "
            f"{r['worst']:.3f} | {r['seconds']:.1f} | {r['first_failure']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    from bench.runner.preflight import UsageParser, positive_float, positive_int, shown

    p = UsageParser(prog="python -m bench.h200.native_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--shapes", nargs="+", default=["official"], help="case selectors as for python -m bench")
    p.add_argument("--seeds", type=positive_int, default=20, help="inputs per shape (seed + 13 i, i = 1..N)")
    p.add_argument("--variants", nargs="+", default=None, help="only these variant names (table, NATIVE_ALTERNATES')")
    p.add_argument(
        "--extra-variants",
        type=Path,
        help="also these variants of each case's table tile: a JSON file of name -> {field: value}, as for "
        "python -m bench.gfx950 (e.g. bench/h200/native_extra_bs512_triton39.json)",
    )
    p.add_argument("--out", default=None, help="folder for native_check.md / .json (default $OUT)")
    p.add_argument(
        "--max-seconds", type=positive_float, default=420, help="start no further shape after this long (default 420)"
    )
    args = p.parse_args(argv)
    out_dir = args.out or os.environ.get("OUT", "")
    if not out_dir:
        return p.fail("--out: no folder given and OUT is not set")
    from bench.gfx950.variants import config_fields, extra_variants

    try:
        extra = extra_variants(args.extra_variants, config_fields("native")) if args.extra_variants else {}
    except (OSError, ValueError) as exc:
        return p.fail(f"--extra-variants: {exc}")
    import torch

    from moe_triton.target import interpreting

    # An NVIDIA GPU; the CPU interpreter too (small shapes only: it checks this script).
    if not (torch.cuda.is_available() and torch.version.hip is None) and not interpreting():
        return p.fail("needs an NVIDIA GPU (or TRITON_INTERPRET=1 on small shapes)")
    from bench.runner.case_args import UsageError, select_cases

    try:
        cases = select_cases(args.shapes)
    except UsageError as exc:
        return p.fail(f"--shapes: {exc}")
    t0, rows, skipped = time.perf_counter(), [], []
    for case in cases:
        if time.perf_counter() - t0 > args.max_seconds:
            skipped.append(case.label)
            continue
        found = check_case(case, args.seeds, args.variants, extra)
        for r in found:
            verdict = "ok" if r["passed"] == r["seeds"] else "FAIL " + r["first_failure"]
            print(
                f"{r['case']} {r['shape']} {r['variant']}: {r['passed']}/{r['seeds']}, worst {r['worst']:.3f} of the "
                f"tolerance, {r['launches']} launches, {r['seconds']:.1f} s {verdict}",
                flush=True,
            )
        rows += found
    seconds = time.perf_counter() - t0
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(rows, seconds)
    if skipped:
        text += f"\nNot run (past --max-seconds {args.max_seconds:.0f}): {', '.join(skipped)}.\n"
    (out / "native_check.md").write_text(text)
    (out / "native_check.json").write_text(json.dumps({"seconds": seconds, "rows": rows, "skipped": skipped}, indent=1))
    failed = sum(r["passed"] < r["seeds"] for r in rows)
    print(f"{len(rows)} variants, {failed} failed, {seconds:.0f} s: {shown(out / 'native_check.md')}")
    if skipped:
        print(f"not run (past --max-seconds): {' '.join(skipped)}")
    return 1 if failed or skipped else 0


if __name__ == "__main__":
    sys.exit(main())
