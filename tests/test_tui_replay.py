"""The replay screen through Pilot: `mmuscope replay TRACE` opens on it; pages appear and
vanish, the timeline steps, seeks, filters by CPU and pid; a bigger file shows indexing
progress; it reads at 80×24 and 120×40; `e` exports the pages as dot."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mmuscope.engine.pacing import SPEEDS
from mmuscope.engine.replay.cursor import TraceCursor
from mmuscope.engine.replay.index import TraceIndex, build_index, open_for_index
from mmuscope.tui.app import MmuscopeApp, make_app
from mmuscope.tui.screens import replay as replay_module
from mmuscope.tui.screens.base import TooSmall
from mmuscope.tui.screens.replay import STEP_CHUNK, ReplayScreen
from mmuscope.tui.widgets.events import EventPanel
from mmuscope.tui.widgets.replay_panels import (
    IndexingBar,
    ReplayPages,
    ReplayState,
    SpteGrid,
    TimelineBar,
)
from textual.widgets import Input

from tests.datafiles import FIXTURES
from tests.test_scenario_steps import cut_panels
from tests.tui_pilot import drawn_lines, paste, press_export, toasts, until

SAMPLE = FIXTURES / "trace-kvmmmu-sample.txt"
MMUSCOPE = Path(sys.executable).parent / "mmuscope"
# seconds a test waits for the index or for frames: a bound, not a speed (indexing ~130k lines while
# playing took over 4 s on a 2-core machine running three suites)
INDEX_WAIT = 60.0


def build(trace: Path, export_dir: Path) -> MmuscopeApp:
    app = make_app(trace=trace, playing=False, export_dir=export_dir)
    app.animation_level = "none"
    return app


def replay_screen(app: MmuscopeApp) -> ReplayScreen:
    screen = app.screen
    assert isinstance(screen, ReplayScreen), f"expected the replay screen, got {screen!r}"
    return screen


async def indexed(pilot, screen: ReplayScreen) -> TraceCursor:  # type: ignore[no-untyped-def]
    timeline = screen.timeline
    assert isinstance(timeline, TraceCursor)
    deadline = time.monotonic() + INDEX_WAIT
    while not timeline.index.done and time.monotonic() < deadline:
        await pilot.pause(0.02)
    await pilot.pause()
    assert timeline.index.done, f"not indexed within {INDEX_WAIT} s"
    return timeline


def shown(widget: object) -> str:
    return "\n".join(drawn_lines(widget))  # type: ignore[arg-type]


async def test_the_trace_drives_pages_sptes_and_the_timeline(tmp_path: Path) -> None:
    app = build(SAMPLE, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = replay_screen(app)
        cursor = await indexed(pilot, screen)
        assert cursor.total == 29 and cursor.position == 0
        assert screen.query_one(IndexingBar).has_class("-done")
        await pilot.press("s")
        assert cursor.position == 1
        for _ in range(3):
            await pilot.press("n")  # spte_requested is no change; get_page is
        assert len(cursor.model.pages) == 1
        assert "0x0" in shown(screen.query_one(ReplayPages))  # the root appeared
        await pilot.press("end")
        assert cursor.position == 29
        state = shown(screen.query_one(ReplayState))
        assert "1→0" in state and "0x3a" in state  # the flip, the MMIO generation
        assert "sptes: as 0 l1" in shown(screen.query_one(SpteGrid))
        assert "#29/29" in shown(screen.query_one(TimelineBar))
        await pilot.press("home")
        assert cursor.position == 0 and not cursor.model.pages
        await pilot.press("right_square_bracket")
        assert cursor.position > 0
        await pilot.press("g")
        await paste(pilot, "#12")
        await pilot.press("enter")
        assert cursor.position == 12 and isinstance(app.screen, ReplayScreen)
        screen.pacer.index = len(SPEEDS) - 1
        await pilot.press("space")
        await until(pilot, lambda: not screen.pacer.playing)
        assert cursor.position == 29 and not screen.pacer.playing  # played to the end
        cursor.model.audit()


async def test_cpu_and_pid_filters_recount_kvm_stat(tmp_path: Path) -> None:
    app = build(SAMPLE, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = replay_screen(app)
        cursor = await indexed(pilot, screen)
        await pilot.press("end")
        panel = screen.query_one(EventPanel)
        everything = sum(panel.counters.totals.values())
        assert everything == cursor.position == 29
        await pilot.press("c")
        await paste(pilot, "5")
        await pilot.press("enter")
        assert screen.filters.cpus == frozenset({5})
        log = screen.query_one("#event-log")
        cpus = [m for line in log.lines for m in re.findall(r"\[(\d+)\]", line)]
        assert cpus and {int(c) for c in cpus} == {5}, log.lines  # not blank, CPU 5 only
        assert panel.counters.totals == {"fast_page_fault": 1, "mark_mmio_spte": 1,
            "check_mmio_spte": 1, "handle_mmio_page_fault": 1, "kvm_mmio": 1}  # fmt: skip
        assert "cpu 5" in shown(screen.query_one(TimelineBar))
        await pilot.press("p")
        await paste(pilot, "4240")
        await pilot.press("enter")
        assert panel.counters.totals == {}  # pid 4240 ran on CPU 0, not 5
        await pilot.press("c")
        dialog = app.screen
        dialog.query_one(Input).value = ""
        await pilot.press("enter")
        assert panel.counters.totals == {"kvm_mmu_zap_all_fast": 1, "kvm_mmu_prepare_zap_page": 1}
        await pilot.press("p")
        await paste(pilot, "x")
        await pilot.press("enter")
        assert "pids: not a number" in str(app.screen.query_one("#error").content)


@pytest.mark.parametrize(
    ("trace", "linked"), [(SAMPLE, 0), (FIXTURES / "kvm-fork-follow" / "trace.txt", 20)]
)
async def test_e_exports_the_pages_as_dot(tmp_path: Path, trace: Path, linked: int) -> None:
    """The pages, each drawn under its parent: `kvm fork` on a shadow-MMU host makes 25
    indirect pages, five of them roots (one per process)."""
    app = build(trace, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await indexed(pilot, replay_screen(app))
        await pilot.press("end")
        await press_export(pilot)
    dots = list(tmp_path.glob("mmuscope-replay-*.dot"))
    assert len(dots) == 1 and dots[0].read_text().startswith("digraph replay_pages {")
    children = re.findall(r"-> p(\d+) \[label=", dots[0].read_text())
    assert len(set(children)) == len(children) == linked


async def test_readable_at_80x24_and_120x40(tmp_path: Path) -> None:
    app = build(SAMPLE, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = replay_screen(app)
        await indexed(pilot, screen)
        await pilot.press("end")
        for size in ((80, 24), (120, 40)):
            await pilot.resize_terminal(*size)
            await pilot.pause()
            assert not screen.query_one(TooSmall).display
            pages, grid, state = (screen.query_one(t) for t in (ReplayPages, SpteGrid, ReplayState))
            assert pages.content_size.height >= 3 and grid.content_size.height >= 4
            assert state.content_size.width >= 28 and state.content_size.height >= 8
            assert "L2" in shown(pages) and "valid_gen" in shown(state)
            assert "…" not in shown(state).split("\n")[1]  # the first line fits
            assert "#29/29" in shown(screen.query_one(TimelineBar))


async def test_no_panel_is_cut_at_80x24_while_it_plays_steps_and_seeks(tmp_path: Path) -> None:
    """At 80×24 the state panel and the spte grid are shorter than their rows: they
    keep the rows that matter and count the others on their bottom border."""
    app = build(SAMPLE, tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = replay_screen(app)
        cursor = await indexed(pilot, screen)
        await pilot.press("space")  # a few frames played
        deadline = time.monotonic() + INDEX_WAIT
        while cursor.position < 8 and time.monotonic() < deadline:
            await pilot.pause(0.01)
        await pilot.press("space")
        await pilot.pause()
        assert cursor.position >= 8 and not screen.pacer.playing
        assert cut_panels(app) == []
        for keys in (("s",), ("n", "n"), ("right_square_bracket",), ("end",)):
            await pilot.press(*keys)
            await pilot.pause()
            assert cut_panels(app) == [], keys
        state, grid = screen.query_one(ReplayState), screen.query_one(SpteGrid)
        assert re.fullmatch(r"\+\d+ more rows?", str(state.border_subtitle))
        assert re.fullmatch(r"\+\d+ more rows", str(grid.border_subtitle))
        lines = shown(grid).split("\n")[1:-1]  # inside the border
        assert lines[0].startswith("│ 000 ■")  # the row of the spte changed, labelled
        assert "■ 4K" in lines[-1]  # the legend
        assert "valid_gen" in shown(state) and "MMIO sptes" in shown(state)
        await pilot.resize_terminal(120, 40)
        await pilot.press("home", "n", "n", "n")  # drawn at 120 columns
        await pilot.resize_terminal(80, 24)  # laid out again: fitted again, the bar too
        await pilot.pause()
        assert cut_panels(app) == []
        assert shown(screen.query_one(TimelineBar)).rstrip().endswith("100/s")
        assert shown(grid).split("\n")[1].startswith("│ 000 ■")


async def test_a_big_file_shows_indexing_progress_and_plays_meanwhile(tmp_path: Path) -> None:
    body = [x for x in SAMPLE.read_text().splitlines(keepends=True) if not x.startswith("#")]
    trace = tmp_path / "big.txt"
    trace.write_text("".join(body * 2500))  # ~130k lines
    messages: list[object] = []
    app = build(trace, tmp_path)
    async with app.run_test(size=(120, 40), message_hook=messages.append) as pilot:
        screen = replay_screen(app)
        await pilot.press("space")
        cursor = await indexed(pilot, screen)
        progress = [m.progress for m in messages if isinstance(m, ReplayScreen.Indexed)]
        assert any(0 < p < 1 for p in progress) and progress[-1] == 1.0
        assert screen.query_one(IndexingBar).has_class("-done")
        assert cursor.position > 0  # it played while the index was built
        await pilot.press("end")
        assert cursor.position == cursor.index.events == cursor.total
        cursor.index.audit()
        await pilot.pause()
        assert screen._frame_drawn.is_set()  # every frame drawn: the index worker's gate open


async def test_a_frame_gives_the_event_loop_turns_and_a_pause_between_them_ends_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A frame replays STEP_CHUNK events a turn (SLICE 0: one chunk a turn) and lets the
    event loop run between turns; space pressed then pauses it there, and kvm_stat
    counts exactly the events the model applied."""
    monkeypatch.setattr(replay_module, "SLICE", 0.0)
    app = build(SAMPLE, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = replay_screen(app)
        cursor = await indexed(pilot, screen)
        screen.pacer.playing = True  # playing, without the frame timer: frames by hand
        frame = asyncio.ensure_future(screen._play(STEP_CHUNK + 5, budget=60.0))
        await asyncio.sleep(0)  # the frame's first turn runs, then this test's
        assert cursor.position == STEP_CHUNK and not frame.done()
        screen.action_play_pause()  # what space does
        await frame
        assert cursor.position == STEP_CHUNK and not screen.pacer.playing
        panel = screen.query_one(EventPanel)
        assert sum(panel.counters.totals.values()) == STEP_CHUNK
        await pilot.pause()
        assert screen._frame_drawn.is_set()  # drawn: the index worker's gate open


async def test_without_a_trace_there_is_no_replay_view(tmp_path: Path) -> None:
    app = make_app("pc-4g", playing=False, export_dir=tmp_path)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await pilot.press("f7")
        await pilot.pause()
        assert not isinstance(app.screen, ReplayScreen)
        assert not app.has_replay
        notes = toasts(app)
        assert any("mmuscope replay TRACE" in n for n in notes), notes  # not silence


def test_replay_without_a_flag_needs_a_file_and_a_terminal(tmp_path: Path) -> None:
    for args, words in (
        ([str(SAMPLE)], "needs a terminal"),
        (["-"], "needs a file"),
        ([str(tmp_path / "missing.txt")], "No such file"),
    ):
        out = subprocess.run([MMUSCOPE, "replay", *args], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL)  # fmt: skip
        assert out.returncode == 2 and words in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1


async def test_dialog_texts_keep_their_brackets(tmp_path: Path) -> None:
    """Trace syntax such as `[cpu]` and a regex's `[ab]` are text, not Rich markup."""
    app = build(SAMPLE, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = replay_screen(app)
        await indexed(pilot, screen)
        await pilot.press("c")
        await pilot.pause()
        assert "the trace's [cpu] column" in "\n".join(drawn_lines(app.screen.query_one(".hint")))
        await pilot.press("escape", "f")
        await paste(pilot, "[km]vm_mmio")
        await pilot.press("enter")
        await pilot.pause()
        log = screen.query_one(EventPanel).query_one("#event-log")
        assert "events /[km]vm_mmio/" in drawn_lines(log)[0]
        await pilot.press("f")
        await paste(pilot, "[")
        await pilot.press("enter")
        await pilot.pause()
        assert "[" in str(app.screen.query_one("#error").render())  # the regex error, whole


async def test_the_footer_says_what_seeking_and_speed_keys_do(tmp_path: Path) -> None:
    from mmuscope.tui.widgets.key_bar import KeyBar

    app = build(SAMPLE, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        shown, _palette = app.screen.query_one(KeyBar).shown_keys()
        keys = {k.display: k for k in shown}
        assert keys["["].description == "Seek back" and keys["]"].description == "Seek on"
        for key in ("+", "-", "[", "]"):
            # words on hover and in the palette: the binding's own tooltip, not the fallback
            assert keys[key].tooltip and keys[key].tooltip != keys[key].description, key


async def test_a_seek_beyond_the_checkpoints_waits_for_them(tmp_path: Path) -> None:
    """Scanned, the whole trace is known; a seek past the checkpoints goes as far as they
    do, says where it is going, and arrives once they reach it."""
    body = [x for x in SAMPLE.read_text().splitlines(keepends=True) if not x.startswith("#")]
    trace = tmp_path / "big.txt"
    trace.write_text("".join(body * 40))  # 1160 events
    app = build(trace, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = replay_screen(app)
        await indexed(pilot, screen)
        half = TraceIndex(trace.stat().st_size, every=64)
        with open_for_index(trace) as handle:  # scanned; checkpoints up to event 320
            build_index(handle, half, cancelled=lambda: half.events >= 320, progress_every=64)
        assert half.scan.done and not half.done and half.events == 320
        cursor = TraceCursor(trace, half)
        screen.timeline = cursor
        await pilot.press("end")
        assert cursor.position == 320 and screen.pending is not None
        assert "seeking #1,160…" in shown(screen.query_one(TimelineBar))
        assert "#320/1,160 " in shown(screen.query_one(TimelineBar))  # the total is known
        with open_for_index(trace) as handle:
            cursor.index = TraceIndex(trace.stat().st_size, every=64)
            build_index(handle, cursor.index)
        screen.post_message(ReplayScreen.Indexed(1.0))
        await pilot.pause()
        assert cursor.position == 1160 and screen.pending is None
        await pilot.press("home")
        assert cursor.position == 0


async def test_one_event_is_one_event(tmp_path: Path) -> None:
    line = next(ln for ln in SAMPLE.read_text().splitlines() if ": kvm_page_fault: " in ln)
    trace = tmp_path / "one.txt"
    trace.write_text(line + "\n")
    app = build(trace, tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = replay_screen(app)
        await indexed(pilot, screen)
        await pilot.press("end")
        await pilot.pause()
        assert "1 event over" in str(screen.sub_title), screen.sub_title


def test_counted_nouns() -> None:
    from mmuscope.engine.words import count

    assert [count(n, "child", "children") for n in (0, 1, 2)] == [
        "0 children",
        "1 child",
        "2 children",
    ]
    assert count(1234, "event") == "1,234 events"


async def test_a_complete_trace_played_to_its_end_says_so(tmp_path: Path) -> None:
    """A trace with no page from before it and no unmatched zap (`replay --summary`'s
    `unmatched` 0) says "complete" once played to its end; the sample, which zaps a page
    it never made, says how many zaps it could not place instead."""
    lines = SAMPLE.read_text().splitlines()
    picked = [lines[14], lines[16], *[line for line in lines if "qemu-system-x86-4240" in line]]
    complete = tmp_path / "complete.txt"
    complete.write_text("\n".join(picked) + "\n")
    summary = subprocess.run(
        [str(MMUSCOPE), "replay", str(complete), "--summary"], capture_output=True, text=True
    )
    assert '"unmatched": 0' in summary.stdout, summary.stdout + summary.stderr
    for trace, said, unsaid in (
        (complete, "complete", "unmatched"),
        (SAMPLE, "unmatched", "complete"),
    ):
        app = build(trace, tmp_path)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = replay_screen(app)
            await indexed(pilot, screen)
            assert "complete" not in shown(screen.query_one(ReplayState))  # not yet at the end
            await pilot.press("end")
            await pilot.pause()
            state = shown(screen.query_one(ReplayState))
            assert said in state and unsaid not in state
