"""The Experiments screen (F6) through Pilot: select a table, run it in the background,
watch the progress, see its bar chart; run them all; a missing table; export.

The table runner is replaced by a tiny fake (the real tables take seconds each): what is
tested is the screen, not the models (tests/test_bench_claims.py).
"""

from __future__ import annotations

import threading
from pathlib import Path

import mmuscope.tui.screens.experiments as experiments
import pytest
from mmuscope.engine.claims.chart import ChartSpec
from mmuscope.engine.claims.registry import BAND, TABLES, MissingTable
from mmuscope.engine.claims.table import ClaimTable
from mmuscope.tui.app import MmuscopeApp
from mmuscope.tui.screens.experiments import ExperimentsScreen, TableList
from mmuscope.tui.widgets.bar_chart import BarChart, bar_cells, chart_lines

from tests.tui_pilot import SIZE, build, press_export


def small_table(name: str, quick: bool = False) -> ClaimTable:
    if name == "ppc_keys":
        raise MissingTable(name, "cannot import engine.claims.ppc_keys")
    return ClaimTable(
        name,
        ["case", "model", "thread_model"],
        [["before", 367.0, 367.2], ["after", 300.0, 302.0]],
        "pte-list-ext",
        f"the claim of {name}",
        {"the_claim": name != "zap"},
        "a note on the run",
    )


@pytest.fixture
def fake_runner(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def run(name: str, quick: bool = False) -> ClaimTable:
        assert quick  # the screen always runs quick
        calls.append(name)
        return small_table(name, quick)

    monkeypatch.setattr(experiments, "run_table", run)
    return calls


def screen_of(app: MmuscopeApp) -> ExperimentsScreen:
    screen = app.screen
    assert isinstance(screen, ExperimentsScreen), f"expected the experiments screen: {screen!r}"
    return screen


def list_text(screen: ExperimentsScreen) -> str:
    return str(screen.query_one(TableList).content)


async def test_select_run_and_see_the_chart(tmp_path: Path, fake_runner: list[str]) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f6")
        await pilot.pause()
        screen = screen_of(app)
        assert "not run yet" in screen.query_one(BarChart).text()
        await pilot.press("down", "down")
        assert screen.selected_name == TABLES[2]
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert fake_runner == [TABLES[2]]
        chart = screen.query_one(BarChart).text()
        assert f"{TABLES[2]}  holds" in chart
        assert "█" in chart and "thread" in chart and "302" in chart
        assert "The PTE_LIST_EXT thread (kvm, 2021): the claim of" in chart
        assert "✓ holds" in list_text(screen)
        assert screen.events_panel.counters.totals.get("bench_table") == 1
        await press_export(pilot)
    dots = list(tmp_path.glob("mmuscope-experiments-*.dot"))
    assert len(dots) == 1 and dots[0].read_text().startswith("digraph bench {")


async def test_run_all_shows_verdicts_and_a_missing_table(
    tmp_path: Path, fake_runner: list[str]
) -> None:
    app = build(tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:  # the smallest terminal
        await pilot.press("f6")
        await pilot.pause()
        screen = screen_of(app)
        assert not screen.has_class("-too-small")
        await pilot.press("a")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert fake_runner == list(TABLES)
        assert screen.states["zap"] == "not reproduced" and screen.states["ppc_keys"] == "missing"
        assert "✗ not reprod." in list_text(screen) and "missing" in list_text(screen)
        await pilot.press("up")  # wraps to the last table: engine
        assert screen.selected_name == TABLES[-1]
        await pilot.press("up")
        assert screen.selected_name == "ppc_keys"
        assert "cannot import" in screen.query_one(BarChart).text()
        assert screen.export_dot() is None  # nothing to chart for a missing table


async def test_progress_while_a_table_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()

    def slow(name: str, quick: bool = False) -> ClaimTable:
        gate.wait(10)
        return small_table(name, quick)

    monkeypatch.setattr(experiments, "run_table", slow)
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f6")
        await pilot.pause()
        screen = screen_of(app)
        await pilot.press("r")
        await pilot.pause(0.1)
        assert screen.states[TABLES[0]] == "running"
        assert "running" in str(screen.query_one("#bench-status").content)
        await pilot.press("down", "enter")  # queued behind the running one
        assert screen.states[TABLES[1]] == "queued"
        await pilot.press("f1")  # the app stays responsive while the worker runs
        assert app.screen is not screen
        gate.set()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert screen.states[TABLES[0]] == "holds" and screen.states[TABLES[1]] == "holds"


def test_chart_lines_fit_the_width_and_pair_the_thread() -> None:
    table = small_table("rmap_ext")
    for width in (30, 60, 100):
        lines = chart_lines(table, None, width)
        assert all(sum(len(text) for text, _ in line) <= width for line in lines)
    text = "\n".join("".join(t for t, _ in line) for line in chart_lines(table, None, 60))
    assert text.index("\nmodel ") < text.index("\nthread ") and "holds" in text
    assert bar_cells(0.5, 8) == "████" and bar_cells(0.5, 1) == "▌" and bar_cells(0.0, 8) == ""


def test_the_band_is_an_error_bar_beside_the_thread() -> None:
    """A timed table: the model's bar, its band ├──┤ under it, then the thread's."""
    table = ClaimTable(
        "rmap_ext",
        ["era", "central", "thread_fork_time", "low", "high", "verdict"],
        [["15", 297.3, 302.0, 177.2, 352.4, "within noise"]],
        "pte-list-ext",
        "the claim",
        {"ext15_cheaper_than_ext3": True},
    )
    spec = ChartSpec(("era",), ("central",), {"central": "thread_fork_time"}, bands=BAND)
    lines = ["".join(t for t, _ in line) for line in chart_lines(table, spec, 80)]
    at = next(i for i, line in enumerate(lines) if line.startswith("band"))
    assert lines[at - 1].startswith("central") and lines[at + 1].startswith("thread")
    assert "├" in lines[at] and lines[at].rstrip().endswith("177.2–352.4")
    assert lines[at].index("├") < lines[at].index("┤")
    assert "within noise" in lines[0]


async def test_help_lists_the_screens_keys_with_tooltips(tmp_path: Path) -> None:
    from mmuscope.tui.screens.help import HelpScreen, key_rows

    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f6")
        await pilot.pause()
        screen = screen_of(app)
        rows = {description: tooltip for _, description, tooltip in key_rows(screen)}
        for wanted in ("Run", "Run all", "Up", "Down", "Export"):
            assert rows.get(wanted), wanted
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
