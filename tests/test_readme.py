"""The README against the program: what it says a key or an option does exists, and
what users asked it to explain is explained."""

from __future__ import annotations

import re
from pathlib import Path

from mmuscope.tui.screens.shadow_mmu import PAGING_MODES

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def section(title: str) -> str:
    start = README.index(title)
    end = README.find("\n#", start + len(title))
    return README[start : end if end > 0 else None]


def test_the_f2_section_lists_every_mmu_p_cycles() -> None:
    text = section("### The shadow-MMU screen (F2)")
    block = text[text.index("`p` ") :].split("\n\n")[0]
    bullets = re.findall(r"^- \*\*(.+?)\*\*", block, re.MULTILINE)
    assert len(bullets) == len(PAGING_MODES), bullets
    for bold, (label, _, _) in zip(bullets, PAGING_MODES, strict=True):
        assert label.startswith(bold), (bold, label)


def test_the_readme_explains_what_users_asked_about() -> None:
    """What users asked the README to explain: real data for tests, text and trace.dat,
    --hex64, the address spaces --mtree loads, refused exports, Ctrl+C, the clicker
    keys."""
    for words in (
        "MMUSCOPE_REALDATA",
        "../shared/realdata",
        "trace-cmd report -i trace.dat > trace.txt",
        "--hex64",
        "`KVM-SMRAM` as address space 1",
        "refused up front",
        "exit code 130",
        "PageDown, →, `.`",
    ):
        assert words in README, words


def test_make_run_writes_exports_outside_the_checkouts_root(tmp_path: Path) -> None:
    """A dry run of `make run`, which must not touch the checkout: `make -n` still runs
    the recipe of any target that is a makefile, so the install stamp stands in as a fresh
    file of its own (with `STAMP=Makefile` a fresh clone, whose pyproject.toml is checked out
    after its Makefile, reinstalled the project's venv under the running tests)."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        import pytest

        pytest.skip("make is not installed")
    root = Path(__file__).resolve().parent.parent
    stamp = tmp_path / "installed"
    stamp.touch()
    makefile_mtime = (root / "Makefile").stat().st_mtime_ns
    dry = subprocess.run(
        ["make", "-n", "run", f"STAMP={stamp}"], cwd=root, capture_output=True, text=True
    )
    assert "pip install" not in dry.stdout, dry.stdout
    assert (root / "Makefile").stat().st_mtime_ns == makefile_mtime
    assert "mmuscope --export-dir exports" in dry.stdout, dry.stdout
    assert "/exports/" in (root / ".gitignore").read_text().split()


NUMBER_WORDS = "zero one two three four five six seven eight nine ten eleven twelve thirteen"


def test_the_readme_lists_the_scenarios_mmuscope_scenarios_lists() -> None:
    """`mmuscope scenarios` against the README: the count in its opening, the table in
    "### Scenarios" and the teachers' numbered lesson plan name the same scenarios in the
    same order, each numbered once, and "Scenario N" is the scenario's place in it."""
    from tests.cli_run import run

    listed = run("scenarios")
    assert listed.returncode == 0, listed.stderr
    names = [line.split()[0] for line in listed.stdout.splitlines() if line[:1].isalpha()]
    names = [n for n in names if n != "open"]  # the closing hint
    assert len(names) == len(set(names)) >= 10, names
    count = NUMBER_WORDS.split()[len(names)]
    assert f"{count.capitalize()} classroom scenarios" in README
    table = section("### Scenarios")
    assert re.findall(r"^\| `([a-z0-9-]+)` \|", table, re.MULTILINE) == names
    plan = section("## Tutorial: for teachers")
    plan = plan[plan.index("\n1. ") : plan.index("\n\n", plan.index("\n1. "))]
    numbers = [int(n) for n in re.findall(r"^(\d+)\. ", plan, re.MULTILINE)]
    assert numbers == list(range(1, len(names) + 1)), numbers
    for number, name in re.findall(r"Scenario (\d+), `mmuscope --scenario ([a-z0-9-]+)`", README):
        assert names.index(name) + 1 == int(number), (number, name)


def test_the_scenario_files_are_numbered_once() -> None:
    """The data files' numbers give `mmuscope scenarios` its order: one file each."""
    from mmuscope.engine.scenarios.scenario import SCENARIO_DIR

    numbers = [path.name.split("-")[0] for path in sorted(SCENARIO_DIR.glob("*.toml"))]
    assert numbers == [f"{i:02d}" for i in range(1, len(numbers) + 1)], numbers
