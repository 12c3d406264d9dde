"""Write the package as ONE submission file for the leaderboard: `python bundle.py [-o PATH]`.

How the file works, and what it refuses: docs/bundle.md.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import itertools
import re
import subprocess
import sys
import textwrap
from pathlib import Path

DIRECTIVES = ("#!POPCORN leaderboard amd-moe-mxfp4", "#!POPCORN gpu MI355X")
ALLOWED_PACKAGES = frozenset({"torch", "triton", "numpy", "pandas", "aiter", "task"})
NOT_MODULES = frozenset({"bundle", "setup", "conftest", "task"})  # task: beside the submission on the server
NOT_PACKAGES = frozenset({"bench", "tests"})  # the package's tools and tests, never bundled
# Beside the submission on the leaderboard (eval.py imports them) or imported by `python -m bench` after
# the submission's folder: an output named like one of these (or a module the bundle imports) replaces it.
RUNNER_MODULES = frozenset({"eval", "utils", "reference", "task", "rich", "matplotlib", "hypothesis", "pytest"})
BUNDLES_DIR = "bundles"  # in the cache's moe-mxfp4 folder, beside the selection's choices.json
PACKAGE_PREFIX = "moe_mxfp4_"
DYNAMIC = ("import_module", "__import__")  # calls that import a module named by a string


class BundleError(Exception):
    """A package that cannot be bundled (exit status 1)."""


class UsageError(BundleError):
    """A bad option (exit status 2, as the runner's usage errors), not a package that cannot bundle."""


def project_modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for the root's modules and packages (a package's is its __init__.py)."""
    out = {p.stem: p for p in sorted(root.glob("*.py")) if p.stem.isidentifier() and p.stem not in NOT_MODULES}
    todo = [(d, d.name) for d in sorted(root.iterdir()) if d.is_dir() and d.name not in NOT_PACKAGES]
    while todo:
        folder, name = todo.pop(0)
        if all(part.isidentifier() for part in name.split(".")) and (folder / "__init__.py").is_file():
            out[name] = folder / "__init__.py"
            out |= {f"{name}.{p.stem}": p for p in sorted(folder.glob("*.py")) if p.stem.isidentifier()}
            todo += [(d, f"{name}.{d.name}") for d in sorted(folder.iterdir()) if d.is_dir()]
    return out


def imports(name: str, tree: ast.Module, modules: dict[str, Path], where: str) -> tuple[set[str], set[str]]:
    """(project modules, their parent packages too; other top-level modules) that a module's imports name."""
    tops = {m.split(".")[0] for m in modules}
    package = name if modules[name].name == "__init__.py" else name.rpartition(".")[0]
    named, found, others = [], set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            named += [(a.name, node) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                if node.level > len(parts):
                    raise BundleError(f"{where}:{node.lineno}: relative import beyond the top-level package")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            named += [(base, node)] + [(f"{base}.{a.name}", node) for a in node.names if f"{base}.{a.name}" in modules]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", None)) in DYNAMIC:
            target = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
            if isinstance(target, str) and target.split(".")[0] in tops:
                raise BundleError(f"{where}:{node.lineno}: dynamic import of project module {target!r}")
    for module, node in named:
        parts = module.split(".")
        parents = [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
        if parts[0] not in tops:
            others.add(parts[0])
        elif missing := [m for m in parents if m not in modules]:
            raise BundleError(f"{where}:{node.lineno}: no project module {missing[0]}")
        else:
            found.update(parents)
    return found, others


def _import_line(alias: ast.alias, package: str, tops: set[str]) -> str:
    """One name of an `import` statement, a project module's moved under `package`, binding the same name."""
    if alias.name.split(".")[0] not in tops:
        return f"import {alias.name}" + (f" as {alias.asname}" if alias.asname else "")
    if alias.asname or "." not in alias.name:
        return f"import {package}.{alias.name} as {alias.asname or alias.name}"
    top = alias.name.split(".")[0]
    return f"{top} = __import__({package + '.' + alias.name!r}).{top}"


def prefixed(source: str, tree: ast.Module, package: str, tops: set[str]) -> str:
    """The source with every absolute import of a project module moved under `package`, line numbers kept."""
    data = source.encode()
    starts = [0, *itertools.accumulate(len(line) for line in data.splitlines(keepends=True))]
    edits = []
    for node in ast.walk(tree):
        begin = starts[getattr(node, "lineno", 1) - 1] + getattr(node, "col_offset", 0)
        if isinstance(node, ast.ImportFrom) and not node.level and node.module.split(".")[0] in tops:
            at = re.compile(rb"from(?:\s|\\\r?\n)+").match(data, begin).end()
            edits.append((at, at, f"{package}."))
        elif isinstance(node, ast.Import) and any(a.name.split(".")[0] in tops for a in node.names):
            text = "; ".join(_import_line(a, package, tops) for a in node.names)
            end = starts[node.end_lineno - 1] + node.end_col_offset
            edits.append((begin, end, text + " \\\n" * (node.end_lineno - node.lineno)))
    for begin, end, text in sorted(edits, reverse=True):
        data = data[:begin] + text.encode() + data[end:]
    return data.decode()


def load(package: str, sources: dict[str, str], entry: str):
    """The bundle's loader (copied into it): sources written, folder on sys.path, entry's code returned."""
    import importlib
    import os
    import sys
    import tempfile

    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    bases = [os.path.join(cache, "moe-mxfp4", "bundles")]
    bases.append(os.path.join(tempfile.gettempdir(), f"moe-mxfp4-{os.getuid()}", "bundles"))
    for base in bases:
        try:
            for name, text in sources.items():
                path = os.path.join(base, package, *name.split("/"))
                if os.path.isfile(path):
                    with open(path, encoding="utf-8", newline="") as f:
                        if f.read() == text:
                            continue
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(f"{path}.{os.getpid()}.tmp", "w", encoding="utf-8", newline="") as f:
                    f.write(text)
                os.replace(f.name, path)
            break
        except OSError as exc:
            error = f"{exc.strerror or exc} ({exc.filename})"
    else:
        raise ImportError(f"moe-mxfp4 bundle: cannot write its modules under {' or '.join(bases)}: {error}")
    if base not in sys.path:
        sys.path.append(base)
    importlib.invalidate_caches()
    return compile(sources[entry], os.path.join(base, package, entry), "exec", dont_inherit=True)


def bundle(root: str | Path = ".", entry: str = "submission", directives=True, backend: str | None = None) -> str:
    """The bundled source of `entry` (default submission.py, a module at the root) in `root`; with
    `backend`, the bundle sets MOE_BACKEND to it unless the environment already does."""
    root = Path(root).resolve()
    if backend is not None and backend not in backends(root):
        raise UsageError(f"--backend: unknown backend {backend!r}; choose one of {', '.join(backends(root))}")
    modules = project_modules(root)
    if "." in entry or entry not in modules:
        raise UsageError(f"--root {root}: no {entry}.py there (the entry module)")
    files = {name: path.relative_to(root).as_posix() for name, path in modules.items()}
    trees, others, todo = {}, set(), [entry]
    while todo:
        name = todo.pop()
        trees[name] = _parse(modules[name].read_text(), files[name])
        found, used = imports(name, trees[name], modules, files[name])
        others |= {f"{files[name]} imports {m}" for m in used - set(sys.stdlib_module_names) - ALLOWED_PACKAGES}
        todo += sorted(found - trees.keys() - set(todo))
    if others:
        raise BundleError(f"{'; '.join(sorted(others))}: not on the leaderboard's machine (docs/bundle.md)")
    originals = {files[n]: modules[n].read_text() for n in sorted(trees)}
    shaping = inspect.getsource(prefixed) + inspect.getsource(_import_line)  # how the written files derive
    digest = hashlib.sha256(repr((entry, sorted(originals.items()), shaping)).encode()).hexdigest()[:16]
    package, tops = PACKAGE_PREFIX + digest, {m.split(".")[0] for m in modules}
    sources = {"__init__.py": f'"""moe-mxfp4\'s modules, written by its bundle {digest}."""\n'}
    for name in sorted(trees):
        sources[files[name]] = prefixed(originals[files[name]], trees[name], package, tops)
        _parse(sources[files[name]], f"{files[name]} (its imports moved)")
    try:  # the commit, where root is a git checkout
        r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True)
        git = f" (git {r.stdout.strip()})" if r.returncode == 0 and r.stdout.strip() else ""
    except OSError:
        git = ""
    lines = [*DIRECTIVES] if directives else []
    about = (
        f"ONE-FILE BUNDLE of moe-mxfp4{git}, written by bundle.py: edit the package. On "
        f"import it writes these modules to the cache's moe-mxfp4/{BUNDLES_DIR}/{package}/ and runs {entry}.py's "
        f"code here (docs/bundle.md): {', '.join(sorted(trees))}."
    )
    lines += [f"# {line}" for line in textwrap.wrap(about, 98, break_on_hyphens=False)]
    if backend:  # set before any bundled code reads MOE_BACKEND; the environment still wins
        lines += ["import os", "", f"os.environ.setdefault('MOE_BACKEND', {backend!r})"]
    body = trees[entry].body
    names = [n.name for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    names += [t.id for n in body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]
    lines += ["", f"__all__ = {sorted(n for n in set(names) if not n.startswith('_'))!r}  # {entry}.py's names"]
    lines += [f"_BUNDLE_PACKAGE = {package!r}", "_BUNDLE_SOURCES = {"]
    for name, text in sources.items():
        lines += [f"    {name!r}: ("] + [f"        {part!r}" for part in text.splitlines(True) or [""]] + ["    ),"]
    lines += ["}", "", "", inspect.getsource(load).replace("def load(", "def _bundle_load(", 1), ""]
    lines += [f"_bundle_code = _bundle_load(_BUNDLE_PACKAGE, _BUNDLE_SOURCES, {entry + '.py'!r})"]
    lines += ["del _bundle_load, _BUNDLE_SOURCES", "exec(_bundle_code, globals())"]
    text = "\n".join(lines) + "\n"
    validate(text, directives)
    return text


def _parse(text: str, where: str) -> ast.Module:
    try:
        return ast.parse(text, filename=where)
    except SyntaxError as exc:
        raise BundleError(f"{where}:{exc.lineno}: {exc.msg}") from None


def validate(text: str, directives: bool = True) -> None:
    """The bundle compiles, imports only stdlib and ALLOWED_PACKAGES and, with `directives`, starts with DIRECTIVES."""
    allowed = set(sys.stdlib_module_names) | ALLOWED_PACKAGES
    for node in ast.walk(_parse(text, "the bundle")):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        names += ["." * node.level + (node.module or "")] if isinstance(node, ast.ImportFrom) else []
        if bad := [m for m in names if m.split(".")[0] not in allowed]:
            raise BundleError(f"the bundle imports {bad[0]} (line {node.lineno}), which the leaderboard lacks")
    if directives and text.splitlines()[: len(DIRECTIVES)] != list(DIRECTIVES):
        raise BundleError(f"the bundle does not start with {' and '.join(DIRECTIVES)}")


def shadowed_modules(root: str | Path = ".") -> frozenset[str]:
    """The module names an output file must not take; submission, the default, it may replace."""
    project = {name.split(".")[0] for name in project_modules(Path(root))}
    return frozenset((set(sys.stdlib_module_names) | ALLOWED_PACKAGES | RUNNER_MODULES | project) - {"submission"})


def check_paths(out: Path, root: Path) -> None:
    """The usage errors of -o and --root, before anything is bundled."""
    existing = next(folder for folder in out.parents if folder.exists())
    if out.is_dir():
        raise UsageError(f"-o {out}: a folder; give the file to write, e.g. -o {out / 'submission.py'}")
    if not existing.is_dir():
        raise UsageError(f"-o {out}: {existing} is a file, not a folder")
    if not root.is_dir():
        raise UsageError(f"--root {root}: {'not a folder' if root.exists() else 'no such folder'}")
    if out.suffix == ".py" and out.stem in shadowed_modules(root):
        raise UsageError(
            f"-o {out}: a file named {out.name} would be imported instead of the module {out.stem} "
            f"(the bundle's folder comes first on sys.path); name it e.g. {out.with_name(f'submission_{out.stem}.py')}"
        )


def backends(root: str | Path = ".") -> tuple[str, ...]:
    """The backend names of the package's submission.py (its BACKENDS tuple), read without importing it."""
    path = Path(root) / "submission.py"
    if not path.is_file():
        raise UsageError(f"--root {root}: no submission.py there (its BACKENDS tuple names the backends)")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "BACKENDS" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise BundleError("submission.py: no BACKENDS tuple")


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    from bench.runner.preflight import UsageParser, shown

    submit = "popcorn-cli submit --gpu MI355X --leaderboard amd-moe-mxfp4 --mode leaderboard dist/submission.py"
    p = UsageParser(prog="bundle.py", description=__doc__.split("\n\n")[0], epilog=f"Submit: {submit}")
    p.add_argument("-o", "--output", default=str(here / "dist" / "submission.py"), help="default: dist/submission.py")
    p.add_argument("--root", default=str(here), help="package root (default: this file's folder)")
    p.add_argument("--backend", help="pin the bundle's backend (MOE_BACKEND, e.g. triton) to time it on its own")
    args = p.parse_args(argv)
    out, root = Path(args.output), Path(args.root)
    try:
        check_paths(out, root)
        text = bundle(root, backend=args.backend)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
        except OSError as exc:
            raise UsageError(f"-o {out}: cannot write it ({exc.strerror or exc})") from None
    except BundleError as exc:
        print(f"bundle.py: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1
    print(f"wrote {shown(out)} ({len(text.splitlines())} lines, {len(text.encode()) / 1024:.1f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
