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
from collections.abc import Callable
from pathlib import Path

ANSI = re.compile(rb"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")


def read_until(fd: int, wanted: list[bytes], timeout: float) -> bytes:
    """Read the terminal until every `wanted` text has appeared (escape codes removed)."""
    return ANSI.sub(b"", read_raw(fd, wanted, timeout))


def read_raw(fd: int, wanted: list[bytes], timeout: float) -> bytes:
    """The bytes read until every `wanted` text is on the screen (escape codes kept)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
        if all(w in ANSI.sub(b"", seen) for w in wanted):
            break
    return seen


def spawn(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[int, int]:
    """Start `argv` (in `cwd`) in a new 110x30 pseudo-terminal: its pid and the terminal."""
    with warnings.catch_warnings():
        # Python 3.12+ warns that forking a multi-threaded process may deadlock the
        # child; this child runs no Python beyond the exec below (all made before fork)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid, fd = pty.fork()
    if pid == 0:  # the child: the command, as a user starts it, and nothing else
        try:
            if cwd is not None:
                os.chdir(cwd)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)  # never back into pytest, in a copy of its process
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 110, 0, 0))
    return pid, fd


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
    pid, fd = spawn([str(command)], env, cwd)
    status: int | None = None
    try:
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


def open_and_end(
    argv: list[str],
    env: dict[str, str],
    wanted: list[bytes],
    end: Callable[[int, int], bool],
    timeout: float = 30,
) -> tuple[bytes, int | None, int | None]:
    """Start `argv` in a 110x30 terminal, read until the `wanted` texts are drawn, then
    `end(pid, fd)` it (send a signal, or close the terminal: then it returns True).  The
    bytes it wrote (escape codes kept), its exit code (None: not gone within 15 s, then
    killed) and the terminal's `c_lflag` after it ended (None: the terminal was closed)."""
    pid, fd = spawn(argv, env)
    status: int | None = None
    raw = b""
    closed = False
    try:
        raw = read_raw(fd, wanted, timeout)
        closed = end(pid, fd)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and status is None:
            if not closed:
                raw += read_raw(fd, [b"\x00never"], 0.2)
            else:
                time.sleep(0.05)
            done, code = os.waitpid(pid, os.WNOHANG)
            status = code if done else None
        if not closed:
            raw += read_raw(fd, [b"\x00never"], 0.2)
        lflag = None if closed else termios.tcgetattr(fd)[3]
    finally:
        if status is None:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        if not closed:
            os.close(fd)
    code = os.WEXITSTATUS(status) if status is not None and os.WIFEXITED(status) else None
    return raw, code, lflag
