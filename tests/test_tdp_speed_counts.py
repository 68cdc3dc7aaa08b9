"""benchmarks/tdp_speed.py --instructions: callgrind's count of a command, the same from
run to run (the number two commits are compared by, where times swing by x1.2-1.4)."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "tdp_speed.py"
needs_valgrind = pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")


def tdp_speed() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tdp_speed", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@needs_valgrind
def test_a_count_repeats_exactly_and_grows_with_the_work() -> None:
    instructions = tdp_speed().instructions
    # -S: without site's imports (~28 M instructions, not ~88 M): each callgrind run
    # takes ~2 s of CPU, not ~3.3 s, and the count is as exact
    idle = [sys.executable, "-S", "-c", "pass"]
    busy = [sys.executable, "-S", "-c", "sum(range(200_000))"]
    first, again, more = instructions(idle), instructions(idle), instructions(busy)
    assert first == again
    assert 10_000_000 < first < more


@needs_valgrind
def test_a_failing_command_is_an_error_not_a_count() -> None:
    # `false` fails in ~0.13 M instructions (a Python exiting with 3: 28 M, ~2.5 s of CPU)
    false = shutil.which("false")
    assert false is not None
    with pytest.raises(subprocess.CalledProcessError):
        tdp_speed().instructions([false])
