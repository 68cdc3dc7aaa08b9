"""Reading a tracefs ``trace_pipe`` (the kernel's consuming trace reader) for ``mmuscope
live``: `tail_lines` reads it (a FIFO in the tests) without ever blocking for long —
non-blocking reads after a `select` with a short timeout, so the thread that runs it
notices when the app quits."""

from __future__ import annotations

import contextlib
import os
import select
import time
from collections.abc import Callable, Iterator
from pathlib import Path

POLL = 0.1  # seconds a read waits for data before checking for quit
READ_SIZE = 1 << 20  # few reads: see engine/replay/index.py on the GIL and I/O


def tail_lines(
    pipe: Path, cancelled: Callable[[], bool], poll: float = POLL
) -> Iterator[list[str]]:
    """Lines as they come (each with its newline); an empty list after `poll` seconds
    without any.  Ends when `cancelled()`.  A FIFO with no writer reads as end of file:
    wait for one (trace_pipe itself never ends)."""
    fd = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    try:
        rest = b""
        while not cancelled():
            ready, _, _ = select.select([fd], [], [], poll)
            chunk = b""
            if ready:
                with contextlib.suppress(BlockingIOError):  # nothing after all
                    chunk = os.read(fd, READ_SIZE)
                if not chunk:
                    time.sleep(poll)  # a FIFO whose writer is gone (or not there yet)
            *lines, rest = (rest + chunk).split(b"\n")
            yield [line.decode("utf-8", "replace") + "\n" for line in lines]
    finally:
        os.close(fd)
