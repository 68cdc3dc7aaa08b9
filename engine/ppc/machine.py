"""The hypervisor side of a Book3S HV guest on a hash MMU: the HPT, the host's copy of
guest memory, the hcalls that fill the HPT, and the HDSI handler (the POWER-keys thread,
docs/kvm.md §8).

* `hw_access()` is the hardware: the HPTE for the page, valid or not, then the AMR check
  of its key (an absent HPTE is invisible to the hardware: DSISR_NOHPTE).
* `hdsi()` is the exit: `kvmppc_hdsi` in book3s_hv_rmhandlers.S and, where it runs,
  `kvmppc_hpte_hv_fault()`; it classifies the fault (faults.py) and emulates MMIO or
  pages the page in (`kvmppc_book3s_hv_page_fault()`), or leaves a forwarded fault to
  the guest.
* `h_enter()`, `h_remove()`, `h_bulk_remove()`: the guest's hcalls.  `kvmppc_do_h_enter`
  marks a page outside every memslot "Emulated MMIO - mark this with key=31" and writes
  "a non-present HPTE" for a page the host has paged out (ABSENT, key bits cleared);
  the thread makes both valid with keys 31 and 30.
* `host_swap_out()`: the host reclaims a guest page; the MMU notifier's `kvm_unmap_rmapp`
  turns its HPTE absent (today) or gives it key 30 (the thread).

One vCPU, no HPTE locks, no TLB; guest RAM is pages `0 .. ram_pages-1` of the guest's
page size and anything above is MMIO.  Counters say what each era's handler did and, for
the thread, what the keys saved: each NO_HPTE fault forwarded without a search would have
been a full miss (16 HPTEs, 2 groups) for the hash-search handler.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from ..errors import AuditError
from ..events import Event, FieldValue
from .faults import (
    CACHED,
    CLASSIFY,
    EMULATED,
    FORWARDED,
    LOCATE,
    NO_SEARCH,
    PAGED_IN,
    FaultRecord,
    classify_by_key,
    classify_by_search,
    classify_found,
)
from .hpt import KVM_DEFAULT_HPT_ORDER, HashPageTable, SearchResult
from .hpte import (
    ABSENT,
    DSISR_KEYFAULT,
    DSISR_NOHPTE,
    EMPTY,
    HPTE_R_KEY,
    HPTE_V_ABSENT,
    HPTE_V_SECONDARY,
    HPTE_V_VALID,
    HPTES_PER_GROUP,
    MMIO,
    PP_RO,
    PP_RW,
    SWAPPED,
    VALID,
    Hpte,
    key_to_r,
    make_v,
    with_key,
)
from .keys import H_PARAMETER, H_PTEG_FULL, H_SUCCESS, Amr, era_of

MMIO_HPTE_CACHE_SIZE = 4
FULL_MISS = 2 * HPTES_PER_GROUP  # HPTEs a search examines when there is no entry
BULK_REMOVE_MAX = 4  # H_BULK_REMOVE takes up to 4 HPTEs a call

Emit = Callable[[Event], None]


@dataclass(slots=True)
class PpcCounters:
    """What the handler did; `saved_*` are the searches the keys avoided."""

    accesses: int = 0
    faults: int = 0
    no_hpte: int = 0
    keyfaults: int = 0
    forwarded: int = 0
    emulated: int = 0
    paged_in: int = 0
    searches: int = 0
    classify_searches: int = 0
    locate_searches: int = 0
    hptes_examined: int = 0
    groups_read: int = 0
    mmio_cache_hits: int = 0
    saved_searches: int = 0
    saved_hptes: int = 0
    h_enter: int = 0
    h_pteg_full: int = 0
    h_parameter: int = 0
    h_remove: int = 0
    h_bulk_remove: int = 0
    unmaps: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


class PpcMachine:
    """The host and the hardware for one guest; see the module docstring."""

    def __init__(
        self,
        era: str = "today",
        *,
        order: int = KVM_DEFAULT_HPT_ORDER,
        page_shift: int = 16,
        ram_pages: int = 1 << 16,
        emit: Emit | None = None,
        trace: bool = False,
    ) -> None:
        self.era = era_of(era)
        self.host_keys = self.era.host_keys
        self.hpt = HashPageTable(order, page_shift)
        self.amr = Amr(self.era)
        self.page_shift = page_shift
        self.ram_pages = ram_pages
        self.swapped = bytearray(ram_pages)  # 1: the host has paged this guest page out
        self.rmap: dict[int, int] = {}  # guest RAM page -> slot of the HPTE mapping it
        self.counters = PpcCounters()
        self.mmio_cache: list[tuple[int, int, int]] = []  # (vpn, slot, mmio_update)
        self.mmio_cache_next = 0
        self.mmio_update = 0  # kvm->arch.mmio_update
        self.emit = emit
        self.trace = trace
        self.last: FaultRecord | None = None

    def _emit(self, name: str, **fields: FieldValue) -> None:
        if self.emit is not None:
            self.emit(Event(name, {"vcpu": 0, **fields}))

    def is_ram(self, gpa: int) -> bool:
        return (gpa >> self.page_shift) < self.ram_pages

    # -- the hardware -----------------------------------------------------------------

    def hw_access(self, vpn: int, store: bool) -> int:
        """0 if the access completes, else the DSISR of the HDSI it raises."""
        self.counters.accesses += 1
        slot = self.hpt.index.get(vpn, -1)
        if slot < 0:
            return DSISR_NOHPTE
        hpte = self.hpt.slots[slot]
        assert hpte is not None
        if not hpte.v & HPTE_V_VALID:
            return DSISR_NOHPTE
        if self.amr.denies(hpte.key, store):
            return DSISR_KEYFAULT
        if store and not hpte.writable:
            raise ValueError("a store to a read-only HPTE: protection faults are not modelled")
        return 0

    # -- the HDSI -----------------------------------------------------------------------

    def hdsi(self, ea: int, vpn: int, store: bool, dsisr: int) -> FaultRecord:
        """Classify the fault as the era's handler does, then act on it."""
        c = self.counters
        c.faults += 1
        hw_key = -1
        if dsisr & DSISR_KEYFAULT:
            c.keyfaults += 1
            hpte = self.hpt.slots[self.hpt.index[vpn]]
            assert hpte is not None
            hw_key = hpte.key
        else:
            c.no_hpte += 1
        outcome, found, purpose, index = self._classify(vpn, dsisr)
        hpte = self.hpt.slots[index] if index >= 0 else None
        kind = hpte.kind if hpte is not None else EMPTY
        groups: tuple[tuple[str, ...], ...] = ()
        if self.trace:
            groups = tuple(tuple(self.hpt.kinds_of(g)) for g in self.hpt.groups_of(vpn))
        record = FaultRecord(
            c.faults, self.era.name, ea, vpn, store, dsisr, hw_key, found, purpose,
            outcome, kind, index, groups,
        )  # fmt: skip
        self._act(record)
        self.last = record
        return record

    def _classify(self, vpn: int, dsisr: int) -> tuple[str, SearchResult | None, str, int]:
        """(outcome, the search if any, why it searched, the slot dealt with or -1)."""
        c = self.counters
        if self.era.host_valid_marks:
            outcome, found = classify_by_key(self.hpt, vpn, dsisr, self.trace)
            if found is None:
                c.saved_searches += 1
                c.saved_hptes += FULL_MISS
                return outcome, None, NO_SEARCH, -1
            c.locate_searches += 1
            self._count_search(found)
            return outcome, found, LOCATE, found.slot
        if self.era.mmio_cache:
            slot = self._mmio_cache_search(vpn)
            if slot >= 0:
                c.mmio_cache_hits += 1
                return classify_found(self.hpt.slots[slot], dsisr), None, CACHED, slot
        outcome, found = classify_by_search(self.hpt, vpn, self.trace)
        c.classify_searches += 1
        self._count_search(found)
        return outcome, found, CLASSIFY, found.slot

    def _count_search(self, found: SearchResult) -> None:
        c = self.counters
        c.searches += 1
        c.hptes_examined += found.examined
        c.groups_read += found.groups_read
        if self.emit is not None:
            self._emit(
                "kvmppc_hv_find_lock_hpte",
                hash=found.primary,
                visited=found.examined,
                index=found.slot,
            )

    def _act(self, record: FaultRecord) -> None:
        c = self.counters
        emitting = self.emit is not None
        if emitting and record.purpose != NO_SEARCH:
            ret = {FORWARDED: record.dsisr, EMULATED: -2, PAGED_IN: -1}[record.outcome]
            self._emit(
                "kvmppc_hpte_hv_fault", ea=record.ea, dsisr=record.dsisr, ret=ret,
                visited=record.examined,
            )  # fmt: skip
        if record.outcome == FORWARDED:
            c.forwarded += 1
        elif record.outcome == EMULATED:
            c.emulated += 1
            hpte = self.hpt.slots[record.slot]
            assert hpte is not None
            self._emit("kvmppc_hv_emulate_mmio", ea=record.ea, gpa=hpte.gpa)
            if self.era.mmio_cache and record.purpose != CACHED:
                self._mmio_cache_insert(record.vpn, record.slot)
        else:
            c.paged_in += 1
            self._page_in(record)
        if emitting:
            self._emit(
                "kvmppc_hdsi", ea=record.ea, dsisr=record.dsisr, outcome=record.outcome,
                visited=record.examined,
            )  # fmt: skip

    def _page_in(self, record: FaultRecord) -> None:
        """`kvmppc_book3s_hv_page_fault()`: bring the page back, make the HPTE valid with
        the guest's own key."""
        hpte = self.hpt.slots[record.slot]
        assert hpte is not None
        page = hpte.gpa >> self.page_shift
        self.swapped[page] = 0
        v = (hpte.v & ~HPTE_V_ABSENT) | HPTE_V_VALID
        self.hpt.replace(record.slot, Hpte.make(hpte.vpn, v, hpte.guest_r, hpte.guest_r))
        self._emit("kvmppc_book3s_hv_page_fault", ea=record.ea, gpa=hpte.gpa, index=record.slot)

    # -- today's MMIO HPTE cache ---------------------------------------------------------

    def _mmio_cache_search(self, vpn: int) -> int:
        for cached_vpn, slot, update in self.mmio_cache:
            if cached_vpn == vpn and update == self.mmio_update:
                return slot
        return -1

    def _mmio_cache_insert(self, vpn: int, slot: int) -> None:
        entry = (vpn, slot, self.mmio_update)
        if len(self.mmio_cache) < MMIO_HPTE_CACHE_SIZE:
            self.mmio_cache.append(entry)
        else:
            self.mmio_cache[self.mmio_cache_next] = entry
        self.mmio_cache_next = (self.mmio_cache_next + 1) % MMIO_HPTE_CACHE_SIZE

    # -- hcalls ------------------------------------------------------------------------

    def h_enter(
        self, group: int, vpn: int, gpa: int, writable: bool, key: int = 0
    ) -> tuple[int, int]:
        """H_ENTER into `group` (the guest picks primary or secondary): (ret, slot)."""
        c = self.counters
        if key in self.host_keys:
            c.h_parameter += 1
            return H_PARAMETER, -1
        hpt = self.hpt
        primary = hpt.hash_of(vpn)
        if group == primary:
            flags = 0
        elif group == primary ^ hpt.mask:
            flags = HPTE_V_SECONDARY
        else:
            c.h_parameter += 1
            return H_PARAMETER, -1
        slot = hpt.free_slot(group)
        if slot < 0:
            c.h_pteg_full += 1
            return H_PTEG_FULL, -1
        guest_r = gpa | (key_to_r(key) if key else 0) | (PP_RW if writable else PP_RO)
        v, r = self._host_view(gpa, guest_r)
        hpt.insert(slot, Hpte.make(vpn, make_v(vpn, self.page_shift, flags | v), r, guest_r))
        page = gpa >> self.page_shift
        if page < self.ram_pages:
            self.rmap[page] = slot
        c.h_enter += 1
        if self.emit is not None:
            self._emit("kvmppc_h_enter", pte_index=slot, pteh=flags | v, ptel=r)
        return H_SUCCESS, slot

    def _host_view(self, gpa: int, guest_r: int) -> tuple[int, int]:
        """The real HPTE's V bits and dword 1 for what the guest asked."""
        era = self.era
        if not self.is_ram(gpa):
            if era.host_valid_marks:
                return HPTE_V_VALID, with_key(guest_r, era.mmio_key)
            return HPTE_V_ABSENT, guest_r | key_to_r(era.mmio_key)
        if self.swapped[gpa >> self.page_shift]:
            return self._swapped_view(guest_r)
        return HPTE_V_VALID, guest_r

    def _swapped_view(self, r: int) -> tuple[int, int]:
        if self.era.swapped_key is not None:
            return HPTE_V_VALID, with_key(r, self.era.swapped_key)
        return HPTE_V_ABSENT, r & ~HPTE_R_KEY

    def h_remove(self, slot: int, *, bulk: bool = False) -> Hpte:
        """H_REMOVE (or, with `bulk`, one entry of H_BULK_REMOVE)."""
        old = self.hpt.remove(slot)
        if self.is_ram(old.gpa):
            del self.rmap[old.gpa >> self.page_shift]
        if old.kind == MMIO:
            self.mmio_update += 1  # kvm->arch.mmio_update: drops the MMIO cache
        self.counters.h_remove += 1
        if not bulk and self.emit is not None:
            self._emit("kvmppc_h_remove", pte_index=slot, pteh=old.v, ptel=old.r)
        return old

    def h_bulk_remove(self, slots: list[int]) -> None:
        """H_BULK_REMOVE calls of up to 4 HPTEs each (the guest's flush of a range)."""
        for start in range(0, len(slots), BULK_REMOVE_MAX):
            batch = slots[start : start + BULK_REMOVE_MAX]
            for slot in batch:
                self.h_remove(slot, bulk=True)
            self.counters.h_bulk_remove += 1
            self._emit("kvmppc_h_bulk_remove", len=len(batch), pte_index=batch[0])

    # -- the host ------------------------------------------------------------------------

    def host_swap_out(self, page: int) -> bool:
        """The host reclaims guest RAM page `page`; `kvm_unmap_rmapp` fixes its HPTE."""
        if self.swapped[page]:
            return False
        self.swapped[page] = 1
        slot = self.rmap.get(page, -1)
        if slot >= 0:
            hpte = self.hpt.slots[slot]
            assert hpte is not None
            view, r = self._swapped_view(hpte.guest_r)
            v = (hpte.v & ~(HPTE_V_VALID | HPTE_V_ABSENT)) | view
            self.hpt.replace(slot, Hpte.make(hpte.vpn, v, r, hpte.guest_r))
            self.counters.unmaps += 1
        self._emit("kvm_unmap_rmapp", gpa=page << self.page_shift, index=slot)
        return True

    # -- audit -------------------------------------------------------------------------

    def audit(self, full: bool = True) -> None:
        """The HPT (when `full`), the AMR, each entry's kind against the era and the
        host's pages, the rmap, and the counters against each other."""
        if full:
            self.hpt.audit()
            self._audit_entries()
        self.amr.audit()
        self._audit_counters()

    def _audit_entries(self) -> None:
        rmapped = 0
        for slot, hpte in enumerate(self.hpt.slots):
            if hpte is None:
                continue
            kind = hpte.kind
            if not self.is_ram(hpte.gpa):
                if kind != MMIO:
                    raise AuditError(f"slot {slot:#x} maps MMIO gpa {hpte.gpa:#x} as {kind}")
                continue
            rmapped += 1
            page = hpte.gpa >> self.page_shift
            if self.rmap.get(page) != slot:
                raise AuditError(f"rmap of guest page {page:#x} does not point at {slot:#x}")
            want = self._kind_for(page)
            if kind != want:
                raise AuditError(f"slot {slot:#x} is {kind}, the era and host say {want}")
            if kind == VALID and hpte.key != hpte.guest_key:
                raise AuditError(f"slot {slot:#x}: a guest HPTE with the host's key")
        if rmapped != len(self.rmap):
            raise AuditError("the rmap lists pages no HPTE maps")

    def _kind_for(self, page: int) -> str:
        if not self.swapped[page]:
            return VALID
        return SWAPPED if self.era.swapped_key is not None else ABSENT

    def _audit_counters(self) -> None:
        c = self.counters
        checks = {
            "faults = no_hpte + keyfaults": c.faults == c.no_hpte + c.keyfaults,
            "faults = forwarded + emulated + paged_in": (
                c.faults == c.forwarded + c.emulated + c.paged_in
            ),
            "searches = classify + locate": (c.searches == c.classify_searches + c.locate_searches),
            "HPTEs examined within 1-16 a search": (
                c.searches <= c.hptes_examined <= FULL_MISS * c.searches
            ),
            "groups read within 1-2 a search": c.searches <= c.groups_read <= 2 * c.searches,
            "saved HPTEs = 16 a saved search": c.saved_hptes == FULL_MISS * c.saved_searches,
        }
        if self.era.host_valid_marks:
            checks |= {
                "keys: no classification search": c.classify_searches == 0,
                "keys: one locate search a key fault": c.locate_searches == c.keyfaults,
                "keys: every NO_HPTE fault saved a search": c.saved_searches == c.no_hpte,
                "keys: no NO_HPTE fault is the host's": c.forwarded >= c.no_hpte,
            }
        else:
            checks |= {
                "no keys: no key faults": c.keyfaults == 0 and c.locate_searches == 0,
                "no keys: a search a fault but cached MMIO": (
                    c.classify_searches == c.no_hpte - c.mmio_cache_hits
                ),
                "no keys: nothing saved": c.saved_searches == 0,
            }
        broken = [name for name, ok in checks.items() if not ok]
        if broken:
            raise AuditError(f"counters broken ({', '.join(broken)}): {c.as_dict()}")
