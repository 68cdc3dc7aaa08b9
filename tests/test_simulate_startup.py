"""`mmuscope simulate`'s start-up (issue 14 "Speed": the whole command at 200,000 lines
per second, start-up included) imports none of the modules it once spent its time on:
argparse (its usual command line is read by `simulate_cli.options_of`) and the other
commands' parts (tui.cliparts), the dataclasses module (engine.record) and inspect, typing
(engine.typing_lite) and the ast module a typing.NamedTuple's annotations compile into."""

from __future__ import annotations

import subprocess
import sys

import pytest

NOT_IMPORTED = (
    "argparse", "gettext", "locale", "mmuscope.tui.cliparts", "dataclasses", "inspect",
    "typing", "ast",
)  # fmt: skip


@pytest.mark.parametrize(
    "argv",
    [
        ["--mmu", "tdp", "--workload", "kernbench", "--accesses", "30"],
        ["--mmu=tdp", "--workload=kernbench", "--accesses=40", "--seed", "3"],
    ],
    ids=" ".join,
)
def test_simulate_starts_without(argv: list[str]) -> None:
    code = (
        "import sys, io, contextlib\n"
        "from mmuscope.tui.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        f"    code = main(['simulate', *{argv!r}])\n"
        f"print(code, 'kvm_page_fault' in out.getvalue(), [m for m in {NOT_IMPORTED!r}"
        " if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "0 True []"


def test_any_other_simulate_line_is_argparses() -> None:
    """A line options_of leaves (here an abbreviation) is parsed by argparse, as before."""
    code = (
        "import sys, io, contextlib\n"
        "from mmuscope.tui.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    code = main(['simulate', '--mmu', 'tdp', '--work', 'kernbench', '--acc', '5'])\n"
        "print(code, 'argparse' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == "0 True"
