"""Messages between the explorer's widgets and screens, in one module (as posting and
harlequin keep theirs): widgets post, screens update the model and the other widgets."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message


@dataclass
class WindowMoved(Message):
    """The tree drawing now shows another window of levels (a click, `u`, `r`, `[`, `]`,
    or the window following a lookup down a big tree)."""

    slot_id: int  # the slot at the window's root
    depth: int  # that node's depth in the whole tree (0: the tree's root)
    levels: int  # levels shown
    hidden: int  # slots of the tree outside the window
