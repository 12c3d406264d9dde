"""The documents the code and the user rely on: every "SPEC n" citation names a section of
docs/spec.md, the README's test command is the one CI runs, the README stays a user's page
(under 8 KB, GPU-only commands marked, the bundle made before it is used), the docs index lists
every document, no document cites a file outside the repository, and every tool the README names
answers --help."""

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _sources():
    skip = {".venv", ".git", "dist", "build"}
    for path in ROOT.rglob("*"):
        if path.suffix in (".py", ".md") and not skip & set(path.relative_to(ROOT).parts):
            yield path


def test_every_spec_citation_names_a_section_of_docs_spec():
    spec = (ROOT / "docs" / "spec.md").read_text()
    sections = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", spec, flags=re.M))
    assert {"1", "2", "3", "3.1", "3.2", "3.3", "3.4", "3.5", "4", "5", "6"} <= sections
    cited = {}
    for path in _sources():
        for number in re.findall(r"\bSPEC (\d+(?:\.\d+)?)", path.read_text()):
            cited.setdefault(number, path.relative_to(ROOT))
    assert len(cited) >= 8
    missing = {n: str(p) for n, p in cited.items() if n not in sections}
    assert not missing, f"cited but not a section of docs/spec.md: {missing}"


def test_readme_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    readme = [line.strip() for line in (ROOT / "README.md").read_text().splitlines() if "pytest" in line]
    assert ci in readme
    for step in ("ruff check .", "ruff format --check .", "TRITON_INTERPRET=1 python -m pytest -q"):
        assert step in ci


def test_docs_link_each_other():
    readme = (ROOT / "README.md").read_text()
    for doc in (
        "docs/spec.md",
        "docs/triton.md",
        "docs/aiter.md",
        "docs/runner.md",
        "docs/selection.md",
        "docs/gfx950.md",
        "docs/bundle.md",
        "docs/status.md",
        "docs/numerics.md",
    ):
        assert doc in readme and (ROOT / doc).is_file()
    assert "docs/gfx950.md" in (ROOT / "docs" / "triton.md").read_text()
    assert "docs/aiter_overrides.md" in (ROOT / "docs" / "aiter.md").read_text()


def test_the_docs_index_has_a_row_per_document_and_the_readme_links_it():
    index = (ROOT / "docs" / "README.md").read_text()
    rows = re.findall(r"^\| \[(\S+)\]\((\S+)\) \|", index, flags=re.M)
    documents = sorted(p.name for p in (ROOT / "docs").glob("*.md") if p.name != "README.md")
    assert sorted(name for name, _ in rows) == documents
    assert all(name == target for name, target in rows)
    assert "docs/README.md" in (ROOT / "README.md").read_text()


def test_no_document_cites_a_file_outside_the_repository():
    """A user's clone has no ../shared/: facts carry their public source instead."""
    outside = re.compile(r"\.\./shared|MI355X_NOTES|PERF_NOTES|\bSPEC\.md\b")
    cited = [
        f"{p.relative_to(ROOT)}: {m.group()}"
        for p in _sources()
        if p.name != "test_docs.py"
        for m in outside.finditer(p.read_text())
    ]
    assert not cited
    for path in (ROOT / "README.md", *(ROOT / "docs").glob("*.md")):
        for target in re.findall(r"\]\(([^)#]+)[^)]*\)", path.read_text()):
            if "://" not in target:
                assert (path.parent / target).exists(), (
                    f"{path.relative_to(ROOT)} links {target}, not in the repository"
                )


def test_the_readme_is_a_users_page():
    """Under 8 KB (status and design live in docs/); every example that needs a GPU says so in its
    comment; no example uses dist/ before `python bundle.py` has made it (issue 24)."""
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) < 8192, len(text.encode())
    commands = [line.strip() for line in text.splitlines() if line.startswith("    ")]
    gpu_only = ("--mode benchmark", "--mode leaderboard", "--mode host", "bench.seed_check", "bench.tune", "aiter")
    for command in commands:
        if any(word in command for word in gpu_only):
            assert "GPU" in command or "MI355X" in command, f"not marked as needing a GPU: {command}"
    first_bundle = next(i for i, c in enumerate(commands) if c.startswith("python bundle.py"))
    first_use = next(i for i, c in enumerate(commands) if "dist/" in c and not c.startswith("python bundle.py"))
    assert first_bundle < first_use


def _anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_notes_and_results_indexes_link_to_existing_entries():
    for index in ("NOTES.md", "RESULTS.md"):
        text = (ROOT / "bench" / index).read_text()
        links = re.findall(r"\]\(((?:notes|results)/[^)#]+)(?:#([^)]+))?\)", text)
        assert len(links) >= 8, index
        for path, anchor in links:
            target = ROOT / "bench" / path
            assert target.is_file(), f"{index}: {path}"
            if anchor:
                headings = {_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", target.read_text(), flags=re.M)}
                assert anchor in headings, f"{index}: {path}#{anchor}"


def _help(command: tuple[str, ...]) -> tuple[tuple[str, ...], subprocess.CompletedProcess]:
    return command, subprocess.run(
        [sys.executable, *command, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_every_tool_the_readme_names_answers_help():
    """`python -m bench...`, `python bundle.py`, `python3 submission.py`: usage on stdout, exit status 0,
    nothing run (the pre-run ran on `submission.py --help`)."""
    readme = (ROOT / "README.md").read_text()
    modules = sorted(set(re.findall(r"python -m (bench(?:\.\w+)*)", readme)))
    assert {"bench", "bench.job", "bench.numerics.silu_code", "bench.gfx950"} <= set(modules), modules
    commands = [("-m", m) for m in modules] + [("bundle.py",), ("submission.py",)]
    with ThreadPoolExecutor(2) as pool:
        for command, proc in pool.map(_help, commands):
            assert proc.returncode == 0 and proc.stdout.startswith("usage: "), (command, proc.stderr[-2000:])
            assert "moe-mxfp4 submission:" not in proc.stdout, command  # the pre-run ran
