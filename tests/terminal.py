"""A command in a pseudo-terminal, as a user at a terminal starts it: what it drew until
some texts were on the screen, and how it ended after ctrl+q."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import termios
import time
import warnings
from pathlib import Path

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


def open_and_quit(
    command: Path,
    env: dict[str, str],
    wanted: list[bytes],
    timeout: float = 30,
    cwd: Path | None = None,
) -> tuple[bytes, int | None]:
    """Start `command` (in `cwd`) in a 110x30 terminal, read until the `wanted` texts are drawn (or
    `timeout`), press ctrl+q; the screen's text and the exit code (None: it did not quit
    within 15 s, and was killed)."""
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a multi-threaded process may deadlock the
        # child; this child runs no Python beyond the exec below (all made before fork)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid, fd = pty.fork()
    if pid == 0:  # the child: the command, as a user starts it, and nothing else
        try:
            if cwd is not None:
                os.chdir(cwd)
            os.execve(str(command), [str(command)], env)
        finally:
            os._exit(127)  # never back into pytest, in a copy of its process
    status: int | None = None
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 110, 0, 0))
        screen = read_until(fd, wanted, timeout)
        os.write(fd, b"\x11")  # ctrl+q
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and status is None:
            read_until(fd, [b"\x00never"], timeout=0.2)  # drain the terminal
            done, code = os.waitpid(pid, os.WNOHANG)
            status = code if done else None
    finally:
        if status is None:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(fd)
    return screen, os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None
