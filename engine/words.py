"""Counted nouns for what the model and the app print: "1 event", "2 events"."""

from __future__ import annotations


def count(n: int, one: str, many: str | None = None) -> str:
    """`n` and the noun that goes with it (`many` defaults to `one` + "s"), with
    thousands separators: count(1, "child", "children") == "1 child"."""
    return f"{n:,} {one if n == 1 else (many or one + 's')}"
