"""The shadow-MMU screen's keys and scenario actions that drive the guest: step one
level of a fault's walk or run to the next VM exit, run to the next `RET_PF_*` of a kind
or to the next exit on one page, switch workloads, a memslot update (the generation moves
on, cached MMIO sptes go stale, a DELETE zaps), a fast-forward to just before the MMIO
generation wraps, and the selection of a level on the fault's path (the memslot-search
and PTE_LIST_EXT threads, docs/kvm.md §4-§6)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mmuscope.engine.mmu.mmu_pages import KvmMmuPage

    from .shadow_mmu_modes import Session, Step

RUN_LIMIT = 10_000  # guest accesses a "run to" action tries before it gives up


class GuestActions:
    """Mixed into the shadow-MMU screen (which provides the session and the player)."""

    session: Session
    last: Step | None
    path: list[tuple[KvmMmuPage, int]]
    shown: int
    depth: int

    if TYPE_CHECKING:  # provided by the Screen it is mixed into

        def notify(self, message: str, **kwargs: object) -> None: ...  # from the Screen
        def pause(self) -> None: ...
        def flush_events(self, force: bool = False) -> None: ...
        def redraw(self) -> None: ...
        def _show_step(self, step: Step) -> None: ...

    def action_step(self) -> None:
        self.pause()
        if self.path and self.shown < len(self.path):
            self.shown += 1
        else:
            self._run_to_exit()
            self.shown = 1
        self.flush_events(force=True)
        self.redraw()

    def action_next_exit(self) -> None:
        self.pause()
        self._run_to_exit()
        self.shown = len(self.path)
        self.flush_events(force=True)
        self.redraw()

    def _run_to_exit(self) -> None:
        for _ in range(RUN_LIMIT):
            step = self.session.step()
            if step.exited:
                self._show_step(step)
                return

    def action_next_workload(self) -> None:
        names = self.session.workloads
        self.action_set_workload(names[(names.index(self.session.workload) + 1) % len(names)])

    def action_set_workload(self, name: str) -> None:
        self.session.set_workload(name)
        self.last, self.path, self.shown = None, [], 0
        self.redraw()

    def action_run(self, count: int) -> None:
        """Run `count` guest accesses at once (paused), showing the last exit."""
        self.pause()
        shown = None
        for _ in range(count):
            step = self.session.step()
            shown = step if step.exited else shown
        if shown is not None:
            self._show_step(shown)
            self.shown = len(self.path)
        self.flush_events(force=True)
        self.redraw()

    def action_next_result(self, name: str) -> None:
        """Run to the next exit whose fault returns RET_PF_<name> (e.g. EMULATE)."""
        self._run_until(lambda step: step.ret is not None and step.ret.name == name)

    def action_next_exit_at(self, address: int) -> None:
        """Run to the next exit on the page of `address` (a gpa under EPT, a gva under
        shadow paging): scenarios follow one device page with it, e.g. the doorbell."""
        self._run_until(
            lambda step: (
                getattr(step.access, "gpa", getattr(step.access, "gva", -1)) >> 12 == address >> 12
            )
        )

    def _run_until(self, wanted: Callable[[Step], bool]) -> None:
        self.pause()
        for _ in range(RUN_LIMIT):
            step = self.session.step()
            if step.exited and wanted(step):
                self._show_step(step)
                self.shown = len(self.path)
                break
        self.flush_events(force=True)
        self.redraw()

    def action_memslot_update(self) -> None:
        """One memslot update (a BAR-like slot created or deleted): the generation moves
        on, cached MMIO sptes go stale, and a DELETE zaps."""
        from mmuscope.engine.mmu.direct.session import churn_update

        done = churn_update(self.session.vm)
        self.notify(f"memslot update: {done}; generation {self.session.vm.generation()}")
        self.flush_events(force=True)
        self.redraw()

    def action_near_wrap(self, left: int = 2) -> None:
        """Fast-forward to `left` memslot swaps (a CREATE is one, a DELETE two) before the
        MMIO generation's 19 bits wrap (262,144 updates with two address spaces)."""
        from mmuscope.engine.mmu.spte import updates_until_mmio_wrap

        vm = self.session.vm
        skip = max(0, updates_until_mmio_wrap(vm.generation(), vm.address_spaces) - left)
        vm.skip_updates(skip)
        self.notify(f"skipped {skip:,} memslot updates: generation {vm.generation():#x}")
        self.redraw()

    def action_select(self, delta: int) -> None:
        revealed = len(self.path[: max(self.shown, 1)])
        if not revealed:
            return
        current = self.depth % revealed if self.depth < 0 else self.depth
        self.depth = max(0, min(revealed - 1, current + delta))
        self.redraw()
