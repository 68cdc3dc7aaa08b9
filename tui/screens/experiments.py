"""The Experiments screen (F6): the `mmuscope bench` tables, run from the app and drawn
as bar charts — each thread's claim measured by the model beside the thread's own numbers,
with the verdict (engine/claims/registry.py).

The list on the left holds every table and what is known of it (not run, running, its
computed verdict — within noise, within 25 %, holds, direction only, not reproduced —
or missing); ↑/↓ select one, enter (or r) runs it with `quick=True`, `a` runs them all.
Each chart draws the model's band as an error bar beside the thread's mark.  Runs happen
in a thread worker, one table after another, so the app never blocks; the progress bar counts
the tables done and the status line says which one is running.  Each finished table
emits a `bench_table` event (the event panel and its counters show it) and is drawn by
`BarChart`; `e` exports the selected table's chart as dot and PDF.
"""

from __future__ import annotations

import time

from mmuscope.engine.claims.registry import TABLES, MissingTable, chart_spec, run_table
from mmuscope.engine.claims.table import ClaimTable
from mmuscope.engine.events import Event
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import ProgressBar, Static
from textual.worker import get_current_worker

from ..widgets.bar_chart import BarChart
from ..widgets.fit import show_title
from .base import MmuScreen

IDLE, QUEUED, RUNNING = "idle", "queued", "running"
MISSING, FAILED = "missing", "failed"


class TableList(Widget, can_focus=True):
    """The bench tables, the selected one marked, each with its state or verdict (it
    takes the focus so that ↑/↓ and enter reach the screen, not the event log)."""

    COMPONENT_CLASSES = {
        "table-list--selected",
        "table-list--yes",
        "table-list--no",
        "table-list--partial",
        "table-list--muted",
        "table-list--running",
    }

    DEFAULT_CSS = """
    TableList { background: $surface; border: round $panel; border-title-color: $primary;
        padding: 0 1; }
    TableList:focus { border: round $primary; }
    TableList > .table-list--selected { color: $background; background: $accent;
        text-style: bold; }
    TableList > .table-list--yes { color: $success; }
    TableList > .table-list--no { color: $error; }
    TableList > .table-list--partial { color: $warning; }
    TableList > .table-list--muted { color: $text-muted; }
    TableList > .table-list--running { color: $warning; text-style: bold; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.content = Text()

    def render(self) -> Text:
        return self.content

    def show(self, names: tuple[str, ...], selected: int, states: dict[str, str]) -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        style = self.get_component_rich_style
        for index, name in enumerate(names):
            state = states.get(name, IDLE)
            mark, component = _mark(state)
            line_style = style("table-list--selected") if index == selected else None
            text.append(f"{'▶' if index == selected else ' '} {name:<14}", style=line_style)
            text.append(f" {mark}\n", style=style(f"table-list--{component}"))
        self.content = text
        self.refresh()


def _mark(state: str) -> tuple[str, str]:
    return {
        IDLE: ("·", "muted"),
        QUEUED: ("queued", "muted"),
        RUNNING: ("running…", "running"),
        "within noise": ("✓ in noise", "yes"),
        "within 25 %": ("✓ in 25 %", "yes"),
        "holds": ("✓ holds", "yes"),
        "direction only": ("~ direction", "partial"),
        "not reproduced": ("✗ not reprod.", "no"),
        MISSING: ("missing", "muted"),
        FAILED: ("failed", "no"),
    }.get(state, (state, "muted"))


class ExperimentsScreen(MmuScreen):
    BINDINGS = [
        Binding("enter,r", "run_selected", "Run", key_display="⏎/r",
                tooltip="Run the selected table (quick) in the background"),
        Binding("a", "run_all", "Run all", tooltip="Run every table (quick), one after another"),
        Binding("up", "select(-1)", "Up", key_display="↑", tooltip="Select the table above"),
        Binding("down", "select(1)", "Down", key_display="↓", tooltip="Select the table below"),
        Binding("j", "scroll_chart(4)", "Scroll", show=False, tooltip="Scroll the chart down"),
        Binding("k", "scroll_chart(-4)", "Scroll up", show=False, tooltip="Scroll the chart up"),
    ]  # fmt: skip

    DEFAULT_CSS = """
    ExperimentsScreen #bench-left { width: 34; }
    ExperimentsScreen.-narrow #bench-left { width: 30; }
    ExperimentsScreen #bench-list { height: 1fr; }
    ExperimentsScreen #bench-status { height: 2; padding: 0 1; color: $text-muted; }
    ExperimentsScreen #bench-progress { height: 1; padding: 0 1; }
    ExperimentsScreen #bench-chart { width: 1fr; height: 1fr; }
    """

    AUTO_FOCUS = "#bench-list"

    view_name = "experiments"

    def __init__(self) -> None:
        super().__init__()
        self.names: tuple[str, ...] = TABLES
        self.selected = 0
        self.states: dict[str, str] = {}
        self.results: dict[str, ClaimTable] = {}
        self.reasons: dict[str, str] = {}  # why a table is missing or failed
        self.queue: list[str] = []
        self.running: str | None = None
        self._started_at = 0.0

    def compose_main(self) -> ComposeResult:
        with Vertical(id="bench-left"):
            yield TableList(id="bench-list")
            yield Static("", id="bench-status")
            yield ProgressBar(total=1, show_eta=False, id="bench-progress")
        yield BarChart(id="bench-chart")

    def on_mount(self) -> None:
        show_title(self.query_one(TableList), "bench tables")
        self.title = "mmuscope · experiments"
        self.sub_title = "the threads' claims measured (quick runs)"
        self.redraw()

    # -- drawing ----------------------------------------------------------------------

    @property
    def selected_name(self) -> str:
        return self.names[self.selected]

    def redraw(self) -> None:
        self.query_one(TableList).show(self.names, self.selected, self.states)
        self._show_chart()

    def _show_chart(self) -> None:
        chart = self.query_one(BarChart)
        name = self.selected_name
        show_title(chart, "chart (j/k scroll)")
        table = self.results.get(name)
        if table is not None:
            chart.show(table, chart_spec(table))
        elif self.states.get(name) in (QUEUED, RUNNING):
            chart.show_message(f"{name}: {self.states[name]} (quick run)…")
        elif name in self.reasons:
            chart.show_message(f"{name} {self.states[name]}: {self.reasons[name]}")
        else:
            chart.show_message(f"{name}: not run yet. enter runs it, a runs every table.")

    def _status(self, text: str) -> None:
        self.query_one("#bench-status", Static).update(text)

    # -- actions ----------------------------------------------------------------------

    def action_select(self, delta: int) -> None:
        self.selected = (self.selected + delta) % len(self.names)
        self.redraw()

    def action_scroll_chart(self, lines: int) -> None:
        chart = self.query_one(BarChart)
        chart.scroll_to(y=chart.scroll_offset.y + lines, animate=False)

    def action_run_selected(self) -> None:
        self._enqueue([self.selected_name])

    def action_run_all(self) -> None:
        self._enqueue(list(self.names))

    def _enqueue(self, names: list[str]) -> None:
        """Queue tables not already queued or running; start the worker if idle."""
        fresh = [n for n in names if n != self.running and n not in self.queue]
        if not fresh:
            self.notify("already running", timeout=2)
            return
        self.queue += fresh
        for name in fresh:
            self.states[name] = QUEUED
        progress = self.query_one(ProgressBar)
        if self.running is None:
            progress.update(total=len(self.queue), progress=0)
            self._run_queue()
        else:
            progress.update(total=(progress.total or 0) + len(fresh))
        self.redraw()

    # -- the worker -------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="bench")
    def _run_queue(self) -> None:
        worker = get_current_worker()
        while not worker.is_cancelled:
            name = self.app.call_from_thread(self._next_name)
            if name is None:
                return
            try:
                table = run_table(name, quick=True)
            except MissingTable as missing:
                self.app.call_from_thread(self._finished, name, MISSING, missing.reason)
            except Exception as err:  # a bug in a table: shown, the others still run
                self.app.call_from_thread(self._finished, name, FAILED, f"{err!r}")
            else:
                self.app.call_from_thread(self._finished, name, table, "")

    def _next_name(self) -> str | None:
        if not self.queue:
            self.running = None
            self._status("done" if self.results else "")
            return None
        name = self.running = self.queue.pop(0)
        self.states[name] = RUNNING
        self.redraw()
        self._started_at = time.monotonic()
        progress = self.query_one(ProgressBar)
        self._status(
            f"running {name}… ({int(progress.progress) + 1} of {int(progress.total or 1)})"
        )
        return name

    def _finished(self, name: str, result: ClaimTable | str, reason: str) -> None:
        seconds = time.monotonic() - self._started_at
        if isinstance(result, ClaimTable):
            self.results[name] = result
            self.states[name] = result.verdict
            self.reasons.pop(name, None)
            self.pending_events.append(
                Event(
                    "bench_table",
                    {"table": name, "verdict": result.verdict, "reproduced": result.reproduced},
                    comm="mmuscope",
                )
            )
            self.flush_events(force=True)
        else:
            self.states[name] = result
            self.reasons[name] = reason
            self.notify(f"{name}: {result} ({reason})", severity="warning", timeout=6)
        self.query_one(ProgressBar).advance(1)
        self._status(f"{name}: {self.states[name]} in {seconds:.1f} s")
        self.redraw()

    # -- export -----------------------------------------------------------------------

    def export_dot(self) -> tuple[str, int] | None:
        """The selected table's bar chart as one dot node (None before it has run)."""
        table = self.results.get(self.selected_name)
        if table is None:
            return None
        from mmuscope.engine.claims.chart import chart_dot

        return chart_dot(table, chart_spec(table)), 1
