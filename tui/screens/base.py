"""What every explorer screen has: the event panel, the regex filter, export, and a clear
message instead of a broken layout when the terminal is too small."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from pathlib import Path

from mmuscope.engine.events import Event
from mmuscope.engine.pacing import Pacer
from mmuscope.engine.stats import compile_filter
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Static

from ..widgets.caption import Caption
from ..widgets.events import EventPanel
from ..widgets.header import MmuHeader
from ..widgets.key_bar import KeyBar

MIN_WIDTH, MIN_HEIGHT = 80, 24
WIDE = 120  # below this width, side panels shrink (the `-narrow` class)
TALL = 34  # below this height, the event panel and the path shrink (`-short`)
COUNTER_REFRESH = 1.0  # seconds between kvm_stat samples (CurAvg/s)
COUNTER_REDRAW = 0.25  # seconds between redraws of the totals


class TooSmall(Static):
    DEFAULT_CSS = """
    TooSmall { display: none; width: 1fr; height: 1fr; content-align: center middle;
        text-align: center; background: $background; color: $warning; text-style: bold; }
    """


class MmuScreen(Screen[None]):
    """Base of the explorer's screens."""

    BINDINGS = [
        Binding("f", "filter", "Filter", tooltip="Filter events by regex (as kvm_stat's f)"),
        Binding("e", "export", "Export", tooltip="Write the view as dot and PDF"),
    ]

    DEFAULT_CSS = """
    MmuScreen.-too-small > * { display: none; }
    MmuScreen.-too-small > TooSmall { display: block; }
    """

    #: a short name for exported files and screenshots
    view_name = "view"
    #: the scenario step's caption on this screen ("" without one): the side panels keep
    #: the rows it names when they have to drop some (tui/widgets/fit.py)
    caption_text = ""

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Notifications as plain text: their messages carry paths, regexes, errno text
        and trace syntax (`[cpu]`) that Rich markup would swallow."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=markup)

    def __init__(self) -> None:
        super().__init__()
        self.pending_events: list[Event] = []
        self._counters_shown_at = 0.0
        self._counters_stale = False
        self._counter_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        """The frame every screen shares: header, the screen's own widgets in `#main`,
        the event panel, the footer, and the too-small message."""
        yield MmuHeader(one_row_below=WIDE)
        yield Caption(id="caption")
        with Horizontal(id="main"):
            yield from self.compose_main()
        yield EventPanel(id="events")
        yield KeyBar(id="keys")  # Textual's compact Footer drawn by one widget
        yield TooSmall(id="too-small")

    def compose_main(self) -> ComposeResult:
        """The screen's own widgets, between the header and the event panel."""
        yield from ()

    @property
    def events_panel(self) -> EventPanel:
        return self.query_one(EventPanel)

    @property
    def leaving(self) -> bool:
        """True once the screen's widgets may be gone while its timers still run.
        - App.exit: `is_attached` is then False.
        - App shutdown without exit (run_test's): `is_running` is False from its first
          step.  An installed screen that is not on the stack (the app's screens but the
          current one) is then never pruned: Textual closes its widgets one by one, in
          the order of its registry (a set), before the screen and its timers.
        A screen that is removed (popped, switched away from and not installed) needs no
        check: its Prune handler stops its timers before Textual removes any widget."""
        return not self.is_attached or not self.app.is_running

    def on_mount(self) -> None:
        # Textual calls each class's own on_mount, subclass first: no class calls its
        # base's (this one would start a second counter timer).
        self._counter_timer = self.set_interval(
            COUNTER_REFRESH, self._refresh_counters, name="counters"
        )
        self._check_size()

    def on_resize(self) -> None:
        self._check_size()

    def _check_size(self) -> None:
        width, height = self.app.size
        small = width < MIN_WIDTH or height < MIN_HEIGHT
        self.set_class(small, "-too-small")
        self.set_class(width < WIDE, "-narrow")
        self.set_class(height < TALL, "-short")
        if small:
            self.query_one(TooSmall).update(
                f"mmuscope needs a terminal of at least {MIN_WIDTH}×{MIN_HEIGHT}.\n"
                f"This one is {width}×{height}: enlarge the window or reduce the font."
            )

    def pause(self) -> None:
        """Stop playing (the app calls this before switching to another screen)."""

    def flush_events(self, force: bool = False) -> None:
        """Hand the events gathered since the last frame to the panel (called every
        frame); the log and the totals are redrawn at most every COUNTER_REDRAW seconds,
        and once more after the last change (rates are sampled every COUNTER_REFRESH)."""
        panel = self.events_panel
        if self.pending_events:
            batch = self.pending_events[:]
            self.pending_events.clear()  # the engine appends to this very list
            panel.add_events(batch)
            self._counters_stale = True
        now = time.monotonic()
        due = force or now - self._counters_shown_at >= COUNTER_REDRAW
        if self._counters_stale and due:
            self._counters_shown_at = now
            self._counters_stale = False
            panel.flush_log()
            panel.show_counters()

    def _refresh_counters(self) -> None:
        if not self.leaving:
            self.events_panel.refresh_counters(time.monotonic())

    # -- filter -----------------------------------------------------------------------

    def action_filter(self) -> None:
        from .dialogs import FilterDialog

        panel = self.events_panel

        def apply(text: str) -> str | None:
            try:
                panel.set_filter(compile_filter(text))
            except ValueError as err:
                return str(err)
            return None

        self.app.push_screen(FilterDialog(panel.filter_text, apply))

    # -- export -----------------------------------------------------------------------

    def export_dot(self) -> tuple[str, int] | None:
        """The view as dot text and its node count; None when there is nothing to draw."""
        return None

    def action_export(self) -> None:
        self.export_found(self.export_dot())

    def export_found(self, found: tuple[str, int] | None, name: str = "", note: str = "") -> None:
        """Write `found` (dot text, nodes) as dot and PDF, named after the view (and
        `name`); `note` ends the notification."""
        if found is None:
            self.notify("nothing to export on this screen", severity="warning")
            return
        text, nodes = found
        directory = Path(getattr(self.app, "export_dir", "."))
        stem = f"mmuscope-{self.view_name}{name}-{time.strftime('%Y%m%d-%H%M%S')}"
        self._export(text, nodes, directory / stem, note)

    @work(thread=True, exclusive=True, group="export")
    def _export(self, text: str, nodes: int, stem: Path, note: str = "") -> None:
        from ..export import export_view

        message, severity = export_view(text, nodes, stem)
        if note:
            message += f"\n{note}"
        self.app.call_from_thread(self._notify_export, message, severity)

    def _notify_export(self, message: str, severity: SeverityLevel) -> None:
        self.notify(message, title="export", severity=severity, timeout=8)


class PlayerScreen(MmuScreen):
    """A screen that plays a model with a `Pacer`: one frame timer that runs only while
    something moves, play/pause, faster/slower.  Subclasses give `tick()` (the frame's
    work) and `show_state()` (redraw what the play state changes), and may keep the
    timer running for their own animations through `animating_alone()`."""

    FRAME = 1 / 30  # seconds between frames

    def __init__(self, pacer: Pacer) -> None:
        super().__init__()
        self.pacer = pacer
        self._last_tick = time.monotonic()
        self._player: Timer | None = None

    def on_mount(self) -> None:
        # the frame timer starts once the first frame is on the screen: its frames until
        # then (mounting takes longer than FRAME) would only delay that first frame
        self.call_after_refresh(self.sync_player)

    def on_unmount(self) -> None:
        self._stop_player()

    def sync_player(self) -> None:
        """The frame timer exists only while something moves (a paused screen costs no
        CPU, and no paused timer task outlives the app)."""
        if self.pacer.playing or self.animating_alone():
            if self._player is None:
                self._last_tick = time.monotonic()
                self._player = self.set_interval(self.FRAME, self._frame, name="player")
        else:
            self._stop_player()

    def _stop_player(self) -> None:
        if self._player is not None:
            self._player.stop()
            self._player = None

    def animating_alone(self) -> bool:
        return False

    def _frame(self) -> Awaitable[None] | None:
        if self.leaving:
            return None
        now = time.monotonic()
        dt, self._last_tick = now - self._last_tick, now
        return self.tick(now, min(dt, 0.25))

    def tick(self, now: float, dt: float) -> Awaitable[None] | None:
        """One frame: `dt` seconds since the last one (an awaitable, if the frame gives
        the event loop turns: the frame timer awaits it before the next frame)."""
        return None

    def show_state(self) -> None:
        """Redraw what play, pause and speed change (the header, at least)."""

    def action_play_pause(self) -> None:
        self.pacer.toggle()
        self.sync_player()
        self.show_state()

    def pause(self) -> None:
        if self.pacer.playing:
            self.pacer.playing = False
            self.sync_player()
            self.show_state()

    def action_faster(self) -> None:
        self.pacer.faster()
        self.show_state()

    def action_slower(self) -> None:
        self.pacer.slower()
        self.show_state()
