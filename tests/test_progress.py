"""Long commands show a progress display on stderr where someone watches, and nothing
where their output goes to another program or is JSON (tui/progress.py).

stderr is a pseudo-terminal here, read to its end; stdout a file or a pipe.
"""

from __future__ import annotations

import os
import pty
import subprocess
from pathlib import Path

import pytest

from tests.cli_run import MMUSCOPE
from tests.kvm_host import TRACE_REASON


def run_watched(args: list[str], out: Path, *, pipe: bool = False) -> tuple[str, str]:
    """The command's stdout and what it drew on the terminal that is its stderr."""
    parent, child = pty.openpty()
    command = [str(MMUSCOPE), *args]
    env = dict(os.environ, COLUMNS="120", TERM="xterm-256color")
    with out.open("w") as sink:
        if pipe:
            command = ["bash", "-c", " ".join(f"'{w}'" for w in command) + " | cat"]
        done = subprocess.Popen(command, stdout=sink, stderr=child, env=env)
        os.close(child)
        drawn = b""
        while True:
            try:
                chunk = os.read(parent, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            drawn += chunk
        done.wait(timeout=300)
    os.close(parent)
    assert done.returncode == 0, drawn.decode(errors="replace")
    return out.read_text(), drawn.decode(errors="replace")


def test_bench_shows_its_progress_on_a_terminal_only(tmp_path: Path) -> None:
    args = ["bench", "--quick", "--table", "slot_cache"]
    out, drawn = run_watched(args, tmp_path / "out.txt")
    assert "bench: slot_cache" in drawn and "0/1" in drawn, drawn
    assert "0:00:0" not in out and "0/1" not in out and out.strip()  # no progress in it
    for other in (["--json"], []):
        out, drawn = run_watched(args + other, tmp_path / "out.txt", pipe=not other)
        assert drawn == "", drawn
        assert out


@pytest.mark.skipif(TRACE_REASON is not None, reason=TRACE_REASON or "")
def test_kvm_shows_the_guest_program_s_slices(tmp_path: Path) -> None:
    out, drawn = run_watched(
        ["kvm", "fork", "--children", "2", "--pages", "64", "--compare"], tmp_path / "o.txt"
    )
    assert "kvm fork:" in drawn and "/3" in drawn, drawn
    assert "kvm fork:" not in out
    _, drawn = run_watched(["kvm", "touch", "--summary"], tmp_path / "o.txt")
    assert drawn == ""


def test_rmaps_stat_shows_the_processes_run(tmp_path: Path) -> None:
    args = ["rmaps-stat", "--children", "300"]
    out, drawn = run_watched(args, tmp_path / "out.txt")
    assert "rmaps-stat fork" in drawn and "/300" in drawn, drawn
    assert out.startswith("Rmap_Count:") and "/300" not in out
    out, drawn = run_watched(args, tmp_path / "out.txt", pipe=True)
    assert drawn == "" and out.startswith("Rmap_Count:")


def test_simulate_shows_the_accesses_run_beside_its_trace_text(tmp_path: Path) -> None:
    args = ["simulate", "--mmu", "tdp", "--workload", "kernbench", "--accesses", "3000"]
    out, drawn = run_watched(args, tmp_path / "out.txt")
    assert "simulate tdp kernbench" in drawn and "/3000" in drawn, drawn
    assert out.startswith("cpus=") and "/3000" not in out
    for other, pipe in ((["--jsonl"], False), ([], True)):
        out, drawn = run_watched(args + other, tmp_path / "out.txt", pipe=pipe)
        assert drawn == "" and out
