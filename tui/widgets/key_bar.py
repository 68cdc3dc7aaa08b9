"""The key bar at the bottom of every screen: the keys the screen offers, as Textual's
compact Footer shows them (key, description; the command palette's key at the right
end), drawn by one widget.

Textual's Footer makes a widget per key: on the memslots screen 22 of its 41 widgets, each
styled, laid out and drawn at start-up (about a quarter of a second before the first
frame) and again whenever the bindings change.  Here a key that does not fit
is left out whole (never cut), the palette key always shows, a click on a key presses it
and hovering one shows its tooltip, as in the Footer.
"""

from __future__ import annotations

from typing import NamedTuple

from rich.style import Style
from rich.text import Text
from textual import events
from textual.screen import Screen
from textual.widget import Widget

SEPARATOR = "▏"  # before the palette key, as the Footer's `border-left: vkey`
DIM = Style(dim=True)  # a key whose action is disabled now


class ShownKey(NamedTuple):
    key: str  # what simulate_key presses
    display: str
    description: str
    enabled: bool
    tooltip: str


class KeyBar(Widget):
    ALLOW_SELECT = False
    COMPONENT_CLASSES = {"key-bar--key", "key-bar--description", "key-bar--separator"}
    DEFAULT_CSS = """
    KeyBar { dock: bottom; height: 1; background: $footer-background;
        color: $footer-foreground; }
    KeyBar > .key-bar--key { color: $footer-key-foreground;
        background: $footer-key-background; text-style: bold; }
    KeyBar > .key-bar--description { color: $footer-description-foreground;
        background: $footer-description-background; }
    KeyBar > .key-bar--separator { color: $foreground 20%; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._spans: list[tuple[int, int, ShownKey]] = []

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen[object]) -> None:
        self.refresh()

    def shown_keys(self) -> tuple[list[ShownKey], ShownKey | None]:
        """The screen's keys with `show`, one per action (the first, as the Footer
        does), and the command palette's key."""
        app = self.app
        keys: list[ShownKey] = []
        actions: set[str] = set()
        palette: ShownKey | None = None
        for key, (_node, binding, enabled, tooltip) in self.screen.active_bindings.items():
            shown = ShownKey(
                binding.key,
                app.get_key_display(binding),
                binding.description,
                enabled,
                tooltip or binding.tooltip or binding.description,
            )
            if key == app.COMMAND_PALETTE_BINDING and app.ENABLE_COMMAND_PALETTE:
                palette = shown
            elif binding.show and binding.action not in actions:
                actions.add(binding.action)
                keys.append(shown)
        return keys, palette

    def render(self) -> Text:
        width = self.size.width
        keys, palette = self.shown_keys()
        key_style = self.get_component_rich_style("key-bar--key")
        text_style = self.get_component_rich_style("key-bar--description")
        tail = Text()
        if palette is not None:
            tail.append(SEPARATOR, self.get_component_rich_style("key-bar--separator"))
            tail.append(palette.display, key_style)
            tail.append(f" {palette.description}", text_style)
        text = Text(no_wrap=True, overflow="crop", end="")
        self._spans = []
        for shown in keys:
            label = len(shown.display) + 1 + len(shown.description)
            if len(text) + label + 1 + len(tail) > width:
                break  # left out whole: the keys after it do not fit either
            start = len(text)
            dim = None if shown.enabled else DIM
            text.append(shown.display, key_style + dim)
            text.append(f" {shown.description}", text_style + dim)
            self._spans.append((start, len(text), shown))
            text.append(" ")
        if palette is not None and len(tail) <= width:
            text.append(" " * (width - len(text) - len(tail)))
            self._spans.append((len(text) + 1, width, palette))
            text.append_text(tail)
        return text

    def key_at(self, x: int) -> ShownKey | None:
        for start, end, shown in self._spans:
            if start <= x < end:
                return shown
        return None

    def on_click(self, event: events.Click) -> None:
        shown = self.key_at(event.x)
        if shown is None:
            return
        if shown.enabled:
            self.app.simulate_key(shown.key)
        else:
            self.app.bell()

    def on_mouse_move(self, event: events.MouseMove) -> None:
        shown = self.key_at(event.x)
        self.tooltip = shown.tooltip if shown is not None else None
