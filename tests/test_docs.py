"""The documents the code and the user rely on: every "SPEC n" citation names a section of
docs/spec.md, the README's test command is the one CI runs, the README stays a user's page
(under 8 KB, GPU-only commands marked, the bundle made before it is used), the docs index lists
every document, no document cites a file outside the repository or links one that is not there
(bench's notes and results included), every module a document names exists, every command the
README and docs/ show takes the options shown, and nothing narrates the repository's making
(its tracker's numbers, the order in which the work was done, a kernel's ordinal version)."""

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


def _user_documents():
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


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


def test_readme_test_command_is_what_ci_runs_on_a_cold_cache():
    """The README's test command is `bash .ci/run` itself, and .ci/run runs the tests and the gfx950
    check with an empty Triton cache and HOME, as a fresh machine would."""
    ci = (ROOT / ".ci" / "run").read_text()
    readme = [line.strip() for line in (ROOT / "README.md").read_text().splitlines()]
    assert "bash .ci/run" in readme
    lines = [line.strip() for line in ci.splitlines()]
    fresh = lines.index('export HOME="$fresh/home" TRITON_CACHE_DIR="$fresh/triton-cache"')
    assert lines.index('fresh="$(mktemp -d)"') < fresh
    for step in ("ruff check .", "ruff format --check ."):
        assert step in lines
    for step in (
        "TRITON_INTERPRET=1 python -m pytest -q -n auto --maxprocesses 4",
        "python -m bench.gfx950 --cases official",
    ):
        assert lines.index(step) > fresh, step


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
        "docs/glossary.md",
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
    bench_records = [*(ROOT / "bench").glob("*.md"), *(ROOT / "bench" / "notes").rglob("*.md")]
    bench_records += (ROOT / "bench" / "results").rglob("*.md")
    for path in (*_user_documents(), *bench_records):
        for target in re.findall(r"\]\(([^)#]+)[^)]*\)", path.read_text()):
            if "://" not in target:
                assert (path.parent / target).exists(), (
                    f"{path.relative_to(ROOT)} links {target}, not in the repository"
                )


def test_the_readme_is_a_users_page():
    """Under 8 KB (status and design live in docs/); every example that needs a GPU says so in its
    comment; no example uses dist/ before `python bundle.py` has made it."""
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


# Files the documents name that are not the repository's: the task's (gpu-mode/reference-kernels),
# aiter's and its generators', bundle.py's outputs under dist/, and a placeholder for the reader's own.
NOT_OURS = re.compile(
    r"^(aiter|problems|dist)/|^(eval|utils|semantic|gen_instances|gemm_moe_ck2stages_common|gemm_moe_tune|PEER)\.py$"
)
# Module names retired by renames (bench/RESULTS.md lists them) that a path check would not catch.
RETIRED = (
    "tile_configs",
    "moe_triton_kernels",
    "moe_native_kernels",
    "mxfp4_kernels",
    "aiter_backend",
    "aiter_kernels",
)


def _module_file(dotted: str) -> tuple[Path, list[str]] | None:
    """The repository's module that a dotted name (`moe_triton.tiles_amd.NATIVE_ALTERNATES`) starts
    with, and the names after it; None when its first part is not one of the repository's."""
    parts = dotted.split(".")
    path = ROOT / parts[0]
    if not (path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()):
        return None
    rest = parts[1:]
    while rest and path.is_dir() and ((path / rest[0]).is_dir() or (path / f"{rest[0]}.py").is_file()):
        path = path / rest[0] if (path / rest[0]).is_dir() else path / f"{rest[0]}.py"
        rest = rest[1:]
    return (path / "__init__.py" if path.is_dir() else path.with_suffix(".py")), rest


def test_every_module_a_document_names_exists():
    """A file (`moe_triton/tiles.py`, `tiles_amd.py` beside it) or module (`bench.h200.rivals`,
    `moe_triton.tiles_amd.NATIVE_ALTERNATES`) that the README or a document names exists, with the
    name after the module in its source; no retired module name is left."""
    ours = [str(p.relative_to(ROOT)) for p in _sources() if p.suffix == ".py"]
    stale = []
    for doc in _user_documents():
        text = doc.read_text()
        for name in re.findall(r"(?<![\w./<>-])((?:[\w.-]+/)*\w+\.py)\b", text):
            if not NOT_OURS.search(name) and not any(f == name or f.endswith("/" + name) for f in ours):
                stale.append(f"{doc.name}: {name}")
        for folder in re.findall(
            r"(?<![\w./<>-])((?:moe_triton|moe_aiter|mxfp4|selection|problem|bench|tests)/[\w/-]*)(?![\w.<-])", text
        ):
            if not (ROOT / folder).exists() and not folder.startswith("bench/out"):
                stale.append(f"{doc.name}: {folder}")
        for dotted in re.findall(r"(?<![\w./-])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)", text):
            found = _module_file(dotted)
            if found is None or dotted.endswith((".py", ".md", ".json", ".yml")):
                continue
            module, rest = found
            if not module.is_file() or (rest and not re.search(rf"\b{rest[0]}\b", module.read_text())):
                stale.append(f"{doc.name}: {dotted}")
        stale += [f"{doc.name}: {name}" for name in RETIRED if re.search(rf"\b{name}\b", text)]
    assert not stale, stale


# Narration a reader cannot look up: this project's tracker numbers (the word and a number, or "#"
# and a number), the stints of work and their ordinals, a kernel's numbered or ordinal version, the
# tracker's own phrases (the examples in the test below). Not a metric, not a
# version number, not another project's issue or PR (EXTERNAL, or a URL: ".../issues/974").
_ORDINAL = (
    r"first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth"
    r"|fifteenth|sixteenth|seventeenth|eighteenth|nineteenth|twentieth|twenty-\w+|thirtieth|thirty-\w+"
)
NARRATION = re.compile(
    r"(?<![A-Za-z])(?:issue|PR|pull request)s?[\s_]#?\d+(?![\d.%-]|\s?/)"
    r"|(?<![\w/&])#\d+\b"
    rf"|(?<![A-Za-z])(?:{_ORDINAL})[\s_-](?:session|version)s?(?![A-Za-z])"
    r"|\b(?:this|that|the|a|an|each|every|earlier|later|next|previous|last|one|whose|same|another)\s+sessions?\b"
    r"|\bversions? \d+(?![\d.])"
    r"|\b(?:the|this|that) issue's\b|\bthis issue\b"
    r"|\bthe lead\b|\blead's\b",
    re.I,
)
EXTERNAL = re.compile(r"\b(?:aiter|triton|LLVM|composable_kernel|wave|pytorch|torch|CUDA|ROCm|GitHub)\s+$", re.I)
# Files whose narration goes with a pending change to them (a rewrite, a removal); the test fails as
# soon as an entry is no longer needed, so the list only shrinks.
NARRATION_PENDING: set[str] = set()


def _narration(text: str) -> list[str]:
    return [
        m.group() for m in NARRATION.finditer(text) if not EXTERNAL.search(text[max(0, m.start() - 40) : m.start()])
    ]


def test_the_narration_pattern_finds_the_tracker_and_leaves_other_projects():
    # put together here, so that this file holds none of the narration it looks for
    issue, session, version, lead = "issue", "session", "version", "lead"
    for text in (
        f"the decode path's stage 1 in Gluon ({issue} 33)",
        f"{issue}s 19, 20 and 21",
        f"def test_every_piece_{issue}_33_needs",
        "see #" + "33",
        f"2026-12-04 (twentieth {session}): the fold",
        f"def test_the_ninth_{session}_tiles",
        f"the fifth {version}'s stage-2 tiles",
        f"{version.title()} 5, per shape",
        f"measured over the {session}",
        f"the {issue}'s target",
        f"the {lead} fills this",
    ):
        assert _narration(text), text
    for text in (
        "aiter issue 2194",
        "LLVM PR 117844",
        "iree-org/wave PR\n1001",
        "https://github.com/ROCm/aiter/issues/974",
        "issue 25%, L2 34%",
        "issues 72 / 65 instructions",
        "triton version 3.9",
        "subprocess.Popen(cmd, start_new_session=True)",
        "the leaderboard's lead time",
        "2026-12-04, H200: the fold",
    ):
        assert not _narration(text), text


def test_code_docs_notes_and_results_do_not_narrate_the_making():
    """A reader has no tracker and no log of the work: a passage says what the code does and why, and a
    measurement its date, device and versions (bench/RESULTS.md's entries)."""
    skip = {".venv", ".git", "dist", "build", "job_task", ".peers"}
    found, pending = {}, set()
    for path in sorted(ROOT.rglob("*")):
        relative = path.relative_to(ROOT)
        if path.suffix not in (".py", ".md", ".sh", ".json") or skip & set(relative.parts) or not path.is_file():
            continue
        if str(relative) == "tests/test_docs.py":
            continue
        hits = _narration(path.read_text(errors="replace"))
        if hits and str(relative) in NARRATION_PENDING:
            pending.add(str(relative))
        elif hits:
            found[str(relative)] = hits
    assert not found, found
    assert pending == NARRATION_PENDING, f"no longer needed in NARRATION_PENDING: {NARRATION_PENDING - pending}"


# A command the README or a document shows: `python -m MODULE ...`, `python SCRIPT.py ...` (python3 too).
COMMAND = re.compile(r"\bpython3?\s+(?:-m\s+(?P<module>[\w.]+)|(?P<script>[\w./-]+\.py))(?P<args>[^\n]*)")
# Shown but not run here: the task's own eval.py, bundle.py's output under dist/, the pre-run
# (`python3 submission.py` takes no options; tests/test_selection.py runs its main), and other
# projects' modules (pytest, venv).
NOT_RUN = re.compile(r"^(?:eval\.py|dist/.*|submission\.py)$")


def _code(text: str) -> list[str]:
    """A Markdown text's code: fenced blocks, indented lines and inline spans (which may wrap)."""
    fenced = re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S)
    prose = re.sub(r"^```[^\n]*\n.*?^```", "", text, flags=re.M | re.S)
    indented = [line for line in prose.splitlines() if line.startswith("    ")]
    inline = [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", prose)]
    return [*fenced, *indented, *inline]


def _documented_commands() -> dict[str, set[str]]:
    """Each module or script the README and docs/ show a command of, with the long options shown with it."""
    commands: dict[str, set[str]] = {}
    for doc in _user_documents():
        for code in _code(doc.read_text()):
            for m in COMMAND.finditer(code):
                target = m.group("module") or m.group("script")
                if NOT_RUN.match(target) or (m.group("module") and _module_file(target) is None):
                    continue
                args = re.split(r"\s(?:#|&&|\||>|;)(?:\s|$)", m.group("args"))[0]
                commands.setdefault(target, set()).update(re.findall(r"(?<![\w-])--[A-Za-z][\w-]*", args))
    return commands


def _help(target: str) -> tuple[str, int, str]:
    argv = ["-m", target] if not target.endswith(".py") else [str(ROOT / target)]
    proc = subprocess.run([sys.executable, *argv, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    return target, proc.returncode, proc.stdout + proc.stderr


def test_every_command_the_docs_show_runs_and_takes_the_options_shown():
    """`--help` of each module and script a command of the README or docs/ names exits 0 and lists
    every long option the documents show with it (one process each, four at a time; nothing runs on a
    GPU)."""
    commands = _documented_commands()
    assert {"bench", "bench.gfx950", "bench.h200.gluon_check", "bench.job", "bundle.py"} <= set(commands), commands
    with ThreadPoolExecutor(max_workers=4) as pool:
        helps = list(pool.map(_help, sorted(commands)))
    broken = [f"{target}: exit status {code}: {out[-300:]}" for target, code, out in helps if code != 0]
    assert not broken, broken
    unknown = {
        target: sorted(option for option in commands[target] if not re.search(rf"{option}(?![\w-])", out))
        for target, _, out in helps
    }
    assert not any(unknown.values()), {target: options for target, options in unknown.items() if options}


def test_the_bundler_and_the_prerun_answer_help_without_running_anything():
    """`python bundle.py --help` and `python3 submission.py --help` (once, it ran the pre-run): usage
    on stdout, exit status 0."""
    for command in (("bundle.py",), ("submission.py",)):
        proc = subprocess.run(
            [sys.executable, *command, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0 and proc.stdout.startswith("usage: "), (command, proc.stderr[-2000:])
        assert "moe-mxfp4 pre-run" not in proc.stdout, command
