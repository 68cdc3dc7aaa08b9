"""A progress display on stderr for the commands that can run past a couple of seconds
(`bench`, `kvm`, `rmaps-stat`, `simulate`): what is running, n of N, the time so far.

It shows only where someone watches: stderr a terminal, stdout a terminal or a file (not
a pipe into another program), and output for people (not `--json`/`--jsonl`/`--summary`
JSON).  Rich draws it on stderr and takes it away when the work ends, so stdout holds the
command's output alone.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # Rich is imported only for a display (`simulate` starts without it)
    from rich.progress import Progress


def watched(*, json_output: bool = False) -> bool:
    """Whether a person watches the command run (see the module's docstring)."""
    if json_output or not sys.stderr.isatty():
        return False
    try:
        return not stat.S_ISFIFO(os.fstat(sys.stdout.fileno()).st_mode)
    except (OSError, ValueError):
        return False


class Steps:
    """Steps of known number, shown as `title: what` and n of N: `start(what)` when a
    step begins (the steps begun before it are done), `finished(what)` when the caller
    hears of a step only at its end, or `reached(n, what)` for n done at once."""

    def __init__(self, progress: Progress | None, title: str, total: int) -> None:
        self.progress = progress
        self.title = title
        self.begun = 0
        self.task = None if progress is None else progress.add_task(title, total=total)

    def start(self, what: str) -> None:
        self._show(self.begun, what)
        self.begun += 1

    def finished(self, what: str) -> None:
        self.begun += 1
        self._show(self.begun, what)

    def reached(self, done: int, what: str) -> None:
        """`done` of the steps are over (work counted in its own units, not one by one)."""
        self.begun = done
        self._show(done, what)

    def _show(self, done: int, what: str) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=done, description=f"{self.title}: {what}")


@contextmanager
def steps(title: str, total: int, *, shown: bool) -> Iterator[Steps]:
    """A display of `total` steps under `title` on stderr while the block runs (none
    unless `shown`)."""
    if not shown:
        yield Steps(None, title, total)
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(bar_width=20),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(file=sys.stderr),
        transient=True,
        redirect_stdout=False,  # the command's output stays on stdout, written as it goes
    )
    with progress:
        yield Steps(progress, title, total)
