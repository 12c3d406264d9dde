"""Write the package as ONE submission file for the leaderboard: `python bundle.py [-o PATH]`.

The project's modules are the .py files at the repository root (task.py excepted: the runner
provides it, so `from task import ...` stays) and those of its packages (folders with an
__init__.py, bench/ and tests/ excepted), named as Python names them (`moe_triton.fused_moe`). A
package's __init__.py holds its docstring only, so that inlining a module never needs it. Starting
from submission.py, every project module reachable through any import statement (top level or
inside functions) is inlined once, in the order Python would first execute it:
  * an eager import (module level) inlines its module right before the statement that needs it;
  * modules only imported lazily (inside functions) are inlined after the entry module's own
    top-level code and before its `if __name__ == "__main__":` block;
and the import statements themselves are removed (`from m import a as b` becomes `b = a`; inside
a function, `pass`). The output starts with the two `#!POPCORN` directives, imports only the
standard library, torch, triton, numpy, pandas, aiter and task, and compiles.

A bad option is a usage error, one line and exit status 2: an unknown --backend, a --root that is
no package folder, an -o that is a folder or cannot be written, or whose file name would shadow a
module the bundle or the runner imports (dist/triton.py would be imported as triton: name it e.g.
dist/submission_triton.py). It fails loudly (exit status 1, nothing
written) on: `import module` or `from module import *` of a project module, `from package import
module`, a package __init__.py with code in it, relative imports,
dynamic imports of a project module, a circular module-level import, a name imported from a project
module that does not define it, an import sharing its line with another statement, a disallowed
import, and a top-level name defined differently in two modules (identical functions, classes,
constants and imports may repeat; module state such as `_cache = {}` or any value built by a call
may not).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

DIRECTIVES = ("#!POPCORN leaderboard amd-moe-mxfp4", "#!POPCORN gpu MI355X")
ALLOWED_PACKAGES = frozenset({"torch", "triton", "numpy", "pandas", "aiter", "task"})
PROVIDED_MODULES = frozenset({"task"})  # beside the submission on the server; never inlined
NOT_MODULES = frozenset({"bundle", "setup", "conftest"})
NOT_PACKAGES = frozenset({"bench", "tests"})  # the package's tools and tests, never bundled
# Files beside the submission on the leaderboard (the runner's eval.py imports utils, reference and
# task), and the libraries `python -m bench` imports after putting a submission file's folder first
# on sys.path: an output named like one of these, or like a module the bundle imports (the standard
# library, ALLOWED_PACKAGES) or a project module, would be imported in its place.
RUNNER_MODULES = frozenset({"eval", "utils", "reference", "task", "rich", "matplotlib", "hypothesis", "pytest"})


class BundleError(Exception):
    pass


class UsageError(BundleError):
    """A bad option (exit status 2, as the runner's usage errors), not a package that cannot bundle."""


@dataclass
class Site:
    """One import statement of a project module."""

    node: ast.ImportFrom
    target: str
    names: list[tuple[str, str | None]]
    scope: str  # "module" (directly in the module body), "compound" (in a module-level if/try/...),
    # "class" or "function"
    top_index: int  # index of the enclosing top-level statement

    @property
    def eager(self) -> bool:
        return self.scope != "function"


@dataclass
class Module:
    name: str
    path: Path
    source: str
    tree: ast.Module
    lines: list[str] = field(default_factory=list)
    sites: list[Site] = field(default_factory=list)
    label: str = ""  # its path from the package root, as messages and the bundle's headers name it


def project_packages(root: Path) -> dict[str, Path]:
    """Dotted package name -> its __init__.py, for every package folder under root (nested ones
    only inside a package) but the tools' and tests'."""
    out = {}
    todo = [(d, d.name) for d in sorted(root.iterdir()) if d.name not in NOT_PACKAGES]
    while todo:
        folder, name = todo.pop(0)
        init = folder / "__init__.py"
        if folder.is_dir() and folder.name.isidentifier() and init.is_file():
            out[name] = init
            todo += [(d, f"{name}.{d.name}") for d in sorted(folder.iterdir())]
    return out


def project_modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for the root's modules and every package's."""
    out = {}
    for p in sorted(root.glob("*.py")):
        if p.stem not in NOT_MODULES and p.stem not in PROVIDED_MODULES and p.stem.isidentifier():
            out[p.stem] = p
    for package, init in project_packages(root).items():
        for p in sorted(init.parent.glob("*.py")):
            if p.name != "__init__.py" and p.stem.isidentifier():
                out[f"{package}.{p.stem}"] = p
    return out


def check_package_inits(root: Path) -> None:
    """A package's __init__.py holds a docstring only: the bundle inlines modules, never runs it."""
    for package, init in project_packages(root).items():
        body = ast.parse(init.read_text(), filename=str(init)).body
        if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
            body = body[1:]
        if body:
            raise BundleError(
                f"{init.relative_to(root)}:{body[0].lineno}: a package's __init__.py may hold its docstring only "
                f"(the bundle inlines {package}'s modules and never runs it)"
            )


def _where(mod: Module, node: ast.AST) -> str:
    return f"{mod.label}:{getattr(node, 'lineno', '?')}"


def _top_is_project(name: str, project: set[str]) -> bool:
    """Whether a dotted name is, or lies in, one of the project's modules or packages."""
    top = name.split(".")[0]
    return any(m == top or m.startswith(top + ".") for m in project)


def _scan_sites(mod: Module, project: set[str]) -> None:
    """Find every import of a project module, rejecting the forms the bundle cannot inline."""

    def visit(node: ast.AST, scope: str, top_index: int) -> None:
        for child in ast.iter_child_nodes(node):
            child_scope = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                child_scope = "function"
            elif isinstance(child, ast.ClassDef) and scope != "function":
                child_scope = "class"
            elif scope == "module" and isinstance(child, ast.stmt):
                child_scope = "compound"
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if _top_is_project(alias.name, project):
                        raise BundleError(
                            f"{_where(mod, child)}: `import {alias.name}`: project modules must be "
                            f"imported as `from module import name`"
                        )
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    raise BundleError(f"{_where(mod, child)}: relative import; name the module in full")
                top = child.module or ""
                if top not in project and _top_is_project(top, project):
                    raise BundleError(
                        f"{_where(mod, child)}: `from {top} import ...`: {top} is a package or no project "
                        f"module; import the names from the module that defines them (`from {top}.module import name`)"
                    )
                if top in project:
                    if any(a.name == "*" for a in child.names):
                        raise BundleError(f"{_where(mod, child)}: `from {top} import *` cannot be bundled")
                    if scope == "compound" and _in_try(mod.tree.body[top_index], child):
                        raise BundleError(
                            f"{_where(mod, child)}: a module-level import of a project module inside "
                            f"try/except cannot be bundled (the inlined module would run outside the "
                            f"try); import it inside the function that needs it"
                        )
                    mod.sites.append(Site(child, top, [(a.name, a.asname) for a in child.names], scope, top_index))
            elif isinstance(child, ast.Call):
                _reject_dynamic_import(mod, child, project)
            visit(child, child_scope, top_index)

    for i, stmt in enumerate(mod.tree.body):
        if isinstance(stmt, ast.ImportFrom) and not stmt.level and (stmt.module or "") in project:
            top = stmt.module
            if any(a.name == "*" for a in stmt.names):
                raise BundleError(f"{_where(mod, stmt)}: `from {top} import *` cannot be bundled")
            mod.sites.append(Site(stmt, top, [(a.name, a.asname) for a in stmt.names], "module", i))
            continue
        wrapper = ast.Module(body=[stmt], type_ignores=[])
        visit(wrapper, "module", i)


def _in_try(top: ast.stmt, node: ast.AST) -> bool:
    """Is `node` inside a try statement within the module-level statement `top` (functions excluded)?"""

    def find(n: ast.AST, in_try: bool) -> bool:
        for c in ast.iter_child_nodes(n):
            if c is node:
                return in_try
            if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if find(c, in_try or isinstance(c, ast.Try) or type(c).__name__ == "TryStar"):
                return True
        return False

    return find(ast.Module(body=[top], type_ignores=[]), False)


def _reject_dynamic_import(mod: Module, call: ast.Call, project: set[str]) -> None:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name in ("import_module", "__import__") and call.args:
        arg = call.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.split(".")[0] in project:
            raise BundleError(f"{_where(mod, call)}: dynamic import of project module {arg.value!r}")


def _is_main_guard(stmt: ast.stmt) -> bool:
    if not isinstance(stmt, ast.If) or not isinstance(stmt.test, ast.Compare):
        return False
    t = stmt.test
    if len(t.ops) != 1 or not isinstance(t.ops[0], ast.Eq):
        return False
    sides = [t.left, t.comparators[0]]
    has_name = any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
    has_main = any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)
    return has_name and has_main


def _is_future(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"


def _is_dunder_all(stmt: ast.stmt) -> bool:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [getattr(stmt, "target", None)]
    return isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and any(
        isinstance(t, ast.Name) and t.id == "__all__" for t in targets
    )


# ------------------------------------------------------------------ definitions and clashes


def _has_state(value: ast.AST | None) -> bool:
    """True for values that make module state: containers, comprehensions, or anything built by a call."""
    if value is None:
        return False
    for n in ast.walk(value):
        if isinstance(
            n, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp, ast.Call, ast.GeneratorExp)
        ):
            return True
    return False


def _target_names(t: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(t) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]


def _definitions(mod: Module, project: set[str]) -> dict[str, list[tuple]]:
    """Top-level name -> how the module defines it (one entry per defining statement)."""
    defs: dict[str, list[tuple]] = {}

    def add(name: str, how: tuple) -> None:
        defs.setdefault(name, []).append(how)

    def walk(stmts: list[ast.stmt]) -> None:
        for s in stmts:
            if _is_main_guard(s) or _is_future(s) or _is_dunder_all(s):
                continue
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                add(s.name, ("def", ast.dump(s)))
                for n in ast.walk(s):
                    if isinstance(n, ast.Global):
                        for g in n.names:
                            add(g, ("global", mod.name))
            elif isinstance(s, ast.Import):
                for a in s.names:
                    if a.asname:
                        add(a.asname, ("import", a.name))
                    else:
                        add(a.name.split(".")[0], ("import", a.name.split(".")[0]))
            elif isinstance(s, ast.ImportFrom):
                for a in s.names:
                    if s.module in project:
                        if a.asname and a.asname != a.name:
                            add(a.asname, ("alias", s.module, a.name))
                    else:
                        add(a.asname or a.name, ("import", f"{s.module}.{a.name}"))
            elif isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = s.targets if isinstance(s, ast.Assign) else [s.target]
                value = s.value
                how = (
                    ("state", mod.name, s.lineno)
                    if _has_state(value) or isinstance(s, ast.AugAssign)
                    else ("value", ast.dump(s))
                )
                for t in targets:
                    for name in _target_names(t):
                        add(name, how)
            elif isinstance(s, (ast.For, ast.AsyncFor, ast.With, ast.AsyncWith)):
                tgt = (
                    [s.target]
                    if isinstance(s, (ast.For, ast.AsyncFor))
                    else [i.optional_vars for i in s.items if i.optional_vars is not None]
                )
                for t in tgt:
                    for name in _target_names(t):
                        add(name, ("state", mod.name, s.lineno))
                walk(s.body)
                walk(getattr(s, "orelse", []))
            elif isinstance(s, ast.If):
                walk(s.body)
                walk(s.orelse)
            elif isinstance(s, ast.Try) or type(s).__name__ == "TryStar":
                walk(s.body)
                for h in s.handlers:
                    if h.name:
                        add(h.name, ("state", mod.name, h.lineno))
                    walk(h.body)
                walk(s.orelse)
                walk(s.finalbody)
            elif isinstance(s, ast.While):
                walk(s.body)
                walk(s.orelse)

    walk(mod.tree.body)
    return defs


def _resolve_alias(how: tuple, all_defs: dict[str, dict], seen: int = 0) -> tuple:
    """('alias', module, name) -> the definition it names, following alias chains."""
    while how[0] == "alias" and seen < 50:
        _, module, name = how
        target = all_defs.get(module, {}).get(name)
        if not target:
            return ("defined-in", module, name)
        if len(target) != 1:
            return ("defined-in", module, name)
        how = target[0]
        seen += 1
    return how


def check_clashes(mods: list[Module], project: set[str]) -> None:
    all_defs = {m.name: _definitions(m, project) for m in mods}
    owner: dict[str, tuple[str, tuple]] = {}
    problems = []
    for m in mods:
        for name, hows in all_defs[m.name].items():
            canon = tuple(_resolve_alias(h, all_defs) for h in hows)
            if name in owner:
                other, other_canon = owner[name]
                same = canon == other_canon
                if same and any(h[0] in ("state", "global") for h in canon):
                    same = False
                if not same:
                    problems.append(f"`{name}` is defined in both {other} and {m.label}, differently")
            else:
                owner[name] = (m.label, canon)
    # Names imported from a project module must be defined there.
    for m in mods:
        for site in m.sites:
            defined = all_defs.get(site.target, {})
            for name, _ in site.names:
                if name not in defined and not _imported_plainly(mods, site.target, name):
                    problems.append(
                        f"{_where(m, site.node)}: `{name}` is not defined at the top level of {site.target}"
                    )
    if problems:
        raise BundleError("top-level names clash:\n  " + "\n  ".join(problems))


def _imported_plainly(mods: list[Module], module: str, name: str) -> bool:
    """`from other import name` at the top of `module` (a re-export) also defines it."""
    mod = next((m for m in mods if m.name == module), None)
    return bool(mod) and any(s.scope != "function" and any(n == name and not a for n, a in s.names) for s in mod.sites)


# ------------------------------------------------------------------ emission


def _replacement(mod: Module, site: Site) -> list[str]:
    node = site.node
    first = mod.lines[node.lineno - 1]
    last = mod.lines[node.end_lineno - 1]
    indent = first[: node.col_offset]
    if indent.strip() or last[node.end_col_offset :].strip()[:1] not in ("", "#"):
        raise BundleError(f"{_where(mod, node)}: put this import on a line of its own")
    names = ", ".join(n + (f" as {a}" if a else "") for n, a in site.names)
    note = f"# bundled: from {site.target} import {names}"
    aliases = [(n, a) for n, a in site.names if a and a != n]
    if site.scope == "class":
        return [f"{indent}{a or n} = {n}  {note}" for n, a in site.names]
    if aliases:
        return [f"{indent}{a} = {n}  {note}" for n, a in aliases]
    if site.scope == "module":
        return [f"{indent}{note}"]
    return [f"{indent}pass  {note}"]


class Bundler:
    def __init__(self, root: Path, entry: str = "submission"):
        self.root = root
        self.entry = entry
        self.paths = project_modules(root)
        if entry not in self.paths:
            raise UsageError(
                f"--root {root}: no {entry.replace('.', '/')}.py there (the entry module, --entry {entry})"
            )
        check_package_inits(root)
        self.project = set(self.paths)
        self.mods: dict[str, Module] = {}
        self._load(entry)
        self.order: list[str] = []
        self.out: list[str] = []
        self.futures: list[str] = []

    def _load(self, name: str) -> None:
        todo = [name]
        while todo:
            n = todo.pop(0)
            if n in self.mods:
                continue
            path = self.paths[n]
            source = path.read_text()
            try:
                tree = ast.parse(source, filename=str(path))
            except SyntaxError as exc:
                raise BundleError(f"{path.relative_to(self.root)}: {exc}") from None
            mod = Module(n, path, source, tree, source.splitlines(), label=str(path.relative_to(self.root)))
            _scan_sites(mod, self.project)
            self.mods[n] = mod
            todo += [s.target for s in mod.sites if s.target not in self.mods]

    def reachable(self) -> list[str]:
        seen, todo = [], [self.entry]
        while todo:
            n = todo.pop(0)
            if n in seen:
                continue
            seen.append(n)
            todo += [s.target for s in self.mods[n].sites]
        return seen

    def _emit_module(self, name: str, stack: list[str]) -> None:
        if name in self.order:
            return
        if name in stack:
            cycle = " -> ".join(stack[stack.index(name) :] + [name])
            raise BundleError(f"circular module-level import: {cycle}")
        stack.append(name)
        mod = self.mods[name]
        is_entry = name == self.entry
        repl: dict[int, list[str]] = {}
        skip: set[int] = set()
        for site in mod.sites:
            lines = _replacement(mod, site)
            repl[site.node.lineno] = lines
            skip.update(range(site.node.lineno + 1, site.node.end_lineno + 1))
        body = mod.tree.body
        chunk: list[str] = [f"# {'=' * 20} {mod.label} {'=' * max(4, 60 - len(mod.label))}"]

        def take(a: int, b: int) -> None:  # 1-based inclusive line range of the module
            for ln in range(a, b + 1):
                if ln in skip:
                    continue
                if ln in repl:
                    chunk.extend(repl[ln])
                    continue
                text = mod.lines[ln - 1]
                if text.startswith("#!POPCORN"):
                    continue
                chunk.append(text)

        def flush() -> None:
            if chunk:
                self.out.extend(chunk)
                chunk.clear()

        prev_end = 0
        for i, stmt in enumerate(body):
            start = prev_end + 1
            end = stmt.end_lineno
            if _is_future(stmt):
                self.futures.append(ast.get_source_segment(mod.source, stmt) or "")
                take(start, stmt.lineno - 1)
                prev_end = end
                continue
            if _is_dunder_all(stmt):
                take(start, stmt.lineno - 1)
                prev_end = end
                continue
            if _is_main_guard(stmt):
                if is_entry:
                    # Every module still to come (imported only lazily) goes before the script part.
                    flush()
                    for other in self.reachable():
                        if other not in self.order and other not in stack:
                            self._emit_module(other, stack)
                    chunk.append(f"# {'=' * 20} {mod.label} (script) {'=' * 40}")
                    take(start, end)
                else:
                    take(start, stmt.lineno - 1)
                    chunk.append(f'# (bundled: the `if __name__ == "__main__":` block of {mod.label} dropped)')
                prev_end = end
                continue
            deps = [s.target for s in mod.sites if s.top_index == i and s.eager]
            pending = [d for d in dict.fromkeys(deps) if d not in self.order]
            if pending:
                flush()
                for d in pending:
                    self._emit_module(d, stack)
                chunk.append(f"# {'=' * 20} {mod.label} (continued) {'=' * 37}")
            take(start, end)
            prev_end = end
        take(prev_end + 1, len(mod.lines))
        flush()
        if is_entry:
            for other in self.reachable():
                if other not in self.order and other not in stack:
                    self._emit_module(other, stack)
        stack.pop()
        self.order.append(name)

    def build(self, directives: bool = True, backend: str | None = None) -> str:
        check_clashes([self.mods[n] for n in self.reachable()], self.project)
        self._emit_module(self.entry, [])
        header = list(DIRECTIVES) if directives else []
        git = _git_describe(self.root)
        header += [
            "#",
            f"# ONE-FILE BUNDLE of moe-mxfp4{f' ({git})' if git else ''}, written by bundle.py: "
            "edit the package, not this file.",
            f"# Modules, in order of execution: {', '.join(self.order_of_first_code())}",
        ]
        futures = list(dict.fromkeys(f for f in self.futures if f))
        # A pinned backend: set before any bundled code reads MOE_BACKEND; the environment still wins.
        pin = ["import os", f"os.environ.setdefault({'MOE_BACKEND'!r}, {backend!r})"] if backend else []
        text = "\n".join(header + futures + pin + [""] + self.out).rstrip() + "\n"
        validate(text, directives)
        return text

    def order_of_first_code(self) -> list[str]:
        seen = []
        for line in self.out:
            if line.startswith("# " + "=" * 20 + " "):
                label = line.split()[2]
                if label not in seen:
                    seen.append(label)
        return seen


def _git_describe(root: Path) -> str | None:
    try:
        r = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return f"git {r.stdout.strip()}" if r.returncode == 0 and r.stdout.strip() else None


def validate(text: str, directives: bool = True) -> None:
    """The bundle compiles, imports only what the leaderboard machine has, and (with directives)
    carries both #!POPCORN lines in its first comment block."""
    try:
        tree = ast.parse(text)
        compile(text, "submission.py", "exec")
    except SyntaxError as exc:
        raise BundleError(f"the bundle does not compile: {exc}") from None
    allowed = set(sys.stdlib_module_names) | ALLOWED_PACKAGES
    bad = []
    for node in ast.walk(tree):
        mods = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                bad.append(f"line {node.lineno}: relative import")
                continue
            mods = [node.module or ""]
        for m in mods:
            if m.split(".")[0] not in allowed:
                bad.append(f"line {node.lineno}: import of {m}")
    if bad:
        raise BundleError("the bundle imports modules the leaderboard does not provide:\n  " + "\n  ".join(bad))
    if directives:
        first_block = []
        for line in text.splitlines():
            if not line.startswith("#"):
                break
            first_block.append(line.strip())
        missing = [d for d in DIRECTIVES if d not in first_block]
        if missing:
            raise BundleError(f"directives missing from the first comment block: {missing}")


def shadowed_modules(root: str | Path = ".") -> frozenset[str]:
    """The module names an output file must not take (see RUNNER_MODULES): submission, the
    default, is the one project module it may replace."""
    project = {name.split(".")[0] for name in (*project_modules(Path(root)), *project_packages(Path(root)))}
    names = set(sys.stdlib_module_names) | ALLOWED_PACKAGES | RUNNER_MODULES | project
    return frozenset(names - {"submission"})


def check_output_name(out: Path, root: str | Path = ".") -> None:
    """-o names a file whose module name (its stem) shadows nothing the bundle or the runner imports."""
    if out.suffix != ".py":
        return  # not importable under its name
    if out.stem in shadowed_modules(root):
        raise UsageError(
            f"-o {out}: a file named {out.name} would be imported instead of the module {out.stem} "
            f"(the bundle's folder comes first on sys.path); name it e.g. {out.with_name(f'submission_{out.stem}.py')}"
        )


def check_root(root: str | Path) -> None:
    """--root is the package's folder."""
    path = Path(root)
    if not path.exists():
        raise UsageError(f"--root {root}: no such folder")
    if not path.is_dir():
        raise UsageError(f"--root {root}: not a folder")


def backends(root: str | Path = ".") -> tuple[str, ...]:
    """The backend names of the package's submission.py (its BACKENDS tuple), read without
    importing it (that would import torch)."""
    path = Path(root) / "submission.py"
    if not path.is_file():
        raise UsageError(f"--root {root}: no submission.py there (its BACKENDS tuple names the backends)")
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "BACKENDS" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise BundleError("submission.py: no BACKENDS tuple")


def bundle(
    root: str | Path = ".", entry: str = "submission", directives: bool = True, backend: str | None = None
) -> str:
    """The bundled source of `entry` (default submission.py) in `root`; with `backend`, the bundle
    sets MOE_BACKEND to it unless the environment already does."""
    if backend is not None and backend not in backends(root):
        raise UsageError(f"--backend: unknown backend {backend!r}; choose one of {', '.join(backends(root))}")
    return Bundler(Path(root).resolve(), entry).build(directives=directives, backend=backend)


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    from bench.runner.preflight import UsageParser, shown

    p = UsageParser(
        prog="bundle.py",
        description=__doc__.split("\n\n")[0],
        epilog="Submit: popcorn-cli submit --gpu MI355X --leaderboard amd-moe-mxfp4 "
        "--mode leaderboard dist/submission.py",
    )
    p.add_argument(
        "-o", "--output", default=str(here / "dist" / "submission.py"), help="output file (default: dist/submission.py)"
    )
    p.add_argument("--entry", default="submission", help="entry module (default: submission)")
    p.add_argument("--root", default=str(here), help="package root (default: this file's folder)")
    p.add_argument("--no-directives", action="store_true", help="leave out the #!POPCORN lines")
    p.add_argument(
        "--backend", help="pin the bundle's backend (MOE_BACKEND, e.g. triton) so it can be timed on its own"
    )
    args = p.parse_args(argv)
    entry = args.entry[:-3] if args.entry.endswith(".py") else args.entry
    out = Path(args.output)
    try:
        if out.is_dir():
            raise UsageError(f"-o {out}: a folder; give the file to write, e.g. -o {out / 'submission.py'}")
        check_root(args.root)
        check_output_name(out, args.root)
        text = bundle(args.root, entry, directives=not args.no_directives, backend=args.backend)
        write(out, text)
    except BundleError as exc:
        print(f"bundle.py: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, UsageError) else 1
    print(f"wrote {shown(out)} ({len(text.splitlines())} lines, {len(text.encode()) / 1024:.1f} KiB)")
    return 0


def write(out: Path, text: str) -> None:
    """The bundle at `out`, its folder created; a path that cannot be written is a usage error."""
    existing = next(folder for folder in out.parents if folder.exists())
    if not existing.is_dir():
        raise UsageError(f"-o {out}: {existing} is a file, not a folder")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
    except OSError as exc:
        raise UsageError(f"-o {out}: cannot write it ({exc.strerror or exc})") from None


if __name__ == "__main__":
    sys.exit(main())
