"""Events: what the engine did, shaped like a kernel tracepoint record.

Everything the engine does reaches the screens as one stream of events
(docs/architecture.md §2).  An event is small immutable data with the fields of the
tracepoint it imitates (or of the kernel function, where KVM has no tracepoint), and the
`ts`/`cpu`/`pid`/`comm` columns a `trace-cmd report` line carries.  The engine hands
events to a listener; the app and the trace parser both speak this type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

FieldValue = int | str | bool

# Fields the kernel's TP_printk prints with %u/%d (counts and ids); the rest in hex.
DECIMAL_FIELDS = frozenset({"vcpu", "vcpu_id", "slot", "visited", "len", "as_id", "step"})


@dataclass(frozen=True, slots=True)
class Event:
    """One record: the tracepoint's name and fields, and trace-cmd's columns (frozen)."""

    name: str
    fields: Mapping[str, FieldValue] = field(default_factory=dict)
    ts: float = 0.0
    cpu: int = 0
    pid: int = 0
    comm: str = "mmuscope"

    def to_json(self) -> dict[str, Any]:
        """The JSON shape of docs/architecture.md §6.3: event, ts, cpu, pid, comm,
        fields."""
        return {
            "event": self.name,
            "ts": self.ts,
            "cpu": self.cpu,
            "pid": self.pid,
            "comm": self.comm,
            "fields": dict(self.fields),
        }

    def format_fields(self) -> str:
        """`key=value` pairs, addresses and gfns in hex as kvm tracepoints print them."""
        return " ".join(
            f"{k}={v:#x}"
            if isinstance(v, int) and not isinstance(v, bool) and k not in DECIMAL_FIELDS
            else f"{k}={v}"
            for k, v in self.fields.items()
        )


Listener = Callable[[Event], None]
