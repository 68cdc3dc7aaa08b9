"""Wide terminals and small ones: what a 120×40 or a 200×60 terminal shows whole.

- `mmuscope kvm fork` at 120×40 (the screen fed by a recorded run, tests/kvm_recorded.py):
  the spte grid keeps its 32 cells a row, the panel titles are not cut, and each event
  kind of the kernel · model panel keeps its figures on its own row;
- widened to 200 columns, its event log is in one form (every trace-cmd line whole, or
  every event as name and fields first), never both;
- the max layout's tree (32764 slots) shows its root's label whole before any lookup.

The help screen at 120 columns is tested with the other keys (tests/test_tui_keys_view.py).
Snapshots as tests/test_tui_sizes.py: fixed sizes, no animation, no user config, and
kvm_stat's wall-clock sample out of reach.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from mmuscope.tui.screens import base
from mmuscope.tui.screens.kvm_replay import ComparePanel, KvmReplayScreen
from mmuscope.tui.widgets.event_log import EventLog
from mmuscope.tui.widgets.events import CountersTable, EventPanel
from mmuscope.tui.widgets.replay_panels import ReplayPages, SpteGrid
from mmuscope.tui.widgets.structure import StructureView
from textual.pilot import Pilot

from tests.datafiles import FIXTURES
from tests.kvm_recorded import recorded_kvm_app, run_read_whole
from tests.tui_pilot import build, structure_text, until

SnapCompare = Callable[..., bool]
SAMPLE = FIXTURES / "trace-kvmmmu-sample.txt"
WHOLE_LINE = re.compile(r"^\s*\S+-\d+\s+\[\d{3}\]")  # a trace-cmd line's head: comm-pid [cpu]


@pytest.fixture(autouse=True)
def deterministic(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MMUSCOPE_CONFIG_DIR", str(tmp_path_factory.mktemp("config")))
    monkeypatch.setattr(base, "COUNTER_REFRESH", 24 * 3600.0)


async def recorded_run_done(pilot: Pilot[object]) -> KvmReplayScreen:
    """The recorded run read whole: the child done, every event in the model."""
    screen = await run_read_whole(pilot)
    screen.redraw(force=True)
    panel = screen.query_one(EventPanel)
    panel.flush_log()
    panel.show_counters()
    await pilot.pause()
    pilot.app.clear_notifications()  # "done: 5 slices" stays 8 s
    await pilot.pause()
    return screen


def test_kvm_fork_at_120x40(snap_compare: SnapCompare, tmp_path: Path) -> None:
    assert snap_compare(recorded_kvm_app(tmp_path), terminal_size=(120, 40),
                        run_before=recorded_run_done)  # fmt: skip


async def test_kvm_fork_at_120x40_keeps_32_cells_a_row_and_whole_titles(tmp_path: Path) -> None:
    app = recorded_kvm_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await recorded_run_done(pilot)
        await pilot.pause()
        grid = screen.query_one(SpteGrid)
        rows = [grid.render_line(y).text.strip() for y in range(grid.content_size.height)]
        cells = [row for row in rows if row and set(row) <= set("·▸■█◆")]
        assert len(cells) >= 8, rows  # 512 sptes: 16 rows of 32
        assert all(len(row) in (32, 63) for row in cells), rows  # packed or spaced, one row each
        pages = screen.query_one(ReplayPages)
        title = str(pages.border_title)
        assert title.startswith("shadow pages by level")
        assert len(title) + 6 <= pages.outer_size.width, title  # drawn whole
        legend = str(grid.border_subtitle)
        assert len(legend) + 6 <= grid.outer_size.width, legend
        # every event kind of the kernel · model panel on one row with its three figures,
        # kvm_mmu_set_accessed_bit too (it runs into the blanks before its first figure)
        shown = str(screen.query_one(ComparePanel).content).splitlines()
        kinds = [row.split() for row in shown if row.startswith(("kvm_", "vcpu_"))]
        assert ["kvm_mmu_set_accessed_bit", "70", "70", "70"] in kinds, shown
        assert all(len(kind) == 4 for kind in kinds), shown


@pytest.mark.parametrize("source", ["kvm fork", "replay"])
async def test_a_log_widened_to_200_columns_keeps_one_form(tmp_path: Path, source: str) -> None:
    """The kvm fork run's lines all fit 200 columns whole; the sample trace's do not all
    (its longest is 186 columns): then every event is shown name first."""
    app = build(tmp_path, trace=SAMPLE) if source == "replay" else recorded_kvm_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        if source == "replay":
            index = app.screen.timeline.index  # type: ignore[attr-defined]  # built in a thread
            await until(pilot, lambda: index.done)
            assert index.done
            await pilot.press("end")
            await pilot.pause()
            app.screen.query_one(EventPanel).flush_log()
        else:
            await recorded_run_done(pilot)
        log = app.screen.query_one(EventLog)
        assert log.lines and not any(WHOLE_LINE.match(row) for row in log.lines)
        await pilot.resize_terminal(200, 60)
        await pilot.pause(0.2)
        await pilot.pause()
        # an event's first row: a whole line, or its name (continuation rows are indented)
        events = [row for row in log.lines if WHOLE_LINE.match(row) or row[:1] != " "]
        whole = [bool(WHOLE_LINE.match(row)) for row in events]
        assert events and (all(whole) or not any(whole)), events
        assert all(whole) == (source == "kvm fork")


async def test_kvm_stat_grows_with_a_200_column_screen(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=(200, 60)) as pilot:
        await pilot.press("f2", *["n"] * 6)
        await pilot.pause()
        table = app.screen.query_one(CountersTable)
        assert table.outer_size.width >= 56
        panel = app.screen.query_one(EventPanel)
        panel.show_counters()
        header = str(table.content).splitlines()[0]
        assert "%Total" in header and "CurAvg/s" in header, header
    narrow = build(tmp_path)
    async with narrow.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert narrow.screen.query_one(CountersTable).outer_size.width == 50  # as before


async def test_the_max_layout_shows_its_roots_label_whole(tmp_path: Path) -> None:
    app = build(tmp_path, "max")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        view = app.screen.query_one(StructureView)
        window = view.window_shown
        assert window is not None and window.depth == 0
        root = str(window.slot_id)
        drawn = structure_text(view)
        assert re.search(rf"(?<!\d){root}(?!\d)", drawn), drawn
