"""bundle.py: the one-file submission, and the bundler's rules on small made-up packages."""

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


def _clean_env(**extra) -> dict:
    """An environment in which only the folder of the bundle can provide modules. Without a GPU
    the bundle runs under Triton's interpreter, with one compiled, as on the leaderboard."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MOE_BACKEND", "TRITON_INTERPRET")}
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def bundled(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist") / "submission.py"
    out.write_text(bundler.bundle(ROOT))  # a BundleError here says what to fix in the package
    return out


@pytest.fixture(scope="module")
def runner_folder(tmp_path_factory, bundled) -> Path:
    """The leaderboard's folder: submission.py (the bundle), task.py, and reference.py (the
    package's reference, itself bundled into one file so it needs nothing else)."""
    d = tmp_path_factory.mktemp("runner")
    (d / "submission.py").write_text(bundled.read_text())
    (d / "task.py").write_text((ROOT / "task.py").read_text())
    (d / "reference.py").write_text(bundler.bundle(ROOT, "reference", directives=False))
    return d


def test_bundle_compiles_and_directives_come_first(bundled):
    text = bundled.read_text()
    compile(text, str(bundled), "exec")
    lines = text.splitlines()
    assert lines[:2] == list(DIRECTIVES)
    first_block = []
    for line in lines:
        if not line.startswith("#"):
            break
        first_block.append(line)
    assert set(DIRECTIVES) <= set(first_block)


def test_bundle_imports_only_allowed_modules_and_no_project_module(bundled):
    tree = ast.parse(bundled.read_text())
    project = set(bundler.project_modules(ROOT))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            assert top in ALLOWED, f"line {node.lineno}: import of {name}"
            assert top not in project, f"line {node.lineno}: project module {name} still imported"
    # The runner's types stay an import from task.
    assert "from task import input_t, output_t" in bundled.read_text()


def test_bundle_defines_custom_kernel_once_at_top_level(bundled):
    tree = ast.parse(bundled.read_text())
    defs = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert defs.count("custom_kernel") == 1


def test_bundle_runs_as_a_script_in_an_empty_folder_without_task_py(tmp_path, bundled):
    """`python dist/submission.py` anywhere (issue 24, item 1): the runner's types are imported
    for annotations only; and a bad setting is one line and exit status 2 (item 2). With the
    selection off (MOE_SELECT=0), as under the CPU interpreter: on a GPU the pre-run would select
    for every official shape (its logic is tested in tests/test_selection.py, `python -m bench.job`
    runs it whole)."""
    script = tmp_path / "submission.py"
    script.write_text(bundled.read_text())
    for env, status in (({}, 0), ({"MOE_TRITON_NATIVE": "2"}, 2)):
        proc = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=_clean_env(MOE_SELECT="0", **env),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == status, proc.stdout + proc.stderr
    assert proc.stderr == "submission.py: error: MOE_TRITON_NATIVE: expected 0 or 1, got '2'\n" and not proc.stdout


def test_the_bundles_prerun_has_a_help_and_refuses_arguments(tmp_path, bundled):
    """`python submission.py --help` ran the pre-run; an unknown argument is one line, exit status 2."""
    script = tmp_path / "submission.py"
    script.write_text(bundled.read_text())
    for argv, status in ((["--help"], 0), (["--bogus"], 2)):
        proc = subprocess.run(
            [sys.executable, str(script), *argv],
            cwd=tmp_path,
            env=_clean_env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == status, proc.stdout + proc.stderr
        if argv == ["--help"]:
            assert proc.stdout.startswith("usage: submission.py [-h]") and "MOE_SELECT" in proc.stdout
    assert proc.stderr == "submission.py: error: unrecognized arguments: --bogus\n" and not proc.stdout


def test_a_pinned_backend_is_the_default_and_the_environment_still_wins(tmp_path):
    (tmp_path / "task.py").write_text((ROOT / "task.py").read_text())
    script = tmp_path / "submission.py"
    script.write_text(bundler.bundle(ROOT, backend="reference"))
    for env, expected in (({}, "reference"), ({"MOE_BACKEND": "triton"}, "triton")):
        proc = subprocess.run(
            [sys.executable, str(script)],
            cwd=tmp_path,
            env=_clean_env(**env),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"moe-mxfp4 submission: backend {expected}" in proc.stdout
    with pytest.raises(BundleError, match="--backend: unknown backend 'cuda'"):
        bundler.bundle(ROOT, backend="cuda")


def test_an_unknown_backend_is_a_usage_error(tmp_path, capsys):
    assert bundler.main(["--backend", "bogus", "-o", str(tmp_path / "s.py")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "bundle.py: error: --backend: unknown backend 'bogus'; choose one of aiter, aiter-fused, triton, reference"
    ]
    assert not (tmp_path / "s.py").exists()


def test_an_output_that_cannot_be_written_is_a_usage_error(tmp_path, capsys, monkeypatch):
    """-o a folder, below a file, or unwritable: one line naming -o, exit status 2 (issue 24, item 5)."""
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
    """dist/triton.py beside the bundle is imported as triton (issue 32, item 1): one line naming -o."""
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
        bundler.check_output_name(out, ROOT)
    assert "submission" not in bundler.shadowed_modules(ROOT)
    assert {"triton", "torch", "aiter", "task", "reference", "utils", "eval", "numpy", "mxfp4"} <= (
        bundler.shadowed_modules(ROOT)
    )


def test_a_root_that_is_no_package_folder_is_one_line_naming_root(tmp_path):
    """python bundle.py --root /nonexistent: no traceback (issue 32, item 3)."""
    (tmp_path / "file").write_text("")
    (tmp_path / "empty").mkdir()
    for root, argv, line in (
        (tmp_path / "none", [], f"--root {tmp_path / 'none'}: no such folder"),
        (tmp_path / "file", [], f"--root {tmp_path / 'file'}: not a folder"),
        (
            tmp_path / "empty",
            [],
            f"--root {tmp_path / 'empty'}: no submission.py there (the entry module, --entry submission)",
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


def test_a_bad_option_is_one_line_without_the_usage(tmp_path):
    """argparse's own errors in the runner's style: no usage lines before them (issue 32, item 4)."""
    proc = subprocess.run(
        [sys.executable, "bundle.py", "--bogus"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["bundle.py: error: unrecognized arguments: --bogus"]


WITHOUT_CUDA_EXTRA = """
import sys
import triton
import triton.language.extra as extra
# A Triton without triton.language.extra.cuda (as ROCm builds may be): importing it fails.
sys.modules["triton.language.extra.cuda"] = None
if hasattr(extra, "cuda"):
    del extra.cuda
path = sys.argv[1]
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
from reference import check_implementation, generate_input
from problem.cases import TINY
import os
for native in ("0", "1"):
    os.environ["MOE_TRITON_NATIVE"] = native
    data = generate_input(**TINY[0])  # the smallest shape: what is imported does not depend on it
    ok, message = check_implementation(data, bundle["custom_kernel"](data))
    assert ok, message
print("ran both paths")
"""


def test_bundle_imports_and_runs_without_the_cuda_extra_module(tmp_path, bundled):
    """No NVIDIA-only name is imported at module import: the bundle's `python3 submission.py`
    step and custom_kernel (decode and native paths) run under a Triton lacking
    triton.language.extra.cuda (on an NVIDIA GPU, whose Triton compiler needs it, the import step)."""
    (tmp_path / "task.py").write_text((ROOT / "task.py").read_text())
    script = tmp_path / "submission.py"
    script.write_text(bundled.read_text())
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_CUDA_EXTRA, str(script)],
        cwd=tmp_path,
        env=_clean_env(PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "moe-mxfp4 submission: backend triton" in proc.stdout
    assert "ran both paths" in proc.stdout


CHECK_SMOKE = """
import json, sys
import torch
from submission import custom_kernel
from reference import compare, generate_input, ref_kernel
results = []
for case in json.loads(sys.argv[1]):
    data = generate_input(**case)
    out = custom_kernel(data)
    ref = ref_kernel(data)  # after the submission, as check_implementation runs it
    ok, message = compare(out, ref)
    form = out.dtype == torch.bfloat16 and out.shape == ref.shape
    results.append([ok, message, form, form and torch.equal(out, ref)])
print(json.dumps(results))
"""


def test_bundle_passes_the_smoke_cases(runner_folder):
    """custom_kernel of the bundle (default backend: Triton, in the interpreter on a CPU) against the
    package's reference, in a process that can import nothing but the runner's folder. The bundle
    is the package inlined, so this is also the package's custom_kernel on SMOKE: bit for bit
    equal to ref_kernel under the interpreter (where both accumulate in fp32), the leaderboard's
    check on a GPU (tests/layer_checks.py's rule)."""
    from problem.cases import SMOKE

    proc = subprocess.run(
        [sys.executable, "-c", CHECK_SMOKE, json.dumps(SMOKE)],
        cwd=runner_folder,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == len(SMOKE)
    for case, (ok, message, form, exact) in zip(SMOKE, results, strict=True):
        assert ok and form, f"{case}: {message}"
        assert exact or torch.cuda.is_available(), f"{case}: not bit for bit ref_kernel's output"


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the pre-run selects the official shapes (bench.job)")
def test_the_bundles_prerun_selects_under_the_interpreter_and_reuses_its_choice_file(tmp_path, bundled):
    """`python3 submission.py` with MOE_SELECT=1 (CI's stand-in for a GPU): it selects for
    problem.cases.TINY, writes the choice file under XDG_CACHE_HOME, and the next run reads it back."""
    from problem.cases import TINY, case_name

    (tmp_path / "task.py").write_text((ROOT / "task.py").read_text())
    script = tmp_path / "submission.py"
    script.write_text(bundled.read_text())
    env = _clean_env(MOE_SELECT="1", MOE_SELECT_BUDGET_S="0", XDG_CACHE_HOME=str(tmp_path / "cache"))
    outputs = []
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        outputs.append(proc)
    name = case_name(TINY[0])
    assert "selecting for problem.cases.TINY (1 small shape) under the CPU interpreter" in outputs[0].stdout
    assert f"moe-mxfp4 pre-run {name}: triton (selected in " in outputs[0].stdout
    assert f"moe-mxfp4 select {name}: triton " in outputs[0].stderr and "skipped (budget)" in outputs[0].stderr
    assert (tmp_path / "cache" / "moe-mxfp4" / "choices.json").is_file()
    assert f"moe-mxfp4 pre-run {name}: triton (stored)" in outputs[1].stdout
    assert "moe-mxfp4 select" not in outputs[1].stderr


# ------------------------------------------------------------------ rules, on made-up packages


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, src in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(src))
    (tmp_path / "task.py").write_text("input_t = object\noutput_t = object\n")
    return tmp_path


def _run(path: Path, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(path)], cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=60
    )


def test_lazy_and_eager_imports_are_inlined_in_execution_order(tmp_path):
    root = _package(
        tmp_path,
        {
            "submission.py": """
            #!POPCORN leaderboard amd-moe-mxfp4
            import os
            os.environ["ORDER"] = "entry-preamble"
            from task import input_t, output_t
            from helpers import double, SCALE as K

            def custom_kernel(data):
                from lazy import triple as t3
                from lazy import triple
                return double(data) + t3(data) + triple(0) + K

            if __name__ == "__main__":
                import lazy
                print(os.environ["ORDER"], custom_kernel(1))
            """,
            "helpers.py": """
            import os
            os.environ["ORDER"] += ",helpers"
            SCALE = 100

            def double(x):
                return 2 * x

            if __name__ == "__main__":
                raise SystemExit("helpers' own script block must not run")
            """,
            "lazy.py": """
            import os
            from helpers import double
            os.environ["ORDER"] += ",lazy"

            def triple(x):
                return double(x) + x
            """,
            "unused.py": "raise RuntimeError('never imported, never bundled')\n",
        },
    )
    # `import lazy` in the script block would be a project import by `import`: not allowed.
    with pytest.raises(BundleError, match="import lazy"):
        bundler.bundle(root)
    src = (root / "submission.py").read_text().replace("    import lazy\n", "")
    (root / "submission.py").write_text(src)
    text = bundler.bundle(root)
    assert "never imported" not in text
    out = root / "out"
    out.mkdir()
    (out / "task.py").write_text((root / "task.py").read_text())
    (out / "submission.py").write_text(text)
    proc = _run(out / "submission.py", out)
    assert proc.returncode == 0, proc.stderr
    # preamble of the entry first, then helpers (eager), then lazy (before the script block)
    assert proc.stdout.split() == ["entry-preamble,helpers,lazy", str(2 + 3 + 0 + 100)]
    assert text.index("# ==================== helpers.py") < text.index("# ==================== lazy.py")
    assert text.count("def double") == 1


def test_modules_of_packages_are_inlined_under_their_paths(tmp_path):
    root = _package(
        tmp_path,
        {
            "submission.py": "from kernels.gemm import f\n\ndef custom_kernel(d):\n    return f(d)\n",
            "kernels/__init__.py": '"""The kernels: a docstring only."""\n',
            "kernels/gemm.py": "from kernels.deep.tiles import BLOCK\n\ndef f(x):\n    return x * BLOCK\n",
            "kernels/deep/__init__.py": "",
            "kernels/deep/tiles.py": "BLOCK = 32\n",
            "bench/__init__.py": "raise RuntimeError('the tools are never bundled')\n",
            "bench/tool.py": "raise RuntimeError('never bundled')\n",
        },
    )
    text = bundler.bundle(root)
    assert text.index("# ==================== kernels/deep/tiles.py") < text.index("def f(x)")
    assert "never bundled" not in text and "from kernels" not in text.replace("# bundled: from kernels", "")
    namespace = {}
    exec(compile(text.replace("from task import input_t, output_t", ""), "bundle", "exec"), namespace)
    assert namespace["custom_kernel"](2) == 64


@pytest.mark.parametrize(
    "entry, init, needle",
    [
        ("from kernels import gemm\n", '"""Doc."""\n', "kernels is a package"),
        ("import kernels.gemm\n", '"""Doc."""\n', "import kernels.gemm"),
        ("from kernels.gemm import f\n", '"""Doc."""\nfrom kernels.gemm import f\n', "docstring only"),
        ("from kernels.nothing import f\n", '"""Doc."""\n', "no project module"),
    ],
)
def test_package_forms_that_cannot_be_bundled_fail_loudly(tmp_path, entry, init, needle):
    files = {"submission.py": entry, "kernels/__init__.py": init, "kernels/gemm.py": "def f():\n    return 1\n"}
    root = _package(tmp_path, files)
    with pytest.raises(BundleError, match=needle):
        bundler.bundle(root)


def test_every_package_of_the_submission_holds_a_docstring_only_in_its_init():
    packages = bundler.project_packages(ROOT)
    assert {"mxfp4", "moe_triton", "moe_triton.kernels", "selection", "moe_aiter", "problem"} <= set(packages)
    assert "bench" not in packages and "tests" not in packages
    bundler.check_package_inits(ROOT)


def test_name_defined_differently_in_two_modules_fails(tmp_path):
    root = _package(
        tmp_path,
        {
            "submission.py": "from a import f\nfrom b import g\n\ndef custom_kernel(d):\n    return f() + g()\n",
            "a.py": "LIMIT = 1\n\ndef f():\n    return LIMIT\n",
            "b.py": "LIMIT = 2\n\ndef g():\n    return LIMIT\n",
        },
    )
    with pytest.raises(BundleError, match="`LIMIT` is defined in both a.py and b.py"):
        bundler.bundle(root)


def test_identical_definitions_may_repeat_but_module_state_may_not(tmp_path):
    files = {
        "submission.py": "from a import f\nfrom b import g\n\ndef custom_kernel(d):\n    return f() + g()\n",
        "a.py": "import torch\nBLOCK = 32\n\ndef f():\n    return BLOCK\n",
        "b.py": "import torch\nBLOCK = 32\n\ndef g():\n    return BLOCK\n",
    }
    root = _package(tmp_path, files)
    text = bundler.bundle(root)
    compile(text, "bundle", "exec")
    (root / "b.py").write_text("_cache = {}\n\ndef g():\n    return len(_cache)\n")
    (root / "a.py").write_text("_cache = {}\n\ndef f():\n    return len(_cache)\n")
    with pytest.raises(BundleError, match="_cache"):
        bundler.bundle(root)


@pytest.mark.parametrize(
    "entry, needle",
    [
        ("import a\n\ndef custom_kernel(d):\n    return a.f()\n", "import a"),
        ("from a import *\n\ndef custom_kernel(d):\n    return f()\n", "import \\*"),
        ("from a import nothing\n\ndef custom_kernel(d):\n    return nothing()\n", "`nothing` is not defined"),
        ("import requests\nfrom a import f\n\ndef custom_kernel(d):\n    return f()\n", "import of requests"),
        ("import os; from a import f\n\ndef custom_kernel(d):\n    return f()\n", "line of its own"),
        ("try:\n    from a import f\nexcept ImportError:\n    f = None\n", "try/except"),
        ("import importlib\nm = importlib.import_module('a')\n", "dynamic import"),
    ],
)
def test_forms_that_cannot_be_bundled_fail_loudly(tmp_path, entry, needle):
    root = _package(tmp_path, {"submission.py": entry, "a.py": "def f():\n    return 1\n"})
    with pytest.raises(BundleError, match=needle):
        bundler.bundle(root)


def test_circular_module_level_import_fails(tmp_path):
    root = _package(
        tmp_path,
        {
            "submission.py": "from a import f\n\ndef custom_kernel(d):\n    return f()\n",
            "a.py": "from b import g\n\ndef f():\n    return g()\n",
            "b.py": "from a import f\n\ndef g():\n    return 1\n",
        },
    )
    with pytest.raises(BundleError, match="circular"):
        bundler.bundle(root)


def test_cli_writes_the_output_and_reports_errors(tmp_path, capsys):
    root = _package(
        tmp_path,
        {
            "submission.py": "from a import f as g\n\ndef custom_kernel(d):\n    return g()\n",
            "a.py": "def f():\n    return 7\n",
        },
    )
    out = tmp_path / "dist" / "sub.py"
    assert bundler.main(["--root", str(root), "-o", str(out)]) == 0
    namespace: dict = {}
    exec(compile(out.read_text(), str(out), "exec"), namespace)
    assert namespace["custom_kernel"](None) == 7
    (root / "submission.py").write_text("import a\n")
    assert bundler.main(["--root", str(root), "-o", str(tmp_path / "x.py")]) == 1
    assert "bundle.py: error" in capsys.readouterr().err
    assert not (tmp_path / "x.py").exists()


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
