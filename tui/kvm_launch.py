"""What the app needs to follow a real guest run (``mmuscope kvm PROGRAM``): the child's
command line and the folder it writes to (tui/kvm_app.py starts it; the screen in
tui/screens/kvm_replay.py reads it).  Imports nothing of the app."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TRACE_FIFO, STATS_FILE = "trace", "stats.jsonl"


@dataclass(frozen=True, slots=True)
class KvmLaunch:
    """What the app starts: the child's command line and where it writes."""

    program: str
    argv: tuple[str, ...]
    folder: Path
    header: str  # kernel, module, MMU

    @property
    def fifo(self) -> Path:
        return self.folder / TRACE_FIFO

    @property
    def stats(self) -> Path:
        return self.folder / STATS_FILE
