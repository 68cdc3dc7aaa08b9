"""Interrupting and killing `mmuscope`, run as users run it (the console script in a
subprocess): Ctrl+C is one line and exit 130 in every command, never a traceback, and no
Graphviz `dot` outlives its parent; exports of huge layouts are refused up front.

`dot` is replaced by a script on PATH that records its pid and sleeps, so that the test
can interrupt mmuscope while `dot` is surely running (real dot takes many minutes only on
layouts that are now refused)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

MMUSCOPE = Path(sys.executable).parent / "mmuscope"
WAIT = 30.0  # seconds to wait for a process to reach the state the test needs


def wait_for(check: object, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.fixture
def slow_dot(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An environment whose `dot` writes its pid to a file and sleeps."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pid_file = tmp_path / "dot.pid"
    dot = bin_dir / "dot"
    dot.write_text(
        f'#!/bin/sh\necho $$ > "{pid_file}.tmp"\nmv "{pid_file}.tmp" "{pid_file}"\nexec sleep 300\n'
    )
    dot.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return env, pid_file


def start_export(tmp_path: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(MMUSCOPE), "export", "-o", str(tmp_path / "tree.svg")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_ctrl_c_during_an_export_is_one_line_exit_130_and_stops_dot(
    tmp_path: Path, slow_dot: tuple[dict[str, str], Path]
) -> None:
    env, pid_file = slow_dot
    proc = start_export(tmp_path, env)
    wait_for(pid_file.exists, "dot to start")
    dot_pid = int(pid_file.read_text())
    proc.send_signal(signal.SIGINT)  # what a terminal's Ctrl+C sends to mmuscope
    out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and err.count("\n") == 1 and "interrupted" in err, err
    wait_for(lambda: not alive(dot_pid), "dot to be gone after mmuscope exited")
    assert not (tmp_path / "tree.svg").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tree")] == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_mmuscope_leaves_no_dot_running(
    tmp_path: Path, slow_dot: tuple[dict[str, str], Path], sig: signal.Signals
) -> None:
    env, pid_file = slow_dot
    proc = start_export(tmp_path, env)
    wait_for(pid_file.exists, "dot to start")
    dot_pid = int(pid_file.read_text())
    proc.send_signal(sig)
    proc.communicate(timeout=WAIT)
    wait_for(lambda: not alive(dot_pid), f"dot to die with mmuscope ({sig.name})")


@pytest.mark.parametrize("mode", ["--jsonl", "--summary"])
def test_ctrl_c_while_reading_a_trace_is_one_line_exit_130(mode: str) -> None:
    proc = subprocess.Popen(
        [str(MMUSCOPE), "replay", "-", mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    syscall = Path(f"/proc/{proc.pid}/syscall")

    def reading_stdin() -> bool:
        try:
            return syscall.read_text().startswith("0 0x0 ")  # read(0, ...) on x86-64
        except OSError:
            return False

    if not syscall.exists() or os.uname().machine != "x86_64":
        proc.kill()
        proc.communicate()
        pytest.skip("needs /proc/PID/syscall on x86-64 to know mmuscope is reading")
    wait_for(reading_stdin, "mmuscope to read its standard input")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=WAIT)
    assert proc.returncode == 130, (out, err)
    assert err == "mmuscope: interrupted\n", err


def test_the_max_layout_is_refused_up_front_in_one_line(tmp_path: Path) -> None:
    """32764 memslots: dot would run for many minutes; say so at once (and `.dot` works)."""
    out = tmp_path / "max.svg"
    done = subprocess.run(
        [str(MMUSCOPE), "export", "-o", str(out), "--layout", "max"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done
    assert done.stderr.count("\n") == 1 and "too many for dot" in done.stderr, done.stderr
    assert ".dot" in done.stderr and done.stdout == ""
    assert list(tmp_path.iterdir()) == []


def test_a_dot_that_takes_too_long_is_stopped(
    slow_dot: tuple[dict[str, str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from mmuscope.engine.export.render import ExportError, run_dot

    env, pid_file = slow_dot
    monkeypatch.setenv("PATH", env["PATH"])
    with pytest.raises(ExportError, match=r"took longer than 0\.5 s"):
        run_dot("digraph { a }", "svg", timeout=0.5)
    dot_pid = int(pid_file.read_text())
    wait_for(lambda: not alive(dot_pid), "the stopped dot to be gone")
