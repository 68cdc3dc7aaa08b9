"""`mmuscope export`: the memslot structures as dot, SVG, PDF and PNG, the lookup path
marked, rendered with Graphviz; without Graphviz or with a failing `dot` a clean error and
no partial file (tests/cli_run.py): the exports whose files are the point run through the
entry point, `main(argv)`, in the test process (`here`), the failures as the console
script in a subprocess with its own PATH.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli_run import Q35, STRATEGIES, assert_user_error, layout_json, ok_here, realdata, run

FORMATS = ("dot", "svg", "pdf", "png")
MAGIC = {"dot": b"digraph", "svg": b"<?xml", "pdf": b"%PDF", "png": b"\x89PNG\r\n\x1a\n"}
HAVE_DOT = shutil.which("dot") is not None
needs_dot = pytest.mark.skipif(not HAVE_DOT, reason="Graphviz 'dot' is not installed")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_export_every_strategy_and_format(strategy: str, fmt: str, tmp_path: Path) -> None:
    if fmt != "dot" and not HAVE_DOT:
        pytest.skip("Graphviz 'dot' is not installed")
    out = tmp_path / f"{strategy}.{fmt}"
    assert ok_here("export", "-o", out, "--lookup", strategy).strip() == f"wrote {out}"
    data = out.read_bytes()
    assert data.startswith(MAGIC[fmt])
    if fmt == "svg":
        assert b"<svg" in data and b"slot 6" in data
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]  # no temporary left


@needs_dot
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_exported_dot_renders_with_graphviz(strategy: str, tmp_path: Path) -> None:
    out = tmp_path / "tree.dot"
    ok_here("export", "-o", out, "--lookup", strategy)
    svg = subprocess.run(
        ["dot", "-Tsvg", str(out)], capture_output=True, text=True, check=False, timeout=30
    )
    assert svg.returncode == 0, svg.stderr
    assert "<svg" in svg.stdout
    for slot in range(7):  # pc-4g has slots 0..6
        assert f"slot {slot}<" in svg.stdout, slot


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_export_path_marks_the_visits(strategy: str, tmp_path: Path) -> None:
    out = tmp_path / "path.dot"
    ok_here("export", "-o", out, "--lookup", strategy, "--path", "0xfee00")
    text = out.read_text()
    labels = re.findall(r"((?:#\d+,)*#\d+)(?:<BR/>| ·)", text)  # "#3,#4": one entry twice
    marks = [int(n) for label in labels for n in label.replace("#", "").split(",")]
    explained = ok_here("lookup", "0xfee00", "--lookup", strategy, "--no-cache")
    found = re.search(r"after (\d+) visited", explained)
    assert found, explained
    visited = int(found[1])
    assert sorted(marks) == list(range(1, visited + 1)), (marks, visited)
    assert "miss" in text
    if strategy == "wbtree":
        assert visited == 4


def test_export_overwrites_an_existing_file(tmp_path: Path) -> None:
    out = tmp_path / "tree.dot"
    out.write_text("old")
    ok_here("export", "-o", out)
    assert out.read_text().startswith("digraph")


def test_export_smm_address_space(tmp_path: Path) -> None:
    out = tmp_path / "smm.dot"
    ok_here("export", "-o", out, "--layout", "q35-16g", "--as", "1")
    slots = {int(n) for n in re.findall(r"slot (\d+)", out.read_text())}
    assert slots == {0, 1, 2, 3, 5, 6}  # q35-16g's SMRAM address space


# -- export without Graphviz ------------------------------------------------------------


@pytest.fixture
def no_dot(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A working directory and an environment whose PATH holds no `dot` at all.

    The console script is run by absolute path; its shebang names the venv's python."""
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    return work, dict(os.environ, PATH=str(empty_bin))


@pytest.mark.parametrize("fmt", ["pdf", "svg", "png"])
def test_export_without_dot_fails_cleanly(fmt: str, no_dot: tuple[Path, dict[str, str]]) -> None:
    work, env = no_dot
    done = run("export", "-o", f"out.{fmt}", "--path", "0xfee00", cwd=work, env=env)
    message = assert_user_error(done)
    assert "apt-get install graphviz" in message
    assert list(work.iterdir()) == []


def test_export_dot_works_without_graphviz(no_dot: tuple[Path, dict[str, str]]) -> None:
    work, env = no_dot
    done = run("export", "-o", "out.dot", "--lookup", "wbtree", cwd=work, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert [p.name for p in work.iterdir()] == ["out.dot"]
    assert (work / "out.dot").read_text().startswith("digraph")


def test_export_failing_dot_leaves_no_partial_file(tmp_path: Path) -> None:
    """A `dot` that writes half a picture and fails: the old file stays, no temporary."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake_dot = fake_bin / "dot"
    fake_dot.write_text("#!/bin/sh\nprintf '%%PDF-1.5 partial'\necho 'Error: syntax' >&2\nexit 1\n")
    fake_dot.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    (work / "out.pdf").write_bytes(b"old picture")
    env = dict(os.environ, PATH=f"{fake_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    message = assert_user_error(run("export", "-o", "out.pdf", cwd=work, env=env))
    assert "Error: syntax" in message
    assert [p.name for p in work.iterdir()] == ["out.pdf"]
    assert (work / "out.pdf").read_bytes() == b"old picture"


@pytest.mark.parametrize("strategy", ["wbtree", "rbtree"])
def test_export_realdata_mtree(strategy: str, tmp_path: Path) -> None:
    path = realdata(Q35)
    out = tmp_path / "q35.dot"
    ok_here("export", "--mtree", path, "-o", out, "--lookup", strategy, "--path", "0x150000")
    text = out.read_text()
    assert text.startswith("digraph")
    slots = set(re.findall(r"slot (\d+)\\n", text))
    assert len(slots) == len(layout_json("--mtree", path))
    assert "hit" in text
