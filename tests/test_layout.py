"""The layout the design card draws: few modules at the top and directly in bench/, every other
one in a package by concern, and no circle of imports among the repository's modules."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# not the package's: environments, build output, the task's carried files, the peers' unpacked code
SKIP = {".venv", ".git", "dist", "build", "job_task", ".peers"}
SCRATCH = ("bench", "out")  # ignored by git; a device call carries what is there


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if SKIP & set(rel.parts) or rel.parts[:2] == SCRATCH:
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(tree: ast.AST) -> set[str]:
    """Every module an import statement names (functions' own imports included; those under `if
    TYPE_CHECKING:` never run), with the modules a dotted import also imports (a.b imports a)."""
    names = set()
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            todo += node.orelse
            continue
        todo += ast.iter_child_nodes(node)
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return {".".join(n.split(".")[:i]) for n in names for i in range(1, n.count(".") + 2)}


def import_cycles(modules: dict[str, Path]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    graph = {m: sorted((_imports(ast.parse(p.read_text())) & modules.keys()) - {m}) for m, p in modules.items()}
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_module_imports_itself_through_others():
    modules = _modules()
    assert {"submission", "bench.runner.cli", "moe_triton.fused_moe", "selection.selector"} <= modules.keys()
    cycles = import_cycles(modules)
    assert not cycles, f"modules that import each other: {[sorted(c) for c in cycles]}"


def test_the_cycle_finder_finds_a_lazy_cycle(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text('"""Doc."""\n')
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import f\nfrom pkg.d import h\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from pkg.c import g\n")
    (tmp_path / "pkg" / "c.py").write_text("from pkg import a\n")
    # d's import of a runs only under a type checker: no cycle through d
    (tmp_path / "pkg" / "d.py").write_text("import typing\n\nif typing.TYPE_CHECKING:\n    from pkg.a import x\n")
    mods = {f"pkg.{n}": tmp_path / "pkg" / f"{n}.py" for n in "abcd"}
    assert import_cycles(mods) == [{"pkg.a", "pkg.b", "pkg.c"}]


def test_few_modules_at_the_top_and_directly_in_bench():
    top = sorted(p.name for p in ROOT.glob("*.py"))
    assert len(top) <= 8, top
    bench = sorted(p.name for p in (ROOT / "bench").glob("*.py"))
    assert len(bench) <= 10, bench
    # every folder of modules is a package, so that its name says what it holds
    for folder in {p.parent for p in _modules().values()} - {ROOT}:
        assert (folder / "__init__.py").is_file() or folder.name == "tests", folder


def test_each_path_of_the_triton_backend_is_a_short_module_beside_its_kernels():
    """moe_triton/ keeps each path's launcher, the plans, the routing and the target probes in a
    module of its own (its kernels in moe_triton/kernels/), none of them long."""
    launchers = {p.name: len(p.read_text().splitlines()) for p in (ROOT / "moe_triton").glob("*.py")}
    assert {"fused_moe.py", "decode.py", "native.py", "plan.py", "routing.py", "target.py"} <= set(launchers)
    assert max(launchers.values()) <= 400, launchers
    assert launchers["fused_moe.py"] <= 100, "fused_moe_triton is a dispatcher"
    kernels = {p.stem for p in (ROOT / "moe_triton" / "kernels").glob("*.py")}
    assert {"decode", "native"} <= kernels


def _package(modules: dict[str, Path]) -> dict[str, Path]:
    """The modules that the bundle carries: the root's (bundle.py and the runner's task.py aside)
    and the packages' (bench's and the tests' aside)."""
    return {
        name: path for name, path in modules.items() if name.split(".")[0] not in {"bench", "tests", "bundle", "task"}
    }


def private_uses(modules: dict[str, Path], root: Path = ROOT) -> list[str]:
    """`from m import _x` and `m._x` in one module of `modules` where m is another: a name that
    another module uses is public in its own."""
    found = []
    for me, path in sorted(modules.items()):
        package = me if path.name == "__init__.py" else me.rpartition(".")[0]
        bound = {}  # local name -> the module it stands for
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom):
                parts = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                base = ".".join(parts + ([node.module] if node.module else []))
                for a in node.names:
                    if f"{base}.{a.name}" in modules:
                        bound[a.asname or a.name] = f"{base}.{a.name}"
                    elif base in modules and base != me and a.name.startswith("_") and not a.name.startswith("__"):
                        found.append(f"{path.relative_to(root)}:{node.lineno}: from {base} import {a.name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                chain, value = [], node.value
                while isinstance(value, ast.Attribute):
                    chain.insert(0, value.attr)
                    value = value.value
                owner = ".".join([bound.get(getattr(value, "id", None), "?")] + chain)
                if owner in modules and owner != me:
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {owner}.{node.attr}")
    return found


def test_no_package_module_uses_another_ones_private_names():
    modules = _package(_modules())
    assert {"submission", "quant", "moe_triton.plan", "moe_triton.kernels.decode", "mxfp4.codec"} <= modules.keys()
    assert not private_uses(modules)


def test_the_private_name_finder_finds_both_forms(tmp_path):
    sources = {
        "__init__": "",
        "a": "_x = 1\nprint(_x)\n",
        "b": "from .a import _x\nfrom pkg import a\nprint(a._x, _x)\n",
        "c": "import pkg.a\nimport pkg.a as alias\nprint(pkg.a._x, alias._x)\n",
    }
    (tmp_path / "pkg").mkdir()
    for name, text in sources.items():
        (tmp_path / "pkg" / f"{name}.py").write_text(text)
    modules = {"pkg" if n == "__init__" else f"pkg.{n}": tmp_path / "pkg" / f"{n}.py" for n in sources}
    assert private_uses(modules, tmp_path) == [
        "pkg/b.py:1: from pkg.a import _x",
        "pkg/b.py:3: pkg.a._x",
        "pkg/c.py:3: pkg.a._x",
        "pkg/c.py:3: pkg.a._x",
    ]
