"""Kernel trace text <-> `Event`s: the printk template language (`printk`), tracepoint
printk formats by era (`tracepoints`), the ftrace / ``trace-cmd report`` line shapes
(`lines`), and the kernel's own ``events/*/format`` files read back (`kernel_format`).
Formatting an event as a trace line is the inverse of parsing one (docs/architecture.md
§2.3)."""

from __future__ import annotations

from .lines import STYLES, format_line, parse_line, parse_trace, printk_text, trace_summary
from .printk import PFERR_FLAGS, PFERR_FLAGS_OLD
from .tracepoints import (
    ACCESS_STR,
    CURRENT,
    LIBTRACEEVENT,
    NO_GEN_2019,
    PRE_3_11,
    PRE_6_14,
    PRE_6_18,
    PRE_2019,
    TRACEPOINTS,
    VARIANTS,
    Tracepoint,
    TracepointError,
    format_pferr,
    json_fields,
    parse_pferr,
)

__all__ = [
    "ACCESS_STR",
    "CURRENT",
    "LIBTRACEEVENT",
    "NO_GEN_2019",
    "PFERR_FLAGS",
    "PFERR_FLAGS_OLD",
    "PRE_3_11",
    "PRE_6_14",
    "PRE_6_18",
    "PRE_2019",
    "STYLES",
    "TRACEPOINTS",
    "VARIANTS",
    "Tracepoint",
    "TracepointError",
    "format_line",
    "format_pferr",
    "json_fields",
    "parse_line",
    "parse_pferr",
    "parse_trace",
    "printk_text",
    "trace_summary",
]
