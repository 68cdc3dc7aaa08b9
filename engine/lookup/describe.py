"""Probes in words: what a lookup decided at each slot or node (for the CLI and the app)."""

from __future__ import annotations

from collections.abc import Callable

from ..memslots.memslot import MemorySlot
from .base import EMPTY, GO_LEFT, GO_RIGHT, HIGHER, HIT, LOWER, MISS, NEXT, Probe

OUTCOME_WORDS = {
    HIT: "holds the gfn: hit",
    GO_LEFT: "gfn < base_gfn: go left",
    GO_RIGHT: "gfn >= base_gfn + npages: go right",
    LOWER: "gfn >= base_gfn: search lower indexes",
    HIGHER: "gfn < base_gfn: search higher indexes",
    NEXT: "not here: next entry",
    EMPTY: "unused entry",
    MISS: "range check: gfn not in this slot, miss",
}


def describe_probe(probe: Probe, name_of: Callable[[MemorySlot], str], name_width: int = 18) -> str:
    """`slot 1   ram-1m-to-hole  gfn 0x100-0xdffff  gfn < base_gfn: go left`."""
    if probe.slot is None:
        return f"[{probe.position}] unused entry (npages 0): no match"
    slot = probe.slot
    where = (
        f"slot {slot.id:<3} {name_of(slot):<{name_width}} "
        f"gfn {slot.base_gfn:#x}-{slot.end_gfn - 1:#x}"
    )
    return f"{where}  {OUTCOME_WORDS[probe.outcome]}"
