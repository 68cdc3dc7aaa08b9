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


# What Textual's own keys, and the pacing keys every screen shares, do: their bindings
# carry no tooltip of their own.  By action, its namespace ("app.", "screen.") left out.
WHAT_IT_DOES = {
    "focus_next": "Move the focus to the next panel (its keys join this list)",
    "focus_previous": "Move the focus to the previous panel",
    "copy_text": "Copy the text selected with the mouse",
    "quit": "Leave mmuscope",
    "help": "This list of keys",
    "faster": "More steps per second",
    "slower": "Fewer steps per second",
    "scroll_up": "Scroll the focused panel up a line",
    "scroll_down": "Scroll the focused panel down a line",
    "scroll_left": "Scroll the focused panel left",
    "scroll_right": "Scroll the focused panel right",
    "page_up": "Scroll the focused panel up a page",
    "page_down": "Scroll the focused panel down a page",
    "page_left": "Scroll the focused panel left a page",
    "page_right": "Scroll the focused panel right a page",
    "scroll_home": "Scroll the focused panel to its start",
    "scroll_end": "Scroll the focused panel to its end",
}


def what_it_does(action: str, tooltip: str) -> str:
    """The binding's tooltip, or what its action does (WHAT_IT_DOES)."""
    if tooltip:
        return tooltip
    name = action.rpartition(".")[2].partition("(")[0]
    return WHAT_IT_DOES.get(name, "")


def key_rows(screen: Screen[object]) -> list[tuple[str, str, str]]:
    """(key, description, what it does) for every binding active on `screen`: the
    screen's and the app's first, then those of the focused widget (scrolling and the
    like)."""
    own: list[tuple[str, str, str]] = []
    widget: list[tuple[str, str, str]] = []
    seen: set[tuple[str, int]] = set()
    for active in screen.active_bindings.values():
        binding = active.binding
        if (binding.action, id(active.node)) in seen or not binding.description:
            continue
        seen.add((binding.action, id(active.node)))
        shown = binding.key_display or screen.app.get_key_display(binding)
        row = (shown, binding.description, what_it_does(binding.action, binding.tooltip))
        (own if isinstance(active.node, (Screen, App)) else widget).append(row)
    return own + widget


class KeyTable(DataTable[str]):
    """The keys, one a row; home and end go to the first and the last row (a DataTable's
    go to its first and last column, and this one has nothing to its right)."""

    BINDINGS = [
        Binding("home", "scroll_top", "First key", show=False),
        Binding("end", "scroll_bottom", "Last key", show=False),
    ]


class HelpScreen(ModalScreen[None]):
    """The key and action columns as wide as their longest entry; "what it does" takes
    the rest of the width and wraps (rows as tall as their text), so nothing is cut and
    nothing lies to the right of the window."""

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
            yield KeyTable(cursor_type="row", zebra_stripes=True)

    def on_resize(self) -> None:
        """The rows again for the table's width, the cursor kept."""
        table = self.query_one(KeyTable)
        width = table.scrollable_content_region.width or table.size.width
        if width <= 0:
            return
        row = table.cursor_row
        table.clear(columns=True)
        key = max(len("key"), *(len(r[0]) for r in self.rows))
        action = max(len("action"), *(len(r[1]) for r in self.rows))
        pad = 2 * table.cell_padding
        scrollbar = table.styles.scrollbar_size_vertical
        rest = max(16, width - key - action - 3 * pad - scrollbar)
        table.add_column("key", width=key)
        table.add_column("action", width=action)
        table.add_column("what it does", width=rest)
        for shown in self.rows:
            table.add_row(*shown, height=None)
        table.move_cursor(row=min(row, table.row_count - 1))

    def action_dismiss_help(self) -> None:
        self.dismiss(None)
