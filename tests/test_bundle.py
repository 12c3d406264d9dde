"""bundle.py: the one-file submission, on the package and on a small made-up package that uses every
import form. Every process here gets its own cache folder (XDG_CACHE_HOME), where bundles write
their modules."""

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import bundle as bundler
from bundle import DIRECTIVES, BundleError

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = set(sys.stdlib_module_names) | {"torch", "triton", "numpy", "pandas", "aiter", "task"}
# What the bundle's loader imports beyond the package's own `import submission` (all of it standard
# library, and already imported by torch today).
LOADER_MODULES = {"importlib", "os", "sys", "tempfile"}


def _clean_env(cache: Path, **extra) -> dict:
    """An environment in which only the folder of the bundle can provide modules, and `cache` holds
    the bundles' modules. Without a GPU the bundle runs under Triton's interpreter, with one compiled,
    as on the leaderboard."""
    drop = ("PYTHONPATH", "MOE_BACKEND", "MOE_SELECT", "TRITON_INTERPRET")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    return {**env, "XDG_CACHE_HOME": str(cache), **extra}


def _python(args: list[str], cwd: Path, cache: Path, timeout: float = 120, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=_clean_env(cache, **env), capture_output=True, text=True, timeout=timeout
    )


def _sources(text: str) -> dict[str, str]:
    """The files a bundle carries (its _BUNDLE_SOURCES), read without running it."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "_BUNDLE_SOURCES":
            return ast.literal_eval(node.value)
    raise AssertionError("no _BUNDLE_SOURCES")


@pytest.fixture(scope="module")
def bundled(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist") / "submission.py"
    out.write_text(bundler.bundle(ROOT))  # a BundleError here says what to fix in the package
    return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One cache for the real bundle's runs: its modules are written once."""
    return tmp_path_factory.mktemp("cache")


def _alone(tmp_path: Path, bundled: Path) -> Path:
    """An empty folder holding only the bundle, as submission.py."""
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "submission.py").write_text(bundled.read_text())
    return folder


# ------------------------------------------------------------------ the package's bundle


def test_bundle_compiles_starts_with_the_directives_and_imports_only_allowed_modules(bundled):
    text = bundled.read_text()
    compile(text, str(bundled), "exec")
    assert text.splitlines()[:2] == list(DIRECTIVES)
    project = {name.split(".")[0] for name in bundler.project_modules(ROOT)}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            assert not getattr(node, "level", 0), f"line {node.lineno}: relative import"
            for name in [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]:
                assert name.split(".")[0] in ALLOWED - project, f"line {node.lineno}: import of {name}"


def test_bundle_carries_the_modules_submission_reaches_each_whole_and_no_tool(bundled):
    files = _sources(bundled.read_text())
    assert {"submission.py", "reference.py", "problem/__init__.py", "moe_triton/kernels/gluon_stage2.py"} <= set(files)
    assert {"moe_aiter/backend.py", "selection/choice_file.py"} <= set(files)  # imported inside functions only
    assert not {"task.py", "bundle.py"} & set(files)
    assert not [f for f in files if f.startswith(("bench/", "tests/"))]
    for name, text in files.items():
        if name != "__init__.py":
            original = (ROOT / name).read_text()
            imports = [n for n in ast.walk(ast.parse(original)) if isinstance(n, (ast.Import, ast.ImportFrom))]
            import_lines = {line for n in imports for line in range(n.lineno, n.end_lineno + 1)}
            pairs = enumerate(zip(text.splitlines(), original.splitlines(), strict=True), start=1)
            assert {i for i, (new, old) in pairs if new != old} <= import_lines, name  # only imports moved


MODULES_AND_NAMES = """
import json, sys
import submission
print(json.dumps([sorted(sys.modules), sorted(n for n in vars(submission) if not n.startswith("_"))]))
"""


def test_importing_the_bundle_loads_no_module_the_package_does_not(tmp_path, bundled, cache):
    """`import submission` of the bundle, in an empty folder, against the package's own (repository
    root on sys.path): the same modules (the package's under the bundle's private package name),
    beyond the loader's standard-library helpers, and the same public names. Lazy imports stay lazy:
    what the package imports only inside functions (Gluon, aiter) the bundle does not import either."""
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", MODULES_AND_NAMES],
            cwd=cwd,
            env=_clean_env(cache),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for cwd in (_alone(tmp_path, bundled), ROOT)
    ]
    results = []
    for run in runs:
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err
        results.append(json.loads(out.splitlines()[-1]))
    (bundle_modules, bundle_names), (package_modules, package_names) = results
    private = {m for m in bundle_modules if m.startswith(bundler.PACKAGE_PREFIX)}
    assert len({m.split(".")[0] for m in private}) == 1
    renamed = {m.split(".", 1)[1] for m in private if "." in m} | (set(bundle_modules) - private)
    assert renamed - set(package_modules) <= LOADER_MODULES, sorted(renamed - set(package_modules))
    assert "reference" in renamed and "reference" not in bundle_modules  # the runner's name stays free
    assert set(package_names) <= set(bundle_names) and "custom_kernel" in bundle_names


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the pre-run selects the official shapes (bench.job)")
def test_the_prerun_selects_in_an_empty_folder_and_reuses_its_choice_file(tmp_path, bundled, cache):
    """`python3 submission.py` with only the bundle in the folder, MOE_SELECT=1 (CI's stand-in for
    a GPU): it selects for problem.cases.TINY, writes the choice file under XDG_CACHE_HOME, and the
    next run reads it back; a bad setting is one line and exit status 2."""
    from problem.cases import TINY, case_name

    folder = _alone(tmp_path, bundled)
    outputs = [
        _python(["submission.py"], folder, cache, timeout=300, MOE_SELECT="1", MOE_SELECT_BUDGET_S="0")
        for _ in range(2)
    ]
    assert [p.returncode for p in outputs] == [0, 0], outputs[0].stderr + outputs[1].stderr
    name = case_name(TINY[0])
    assert "selecting for problem.cases.TINY (1 small shape) under the CPU interpreter" in outputs[0].stdout
    assert f"moe-mxfp4 pre-run {name}: triton (selected in " in outputs[0].stdout
    assert f"moe-mxfp4 select {name}: triton " in outputs[0].stderr and "skipped (budget)" in outputs[0].stderr
    assert (cache / "moe-mxfp4" / "choices.json").is_file()
    assert f"moe-mxfp4 pre-run {name}: triton (stored)" in outputs[1].stdout
    assert "moe-mxfp4 select" not in outputs[1].stderr
    bad = _python(["submission.py"], folder, cache, MOE_TRITON_NATIVE="2")
    assert bad.returncode == 2 and not bad.stdout, bad.stderr
    assert bad.stderr == "submission.py: error: MOE_TRITON_NATIVE: expected 0 or 1, got '2'\n"


def test_the_bundles_prerun_has_a_help_and_refuses_arguments(tmp_path, bundled, cache):
    """`python submission.py --help` says what the pre-run does without running it; an unknown
    argument is one line and exit status 2."""
    folder = _alone(tmp_path, bundled)
    shown = _python(["submission.py", "--help"], folder, cache)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("usage: submission.py [-h]") and "MOE_SELECT" in shown.stdout
    bad = _python(["submission.py", "--bogus"], folder, cache)
    assert bad.returncode == 2 and not bad.stdout
    assert bad.stderr == "submission.py: error: unrecognized arguments: --bogus\n"


def test_a_pinned_backend_is_the_default_and_the_environment_still_wins(tmp_path, cache):
    pinned = tmp_path / "pinned.py"
    pinned.write_text(bundler.bundle(ROOT, backend="reference"))
    folder = _alone(tmp_path, pinned)
    for env, expected in (({}, "reference"), ({"MOE_BACKEND": "triton"}, "triton")):
        proc = _python(["submission.py"], folder, cache, **env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"moe-mxfp4 submission: backend {expected}" in proc.stdout
    with pytest.raises(BundleError, match="--backend: unknown backend 'cuda'"):
        bundler.bundle(ROOT, backend="cuda")


def test_the_local_runner_passes_the_bundle_on_a_smoke_case(tmp_path, bundled, cache):
    """`python -m bench --backend <bundle> --cases smoke:0`: custom_kernel of the bundle checked
    against the package's reference (in the Triton interpreter on a CPU)."""
    proc = _python(["-m", "bench", "--backend", str(bundled), "--cases", "smoke:0"], ROOT, cache, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "smoke0" in proc.stdout and " pass " in proc.stdout


WITHOUT_CUDA_EXTRA = """
import sys
import triton
import triton.language.extra as extra
# A Triton without triton.language.extra.cuda (as ROCm builds may be): importing it fails.
sys.modules["triton.language.extra.cuda"] = None
if hasattr(extra, "cuda"):
    del extra.cuda
path, case = sys.argv[1:3]
sys.argv = [path]  # as `python3 submission.py` sees them: no arguments
bundle = {"__name__": "__main__", "__file__": path}
try:  # the script block ends with the pre-run's exit status
    exec(compile(open(path).read(), path, "exec"), bundle)
except SystemExit as exc:
    assert exc.code == 0, exc.code
import torch
if torch.cuda.is_available() and torch.version.hip is None:
    # Triton's own NVIDIA compiler imports the module: on an NVIDIA GPU only the import step above
    # can run without it, and the kernels below compile with it back.
    del sys.modules["triton.language.extra.cuda"]
import json, os
from reference import check_implementation, generate_input  # bench.job's stand-in: a second bundle
for native in ("0", "1"):
    os.environ["MOE_TRITON_NATIVE"] = native
    data = generate_input(**json.loads(case))  # the smallest shape: what is imported does not depend on it
    ok, message = check_implementation(data, bundle["custom_kernel"](data))
    assert ok, message
print("ran both paths")
"""


def test_bundle_imports_and_runs_without_the_cuda_extra_module(tmp_path, bundled, cache):
    """No NVIDIA-only name is imported at module import: the bundle's `python3 submission.py`
    step and custom_kernel (decode and native paths) run under a Triton lacking
    triton.language.extra.cuda (on an NVIDIA GPU, whose Triton compiler needs it, the import step).
    In bench.job's folder: the reference beside it is the package's, bundled too, in the same process."""
    from problem.cases import TINY

    folder = _alone(tmp_path, bundled)
    (folder / "reference.py").write_text(bundler.bundle(ROOT, "reference", directives=False))
    (folder / "task.py").write_text((ROOT / "task.py").read_text())
    proc = _python(["-c", WITHOUT_CUDA_EXTRA, "submission.py", json.dumps(TINY[0])], folder, cache, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "moe-mxfp4 submission: backend triton" in proc.stdout and "ran both paths" in proc.stdout


# ------------------------------------------------------------------ a made-up package, every import form

FIXTURE = {
    "submission.py": '''
        """The entry: every import form of a project module."""
        import json
        import os, \\
            helpers as h_continued
        import sys
        if True: import helpers as h_inline
        import helpers
        import pkg.deep.leaf
        import pkg.deep.leaf as leaf_alias
        from pkg import mod
        from pkg.deep import (
            leaf as leaf_paren,
        )
        from pkg.mod import LIMIT as MOD_LIMIT
        from reference import WHO as REFERENCE_WHO
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from task import input_t

        LIMIT = 1
        _cache = {"owner": "submission"}


        def lazy_loaded():
            return any(name.endswith(".lazy") for name in sys.modules)


        def custom_kernel(data: "input_t"):
            from lazy import triple

            return triple(data)


        def report():
            import inspect

            before = lazy_loaded()
            return {
                "limits": [LIMIT, helpers.LIMIT, mod.LIMIT, MOD_LIMIT, pkg.PKG_LIMIT, pkg.deep.leaf.UP],
                "caches": [_cache["owner"], helpers._cache["owner"], mod._cache["owner"]],
                "same": [h_continued is helpers, h_inline is helpers, leaf_alias is pkg.deep.leaf is leaf_paren],
                "sibling": [mod.sibling.NAME, mod.NAME, helpers.sibling_name()],
                "reference": REFERENCE_WHO,
                "lazy": [before, custom_kernel(2), lazy_loaded()],
                "source": inspect.getsource(helpers.double).splitlines()[0],
                "file": os.path.basename(__file__),
            }


        if __name__ == "__main__":
            print(json.dumps(report()))
        ''',
    "helpers.py": """
        LIMIT = 2
        _cache = {"owner": "helpers"}


        def double(x):
            return 2 * x


        def sibling_name():
            import pkg.sibling

            return pkg.sibling.NAME
        """,
    "lazy.py": "from helpers import LIMIT, double\n\n\ndef triple(x):\n    return double(x) + x + 0 * LIMIT\n",
    "reference.py": 'WHO = "the package\'s reference"\n',
    "pkg/__init__.py": '"""Code in a package\'s __init__."""\nfrom .mod import LIMIT as PKG_LIMIT\n',
    "pkg/mod.py": 'from . import sibling\nfrom .sibling import NAME\n\nLIMIT = 3\n_cache = {"owner": "mod"}\n',
    "pkg/sibling.py": 'NAME = "sibling"\n',
    "pkg/deep/__init__.py": "",
    "pkg/deep/leaf.py": "from ..mod import LIMIT as UP\n",
    "unused.py": "raise RuntimeError('never imported, never bundled')\n",
    "task.py": "input_t = object\n",
    "bench/__init__.py": "raise RuntimeError('the tools are never bundled')\n",
}
EXPECTED = {
    "limits": [1, 2, 3, 3, 3, 3],
    "caches": ["submission", "helpers", "mod"],
    "same": [True, True, True],
    "sibling": ["sibling", "sibling", "sibling"],
    "reference": "the package's reference",
    "lazy": [False, 6, True],
    "source": "def double(x):",
    "file": "submission.py",
}


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, src in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(src).lstrip("\n"))
    return root


def _bundle(tmp_path: Path, name: str = "pkg", **changed: str) -> Path:
    """The made-up package (with `changed` files) bundled alone in a folder of its own."""
    root = _package(tmp_path / name, {**FIXTURE, **changed})
    folder = tmp_path / f"{name}-run"
    folder.mkdir()
    (folder / "submission.py").write_text(bundler.bundle(root, directives=False))
    return folder


RUNNER = """
import json, sys
import reference  # the runner's, imported before the submission as eval.py does
from submission import custom_kernel, report
lazy = report()
print(json.dumps([reference.WHO, custom_kernel(1), lazy]))
"""


def test_every_import_form_runs_from_an_empty_folder_beside_the_runners_modules(tmp_path):
    folder = _bundle(tmp_path)
    files = _sources((folder / "submission.py").read_text())
    assert "unused.py" not in files and "task.py" not in files and not any(f.startswith("bench/") for f in files)
    script = _python(["submission.py"], folder, tmp_path / "cache")
    assert script.returncode == 0, script.stderr
    assert json.loads(script.stdout) == EXPECTED
    (folder / "reference.py").write_text("WHO = 'the runner'\n")
    runner = _python(["-c", RUNNER], folder, tmp_path / "cache")
    assert runner.returncode == 0, runner.stderr
    assert json.loads(runner.stdout) == ["the runner", 3, EXPECTED]


def test_two_bundles_share_a_home_and_a_process_without_clashing(tmp_path):
    """Different sources, different folders under the same cache, and in one process each bundle
    runs its own modules, at its lazy imports too; a deleted file comes back at the next import."""
    changed = {"helpers.py": "LIMIT = 5\n", "lazy.py": "def triple(x):\n    return 500\n"}
    folders = [_bundle(tmp_path, "a"), _bundle(tmp_path, "b", **changed)]
    cache = tmp_path / "cache"
    both = textwrap.dedent("""
        import importlib.util, json, sys
        modules = []
        for i, path in enumerate(sys.argv[1:]):
            spec = importlib.util.spec_from_file_location(f"submission_{i}", path)
            modules.append(importlib.util.module_from_spec(spec))
            spec.loader.exec_module(modules[-1])
        print(json.dumps([[m.helpers.LIMIT, m.custom_kernel(1)] for m in modules]))
        """)
    for order in ([0, 1], [1, 0]):
        paths = [str(folders[i] / "submission.py") for i in order]
        proc = _python(["-c", both, *paths], tmp_path, cache)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout) == [[[2, 3], [5, 500]][i] for i in order]
    packages = sorted((cache / "moe-mxfp4" / "bundles").iterdir())
    assert len(packages) == 2 and all(p.name.startswith(bundler.PACKAGE_PREFIX) for p in packages)
    (packages[0] / "helpers.py").unlink()
    for folder in folders:
        assert _python(["-c", "import submission"], folder, cache).returncode == 0
    assert (packages[0] / "helpers.py").is_file()


def test_processes_writing_one_bundle_at_once_all_import_it(tmp_path):
    folder = _bundle(tmp_path)
    runs = [
        subprocess.Popen(
            [sys.executable, "submission.py"],
            cwd=folder,
            env=_clean_env(tmp_path / "cache"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    for run in runs:
        out, err = run.communicate(timeout=60)
        assert run.returncode == 0 and json.loads(out) == EXPECTED, err
    assert not list((tmp_path / "cache").rglob("*.tmp"))


def test_a_cache_that_cannot_be_written_falls_back_to_the_temporary_folder(tmp_path):
    folder = _bundle(tmp_path)
    (tmp_path / "not-a-folder").write_text("")
    (tmp_path / "tmp").mkdir()
    proc = _python(["submission.py"], folder, tmp_path / "not-a-folder", TMPDIR=str(tmp_path / "tmp"))
    assert proc.returncode == 0 and json.loads(proc.stdout) == EXPECTED, proc.stderr
    assert list((tmp_path / "tmp" / f"moe-mxfp4-{os.getuid()}" / "bundles").glob("*/helpers.py"))


def test_a_value_error_of_a_bundled_module_is_refused_by_design_in_the_local_runner(tmp_path, monkeypatch):
    """The local runner prints the one line of a ValueError raised by the submission's own code: a
    bundle's code lies in the package it writes under the cache."""
    from bench.runner import cli

    folder = _bundle(tmp_path, **{"lazy.py": "def triple(data):\n    raise ValueError('config: refused')\n"})
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    argv = ["--backend", str(folder / "submission.py"), "--cases", "smoke:1", "--inline", "--roofline", "off"]
    assert cli.main([*argv, "--out", str(tmp_path / "out"), "-q"]) == 1
    row = json.loads((tmp_path / "out" / "test.json").read_text())["rows"][0]
    assert row["message"] == "ValueError: config: refused" and row["refused"] is True


@pytest.mark.parametrize(
    "changed, needle",
    [
        ({"lazy.py": "from pkg.nothing import f\n"}, "lazy.py:1: no project module pkg.nothing"),
        ({"lazy.py": "def f():\n    import requests\n"}, "lazy.py imports requests: not on the leaderboard's machine"),
        ({"lazy.py": "import importlib\nm = importlib.import_module('helpers')\n"}, "dynamic import of project module"),
        ({"lazy.py": "from ... import x\n"}, "lazy.py:1: relative import beyond the top-level package"),
        ({"lazy.py": "def f(:\n"}, "lazy.py:1: invalid syntax"),
    ],
)
def test_a_package_that_cannot_be_bundled_is_one_line_and_exit_status_1(tmp_path, capsys, changed, needle):
    root = _package(tmp_path / "pkg", {**FIXTURE, **changed})
    assert bundler.main(["--root", str(root), "-o", str(tmp_path / "s.py")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("bundle.py: error: ") and needle in err[0], err
    assert not (tmp_path / "s.py").exists()


# ------------------------------------------------------------------ the command line


def test_an_unknown_backend_is_a_usage_error(tmp_path, capsys):
    assert bundler.main(["--backend", "bogus", "-o", str(tmp_path / "s.py")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "bundle.py: error: --backend: unknown backend 'bogus'; choose one of aiter, aiter-fused, triton, reference"
    ]
    assert not (tmp_path / "s.py").exists()


def test_an_output_that_cannot_be_written_is_a_usage_error(tmp_path, capsys, monkeypatch):
    """-o a folder, below a file, or unwritable: one line naming -o, exit status 2."""
    (tmp_path / "file").write_text("")
    for out, line in (
        (tmp_path, f"-o {tmp_path}: a folder; give the file to write, e.g. -o {tmp_path / 'submission.py'}"),
        (tmp_path / "file" / "s.py", f"-o {tmp_path / 'file' / 's.py'}: {tmp_path / 'file'} is a file, not a folder"),
    ):
        assert bundler.main(["-o", str(out)]) == 2
        assert capsys.readouterr().err.splitlines() == [f"bundle.py: error: {line}"]

    def refuse(self, text):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "write_text", refuse)
    assert bundler.main(["-o", str(tmp_path / "s.py")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"bundle.py: error: -o {tmp_path / 's.py'}: cannot write it (Permission denied)"]


@pytest.mark.parametrize("name", ["triton", "torch", "aiter", "task", "reference", "utils", "eval", "numpy", "json"])
def test_an_output_named_like_a_module_it_would_shadow_is_refused(tmp_path, capsys, name):
    """dist/triton.py beside the bundle is imported as triton: one line naming -o."""
    out = tmp_path / "dist" / f"{name}.py"
    assert bundler.main(["-o", str(out)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"bundle.py: error: -o {out}: a file named {name}.py would be imported instead of the module {name} "
        f"(the bundle's folder comes first on sys.path); name it e.g. {out.with_name(f'submission_{name}.py')}"
    ]
    assert not out.parent.exists()


def test_the_outputs_the_docs_suggest_shadow_nothing():
    """Every `bundle.py ... -o PATH` of the README and docs names a file that bundle.py accepts."""
    import re
    import shlex

    outputs = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in doc.read_text().splitlines():
            for command in re.findall(r"python bundle\.py[^`&|]*", line):
                words = shlex.split(command)
                outputs += [Path(words[i + 1]) for i, w in enumerate(words[:-1]) if w in ("-o", "--output")]
    assert Path("dist/submission_triton.py") in outputs
    for out in outputs:
        bundler.check_paths(out, ROOT)
    assert "submission" not in bundler.shadowed_modules(ROOT)
    assert {"triton", "torch", "aiter", "task", "reference", "utils", "eval", "numpy", "mxfp4"} <= (
        bundler.shadowed_modules(ROOT)
    )


def test_a_root_that_is_no_package_folder_is_one_line_naming_root(tmp_path):
    (tmp_path / "file").write_text("")
    (tmp_path / "empty").mkdir()
    for root, argv, line in (
        (tmp_path / "none", [], f"--root {tmp_path / 'none'}: no such folder"),
        (tmp_path / "file", [], f"--root {tmp_path / 'file'}: not a folder"),
        (
            tmp_path / "empty",
            [],
            f"--root {tmp_path / 'empty'}: no submission.py there (the entry module)",
        ),
        (
            tmp_path / "empty",
            ["--backend", "triton"],
            f"--root {tmp_path / 'empty'}: no submission.py there (its BACKENDS tuple names the backends)",
        ),
    ):
        proc = subprocess.run(
            [sys.executable, "bundle.py", "--root", str(root), "-o", str(tmp_path / "s.py"), *argv],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2 and proc.stderr.splitlines() == [f"bundle.py: error: {line}"], proc.stderr
    assert not (tmp_path / "s.py").exists()


def test_a_bad_option_is_one_line_without_the_usage():
    proc = subprocess.run(
        [sys.executable, "bundle.py", "--bogus"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["bundle.py: error: unrecognized arguments: --bogus"]


def test_the_written_path_is_printed_relative_to_the_current_folder(tmp_path, capsys, monkeypatch):
    """Given absolute or relative, the output is reported as a user types it (the tools' one rule,
    bench.runner.preflight.shown); outside the current folder it stays absolute."""
    root = _package(tmp_path / "pkg", {"submission.py": "def custom_kernel(d):\n    return 1\n"})
    monkeypatch.chdir(tmp_path)
    for given in (str(tmp_path / "dist" / "a.py"), "dist/b.py"):
        assert bundler.main(["--root", str(root), "-o", given]) == 0
        assert capsys.readouterr().out.startswith(f"wrote dist{os.sep}{Path(given).name} (")
    monkeypatch.chdir(root)
    assert bundler.main(["--root", str(root), "-o", str(tmp_path / "c.py")]) == 0
    assert capsys.readouterr().out.startswith(f"wrote {tmp_path / 'c.py'} (")
