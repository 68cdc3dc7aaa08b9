"""Classifying a guest's HPTE fault: forwarded to the guest, emulated MMIO, or paged in.

The POWER-keys thread (kvm-ppc, 2014): "A NO_HPTE page fault can happen due to the below
reasons: 1) Missing hash pte as per guest. This should be forwarded to the guest 2) MMIO
hash pte. [...] should be emulated as a MMIO operation. 3) Missing hash pte because host
swapped out the guest page."  Two ways to tell them apart:

* by hash search (today, and the thread's "Without Fix"): `kvmppc_hpte_hv_fault()` calls
  `kvmppc_hv_find_lock_hpte(kvm, addr, slb_v, HPTE_V_VALID | HPTE_V_ABSENT)`; no entry
  means case 1 ("there really was no HPTE": return the DSISR, reflect to the guest); an
  entry with key 31 means MMIO (return -2, "MMIO emulation - load instr word"); any
  other absent entry goes to the host's page fault handler (return -1).
* by key (the thread's "With Fix"): cases 2 and 3 are valid HPTEs with key 31 and 30 that
  the AMR denies, so they raise DSISR_KEYFAULT; a DSISR_NOHPTE fault is case 1 and is
  forwarded at once, with no search.  A key fault still needs the HPTE — the emulation
  needs the guest real address and the page-in must rewrite the entry, and the hardware
  reports neither slot nor key — so the handler locates it with one search over valid
  HPTEs, stopping at its slot; its key then says MMIO (31) or host-swapped (30).  The
  search the thread saves is the one for case 1, which is also the dearest: a miss reads
  both groups, all 16 HPTEs.

The functions here are pure: they read a `HashPageTable` and return what the handler
would decide; `machine.py` acts on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .hpt import VALID_OR_ABSENT, HashPageTable, SearchResult
from .hpte import (
    ABSENT,
    DSISR_KEYFAULT,
    DSISR_NOHPTE,
    EMPTY,
    HPTE_V_VALID,
    HPTES_PER_GROUP,
    MMIO,
    SWAPPED,
    Hpte,
)

FORWARDED = "forwarded"  # case 1: the guest's own missing HPTE, a DSI for the guest
EMULATED = "emulated"  # case 2: MMIO, emulated by the host
PAGED_IN = "paged_in"  # case 3: the host had paged the guest's page out
OUTCOMES = (FORWARDED, EMULATED, PAGED_IN)

# Why a fault searched the HPT.
CLASSIFY = "classify"  # today: the search decides the case
LOCATE = "locate"  # the thread: the key fault decided "host's", the search finds the HPTE
CACHED = "mmio-cache"  # today: mmio_cache_search() hit, no search
NO_SEARCH = ""  # the thread: DSISR_NOHPTE forwarded directly


def classify_found(hpte: Hpte | None, dsisr: int) -> str:
    """The handler's decision once it holds the HPTE (or knows there is none)."""
    if hpte is None:
        return FORWARDED
    kind = hpte.kind
    if kind == MMIO:
        return EMULATED
    if kind in (ABSENT, SWAPPED):
        return PAGED_IN
    if dsisr & DSISR_KEYFAULT:
        return FORWARDED  # a key the guest itself denied (not in the model's guests)
    raise ValueError("a NO_HPTE fault found a valid HPTE (another vCPU raced; the kernel retries)")


def classify_by_search(
    hpt: HashPageTable, vpn: int, trace: bool = False
) -> tuple[str, SearchResult]:
    """Today's `kvmppc_hpte_hv_fault()` on DSISR_NOHPTE: search, then decide."""
    found = hpt.search(vpn, VALID_OR_ABSENT, trace)
    hpte = hpt.entry(found.slot) if found.found else None
    return classify_found(hpte, DSISR_NOHPTE), found


def classify_by_key(
    hpt: HashPageTable, vpn: int, dsisr: int, trace: bool = False
) -> tuple[str, SearchResult | None]:
    """The thread's handler: DSISR_NOHPTE is the guest's, forwarded with no search; a key
    fault is the host's, and one search over valid HPTEs finds which mark it is."""
    if not dsisr & DSISR_KEYFAULT:
        return FORWARDED, None
    found = hpt.search(vpn, HPTE_V_VALID, trace)
    hpte = hpt.entry(found.slot) if found.found else None
    if hpte is None:
        raise ValueError("a key fault without a valid HPTE (the model never unmaps mid-fault)")
    return classify_found(hpte, dsisr), found


@dataclass(frozen=True, slots=True)
class Phase:
    """One frame of a fault's animation: what happens and the slot it looks at."""

    what: str  # "fault", "key", "cache", "probe", "outcome"
    text: str
    slot: int = -1
    match: bool = False


class FaultRecord(NamedTuple):
    """One HDSI and what the hypervisor did with it."""

    seq: int
    era: str
    ea: int
    vpn: int
    store: bool
    dsisr: int
    hw_key: int  # the key the hardware denied (-1: a NO_HPTE fault)
    search: SearchResult | None
    purpose: str  # CLASSIFY, LOCATE, CACHED or NO_SEARCH
    outcome: str
    kind: str  # the kind of the HPTE the handler dealt with (EMPTY: none)
    slot: int  # its slot (-1: none)
    groups: tuple[tuple[str, ...], ...] = ()  # traced: the kinds of the primary and
    # secondary groups' slots when the fault happened (before the handler changed them)

    @property
    def keyfault(self) -> bool:
        return bool(self.dsisr & DSISR_KEYFAULT)

    @property
    def examined(self) -> int:
        return self.search.examined if self.search is not None else 0

    def phases(self) -> list[Phase]:
        """The fault step by step: the exit, the key check (or the cache), each slot the
        search examined, the outcome."""
        access = "store" if self.store else "load"
        why = "DSISR_KEYFAULT" if self.keyfault else "DSISR_NOHPTE"
        out = [Phase("fault", f"HDSI: {access} at ea {self.ea:#x}, {why}")]
        if self.keyfault:
            out.append(Phase("key", f"the AMR denies key {self.hw_key}: the host's mark"))
        elif self.purpose == NO_SEARCH:
            out.append(Phase("key", "no key fault: the guest's own miss, no search"))
        elif self.purpose == CACHED:
            out.append(Phase("cache", "mmio_cache_search(): hit, no search", self.slot))
        if self.search is not None:
            for probe in self.search.probes:
                hit = probe == self.search.slot
                group, index = divmod(probe, HPTES_PER_GROUP)
                out.append(Phase("probe", f"group {group:#x} slot {index}", probe, hit))
        if self.purpose == CLASSIFY and self.slot >= 0:
            out.append(Phase("key", FOUND_WORDS[self.kind], self.slot))
        out.append(Phase("outcome", OUTCOME_WORDS[self.outcome], self.slot))
        return out


FOUND_WORDS = {
    MMIO: "is_mmio_hpte(): absent, key 31",
    ABSENT: "absent, key 0: the host paged it out",
}
OUTCOME_WORDS = {
    FORWARDED: "forwarded to the guest (DSI)",
    EMULATED: "MMIO emulated (kvmppc_hv_emulate_mmio)",
    PAGED_IN: "paged in (kvmppc_book3s_hv_page_fault)",
}

__all__ = [
    "CACHED",
    "CLASSIFY",
    "EMPTY",
    "EMULATED",
    "FORWARDED",
    "LOCATE",
    "NO_SEARCH",
    "OUTCOMES",
    "PAGED_IN",
    "FaultRecord",
    "Phase",
    "classify_by_key",
    "classify_by_search",
    "classify_found",
]
