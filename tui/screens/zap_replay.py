"""The shadow-MMU screen's zaps, replayed: the pages a zap took stay on screen, dimmed,
and vanish hold by hold (the hold being replayed in red), each hold as long as its pages;
a slow zap stalls the guest while its one hold replays.  Fast zap of 2013
(`kvm_mmu_zap_all_fast`: BATCH_ZAP_PAGES per mmu_lock hold) and of today (TDP MMU roots
invalidated, then zapped root by root with mmu_lock held for read, their page tables left
to RCU), the old slow zap, and today's root invalidation alone (`i`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from mmuscope.engine.mmu.mmu_pages import KvmMmuPage
from mmuscope.engine.mmu.tdp.session import TdpSession
from mmuscope.engine.mmu.views import LevelSummary, levels_of, zap_batches

from .tdp_view import tdp_zap_caption

if TYPE_CHECKING:
    from mmuscope.engine.mmu.direct.session import MmuSession
    from mmuscope.engine.mmu.shadow.session import ShadowSession

ZAP_BATCH_SECONDS = 0.25  # one lock hold of a replayed zap on screen, at least
ZAP_PAGE_SECONDS = 0.025  # and this long per page zapped under it (10 pages: 0.25 s)
ZAP_HOLD_MAX_SECONDS = 8.0  # the longest hold shown (a slow zap of a big guest)


class ZapReplay:
    """Mixed into the shadow-MMU screen (which provides the session and the player)."""

    session: MmuSession | ShadowSession | TdpSession
    zap_replay: list[tuple[int, int]]
    zap_kind: str
    zap_ghosts: list[KvmMmuPage]
    _zap_at: float
    path: list[tuple[KvmMmuPage, int]]
    shown: int

    if TYPE_CHECKING:  # provided by the Screen it is mixed into

        def notify(self, message: str, **kwargs: object) -> None: ...  # from the Screen
        def sync_player(self) -> None: ...
        def flush_events(self, force: bool = False) -> None: ...
        def redraw(self) -> None: ...

    def _start_zap(self, kind: str, zapped: int, before: list[KvmMmuPage]) -> None:
        """Replay a zap that already happened: `before` are the pages it found, zapped
        oldest first (kvm_zap_obsolete_pages walks active_mmu_pages from the tail)."""
        holds = self.session.mmu.pages.lock_holds
        alive = {sp.seq for sp in self.session.mmu.pages.pages()}
        self.zap_ghosts = sorted((sp for sp in before if sp.seq not in alive), key=_seq)
        self.zap_kind = kind
        self.zap_replay = zap_batches(holds) if zapped else []
        self.path, self.shown = [], 0
        pages = f"{zapped} page{'s' if zapped != 1 else ''}"
        locks = f"{len(holds)} lock hold{'s' if len(holds) != 1 else ''}"
        self.notify(f"{kind}: {pages} in {locks}", timeout=4)
        self.sync_player()
        self.flush_events(force=True)
        self._zap_at = time.monotonic()  # after the zap's events (thousands, for the TDP MMU)
        self.redraw()

    def _advance_zap(self, now: float) -> None:
        hold = self.zap_replay[0][1]
        seconds = min(ZAP_HOLD_MAX_SECONDS, max(ZAP_BATCH_SECONDS, hold * ZAP_PAGE_SECONDS))
        if now - self._zap_at >= seconds:
            self._zap_at = now
            self.zap_replay.pop(0)
            if not self.zap_replay:
                self.sync_player()

    def _zap_caption(self) -> str:
        if not self.zap_replay:
            return ""
        done, hold = self.zap_replay[0]
        left = len(self.zap_replay) - 1
        if isinstance(self.session, TdpSession):
            return tdp_zap_caption(self.zap_kind, done, hold, left)
        if self.zap_kind == "slow zap":
            return f"slow zap: mmu_lock held over all {hold} pages; every vCPU waits"
        return (
            f"{self.zap_kind}: mmu_lock held, zapping pages {done + 1}-{done + hold}; "
            f"{left} more hold{'s' if left != 1 else ''} after a lock break "
            "(the vCPUs run meanwhile)"
        )

    def _zap_levels(self) -> tuple[list[LevelSummary], set[int]]:
        """The pages by level, with the replayed zap's pages not yet gone (dimmed), and
        the seqs of the ones its current lock hold is zapping."""
        pages = self.session.mmu.pages
        if not self.zap_replay:
            return levels_of(pages.pages(), pages.is_obsolete), set()
        done, hold = self.zap_replay[0]
        ghosts = self.zap_ghosts[done:]
        gone = {sp.seq for sp in ghosts}
        levels = levels_of(
            [*pages.pages(), *ghosts], lambda sp: sp.seq in gone or pages.is_obsolete(sp)
        )
        return levels, {sp.seq for sp in ghosts[:hold]}

    def action_fast_zap(self) -> None:
        before = list(self.session.mmu.pages.pages())
        session = self.session
        zapped = (
            session.zap("fast") if isinstance(session, TdpSession) else session.mmu.zap_all_fast()
        )
        self._start_zap("fast zap", zapped, before)

    def action_slow_zap(self) -> None:
        before = list(self.session.mmu.pages.pages())
        session = self.session
        zapped = (
            session.zap("slow") if isinstance(session, TdpSession) else session.mmu.pages.zap_all()
        )
        self._start_zap("slow zap", zapped, before)

    def action_invalidate_roots(self) -> None:
        if not isinstance(self.session, TdpSession):
            self.notify("only the TDP MMU has roots to invalidate: p to it", severity="warning")
            return
        before = list(self.session.mmu.pages.pages())
        self._start_zap("root invalidation", self.session.zap("roots"), before)  # type: ignore[arg-type]


def _seq(sp: KvmMmuPage) -> int:
    return sp.seq
