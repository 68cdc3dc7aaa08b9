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


@pytest.mark.parametrize("asks", ["--help", "-h", "--he"])
def test_a_help_before_a_command_lists_every_command(asks: str) -> None:
    """argparse answers a help before the command with the list of commands: a command
    line naming one builds the others' parsers only then."""
    assert ok(asks, "simulate", "--mmu", "tdp") == ok("--help")


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


def test_overview_shows_the_guest_it_is_given() -> None:
    """--layout/--as pick the guest; a big one shows its first and last memslots with
    the count of those between, and the cost table samples its own slots."""
    env = dict(os.environ, COLUMNS="120")
    out = run("overview", "--layout", "max", env=env).stdout
    assert "region0 " in out and "region32763" in out
    assert "32,740 more" in out and "region100 " not in out
    assert re.search(r"0xfff700 │ region32763 │\s+32764 │", out), out
    out = run("overview", "--layout", "q35-16g", "--as", "1", env=env).stdout
    assert "memslots of address space 1" in out and "smm-ram-below-768k" in out


def test_explorer_options_before_a_command_are_refused_by_name() -> None:
    message = assert_user_error(run("--layout", "max", "overview"))
    assert "--layout is an option of the explorer" in message
    assert "(mmuscope overview --help)" in message
    assert "--layout" not in assert_user_error(run("--lookup", "lookup", "lookup", "-5"))


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (
            ["kvm", "fork", "--pages", "4"],
            "; for counts without one, run: mmuscope kvm fork --summary",
        ),
        (
            ["replay", str(Path(__file__).parent / "fixtures" / "trace-kvmmmu-sample.txt")],
            "; for counts without one, run: mmuscope replay TRACE --summary",
        ),
        ([], "the explorer needs a terminal; for a summary without one, run: mmuscope overview"),
    ],
)
def test_without_a_terminal_the_app_names_the_text_command(args: list[str], hint: str) -> None:
    """What to run instead, spelled so that it can be pasted (no stray quoting)."""
    message = assert_user_error(run(*args))
    assert message.rstrip().endswith(hint) and "`" not in message, message


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["mmio", "--children", "5"], "--children goes with fork; mmio has no child processes"),
        (["fork", "--pages", "-5"], "--pages -5: give 1 to 65536"),
        (["fork", "--pages", "0"], "--pages 0: give 1 to 65536"),
        (["fork", "--children", "-1"], "--children -1: give 0 to 1024"),
    ],
)
def test_kvm_counts_out_of_range_say_the_range(args: list[str], message: str) -> None:
    """The same message for every count out of range, negative or not, and no option
    accepted only to be ignored."""
    assert assert_user_error(run("kvm", *args, "--summary")) == f"mmuscope: error: {message}\n"


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
    "overview-address-space": ["overview", "--as", "3"],
    "explorer-layout-before-overview": ["--layout", "max", "overview"],
    "explorer-theme-before-overview": ["--theme", "nosuch", "overview"],
    "explorer-seed-before-simulate": ["--seed=3", "simulate", "--accesses", "3"],
    "explorer-scenario-before-lookup": ["--scenario", "vtlb", "lookup", "1"],
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
