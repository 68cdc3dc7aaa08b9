"""`mmuscope live`: the replay screen fed by a tracefs-like directory whose trace_pipe is a
FIFO written by a thread with recorded lines; and the checks before the app starts, each
a one-line error with exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mmuscope.engine.replay.live import LiveTimeline
from mmuscope.tui import live, trace_pipe
from mmuscope.tui.app import make_app
from mmuscope.tui.cli import main
from mmuscope.tui.screens.replay import ReplayScreen
from mmuscope.tui.widgets.events import EventPanel
from mmuscope.tui.widgets.replay_panels import ReplayPages

from tests.datafiles import FIXTURES

SAMPLE = FIXTURES / "trace-kvmmmu-sample.txt"
MMUSCOPE = Path(sys.executable).parent / "mmuscope"


def tracefs(root: Path, enabled: str = "1", kvmmmu: bool = True) -> Path:
    """A directory laid out like tracefs: trace_pipe (a FIFO), events/kvmmmu/..."""
    if kvmmmu:
        for event in ("kvm_mmu_get_page", "kvm_mmu_prepare_zap_page", "mark_mmio_spte"):
            (root / "events" / "kvmmmu" / event).mkdir(parents=True)
            (root / "events" / "kvmmmu" / event / "enable").write_text(enabled + "\n")
        (root / "events" / "kvmmmu" / "enable").write_text(enabled + "\n")
    os.mkfifo(root / "trace_pipe")
    return root


def feed(pipe: Path, lines: list[str], pause: float = 0.002) -> threading.Thread:
    """A writer thread: opens the FIFO (waiting for the reader), writes, closes."""

    def write() -> None:
        with pipe.open("w") as out:
            for line in lines:
                out.write(line)
                out.flush()
                time.sleep(pause)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


async def test_live_screen_shows_what_the_fifo_brings(tmp_path: Path) -> None:
    root = tracefs(tmp_path)
    lines = SAMPLE.read_text().splitlines(keepends=True)
    writer = feed(root / "trace_pipe", lines)
    app = make_app(tracefs=root, export_dir=tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, ReplayScreen)
        timeline = screen.timeline
        assert isinstance(timeline, LiveTimeline)
        for _ in range(150):
            if timeline.total >= 29:
                break
            await pilot.pause(0.02)
        await pilot.pause(0.2)
        assert timeline.total == timeline.position == 29 and timeline.following
        assert screen.query_one(EventPanel).counters.totals["kvm_mmu_get_page"] == 4
        assert "L2" in str(screen.query_one(ReplayPages).content)  # the adopted page
        assert timeline.model.flips_total == 1
        await pilot.press("home")  # seek back in what is kept: stops following
        assert timeline.position == 0 and not timeline.following
        await pilot.press("end")
        assert timeline.position == 29 and timeline.following
        timeline.audit()
    writer.join(2)


def test_tail_lines_reads_a_fifo_in_batches_and_stops_when_told(tmp_path: Path) -> None:
    root = tracefs(tmp_path)
    writer = feed(root / "trace_pipe", ["a\n", "b\nc", "\n"], pause=0.05)
    stop = threading.Event()
    got: list[str] = []
    idle = 0
    pipe = root / "trace_pipe"
    batches: Iterator[list[str]] = trace_pipe.tail_lines(pipe, stop.is_set, poll=0.02)
    for batch in batches:
        got += batch
        idle += not batch
        if got == ["a\n", "b\n", "c\n"] and idle > 3:
            stop.set()
    assert got == ["a\n", "b\n", "c\n"]
    writer.join(2)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([MMUSCOPE, "live", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=30)  # fmt: skip


def one_line_error(out: subprocess.CompletedProcess[str], words: str) -> None:
    assert out.returncode == 2, out
    assert len(out.stderr.strip().splitlines()) == 1 and words in out.stderr, out.stderr


def test_cli_no_tracefs_and_no_kvmmmu_events(tmp_path: Path) -> None:
    one_line_error(run_cli("--tracefs", str(tmp_path / "nowhere")), "no tracefs at")
    one_line_error(run_cli("--tracefs", str(tracefs(tmp_path, kvmmmu=False))),
                   "no kvmmmu events in")  # fmt: skip


def test_cli_enabled_events_get_as_far_as_the_terminal(tmp_path: Path) -> None:
    one_line_error(run_cli("--tracefs", str(tracefs(tmp_path))), "needs a terminal")


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["live", *args])
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return code, err


def test_not_readable_means_not_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tracefs(tmp_path)
    monkeypatch.setattr(live, "can_read", lambda path: False)
    code, err = in_process(capsys, "--tracefs", str(root))
    assert code == 2 and "cannot read" in err and "root" in err


def test_disabled_events_not_root_names_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tracefs(tmp_path, enabled="0")
    monkeypatch.setattr(live, "is_root", lambda: False)
    code, err = in_process(capsys, "--tracefs", str(root))
    switch = root / "events" / "kvmmmu" / "enable"
    assert code == 2 and f"echo 1 | sudo tee {switch}" in err
    assert switch.read_text().strip() == "0"


def test_disabled_events_as_root_ask_then_enable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tracefs(tmp_path, enabled="0")
    switch = root / "events" / "kvmmmu" / "enable"
    monkeypatch.setattr(live, "is_root", lambda: True)
    questions: list[str] = []
    monkeypatch.setattr(live, "ask", lambda q: questions.append(q) or False)
    code, err = in_process(capsys, "--tracefs", str(root))
    assert code == 2 and "not enabling" in err and switch.read_text().strip() == "0"
    assert questions == [f"enable kvmmmu events in {root}? [y/N] "]
    monkeypatch.setattr(live, "ask", lambda q: True)
    code, err = in_process(capsys, "--tracefs", str(root))
    assert switch.read_text().strip() == "1" and "needs a terminal" in err  # then the app
    switch.write_text("0\n")
    monkeypatch.setattr(live, "ask", lambda q: pytest.fail("--enable asks nothing"))
    code, err = in_process(capsys, "--tracefs", str(root), "--enable")
    assert switch.read_text().strip() == "1" and code == 2
