"""Where the replay screen's `g` goes: a time, a share of the trace, or an event number,
written as a person would (``1.5``, ``+0.2``, ``50%``, ``#1234``, ``@5123.456``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SeekTarget:
    event: int | None = None  # an event number, or
    ts: float | None = None  # a trace timestamp


def parse_seek(text: str, first: float, span: float, now: float) -> SeekTarget:
    """`text` against a trace starting at `first`, `span` seconds long, now at `now`:
    seconds from the start, ``+``/``-`` seconds from now, ``N%`` of the span, ``#N`` an
    event, ``@T`` a raw timestamp.  ValueError (one line) for anything else."""
    words = text.strip().replace(",", "").replace("_", "")
    try:
        if words.startswith("#"):
            return SeekTarget(event=int(words[1:]))
        if words.endswith("%"):
            return SeekTarget(ts=first + span * float(words[:-1]) / 100)
        if words.startswith("@"):
            return SeekTarget(ts=float(words[1:]))
        if words[:1] in ("+", "-"):
            return SeekTarget(ts=now + float(words))
        return SeekTarget(ts=first + float(words))
    except ValueError:
        raise ValueError(f"not a time, share or event: {text!r}") from None
