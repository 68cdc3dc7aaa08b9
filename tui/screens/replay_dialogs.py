"""The replay screen's questions: where to seek (`g`), which CPUs (`c`) and which pids
(`p`) to show (engine.replay.seek and engine.replay.filters read the answers)."""

from __future__ import annotations

from mmuscope.engine.replay.filters import describe_ids

from .dialogs import TextDialog


class GotoDialog(TextDialog):
    PROMPT = "Go to a time or an event"
    PLACEHOLDER = "1.5 · +0.2 · -0.2 · 50% · #1234 · @5123.456"
    HINT = "seconds from the start, ± from here, a share of the trace, #event, @timestamp"
    INPUT_ID = "goto"


class CpuDialog(TextDialog):
    PROMPT = "Show the events of these CPUs"
    PLACEHOLDER = "e.g. 3 or 0,2-5"
    HINT = "the trace's [cpu] column; empty: every CPU"
    INPUT_ID = "cpus"


class PidDialog(TextDialog):
    PROMPT = "Show the events of these pids"
    PLACEHOLDER = "e.g. 4242 (a vCPU thread) or 4240-4250"
    HINT = "the trace's comm-pid column (thread ids); empty: every pid"
    INPUT_ID = "pids"


def ids_text(ids: frozenset[int] | None) -> str:
    return "" if ids is None else describe_ids(ids)
