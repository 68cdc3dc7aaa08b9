"""The shadow-MMU screen's keys that make `fast_page_fault()` fire (engine/mmu/fast_pf.py,
6.18 mmu.c): `L` dirty logging on the largest RAM slot (its sptes write-protected but
still MMU-writable), `G` KVM_GET_DIRTY_LOG (the bitmap returned, the reported pages
protected again), `A` kvm_age_gfn over guest RAM (without A/D bits: access-tracked
sptes).  The fault bar then names the fast path and the spte it changed, the counters
show `pf_fast`, and the event log its `fast_page_fault` lines.

The direct MMU (tdp_mmu=N) and the TDP MMU call the fast path; shadow paging does not
(`FNAME(page_fault)`), and there the keys say so.  With EPT and PML (today's default,
`M` turns it off) the CPU logs dirty pages itself: dirty logging clears D bits and no
write faults; the counters panel names the setting in use (`dirty log by`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mmuscope.engine.mmu.dirty_log import dirty_logging_words
from mmuscope.engine.mmu.shadow.session import ShadowSession

if TYPE_CHECKING:
    from collections.abc import Callable

    from mmuscope.engine.mmu.direct.session import MmuSession
    from mmuscope.engine.mmu.tdp.session import TdpSession

    from .shadow_mmu_modes import Session, Step

NO_FAST_PATH = (
    "shadow paging has no fast_page_fault (FNAME(page_fault) takes mmu_lock): press p for EPT"
)


class FastPathActions:
    """Mixed into the shadow-MMU screen (which provides the session)."""

    session: Session

    if TYPE_CHECKING:  # provided by the Screen it is mixed into

        def notify(self, message: str, **kwargs: object) -> None: ...  # from the Screen
        def flush_events(self, force: bool = False) -> None: ...
        def redraw(self) -> None: ...
        def _run_until(self, wanted: Callable[[Step], bool]) -> None: ...

    def _fast_session(self) -> MmuSession | TdpSession | None:
        session = self.session
        if isinstance(session, ShadowSession):
            self.notify(NO_FAST_PATH, severity="warning")
            return None
        return session

    def _done(self, words: str) -> None:
        self.notify(words, timeout=4)
        self.flush_events(force=True)
        self.redraw()

    def action_toggle_dirty_logging(self) -> None:
        session = self._fast_session()
        if session is None:
            return
        words = session.toggle_dirty_logging()
        slot = session.logged_slot()
        if not slot.dirty_logging:
            self._done(f"{words}, slot {slot.id}")
            return
        how = (
            "PML: D bits cleared, the CPU logs the writes (no fault)"
            if session.dirty_log.pml
            else "PML off: its sptes lost W, the next write to each takes fast_page_fault"
        )
        self._done(f"{words}, slot {slot.id}: {how}")

    def action_get_dirty_log(self) -> None:
        session = self._fast_session()
        if session is None:
            return
        slot = session.logged_slot()
        if not slot.dirty_logging:
            self._done(f"slot {slot.id} logs no dirty pages: L starts dirty logging")
            return
        pages = session.get_dirty_log()
        again = "D bits cleared again" if session.dirty_log.pml else "write-protected again"
        self._done(f"KVM_GET_DIRTY_LOG slot {slot.id}: {len(pages)} pages, {again}")

    def action_next_fast_fault(self) -> None:
        """Run to the next VM exit that fast_page_fault fixed (or found spurious)."""
        if self._fast_session() is not None:
            self._run_until(lambda step: bool(getattr(step, "fast", "")))

    def action_age_memory(self) -> None:
        session = self._fast_session()
        if session is None:
            return
        young = session.age_memory()
        how = (
            "A bits cleared (the CPU sets them again, no fault)"
            if session.mmu.fast_pf is None or session.mmu.fast_pf.kvm_ad_enabled
            else "now access-tracked: the next access of each takes fast_page_fault"
        )
        self._done(f"kvm_age_gfn: {young} young sptes made old, {how}")


def fast_path_lines(session: Session) -> list[tuple[str, str]]:
    """The counters panel's lines about the fast path and dirty logging."""
    if isinstance(session, ShadowSession):
        return [
            ("fast_page_fault", "never (FNAME(page_fault))"),
            ("dirty log by", "write protection (no EPT: no PML)"),
        ]
    by = ("dirty log by", dirty_logging_words(session.dirty_log.pml))
    fast = session.mmu.fast_pf
    if fast is None:
        return [("fast_page_fault", "none before 3.6 (2012)"), by]
    slot = session.logged_slot()
    logging = "off (L)"
    if slot.dirty_logging:
        bits = session.dirty_log.dirty.get((slot.as_id, slot.id), set())
        logging = f"slot {slot.id} · {len(bits)} dirty"
    return [
        ("dirty logging", logging),
        by,
        # pf_fast itself is with the other kvm->stat counters
        ("fast_pf lost/restored", f"{fast.lost_cmpxchg} / {fast.restored}"),
    ]
