"""A command line that starts with a command of OWN_ARGUMENTS_ONLY (`simulate`) is parsed
by that command's parser alone under a bare top level (tui/cli.py `_own_parser`, the
start-up of issue 14 "Speed"): it parses, refuses and helps exactly as the whole
parser does."""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil

import pytest

from tui.cli import OWN_ARGUMENTS_ONLY, build_parser
from tui.cliparts import EXPLORER_OPTION_STRINGS, CliParser, add_explorer_options, help_width

GOOD = [
    ["simulate", "--mmu", "tdp", "--workload", "kernbench"],
    ["simulate", "--mmu=direct", "--work", "churn", "--accesses", "0x10", "--seed", "3"],
    ["simulate", "--mmu", "tdp", "--workload", "churn", "--zap", "roots", "--at", "5", "--jsonl"],
    ["simulate", "--mmu", "tdp", "--workload", "k", "--race", "0.5", "--smi", "3", "--lay", "x"],
]
BAD = [
    ["simulate"],
    ["simulate", "--s", "1", "--mmu", "tdp", "--workload", "kernbench"],  # top level: ambiguous
    ["simulate", "--se", "1", "--mmu", "tdp", "--workload", "kernbench"],
    ["simulate", "--sm", "1", "--mmu", "tdp", "--workload", "kernbench"],
    ["simulate", "--mmu", "bogus", "--workload", "kernbench"],
    ["simulate", "--mmu", "tdp", "--workload", "kernbench", "extra"],
    ["simulate", "--mmu", "tdp", "--workload", "kernbench", "--paused"],
    ["simulate", "--mmu", "tdp", "--workload", "kernbench", "--lookup=rbtree"],
    ["simulate", "--mmu", "tdp", "--workload", "kernbench", "--accesses", "-1"],
    ["simulate", "--mmu", "tdp", "--workload", "kernbench", "--race-rate", "2"],
    ["simulate", "--version"],
    ["simulate", "-h"],
    ["simulate", "--help"],
    ["simulate", "--", "--mmu", "tdp"],
]


def _outcome(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[object, ...]:
    """What a user sees (exit code, stdout, stderr) and what the command's runner reads
    (the command's own arguments)."""
    out, err = io.StringIO(), io.StringIO()
    code: object = None
    args = argparse.Namespace()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            args = parser.parse_args(argv)
        except SystemExit as exit:
            code = exit.code
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    own = [a.dest for a in sub.choices[argv[0]]._actions if a.dest != "help"]
    return code, out.getvalue(), err.getvalue(), {d: getattr(args, d, "-") for d in own}


@pytest.mark.parametrize("argv", GOOD + BAD, ids=" ".join)
def test_the_own_parser_is_the_whole_one_for_its_command(argv: list[str]) -> None:
    assert argv[0] in OWN_ARGUMENTS_ONLY
    own = build_parser(argv)
    assert len(own._actions) == 3 + len(EXPLORER_OPTION_STRINGS)  # --help, --version, command
    assert _outcome(own, argv) == _outcome(build_parser(), argv)


def test_the_bare_top_level_has_the_explorer_options_strings_in_order() -> None:
    parser = CliParser(prog="mmuscope")
    add_explorer_options(parser)
    strings = [s for a in parser._actions if a.dest != "help" for s in a.option_strings]
    assert tuple(strings) == EXPLORER_OPTION_STRINGS


@pytest.mark.parametrize("columns", [None, "", "x", "0", "-5", "1", "57", "200"])
def test_the_help_width_is_the_one_shutil_gives(
    columns: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for lines in (None, "0", "30"):
        for name, value in (("COLUMNS", columns), ("LINES", lines)):
            if value is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, value)
        assert help_width() == shutil.get_terminal_size().columns - 2
        assert argparse.HelpFormatter("x")._width == CliParser()._get_formatter()._width
