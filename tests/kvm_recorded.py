"""The app's `mmuscope kvm fork` screen fed by a recorded run instead of a live guest:
its child copies what `mmuscope kvm fork --pages 8 --children 4 --follow DIR` wrote on
a 6.18 shadow-paging host (tests/fixtures/kvm-fork-follow/: the kernel's text and the
statistics records, the same files a live child writes), so that the screen can be
drawn at fixed sizes on any machine, KVM or not."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from mmuscope.tui.app import MmuscopeApp, make_app
from mmuscope.tui.kvm_launch import STATS_FILE, TRACE_FIFO, KvmLaunch
from mmuscope.tui.screens.kvm_replay import KvmReplayScreen

from tests.datafiles import FIXTURES

RECORDED = FIXTURES / "kvm-fork-follow"
HEADER = "6.18.44 · kvm_pvm · shadow MMU · MMIO caching off"

# The recorded files handed over as a live child hands them: the text into the FIFO,
# then the statistics records (their last one says `done`).
CHILD = """
import shutil, sys
recorded, folder = sys.argv[1:]
with open(f"{folder}/trace", "w") as fifo, open(f"{recorded}/trace.txt") as text:
    shutil.copyfileobj(text, fifo)
shutil.copy(f"{recorded}/stats.jsonl", f"{folder}/stats.jsonl.new")
shutil.move(f"{folder}/stats.jsonl.new", f"{folder}/stats.jsonl")
"""


def recorded_kvm_app(folder: Path) -> MmuscopeApp:
    """The kvm screen on the recorded run, its child writing into `folder`."""
    os.mkfifo(folder / TRACE_FIFO)
    assert STATS_FILE == "stats.jsonl" and TRACE_FIFO == "trace"
    argv = (sys.executable, "-c", CHILD, str(RECORDED), str(folder))
    app = make_app(kvm=KvmLaunch("fork", argv, folder, HEADER), export_dir=folder)
    app.animation_level = "none"
    return app


async def run_read_whole(pilot: Any, set_sptes: int = 45) -> KvmReplayScreen:
    """Wait until the kvm screen's child is done (5 slices: fork with 4 children) and the
    tail has handed the last batch to the model (`set_sptes` sptes set: 5 processes, each
    mapping the code page and the 8 shared pages)."""
    screen = pilot.app.screen
    assert isinstance(screen, KvmReplayScreen)
    for _ in range(400):
        if screen.finished and screen.status.startswith("done"):
            break
        await pilot.pause(0.05)
    assert screen.status == "done: 5 slices", screen.status
    for _ in range(100):
        if screen.timeline.model.set_sptes >= set_sptes:
            break
        await pilot.pause(0.05)
    return screen
