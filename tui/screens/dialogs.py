"""Small dialogs: the event filter, a gfn to look up, and the slot form.

Each dialog gets an `apply` callback that returns None on success or a one-line error;
on error the dialog stays open and shows it (a refused KVM_SET_USER_MEMORY_REGION shows
the kernel's errno name, and nothing changed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Static

Apply = Callable[[str], "str | None"]


def parse_number(text: str, what: str) -> int:
    """An int in C syntax (0x..., decimal) with K/M/G suffixes for sizes."""
    cleaned = text.strip().replace("_", "")
    scale = 1
    if cleaned[-1:].upper() in ("K", "M", "G"):
        scale = 1 << {"K": 10, "M": 20, "G": 30}[cleaned[-1].upper()]
        cleaned = cleaned[:-1]
    try:
        value = int(cleaned, 0) * scale
    except ValueError:
        raise ValueError(f"{what}: not a number: {text!r}") from None
    if value < 0:
        raise ValueError(f"{what}: must not be negative")
    return value


class Dialog(ModalScreen[None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    DEFAULT_CSS = """
    Dialog { align: center middle; }
    Dialog > Vertical { width: 64; height: auto; border: thick $primary; background: $surface;
        padding: 1 2; }
    Dialog .title { text-style: bold; margin-bottom: 1; }
    Dialog .error { color: $error; text-style: bold; height: auto; }
    Dialog .hint { color: $text-muted; }
    Dialog Horizontal { height: auto; align-horizontal: right; margin-top: 1; }
    Dialog Button { margin-left: 1; }
    """

    def action_cancel(self) -> None:
        self.dismiss(None)

    def show_error(self, message: str | None) -> None:
        self.query_one("#error", Static).update(message or "")


class TextDialog(Dialog):
    """One line of text checked by `apply`: closes on success, shows the error otherwise."""

    PROMPT = ""
    PLACEHOLDER = ""
    HINT = ""
    INPUT_ID = "text"

    def __init__(self, apply: Apply, initial: str = "") -> None:
        super().__init__()
        self.apply = apply
        self.initial = initial

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label(self.PROMPT, classes="title", markup=False)
            yield Input(self.initial, placeholder=self.PLACEHOLDER, id=self.INPUT_ID)
            if self.HINT:
                yield Static(self.HINT, classes="hint", markup=False)  # "the trace's [cpu]"
            yield Static("", id="error", classes="error", markup=False)

    @on(Input.Submitted)
    def submit(self, event: Input.Submitted) -> None:
        error = self.apply(event.value)
        if error:
            self.show_error(error)
        else:
            self.dismiss(None)


class FilterDialog(TextDialog):
    """kvm_stat's `f`: a regular expression over event names (empty shows all)."""

    PROMPT = "Filter events (regular expression over event names)"
    PLACEHOLDER = "e.g. lookup|mmio"
    HINT = "empty: show every event"
    INPUT_ID = "pattern"

    def __init__(self, initial: str, apply: Apply) -> None:
        super().__init__(apply, initial)


class GfnDialog(TextDialog):
    """Look up one gfn (or a gpa with a 'gpa' prefix) on the current structure."""

    PROMPT = "Look up a guest frame number"
    PLACEHOLDER = "gfn, e.g. 0xfee00   (or: gpa 0xfee00000)"
    INPUT_ID = "gfn"


@dataclass(frozen=True, slots=True)
class SlotRequest:
    mode: str  # "add", "delete", "move"
    slot_id: int
    gpa: int = 0
    size: int = 0
    readonly: bool = False
    dirty: bool = False


SlotApply = Callable[[SlotRequest], "str | None"]

TITLES = {
    "add": "Add a memslot (KVM_MR_CREATE)",
    "delete": "Delete a memslot (KVM_MR_DELETE)",
    "move": "Move a memslot (KVM_MR_MOVE)",
}


class SlotDialog(Dialog):
    """One form for create, delete and move, as KVM_SET_USER_MEMORY_REGION takes them."""

    def __init__(
        self, mode: str, apply: SlotApply, *, slot_id: int = 0, gpa: int = 0, size: int = 0
    ) -> None:
        super().__init__()
        self.mode = mode
        self.apply = apply
        self.defaults = (slot_id, gpa, size)

    def compose(self) -> ComposeResult:
        slot_id, gpa, size = self.defaults
        with Vertical():
            yield Label(TITLES[self.mode], classes="title")
            yield Label("slot id")
            yield Input(str(slot_id), id="slot-id")
            if self.mode in ("add", "move"):
                yield Label("guest physical address" + (" (new)" if self.mode == "move" else ""))
                yield Input(f"{gpa:#x}", id="gpa")
            if self.mode == "add":
                yield Label("size (bytes; K/M/G suffixes)")
                yield Input(f"{size:#x}", id="size")
                with Horizontal():
                    yield Checkbox("KVM_MEM_READONLY", id="readonly")
                    yield Checkbox("KVM_MEM_LOG_DIRTY_PAGES", id="dirty")
            yield Static("", id="error", classes="error", markup=False)
            with Horizontal():
                yield Button("Cancel", id="cancel")
                yield Button(self.mode.capitalize(), id="ok", variant="primary")

    def request(self) -> SlotRequest:
        def number(selector: str, what: str) -> int:
            return parse_number(self.query_one(selector, Input).value, what)

        slot_id = number("#slot-id", "slot id")
        if self.mode == "delete":
            return SlotRequest("delete", slot_id)
        gpa = number("#gpa", "address")
        if self.mode == "move":
            return SlotRequest("move", slot_id, gpa)
        return SlotRequest(
            "add",
            slot_id,
            gpa,
            number("#size", "size"),
            self.query_one("#readonly", Checkbox).value,
            self.query_one("#dirty", Checkbox).value,
        )

    @on(Input.Submitted)
    @on(Button.Pressed, "#ok")
    def submit(self) -> None:
        try:
            request = self.request()
        except ValueError as err:
            self.show_error(str(err))
            return
        error = self.apply(request)
        if error:
            self.show_error(error)
        else:
            self.dismiss(None)

    @on(Button.Pressed, "#cancel")
    def cancel(self) -> None:
        self.dismiss(None)
