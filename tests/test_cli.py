"""The `mmuscope` command line as a whole, run the way a user runs it (tests/cli_run.py): the
help, `python -m tui`, the overview, and bad input to every command — exit 2, one line on
stderr, no traceback, no file left behind (docs/architecture.md §6.3).

The commands have their own files: test_cli_lookup.py, test_cli_export.py,
test_cli_layout.py and test_cli_layout_trace.py.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_run import MTREE_FLAT, MTREE_TREE, STRACE, STRATEGIES, assert_user_error, ok, run

# -- help and the overview --------------------------------------------------------------


def test_help_lists_the_commands() -> None:
    out = ok("--help")
    for command in ("overview", "lookup", "export", "layout"):
        assert re.search(rf"^\s+{command}\s", out, re.MULTILINE), out


@pytest.mark.parametrize("command", ["lookup", "export", "layout"])
def test_subcommand_help(command: str) -> None:
    out = ok(command, "--help")
    assert out.startswith(f"usage: mmuscope {command}")


def test_python_dash_m_tui_is_the_same_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mmuscope.tui", "--help"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "lookup" in done.stdout and "export" in done.stdout


def test_overview_shows_slots_and_strategies() -> None:
    env = dict(os.environ, COLUMNS="120")
    done = run("overview", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    out = done.stdout
    for name in ("ram-below-1m", "pc.rom", "isa-bios", "vga.vram", "pc.bios", "ram-above-4g"):
        assert name in out
    for strategy in STRATEGIES:
        assert re.search(rf"\b{re.escape(strategy)}\b", out), strategy
    assert "mmuscope lookup" in out


# -- bad input --------------------------------------------------------------------------

BAD_INPUT = {
    "unknown-layout-lookup": ["lookup", "1", "--layout", "nope"],
    "unknown-layout-export": ["export", "-o", "out.dot", "--layout", "nope"],
    "unknown-preset": ["layout", "--preset", "nope"],
    "unknown-lookup": ["lookup", "1", "--lookup", "nope"],
    "unknown-lookup-export": ["export", "-o", "out.dot", "--lookup", "nope"],
    "unknown-command": ["nope"],
    "gfn-not-a-number": ["lookup", "zz"],
    "gfn-negative": ["lookup", "-5"],
    "gfn-negative-after-dashes": ["lookup", "--", "-5"],
    "gfn-missing": ["lookup"],
    "output-missing": ["export"],
    "address-space-missing": ["lookup", "1", "--as", "2"],
    "layout-and-mtree": ["lookup", "1", "--layout", "pc-4g", "--mtree", "layout.txt"],
    "output-suffix": ["export", "-o", "out.xyz"],
    "output-no-suffix": ["export", "-o", "out"],
    "output-directory-missing": ["export", "-o", "/nonexistent/dir/out.dot"],
    "mtree-missing": ["lookup", "1", "--mtree", "missing.txt"],
    "mtree-directory": ["lookup", "1", "--mtree", "."],
    "mtree-binary": ["lookup", "1", "--mtree", "garbage.bin"],
    "mtree-text": ["lookup", "1", "--mtree", "garbage.txt"],
    "mtree-empty": ["lookup", "1", "--mtree", "empty.txt"],
    "mtree-export": ["export", "-o", "out.dot", "--mtree", "garbage.bin"],
    "mtree-layout-missing": ["layout", "--mtree", "missing.txt", "--json"],
    "mtree-layout-binary": ["layout", "--mtree", "garbage.bin", "--json"],
    "mtree-layout-empty": ["layout", "--mtree", "empty.txt"],
    "mtree-is-a-trace": ["layout", "--mtree", str(STRACE)],
    "mtree-address-space": ["layout", "--mtree", str(MTREE_FLAT), "--address-space", "nope"],
    "trace-missing": ["layout", "--trace", "missing.txt"],
    "trace-binary": ["layout", "--trace", "garbage.bin"],
    "trace-text": ["layout", "--trace", "garbage.txt", "--json"],
    "trace-empty": ["layout", "--trace", "empty.txt"],
    "trace-is-an-mtree": ["layout", "--trace", str(MTREE_TREE)],
}


@pytest.mark.parametrize("args", BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input(args: list[str], tmp_path: Path) -> None:
    (tmp_path / "garbage.bin").write_bytes(random.Random(2011).randbytes(4096) + b"\0\xff")
    (tmp_path / "garbage.txt").write_text("address: nowhere\n0x1000-0x2000 ram\n(qemu) quit\n")
    (tmp_path / "empty.txt").write_bytes(b"")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert_user_error(run(*args, cwd=tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not Path("/nonexistent").exists()
