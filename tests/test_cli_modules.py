"""The command modules share `tui/cliparts.py`, and `tui/cli.py` only assembles them: no
command module imports the assembling CLI (tests/test_import_graph.py builds the graph and
checks the whole tree for circles), and a command line builds only its own command.
"""

from __future__ import annotations

import subprocess
import sys

import networkx as nx
from mmuscope.tui.cli import RUNNERS, build_parser

from tests.test_import_graph import import_graph


def test_no_command_module_imports_the_assembling_cli() -> None:
    importers = sorted(nx.ancestors(import_graph(), "tui.cli"))
    assert importers == ["tui.__main__"]


def test_a_command_line_builds_only_its_command_and_lists_every_command() -> None:
    """Start-up: `mmuscope` alone, or with an option whose value names a command, imports
    no command module and builds no command's parser, yet `--help` lists every command
    with its help line, as argparse's error for a word that is no command does; a
    command gets its arguments."""
    full = build_parser().format_help()
    assert "rmaps-stat" in full
    assert build_parser(["--help"]).format_help() == full
    assert build_parser(["--scenario", "simulate", "--help"]).format_help() == full
    assert build_parser(["--paused", "nosuch"]).format_help() == full
    assert "rmaps-stat" not in build_parser(["--scenario", "simulate"]).format_help()
    assert "rmaps-stat" not in build_parser([]).format_help()
    words = ["lookup", "0x1", "--layout", "max"]
    args = build_parser(words).parse_args(words)
    assert (args.command, args.gfn, args.layout) == ("lookup", 1, "max")
    words = ["--scenario", "simulate", "--paused"]
    args = build_parser(words).parse_args(words)
    assert (args.command, args.scenario, args.paused) == (None, "simulate", True)
    assert build_parser(["bench", "--quick"]).parse_args(["bench", "--quick"]).quick
    commands = [f"mmuscope.tui.{module}" for module, _ in set(RUNNERS.values())]
    code = (
        "import sys; from mmuscope.tui.cli import build_parser; "
        "build_parser(['--scenario', 'simulate', '--paused']); "
        f"print([m for m in {commands!r} if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"
