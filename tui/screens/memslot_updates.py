"""KVM_SET_USER_MEMORY_REGION from the memslots screen: the slots a user creates, deletes
and moves (kvm_set_memory_region: a new memslots generation, docs/kvm.md §2.3), and the
calls QEMU made, recorded (`--qemu-trace`) and replayed one by one (`j`) or between
lookups while playing.  The screen redraws itself after each (`_slots_changed`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mmuscope.engine.errors import KvmError
from mmuscope.engine.memslots.explorer import MemslotExplorer

from ..widgets.slot_table import SlotTable
from .base import PlayerScreen

if TYPE_CHECKING:
    from mmuscope.engine.memslots.churn import RecordedChurn

    from .dialogs import SlotRequest


class MemslotUpdates(PlayerScreen):
    """The memslot updates of the memslots screen (its base class)."""

    explorer: MemslotExplorer
    churn: RecordedChurn | None

    def _slots_changed(self) -> None:
        """Redraw after a memslot update (the screen's)."""
        raise NotImplementedError

    # -- actions: KVM_SET_USER_MEMORY_REGION ------------------------------------------

    def _apply_slot(self, request: SlotRequest) -> str | None:
        explorer = self.explorer
        try:
            if request.mode == "add":
                explorer.add_slot(
                    request.slot_id,
                    request.gpa,
                    request.size,
                    readonly=request.readonly,
                    dirty=request.dirty,
                )
            elif request.mode == "delete":
                explorer.delete_slot(request.slot_id)
            else:
                explorer.move_slot(request.slot_id, request.gpa)
        except KvmError as err:
            return f"{err.errno_name}: {err.reason} (nothing changed)"
        self._slots_changed()
        self.notify(
            f"slot {request.slot_id}: {request.mode} done, generation {explorer.generation}"
        )
        return None

    # -- recorded churn (QEMU's KVM_SET_USER_MEMORY_REGION calls) ---------------------

    def action_next_ioctl(self) -> None:
        """Replay the next recorded KVM_SET_USER_MEMORY_REGION call."""
        if self.churn is None:
            self.notify(
                "no recorded calls: start with --qemu-trace FILE (a kvm_set_user_memory "
                "trace or strace of QEMU)",
                severity="warning",
            )
            return
        self.pause()
        if self._replay_ioctl(notify=True):
            self._slots_changed()
        self.flush_events(force=True)

    def _replay_ioctl(self, notify: bool) -> bool:
        """Replay one recorded call; True when there was one (the caller redraws)."""
        from mmuscope.engine.memslots.churn import describe_call

        churn = self.churn
        assert churn is not None
        call = churn.next_call()
        if call is None:
            if notify:
                self.notify(f"all {len(churn.calls)} recorded calls replayed", timeout=4)
            return False
        result = self.explorer.replay_call(call)
        churn.record(result)
        answer = "0" if result.ret == 0 else f"{result.errno_name} ({result.reason})"
        recorded = "" if result.call.recorded_ret is None else f", recorded {call.recorded_ret}"
        mismatch = result.matches_recorded is False
        if notify or result.ret or mismatch:
            # the generation of the call's own address space (KVM counts one per as_id)
            gen = self.explorer.vm.generation(call.as_id)
            where = f"address space {call.as_id} " if call.as_id else ""
            self.app.notify_replacing(  # type: ignore[attr-defined]
                f"{describe_call(call)} → {answer}{recorded}; {where}generation {gen}",
                title=churn.position,
                severity="warning" if result.ret or mismatch else "information",
                timeout=5,
            )
        return True

    def _selected(self) -> int:
        selected = self.query_one(SlotTable).selected_slot_id()
        return selected if selected is not None else 0

    def action_add_slot(self) -> None:
        from .dialogs import SlotDialog

        used = {s.id for s in self.explorer.slots()}
        free = next(i for i in range(len(used) + 1) if i not in used)
        top = max((s.end_gfn for s in self.explorer.slots()), default=0x100000)
        self.app.push_screen(
            SlotDialog("add", self._apply_slot, slot_id=free, gpa=top << 12, size=256 << 20)
        )

    def action_delete_slot(self) -> None:
        from .dialogs import SlotDialog

        self.app.push_screen(SlotDialog("delete", self._apply_slot, slot_id=self._selected()))

    def action_move_slot(self) -> None:
        from .dialogs import SlotDialog

        slot_id = self._selected()
        slot = self.explorer.vm.slot(self.explorer.as_id, slot_id)
        gpa = slot.base_gfn << 12 if slot is not None else 0
        self.app.push_screen(SlotDialog("move", self._apply_slot, slot_id=slot_id, gpa=gpa))
