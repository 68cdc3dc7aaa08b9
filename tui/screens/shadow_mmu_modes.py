"""The shadow-MMU screen's paging modes (`p`): which MMU the guest faults on — EPT with
the TDP MMU (today's default, `tdp_mmu=Y`), EPT with direct shadow pages (`tdp_mmu=N`),
shadow paging (EPT off: the guest's own page tables shadowed), and the 2011 eras without
MMIO sptes, and EPT without A/D bits (access tracking, no PML) — plus the EPT huge-page
(`H`), host backing (`B`: 4K pages, THP 2M, hugetlbfs 1G; `host_pfn_mapping_level`), NX
huge pages (`X`: the `nx_huge_pages` module parameter), PML (`M`: kvm_intel's
`enable_pml`, how the EPT modes log dirty pages, engine/mmu/dirty_log.py) and
shadow-paging vtlb (`V`) switches; each change starts a new guest (the memslot-search
and PTE_LIST_EXT threads, docs/kvm.md §4-§6)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mmuscope.engine.mmu.direct.session import MmuSession, MmuStep
from mmuscope.engine.mmu.params import TdpMmuParams
from mmuscope.engine.mmu.shadow.session import ShadowSession, ShadowStep
from mmuscope.engine.mmu.tdp.session import TdpSession, TdpStep

if TYPE_CHECKING:
    from collections.abc import Callable

    from mmuscope.engine.events import Event
    from mmuscope.engine.mmu.mmu_pages import KvmMmuPage

    from ..widgets.events import EventPanel

#: `p` cycles these: (name, spte config, MMU: "tdp" | "direct" | "shadow")
PAGING_MODES = (
    ("EPT, TDP MMU (today's default)", "ept", "tdp"),
    ("EPT, direct pages (tdp_mmu=N)", "ept", "direct"),
    ("shadow paging (EPT off)", "shadow", "shadow"),
    ("shadow paging, 2011: no MMIO sptes", "2011-shadow-no-mmio-cache", "shadow"),
    ("EPT, 2011: no MMIO sptes (direct pages, tdp_mmu=N)", "2011-no-mmio-cache", "direct"),
    # no PML without EPT A/D bits: dirty logging and aging both go through fast_page_fault
    ("EPT without A/D bits (kvm_intel.eptad=0), TDP MMU", "ept-no-ad", "tdp"),
)
Session = MmuSession | ShadowSession | TdpSession
SESSION_KINDS: dict[str, type[Session]] = {
    "tdp": TdpSession,
    "direct": MmuSession,
    "shadow": ShadowSession,
}
Step = MmuStep | ShadowStep | TdpStep


def era_2011(paging: int) -> bool:
    """The 2011 modes: no MMIO sptes and no mmu_valid_gen yet (added in 2013 by the
    fast-zap thread)."""
    return PAGING_MODES[paging][1].startswith("2011")


class PagingModes:
    """Mixed into the shadow-MMU screen (which provides the session and the player)."""

    session: Session
    seed: int
    paging: int
    vtlb: bool
    huge_pages: bool
    host_level: int  # the host's backing: 1 (4K), 2 (THP 2M), 3 (hugetlbfs 1G)
    nx_huge_pages: bool
    pml: bool  # kvm_intel.enable_pml
    kernel_2m: bool  # shadow paging: the guest kernel's 2M text and direct map
    last: Step | None
    path: list[tuple[KvmMmuPage, int]]
    shown: int
    depth: int
    zap_replay: list[tuple[int, int]]
    _reach_key: object
    _unsubscribe: Callable[[], None]

    if TYPE_CHECKING:  # provided by the Screen it is mixed into
        pending_events: list[Event]
        events_panel: EventPanel

        def notify(self, message: str, **kwargs: object) -> None: ...  # from the Screen
        def sync_player(self) -> None: ...
        def redraw(self) -> None: ...

    def _replace_session(self, session: Session) -> None:
        """Start over on a new guest (same layout, seed and workload where it exists)."""
        self._unsubscribe()
        self.session = session
        self._unsubscribe = session.subscribe(self.pending_events.append)
        self.last, self.path, self.shown, self.depth = None, [], 0, -1
        self.zap_replay = []
        self._reach_key = None
        self.pending_events.clear()
        self.events_panel.reset()
        self.sync_player()

    def _new_session(self, workload: str) -> Session:
        _, config, kind = PAGING_MODES[self.paging]
        layout = self.session.layout
        nx = "on" if self.nx_huge_pages else "off"
        # the module parameters of tdp_mmu=N: shadow paging and the direct MMU alike
        tdp_mmu_off = TdpMmuParams(
            tdp_mmu=False, host_level=self.host_level, nx_huge_pages=nx, enable_pml=self.pml
        )
        if kind == "shadow":  # B and X as for tdp_mmu=N; shadow paging's own H
            return ShadowSession(
                layout,
                workload=workload,
                seed=self.seed,
                spte_config=config,
                vtlb=self.vtlb,
                params=tdp_mmu_off,
                kernel_2m=self.kernel_2m,
            )
        if kind == "tdp":
            params = TdpMmuParams(
                host_level=self.host_level if self.huge_pages else 1,
                nx_huge_pages=nx,
                enable_pml=self.pml,
            )
            return TdpSession(
                layout, workload=workload, seed=self.seed, spte_config=config, params=params
            )
        return MmuSession(
            layout,
            workload=workload,
            seed=self.seed,
            spte_config=config,
            huge_pages=self.huge_pages,
            params=tdp_mmu_off,
        )

    def action_next_paging(self) -> None:
        self.action_set_paging((self.paging + 1) % len(PAGING_MODES))

    def action_set_paging(self, mode: int) -> None:
        """One of PAGING_MODES, on a new guest (scenarios use this directly)."""
        self.paging = mode
        workload = self.session.workload
        names = SESSION_KINDS[PAGING_MODES[self.paging][2]].workloads
        self._new_guest(PAGING_MODES[self.paging][0], workload if workload in names else names[0])

    def _new_guest(self, what: str, workload: str | None = None) -> None:
        """A new session after a setting changed (the current workload unless named)."""
        self._replace_session(self._new_session(workload or self.session.workload))
        self.notify(f"{what}: a new guest", timeout=3)
        self.redraw()

    def _refused(self, shadow: bool, what: str) -> bool:
        """Warn and refuse when the setting is not for this paging mode (`shadow`: only
        for shadow paging, else only for EPT)."""
        if isinstance(self.session, ShadowSession) is shadow:
            return False
        self.notify(f"{what}: press p first", severity="warning")
        return True

    def action_toggle_huge_pages(self) -> None:
        """`H`: EPT: 2M leaves or 4K only; shadow paging (`fault->max_level =
        walker.level`): the guest kernel's own 2M text and direct map or none."""
        if isinstance(self.session, ShadowSession):
            self.kernel_2m = not self.kernel_2m
            on = "guest kernel text and direct map in 2M pages"
            self._new_guest(on if self.kernel_2m else "guest maps 4K pages only")
            return
        self.huge_pages = not self.huge_pages
        self._new_guest("2M leaves where the slot allows" if self.huge_pages else "4K leaves only")

    def action_next_host_pages(self) -> None:
        """`B`: the host backs guest memory with THP 2M pages, hugetlbfs 1G, or 4K."""
        self.host_level = {2: 3, 3: 1, 1: 2}[self.host_level]
        name = {1: "4K pages", 2: "THP 2M pages", 3: "hugetlbfs 1G pages"}[self.host_level]
        self._new_guest(f"host memory in {name} (host_pfn_mapping_level)")

    def action_toggle_nx_huge_pages(self) -> None:
        """`X`: kvm.nx_huge_pages on or off (fetches split huge pages, recovery rejoins)."""
        self.nx_huge_pages = not self.nx_huge_pages
        self._new_guest(f"nx_huge_pages={'on' if self.nx_huge_pages else 'off'}")

    def action_toggle_pml(self) -> None:
        """`M`: kvm_intel.enable_pml on or off: how dirty logging runs under EPT (PML:
        D bits cleared, the CPU logs writes; off: write protection, fast_page_fault)."""
        if self._refused(False, "PML needs EPT: shadow paging logs by write protection"):
            return
        self.action_set_pml(not self.pml)

    def action_set_pml(self, on: bool) -> None:
        """PML on or off, on a new guest (scenarios use this directly)."""
        self.pml = on
        self._new_guest(f"kvm_intel.enable_pml={'Y' if on else 'N'}")

    def action_toggle_vtlb(self) -> None:
        if self._refused(True, "the vtlb is for shadow paging"):
            return
        self.vtlb = not self.vtlb
        self._new_guest(f"vtlb {'on' if self.vtlb else 'off'}")
