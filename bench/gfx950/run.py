"""`python -m bench.gfx950`: the offline gfx950 (MI355X) compile check of the Triton backend, CPU only.

It calls the package's own launcher (moe_triton.fused_moe.fused_moe_triton) on empty CPU tensors of each
case's shapes while a compile-only gfx950 driver is active (bench.gfx950.driver), so every kernel
compiles as the launcher would launch it on an MI355X, and nothing runs. Each case is compiled once
per variant (bench.gfx950.variants: the table's tile and every alternate tile_configs names for the
shape, passed as tiles=). Per launch it prints what the kernel compiled to (bench.gfx950.asm) and
the limits it breaks (bench.gfx950.check); per case and variant the launches of one call and a
static ESTIMATE (bench.gfx950.estimate) beside aiter's MI355X time. Exit status 1 on any broken
limit or failed compile, 2 on bad options. docs/gfx950.md, "The offline check", explains how to
read it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from unittest import mock

from bench.gfx950 import model

PATHS = ("native", "decode")
ROOT = Path(__file__).resolve().parents[2]  # the package's modules and packages sit at the repository root


def compile_inputs(params: dict) -> tuple:
    """The 12-item input tuple (SPEC 2) of a case as empty CPU tensors: the config generate_input
    makes and the shapes and dtypes validation expects of it, no values but the expert ids (all 0),
    which validation reads at a shape's first call."""
    import torch

    from problem.validation import expected_layout
    from reference import make_config

    keys = ("dhidden", "dexpert", "nroutedexperts", "nexpertspertoken", "nsharedexperts", "bs")
    config = make_config(*(params[k] for k in keys))
    *tensors, topk_ids = (torch.empty(shape, dtype=dtypes[0]) for dtypes, shape in expected_layout(config))
    return (*tensors, topk_ids.zero_(), config)


def _own(path: Path) -> bool:
    """A module of the package: under the repository root, in a package of its own (moe_triton/kernels/...)
    or at the top, not in an environment installed there (.venv's site-packages)."""
    return ROOT in path.parents and "site-packages" not in path.parts


def _launcher():
    """fused_moe_triton; refuses kernels built for the interpreter (a kernel module of the package
    imported under TRITON_INTERPRET=1 in this process: main turns it off before anything imports one)."""
    from triton.runtime.interpreter import InterpretedFunction

    from moe_triton import fused_moe as moe_triton

    for module in list(sys.modules.values()):
        source = getattr(module, "__file__", None)
        if source and _own(Path(source).resolve()):
            if any(isinstance(v, InterpretedFunction) for v in vars(module).values()):
                raise RuntimeError(
                    f"{module.__name__} was imported under TRITON_INTERPRET=1: run the check in a fresh process"
                )
    return moe_triton.fused_moe_triton


def launch_case(params: dict, path: str, tiles=None):
    """Compile (never run) every launch of one call of a case, on the given tiles (None: the
    launcher's table); returns (launches, note on the path taken)."""
    from bench.gfx950.driver import compile_only_gfx950
    from problem.validation import validate_inputs

    fused = _launcher()
    data = compile_inputs(params)
    validate_inputs(data)
    hidden, w1, w2, w1_scale, w2_scale, *_, topk_weights, topk_ids, _config = data
    kwargs, note = {} if tiles is None else {"tiles": tiles}, f"{path} path"
    if "native" in inspect.signature(fused).parameters:
        kwargs["native"] = path == "native"
    elif path == "native":
        note = "no native keyword in fused_moe_triton: its only (decode) path"
    previous = os.environ.get("MOE_TRITON_NATIVE")
    os.environ["MOE_TRITON_NATIVE"] = "1" if path == "native" else "0"
    try:
        with compile_only_gfx950() as driver:
            fused(hidden, w1, w2, w1_scale, w2_scale, topk_weights, topk_ids, **kwargs)
    finally:
        if previous is None:
            os.environ.pop("MOE_TRITON_NATIVE", None)
        else:
            os.environ["MOE_TRITON_NATIVE"] = previous
    return driver.launches, note


def rank_variants(params: dict, path: str = "native", **estimate_options) -> list[tuple[str, float]]:
    """(name, ESTIMATE us) of every variant of a case within the check's limits (one that breaks a
    limit is no candidate), lowest first: compiled for gfx950 here, in a process whose kernel
    modules were not imported under TRITON_INTERPRET=1. The selection on the MI355X cannot call it
    there (no compiler for another target at run time); `--ranking FILE` writes its result as data."""
    from bench.gfx950.check import analyse
    from bench.gfx950.estimate import estimate
    from bench.gfx950.variants import variants

    ranked = []
    for name, tiles in variants(params, path):
        launches, _ = launch_case(params, path, tiles)
        analysed = [(analyse(launch.kernel), launch) for launch in launches]
        if not any(rep.violations for rep, _ in analysed):
            ranked.append((name, estimate(params, analysed, **estimate_options).estimate_us))
    return sorted(ranked, key=lambda item: item[1])


def dump_asm(directory: Path, label: str, launch) -> None:
    stem = f"{label}-{launch.function}-{launch.kernel.metadata.hash[:8]}"
    for ext in ("amdgcn", "ttgir"):
        (directory / f"{stem}.{ext}").write_text(launch.kernel.asm[ext])


PROG = "python -m bench.gfx950"


class PathError(ValueError):
    """An output path that cannot be written; its message is the one line the check prints."""


def checked_file(option: str, path: Path) -> Path:
    """An output file that can be written: not a folder, in an existing folder, writable (opened for
    appending, as nothing is written to it before the tables are done; a file made for the test is
    removed again)."""
    if path.is_dir():
        raise PathError(f"{option} {path}: is a folder")
    if not path.parent.is_dir():
        raise PathError(f"{option} {path}: no folder {path.parent}")
    existed = path.exists()
    try:
        path.open("a").close()
    except OSError as exc:
        raise PathError(f"{option} {path}: cannot be written ({exc.strerror or exc})") from None
    if not existed:
        path.unlink()
    return path


class AsmFolder:
    """--asm-dir: the kernels are written into a fresh folder beside it and moved into it only once the
    whole run is done, so that an interrupted or failed run leaves no half-written folder (an existing
    folder keeps what it held, and gains the new files)."""

    def __init__(self, target: Path):
        if target.exists() and not target.is_dir():
            raise PathError(f"--asm-dir {target}: is not a folder")
        if not target.parent.is_dir():
            raise PathError(f"--asm-dir {target}: no folder {target.parent}")
        try:
            self.partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
        except OSError as exc:
            raise PathError(f"--asm-dir {target}: cannot be written ({exc.strerror or exc})") from None
        self.target = target

    def commit(self) -> None:
        if not self.target.exists():
            os.replace(self.partial, self.target)
            return
        for written in sorted(self.partial.iterdir()):
            os.replace(written, self.target / written.name)
        self.partial.rmdir()

    def discard(self) -> None:
        shutil.rmtree(self.partial, ignore_errors=True)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _non_negative(text: str) -> float:
    value = _float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number >= 0")
    return value


def _fraction(text: str) -> float:
    value = _float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction in (0, 1]")
    return value


def model_constant(text: str) -> tuple[str, float]:
    """--constant FIELD=VALUE: a field of bench.gfx950.model.Machine (model.TUNABLE) and a number >= 0."""
    field, sep, value = text.partition("=")
    if not sep or field not in model.TUNABLE:
        raise argparse.ArgumentTypeError(f"{text!r} is not FIELD=VALUE with FIELD one of {', '.join(model.TUNABLE)}")
    number = _non_negative(value)
    if field in ("achievable_fraction", "issue_efficiency") and not 0 < number <= 1:
        raise argparse.ArgumentTypeError(f"{text!r}: {field} is a fraction in (0, 1]")
    return field, number


def ranking_json(title: str, footnote: str, ranking: dict) -> str:
    """--ranking's file, one case a line: its shape, [variant, ESTIMATE us] lowest first for the
    variants within the limits, and the names of those that break one (no candidates)."""
    cases = [
        f"  {json.dumps(label)}: "
        + json.dumps({**entry, "variants": sorted(entry["variants"], key=lambda item: item[1])})
        for label, entry in ranking.items()
    ]
    head = f'{{"title": {json.dumps(title)},\n "estimate": {json.dumps(footnote)},\n "cases": {{\n'
    return head + ",\n".join(cases) + "\n}}\n"


def parse_args(argv):
    from bench.runner.preflight import UsageParser

    p = UsageParser(prog="python -m bench.gfx950", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--cases",
        nargs="+",
        default=["official"],
        help="case selectors as for python -m bench: official (default), tests, benchmarks, smoke, "
        "benchmarks:0,3, or dhidden=...,bs=...",
    )
    p.add_argument(
        "--path",
        choices=PATHS,
        default="native",
        help="the launcher's native gfx950 path (default) or the decode path, which is expected to fail: its "
        "GEMMs are bf16 MFMAs on decoded weights, no scaled MFMAs (exit status 1)",
    )
    p.add_argument(
        "--variants",
        choices=("all", "table"),
        default="all",
        help="all (default): each case on its table tile and on every alternate tile_configs names for "
        "its shape; table: the table tile only",
    )
    p.add_argument(
        "--extra-variants",
        type=Path,
        metavar="JSON",
        help="also compile, per case, these variants of the table's tile: a JSON file of name -> "
        "{field: value} (e.g. bench/gfx950/kernel_variants.json)",
    )
    p.add_argument(
        "--gap-us",
        type=_non_negative,
        default=None,
        help=f"the ESTIMATE's gap per launch, us (default {model.MI355X.gap_s * 1e6:g}: docs/gfx950.md says why)",
    )
    p.add_argument(
        "--hbm-fraction",
        type=_fraction,
        default=None,
        help="the ESTIMATE's achievable fraction of 8 TB/s "
        f"(default {model.MI355X.achievable_fraction:g}: docs/gfx950.md says why)",
    )
    p.add_argument(
        "--constant",
        type=model_constant,
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="replace one of the MI355X's model constants (SI units: seconds, bytes, cycles), e.g. "
        "issue_latency=2.35; repeatable (docs/gfx950.md gives each one's range)",
    )
    p.add_argument(
        "--launches",
        choices=("failed", "all"),
        default="failed",
        help="the console's per-launch table: failed (default), the launches that break the limits; all: every "
        "launch (the Markdown of --md always has them all)",
    )
    p.add_argument("--md", type=Path, help="also write the tables as Markdown to this file")
    p.add_argument(
        "--ranking", type=Path, help="also write each case's variants ranked by the ESTIMATE as JSON to this file"
    )
    p.add_argument("--asm-dir", type=Path, help="write each compiled kernel's AMDGCN and TTGIR here")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        for option in ("md", "ranking"):
            if getattr(args, option):
                checked_file(f"--{option}", getattr(args, option))
        asm_folder = AsmFolder(args.asm_dir) if args.asm_dir else None
    except PathError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    try:
        # Off before the kernels' modules are imported (they decorate at import), and back as it was
        # after: a caller in this process (the tests) keeps its own.
        with mock.patch.dict(os.environ, {"TRITON_INTERPRET": "0"}):
            status = _check(args, asm_folder)
    except KeyboardInterrupt:
        if asm_folder:
            asm_folder.discard()
        print(f"{PROG}: interrupted (Ctrl-C), nothing written", file=sys.stderr)
        return 130
    except BaseException:
        if asm_folder:
            asm_folder.discard()
        raise
    if asm_folder and status == 2:  # bad options: nothing compiled
        asm_folder.discard()
    elif asm_folder:
        asm_folder.commit()
    return status


def _check(args, asm_folder: AsmFolder | None) -> int:
    """The check itself (main has checked the output paths): its exit status, 2 on bad options."""
    import triton

    from bench.gfx950 import report
    from bench.gfx950.check import analyse
    from bench.gfx950.estimate import assumptions, estimate
    from bench.gfx950.variants import config_fields, extra_variants, variants
    from bench.runner.case_args import UsageError, case_shape, select_cases
    from bench.runner.report import aiter_times

    try:
        cases = select_cases(args.cases)
    except UsageError as exc:
        print(f"{PROG}: error: --cases: {exc}", file=sys.stderr)
        return 2
    try:
        extra = extra_variants(args.extra_variants, config_fields(args.path)) if args.extra_variants else {}
    except (OSError, ValueError) as exc:
        print(f"{PROG}: error: --extra-variants: {exc}", file=sys.stderr)
        return 2
    try:
        plans = [(case, variants(case.params, args.path, extra)) for case in cases]
    except ValueError as exc:  # two variants of a case under one name
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    aiter = aiter_times()
    machine = model.MI355X.with_options(args.gap_us, args.hbm_fraction, **dict(args.constant))
    kernel_rows, case_rows, ranking, failed = [], [], {}, False
    for case, tiles in plans:
        for name, cfg in tiles[:1] if args.variants == "table" else tiles:
            try:
                launches, note = launch_case(case.params, args.path, cfg)
            except Exception as exc:  # a kernel that does not compile for gfx950 is a finding, not a crash
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                case_rows.append(report.failed_case_row(case, f"{type(exc).__name__}: {first}", name))
                failed = True
                continue
            analysed = [(analyse(launch.kernel), launch) for launch in launches]
            est = estimate(case.params, analysed, machine=machine)
            for (rep, launch), part in zip(analysed, est.per_launch, strict=True):
                kernel_rows.append(report.kernel_row(case, rep, launch, name, part))
                if asm_folder:
                    dump_asm(asm_folder.partial, f"{case.label}-{name}", launch)
            broken = any(rep.violations for rep, _ in analysed)
            failed |= broken
            case_rows.append(report.case_row(case, note, est, aiter.get(case.shape_key()), name, broken))
            shape = case_shape(case.params)._asdict()
            entry = ranking.setdefault(case.label, {"shape": shape, "variants": [], "broken": []})
            if broken:
                entry["broken"].append(name)
            else:
                entry["variants"].append([name, round(est.estimate_us, 2)])
    title = f"gfx950 compile check, triton {triton.__version__}, --path {args.path}"
    footnote = assumptions(machine=machine)
    report.print_tables(title, kernel_rows, case_rows, footnote, launches=args.launches)
    if args.md:
        args.md.write_text(report.markdown(title, kernel_rows, case_rows, footnote))
    if args.ranking:
        args.ranking.write_text(ranking_json(title, footnote, ranking))
    broken = sum(bool(r["violations"]) for r in kernel_rows)
    errors = sum(bool(r.get("error")) for r in case_rows)
    compiled = len(case_rows) - errors
    if failed:
        print(f"FAIL: {broken} of {len(kernel_rows)} launches break the limits, {errors} variants failed to compile")
    else:
        print(f"PASS: {len(kernel_rows)} launches of {compiled} variants over {len(cases)} cases within the limits")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
