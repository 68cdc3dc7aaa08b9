"""`?`: every key of the screen underneath and of the app, with what it does."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Label, Static

ABOUT = (
    "mmuscope shows KVM's MMU at work. F1 memslot lookups, F2 faults, shadow pages and zaps "
    "(p: EPT or shadow paging), F3 rmap chains, F4 the paravirt TLB flush, F5 POWER's hash "
    "page table, F6 the threads' claims measured, F7 a replayed trace (when given one). "
    "ctrl+p opens the command palette; --scenario NAME walks through a thread step by step."
)


def key_rows(screen: Screen[object]) -> list[tuple[str, str, str]]:
    """(key, description, longer help) for every binding active on `screen`: the screen's
    and the app's first, then those of the focused widget (scrolling and the like)."""
    own: list[tuple[str, str, str]] = []
    widget: list[tuple[str, str, str]] = []
    seen: set[tuple[str, int]] = set()
    for active in screen.active_bindings.values():
        binding = active.binding
        if (binding.action, id(active.node)) in seen or not binding.description:
            continue
        seen.add((binding.action, id(active.node)))
        shown = binding.key_display or screen.app.get_key_display(binding)
        row = (shown, binding.description, binding.tooltip)
        (own if isinstance(active.node, (Screen, App)) else widget).append(row)
    return own + widget


class HelpScreen(ModalScreen[None]):
    BINDINGS = [
        Binding("escape", "dismiss_help", "Close"),
        Binding("question_mark", "dismiss_help", "Close", show=False),
        Binding("q", "dismiss_help", "Close", show=False),
    ]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > Vertical { width: 90%; max-width: 100; height: 90%; border: thick $primary;
        background: $surface; padding: 0 1; }
    HelpScreen .title { text-style: bold; color: $primary; }
    HelpScreen #about { color: $text-muted; margin-bottom: 1; }
    HelpScreen DataTable { height: 1fr; }
    """

    def __init__(self, under: Screen[object]) -> None:
        super().__init__()
        self.rows = key_rows(under)

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("mmuscope keys", classes="title")
            yield Static(ABOUT, id="about")
            table: DataTable[str] = DataTable(cursor_type="row", zebra_stripes=True)
            table.add_columns("key", "action", "what it does")
            table.add_rows(self.rows)
            yield table

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
