"""The real `mmuscope` command in a pseudo-terminal: it draws the explorer and quits
cleanly on ctrl+q, as a user at a terminal sees it."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import sys
import termios
import time
import warnings
from pathlib import Path

import pytest

MMUSCOPE = Path(sys.executable).with_name("mmuscope")
ANSI = re.compile(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")


def read_until(fd: int, wanted: list[bytes], timeout: float) -> bytes:
    """Read the terminal until every `wanted` text has appeared (escape codes removed)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
        text = ANSI.sub(b"", seen)
        if all(w in text for w in wanted):
            break
    return ANSI.sub(b"", seen)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a POSIX pseudo-terminal")
def test_mmuscope_opens_in_a_terminal_and_quits_on_ctrl_q(tmp_path: Path) -> None:
    assert MMUSCOPE.exists(), f"console script not installed next to {sys.executable}"
    status: int | None = None
    env = dict(
        os.environ,
        TERM="xterm-256color",
        MMUSCOPE_CONFIG_DIR=str(tmp_path),
        TEXTUAL_ANIMATIONS="none",
    )
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a multi-threaded process may deadlock the
        # child; this child runs no Python beyond the exec below (all made before fork)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid, fd = pty.fork()
    if pid == 0:  # the child: the command, as a user starts it, and nothing else
        try:
            os.execve(str(MMUSCOPE), [str(MMUSCOPE)], env)
        finally:
            os._exit(127)  # never back into pytest, in a copy of its process
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 110, 0, 0))
        screen = read_until(fd, [b"memslots", b"kvm_stat", b"pc-4g"], timeout=30)
        assert b"memslots" in screen and b"kvm_stat" in screen, screen[-2000:]
        assert b"pc-4g" in screen
        os.write(fd, b"\x11")  # ctrl+q
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and status is None:
            read_until(fd, [b"\x00never"], timeout=0.2)  # drain the terminal
            done, code = os.waitpid(pid, os.WNOHANG)
            status = code if done else None
        assert status is not None and os.WIFEXITED(status), "mmuscope did not quit on ctrl+q"
        assert os.WEXITSTATUS(status) == 0
    finally:
        if status is None:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(fd)
