"""Which CPUs and pids a replay shows: kvm_stat's ``-p PID`` idea for the trace's
``[cpu]`` and ``comm-pid`` columns.  A filter narrows the event log and the kvm_stat
counters; the MMU model always sees every event (the shadow pages are the VM's, not a
thread's)."""

from __future__ import annotations

from dataclasses import dataclass

from ..events import Event

MAX_ID = 1 << 22  # pid_max's ceiling on 64-bit Linux (PID_MAX_LIMIT)


def parse_ids(text: str, what: str = "id") -> frozenset[int] | None:
    """``"3"``, ``"0,2-5"`` → those numbers; ``""`` or ``"*"`` → None (all).  Raises
    ValueError with a one-line message for anything else."""
    cleaned = text.strip()
    if cleaned in ("", "*", "all"):
        return None
    ids: set[int] = set()
    for part in cleaned.replace(" ", ",").split(","):
        if not part:
            continue
        low, sep, high = part.partition("-")
        try:
            first, last = int(low), int(high) if sep else int(low)
        except ValueError:
            raise ValueError(f"{what}: not a number or range: {part!r}") from None
        if not 0 <= first <= last < MAX_ID or last - first > 65536:
            raise ValueError(f"{what}: bad range {part!r}")
        ids.update(range(first, last + 1))
    return frozenset(ids)


def describe_ids(ids: frozenset[int] | None) -> str:
    """The inverse of `parse_ids`, ranges folded: ``0,2-5`` (``*`` for all)."""
    if ids is None:
        return "*"
    parts: list[str] = []
    run: list[int] = []
    for n in sorted(ids):
        if run and n == run[-1] + 1:
            run.append(n)
            continue
        if run:
            parts.append(_run_text(run))
        run = [n]
    if run:
        parts.append(_run_text(run))
    return ",".join(parts)


def _run_text(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


@dataclass(frozen=True, slots=True)
class EventFilter:
    cpus: frozenset[int] | None = None
    pids: frozenset[int] | None = None

    @property
    def active(self) -> bool:
        return self.cpus is not None or self.pids is not None

    def matches(self, event: Event) -> bool:
        return (self.cpus is None or event.cpu in self.cpus) and (
            self.pids is None or event.pid in self.pids
        )

    def describe(self) -> str:
        return f"cpu {describe_ids(self.cpus)} · pid {describe_ids(self.pids)}"
