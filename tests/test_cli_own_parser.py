"""A command line that starts with a command of OWN_ARGUMENTS_ONLY (`simulate`) is parsed
by that command's parser alone under a bare top level (tui/cli.py `_own_parser`, for
a faster start-up): it parses, refuses and helps exactly as the whole
parser does.  And simulate's usual command line, read without argparse
(`simulate_cli.options_of`), gives the options argparse gives; any other it leaves to
argparse."""

from __future__ import annotations

import argparse
import contextlib
import io
import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mmuscope.tui import simulate_cli
from mmuscope.tui.cli import OWN_ARGUMENTS_ONLY, build_parser
from mmuscope.tui.cliparts import (
    EXPLORER_OPTION_STRINGS,
    CliParser,
    add_explorer_options,
    help_width,
)
from mmuscope.tui.simulate_cli import SimulateOptions

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


# -- simulate's command line without argparse (simulate_cli.options_of) ---------------------

VALUES = (
    "tdp", "direct", "shadow", "bogus", "kernbench", "churn", "", "0x10", "10", "1_000", "-1",
    "-0", "x", " 7 ", "fast", "slow", "roots", "q35-16g", "0.25", "1e-1", "nan", "2", "-x",
)  # fmt: skip
GOOD_VALUES = {
    "--mmu": ("tdp", "direct", "shadow"), "--zap": ("fast", "slow", "roots"),
    "--race-rate": ("0", "0.25", "1e-1", "1"), "--workload": ("kernbench", "churn", "", "a=b"),
    "--layout": ("pc-4g", "q35-16g", "x y"),
}  # fmt: skip
COUNTS = ("0", "10", "0x10", "0o7", "1_000", " 7 ", "99999999999999999999")
OTHER_WORDS = ("--smi", "--acc", "--s", "-h", "--", "--paused", "--lookup=rbtree", "extra")
OPTIONS = tuple(o for o in simulate_cli._OPTIONS if o != "--jsonl")


@st.composite
def simulate_words(draw: st.DrawFn) -> list[str]:
    """Mostly simulate's options with a value (`--opt value`, `--opt=value`), some with a
    bad one, now and then a word argparse reads otherwise."""
    words: list[str] = []
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            words.append(draw(st.sampled_from(OTHER_WORDS)))
        elif kind == 1:
            words.append(draw(st.sampled_from(("--jsonl", "--jsonl=1"))))
        else:
            option = draw(st.sampled_from(OPTIONS))
            good = GOOD_VALUES.get(option, COUNTS)
            value = draw(st.sampled_from(VALUES if kind in (3, 4) else good))
            words += [f"{option}={value}"] if kind in (2, 4) else [option, value]
    return words


def _simulate_fields(argv: list[str]) -> dict[str, object] | None:
    """The options argparse gives for `simulate` then `argv`, or None if it exits."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            args = build_parser(["simulate", *argv]).parse_args(["simulate", *argv])
        except SystemExit:
            return None
    return {name: getattr(args, name) for name in SimulateOptions.__slots__}


def _fields(options: SimulateOptions) -> dict[str, object]:
    return {name: getattr(options, name) for name in SimulateOptions.__slots__}


def test_options_of_reads_the_options_of_simulates_parser() -> None:
    own = build_parser(["simulate"])
    sub = next(a for a in own._actions if isinstance(a, argparse._SubParsersAction))
    strings = {s for a in sub.choices["simulate"]._actions for s in a.option_strings}
    assert strings - {"-h", "--help"} == set(simulate_cli._OPTIONS)


@pytest.mark.parametrize("argv", GOOD + BAD, ids=" ".join)
def test_options_of_gives_argparses_options_or_leaves_the_line_to_it(argv: list[str]) -> None:
    options = simulate_cli.options_of(argv[1:])
    if argv in BAD:
        assert options is None  # argparse refuses or helps, and options_of leaves it that
    else:
        assert options is None or _fields(options) == _simulate_fields(argv[1:])


def test_options_of_reads_the_usual_command_lines() -> None:
    for argv in (
        ["--mmu", "tdp", "--workload", "kernbench", "--accesses", "100000"],
        ["--mmu=direct", "--workload=churn", "--zap", "fast", "--at", "0x10", "--jsonl"],
        ["--jsonl", "--seed", "3", "--workload", "fork", "--mmu", "shadow", "--seed", "4"],
        ["--mmu", "tdp", "--workload", "k", "--race-rate", "0.5", "--smi-every", "3"],
    ):
        options = simulate_cli.options_of(argv)
        assert options is not None, argv
        assert _fields(options) == _simulate_fields(argv)


@settings(max_examples=150, deadline=None)
@given(simulate_words())
def test_options_of_agrees_with_argparse(words: list[str]) -> None:
    """Any line options_of reads, argparse reads alike (else options_of leaves it)."""
    argv = ["--mmu", "tdp", "--workload", "kernbench", *words]
    for line in (argv, words):
        options = simulate_cli.options_of(line)
        if options is not None:  # None: argparse parses it (or refuses it) as before
            assert _fields(options) == _simulate_fields(line)
