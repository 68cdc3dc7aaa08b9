"""Kernel trace text <-> `Event`s: tracepoint printk formats (`tracepoints`) and the
ftrace / ``trace-cmd report`` line shapes (`lines`).  Formatting an event as a trace line
is the inverse of parsing one (DESIGN.md, "everything is an event")."""

from __future__ import annotations

from .lines import STYLES, format_line, parse_line, parse_trace, printk_text, trace_summary
from .tracepoints import (
    ACCESS_STR,
    CURRENT,
    LIBTRACEEVENT,
    PRE_2019,
    TRACEPOINTS,
    VARIANTS,
    Tracepoint,
    TracepointError,
    format_pferr,
    parse_pferr,
)

__all__ = [
    "ACCESS_STR",
    "CURRENT",
    "LIBTRACEEVENT",
    "PRE_2019",
    "STYLES",
    "TRACEPOINTS",
    "VARIANTS",
    "Tracepoint",
    "TracepointError",
    "format_line",
    "format_pferr",
    "parse_line",
    "parse_pferr",
    "parse_trace",
    "printk_text",
    "trace_summary",
]
