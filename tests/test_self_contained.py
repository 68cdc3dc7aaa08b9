"""The repository explains itself: code, user-visible text and docs cite docs/kvm.md,
docs/architecture.md, docs/threads.md, kernel functions and the threads by their short
names, never something a user cannot open (an issue number, a file outside the
repository, a thread's archive file name) and never "seed 00N" ("seed" is the random
seed only).  Scanned: engine/ (code and the scenario data), tui/, benchmarks/, scripts/,
docs/, themes/, the README's screenshots, README.md, the Makefile and the packaging files.
tests/ is not scanned: this file names the forms."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCANNED = (
    "engine",
    "tui",
    "benchmarks",
    "scripts",
    "docs",
    "themes",
    "screenshots",
    "README.md",
    "Makefile",
    "pyproject.toml",
    "setup.py",
)
SUFFIXES = {".py", ".toml", ".md", ".tcss", ".txt", ".json", ".cfg", ".svg", ""}

FORBIDDEN = {
    "an issue number": re.compile(r"\bissues? (?:#|no\.? ?)?\d+", re.IGNORECASE),
    "CONTRACT.md": re.compile(r"CONTRACT\.md"),
    "the old KVM reference": re.compile(r"kvm-reference", re.IGNORECASE),
    "seed 00N": re.compile(r"\bseeds? ?[-_#]?0\d\d\b", re.IGNORECASE),
    "a thread's file name": re.compile(r"\b\d{3}_[0-9a-f]{16}\b"),
    "shared/seeds": re.compile(r"shared/seeds"),
    "shared/domain": re.compile(r"shared/domain"),
    "DESIGN.md": re.compile(r"DESIGN\.md"),
}


def scanned_files(root: Path = ROOT) -> list[Path]:
    files: list[Path] = []
    for name in SCANNED:
        path = root / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and p.suffix in SUFFIXES and "__pycache__" not in p.parts
            )
    return files


LINE_BREAK = re.compile(r"[ \t]*\n[ \t]*(?:#[ \t]*)?")  # a comment's words run on


def findings(files: list[Path], root: Path = ROOT) -> list[str]:
    """`path:line: what: the line` for every forbidden citation in `files`, also where a
    line break (in prose or a comment) falls inside one ("issue\n# 14")."""
    found = []
    for path in files:
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = text.splitlines()
        # the text with each line break (and a comment's `#`) as one space, and where
        # each of its characters came from
        flat, origin, at = [], [], 0
        for piece in LINE_BREAK.split(text):
            start = text.index(piece, at) if piece else at
            flat.append(piece + " ")
            origin += range(start, start + len(piece) + 1)
            at = start + len(piece)
        joined = "".join(flat)
        for what, pattern in FORBIDDEN.items():
            for match in pattern.finditer(joined):
                number = text.count("\n", 0, origin[match.start()]) + 1
                where = path.relative_to(root)
                found.append(f"{where}:{number}: {what}: {lines[number - 1].strip()[:120]}")
    return sorted(set(found))


def test_the_scan_covers_code_data_and_docs() -> None:
    files = {p.relative_to(ROOT).as_posix() for p in scanned_files()}
    for expected in (
        "README.md",
        "docs/kvm.md",
        "docs/threads.md",
        "docs/architecture.md",
        "engine/scenarios/data/05-fast-zap.toml",
        "engine/claims/table.py",
        "tui/bench.py",
        "benchmarks/frame_speed.py",
        "themes/projector.toml",
        "screenshots/help.svg",
        "pyproject.toml",
    ):
        assert expected in files, expected


def test_nothing_cites_what_the_repository_does_not_hold() -> None:
    found = findings(scanned_files())
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "# the budget reclaims them later (Issue 15 item 7)",
        "Public API per CONTRACT.md.",
        "(kvm-reference §4.4)",
        'caption = """Xiao Guangrong\'s fast zap (seed 003): ..."""',
        "(seeds 000, 002)",
        "(seed 007)",
        'SEED = "003_04d8d0fcc1d93881.txt"',
        "the thread 004_1f2e3d4c5b6a7980 says",
        "as issue #14 asked",
        "issues 15 and 18",
        "in shared/seeds beside the project",
        "see shared/domain/real-kvm.md",
        '(DESIGN.md, "everything is an event")',
        "# read without argparse (options_of: issue\n# 14, start-up)",
    ],
)
def test_a_planted_citation_is_found(tmp_path: Path, line: str) -> None:
    planted = tmp_path / "engine" / "planted.py"
    planted.parent.mkdir()
    planted.write_text(f'"""A module."""\n\n{line}\n', encoding="utf-8")
    (tmp_path / "README.md").write_text("# clean\n", encoding="utf-8")
    found = findings(scanned_files(tmp_path), tmp_path)
    assert len(found) == 1 and found[0].startswith("engine/planted.py:3: "), found


def test_the_random_seed_and_the_threads_short_names_pass(tmp_path: Path) -> None:
    ok = tmp_path / "engine" / "ok.py"
    ok.parent.mkdir()
    ok.write_text(
        "Workload(seed=3)  # the random seed of the run\n"
        "# the fast-zap thread (kvm, 2013), docs/kvm.md §4.4\n"
        "thread = 'memslot-search'\n",
        encoding="utf-8",
    )
    assert findings(scanned_files(tmp_path), tmp_path) == []
