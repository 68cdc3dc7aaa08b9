"""Replaying a kvmmmu trace on a model of the MMU: `model` (what the events imply) and
its `records`, `stream` (events with the byte offset of their first line), `index`
(checkpoints for seeking in a file of any size), `cursor` (a position in a file), `live`
(a position in a live tail), `filters` and `seek` (what the user asks for), `views` and
`dot` (what the app draws and exports)."""

from __future__ import annotations

from .cursor import TraceCursor
from .filters import EventFilter, parse_ids
from .index import Checkpoint, TraceIndex, build_index
from .live import LiveTimeline
from .model import MODEL_EVENTS, ReplayModel
from .records import classify
from .stream import EventAssembler, Positioned, iter_positioned

__all__ = [
    "MODEL_EVENTS",
    "Checkpoint",
    "EventAssembler",
    "EventFilter",
    "LiveTimeline",
    "Positioned",
    "ReplayModel",
    "TraceCursor",
    "TraceIndex",
    "build_index",
    "classify",
    "iter_positioned",
    "parse_ids",
]
