"""The five mailing-list threads mmuscope reproduces, by the short names docs/threads.md
gives them (each thread's subject, list, date and authors are there).

A scenario names the thread it follows (`thread = "fast-zap"`), a bench table the thread
whose claim it measures (`"thread": "fast-zap"` in `mmuscope bench --json`); captions and
tables for people print the short name, "the fast-zap thread (kvm, 2013)".
"""

from __future__ import annotations

from typing import NamedTuple


class Thread(NamedTuple):
    id: str  # what files and JSON use: "memslot-search"
    label: str  # how the short name spells it: "memslot-search", "PV-flush"
    mailing_list: str  # "kvm", "lkml", "kvm-ppc"
    year: int

    @property
    def name(self) -> str:
        """The short name, as docs/threads.md's heading has it:
        "the memslot-search thread (kvm, 2011)"."""
        return f"the {self.label} thread ({self.mailing_list}, {self.year})"

    @property
    def title(self) -> str:
        """The short name at the start of a sentence or a caption."""
        return "T" + self.name[1:]


THREADS: dict[str, Thread] = {
    t.id: t
    for t in (
        Thread("memslot-search", "memslot-search", "kvm", 2011),
        Thread("pv-flush", "PV-flush", "lkml", 2012),
        Thread("fast-zap", "fast-zap", "kvm", 2013),
        Thread("power-keys", "POWER-keys", "kvm-ppc", 2014),
        Thread("pte-list-ext", "PTE_LIST_EXT", "kvm", 2021),
    )
}
"""By id, in the order docs/threads.md tells them (by date)."""


def thread(thread_id: str) -> Thread:
    """The thread with that id; KeyError names the ids there are."""
    try:
        return THREADS[thread_id]
    except KeyError:
        raise KeyError(f"no thread {thread_id!r}; the threads are {', '.join(THREADS)}") from None
