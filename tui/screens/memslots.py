"""The memslots screen: the lookup structure drawn live, the slot table, every strategy's
cost on the same gfn stream, and the events (the memslot-search thread, docs/kvm.md
§1); and KVM_SET_USER_MEMORY_REGION from it: the slots a user creates, deletes and moves
(kvm_set_memory_region: a new memslots generation, docs/kvm.md §2.3), and the calls QEMU
made, recorded (`--qemu-trace`) and replayed one by one (`j`) or between lookups while
playing.  The screen redraws itself after each (`_slots_changed`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from mmuscope.engine.errors import KvmError
from mmuscope.engine.lookup import LOOKUP_STRATEGIES, STRATEGY_CLASSES
from mmuscope.engine.lookup.views import TreeView
from mmuscope.engine.memslots.explorer import LookupRecord, MemslotExplorer
from mmuscope.engine.memslots.workload import WORKLOADS
from mmuscope.engine.pacing import Pacer
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical

from ..messages import WindowMoved
from ..widgets.cost_panel import CostPanel
from ..widgets.fit import fit_title, show_subtitle, show_title
from ..widgets.highlight import Highlight
from ..widgets.lookup_bar import LookupBar
from ..widgets.path_panel import PathPanel
from ..widgets.slot_table import SlotTable
from ..widgets.structure import StructureView
from .base import PlayerScreen

if TYPE_CHECKING:
    from mmuscope.engine.memslots.churn import RecordedChurn

    from .dialogs import SlotRequest

ENGINE_BUDGET = 0.008  # seconds of engine work per tick, at most (the rest waits)
CHURN_LOOKUPS = 25  # while playing a recording: one recorded ioctl every this many lookups
PREFIX_SCANS = ("linear", "size-sorted")
LEGEND = (
    "[$node-path]■ visited[/] [$node-compare]■ comparing[/] [$node-hit]■ hit[/] "
    "[$node-miss]■ miss[/] [$node-cache-hit]■ cache hit[/]"
)  # scans whose probes are positions 0..visits-1


class MemslotsScreen(PlayerScreen):
    BINDINGS = [
        Binding("space", "play_pause", "Play/Pause", tooltip="Play or pause the workload"),
        Binding("s", "step", "Step", tooltip="Reveal the next probe (or start the next lookup)"),
        Binding("n", "next_lookup", "Next", tooltip="Run the next lookup whole, paused"),
        Binding(
            "plus,equals_sign",
            "faster",
            "Faster",
            key_display="+",
            tooltip="More lookups per second (animation above 30/s shows whole lookups)",
        ),
        Binding(
            "minus",
            "slower",
            "Slower",
            key_display="-",
            tooltip="Fewer lookups per second (below 30/s each probe is animated)",
        ),
        Binding("l", "next_strategy", "Strategy", tooltip="Cycle the lookup strategy"),
        Binding("1", "strategy(0)", "linear", show=False, tooltip="2011 unsorted array"),
        Binding("2", "strategy(1)", "size-sorted", show=False, tooltip="array by npages"),
        Binding("3", "strategy(2)", "binary", show=False, tooltip="binary search (2014)"),
        Binding("4", "strategy(3)", "wbtree", show=False, tooltip="weight-balanced tree RFC"),
        Binding("5", "strategy(4)", "rbtree", show=False, tooltip="today's gfn rbtree"),
        Binding(
            "6",
            "strategy(5)",
            "wbtree-compact",
            show=False,
            tooltip="the wbtree with equal weights compacted by address (beyond the thread)",
        ),
        Binding(
            "e",
            "export",
            "Export",
            tooltip="Write the drawing on screen (a big tree's "
            "window of levels, with the lookup path) as dot and PDF",
        ),
        Binding(
            "E",
            "export_whole",
            "Export whole",
            show=False,
            tooltip="Write the whole structure as dot and PDF, not just the window",
        ),
        Binding("c", "toggle_vm_cache", "VM cache", tooltip="slots->last_used_slot on/off"),
        Binding("v", "toggle_vcpu_cache", "vCPU cache", tooltip="vcpu->last_used_slot on/off"),
        Binding("w", "next_workload", "Workload", show=False, tooltip="Cycle the access mix"),
        Binding("g", "lookup_gfn", "Look up", tooltip="Look up a gfn you type"),
        Binding("a", "add_slot", "Add", tooltip="Create a memslot"),
        Binding(
            "j",
            "next_ioctl",
            "Next ioctl",
            show=False,
            tooltip="Replay the next recorded KVM_SET_USER_MEMORY_REGION (--qemu-trace)",
        ),
        Binding("d", "delete_slot", "Delete", show=False, tooltip="Delete the selected memslot"),
        Binding("m", "move_slot", "Move", show=False, tooltip="Move the selected memslot"),
        Binding("z", "zoom(1)", "Zoom in", show=False, tooltip="More detail per node"),
        Binding("Z", "zoom(-1)", "Zoom out", show=False, tooltip="Less detail per node"),
        Binding(
            "left_square_bracket",
            "levels(-1)",
            "Fewer levels",
            show=False,
            key_display="[",
            tooltip="Collapse the deepest level shown",
        ),
        Binding(
            "right_square_bracket",
            "levels(1)",
            "More levels",
            show=False,
            key_display="]",
            tooltip="Show one more level",
        ),
        Binding("u", "window_up", "Up", show=False, tooltip="Window root up one level"),
        Binding("r", "window_root", "Root", show=False, tooltip="Window back to the root"),
        Binding(
            "F",
            "toggle_follow",
            "Follow",
            show=False,
            tooltip="Let the window follow each lookup down the tree",
        ),
        Binding("x", "reset_costs", "Reset", show=False, tooltip="Reset costs and hits"),
    ]

    def __init__(
        self, explorer: MemslotExplorer, pacer: Pacer, churn: RecordedChurn | None = None
    ) -> None:
        super().__init__(pacer)
        self.explorer = explorer
        self.record: LookupRecord | None = None
        self.highlight: Highlight | None = None
        self.lookups_done = 0
        self._changed_hits: set[int] = set()
        self._costs_shown_at = 0.0
        self.rate = 0.0  # lookups per second measured over the last second
        self._rate_at = time.monotonic()
        self._rate_count = 0
        self.window = ""  # where the tree drawing's window is, when not the whole tree
        self.churn = churn
        explorer.subscribe(self.pending_events.append)

    @property
    def view_name(self) -> str:  # type: ignore[override]
        return f"memslots-{self.explorer.layout.name}-{self.explorer.lookup}"

    # -- layout -----------------------------------------------------------------------

    def compose_main(self) -> ComposeResult:
        with Vertical(id="left"):
            yield LookupBar(id="lookup-bar")
            yield StructureView(id="structure")
            yield PathPanel(id="path")
        with Vertical(id="right"):
            yield SlotTable(id="slots")
            yield CostPanel(id="costs")

    def on_mount(self) -> None:
        show_title(self.query_one("#slots"), "memslots")
        show_title(self.query_one("#costs"), "slots looked at per lookup")
        show_title(self.query_one("#path"), "this lookup")
        show_subtitle(self.query_one(StructureView), LEGEND)
        self._show_structure()
        self.query_one(SlotTable).set_slots(self.explorer.slots(), self.explorer.names)
        self.query_one(LookupBar).show(None, 0, "", "")
        # the first frame is whole: the costs table before the first lookup, as paused
        self.query_one(CostPanel).update_costs(self.explorer.costs, self.explorer.lookup)
        self._update_header()

    # -- the player -------------------------------------------------------------------

    def show_state(self) -> None:
        self._update_header()

    def tick(self, now: float, dt: float) -> None:
        started = self.pacer.advance(dt)
        if started:
            self._run(started)
        elif self.highlight is not None and self.pacer.playing and self.pacer.animating:
            self._reveal(self.pacer.revealed(self.highlight.steps))
        self._show_progress(now)

    def _run(self, count: int, whole: bool = False) -> None:
        """Run up to `count` lookups within the engine budget; show the last one (`whole`:
        every probe revealed at once, drawn once)."""
        deadline = time.perf_counter() + ENGINE_BUDGET
        record = None
        updated = False
        for _ in range(count):
            record = self.explorer.step()
            self.lookups_done += 1
            if record.slot is not None:
                self._changed_hits.add(record.slot.id)
            if self.churn is not None and self.lookups_done % CHURN_LOOKUPS == 0:
                updated |= self._replay_ioctl(notify=False)  # recorded, between lookups
                record = None
            if time.perf_counter() > deadline:
                break
        if updated:
            self._slots_changed()
        if record is not None:
            self._show_record(record, whole=whole)

    def _show_record(
        self, record: LookupRecord, shown: int | None = None, whole: bool = False
    ) -> None:
        self.record = record
        self.query_one(SlotTable).mark_found(record.slot.id if record.slot else None)
        highlight = self._highlight_for(record)
        if whole:  # as revealed from probe 1 to the last in one frame, drawn once
            self._set_highlight(highlight.with_shown(highlight.steps), highlight.with_shown(1))
            return
        if shown is None:
            shown = self.pacer.revealed(highlight.steps) if self.pacer.playing else 1
        self._set_highlight(highlight.with_shown(shown))

    def _highlight_for(self, record: LookupRecord) -> Highlight:
        trace = record.trace
        lookup = self.explorer.lookup
        if trace.cache_hit or lookup in PREFIX_SCANS:
            return Highlight.from_scan(trace, record.visits.get(lookup, 0))
        return Highlight.from_trace(self.explorer.explain(record))

    def _reveal(self, shown: int) -> None:
        if self.highlight is not None and shown != self.highlight.shown:
            self._set_highlight(self.highlight.with_shown(shown))

    def _set_highlight(self, highlight: Highlight | None, via: Highlight | None = None) -> None:
        """Show `highlight` in every panel (`via`: see StructureView.set_highlight)."""
        self.highlight = highlight
        view = self.query_one(StructureView)
        view.set_highlight(highlight, via)
        if view.window_shown is not None:  # titled in this frame, not in a second one
            self._title_window(view.window_shown)
        record = self.record
        name = ""
        if highlight is not None and highlight.slot is not None:
            name = self.explorer.slot_name(highlight.slot)
        vcpu = record.access.vcpu if record is not None else 0
        self.query_one(LookupBar).show(highlight, vcpu, self.explorer.lookup, name)
        caches = record.trace.cache_probes if record is not None else ()
        self.query_one(PathPanel).show(highlight, caches, self.explorer.slot_name)

    def _show_progress(self, now: float, force: bool = False) -> None:
        """Tables follow the engine: every frame while playing (throttled), and at once
        (`force`) after a key pressed while paused."""
        self.flush_events(force)
        if self._changed_hits:
            hits = self.explorer.slot_hits
            self.query_one(SlotTable).update_hits({i: hits.get(i, 0) for i in self._changed_hits})
            self._changed_hits.clear()
        if force or now - self._costs_shown_at >= 0.25:
            self._costs_shown_at = now
            self.query_one(CostPanel).update_costs(self.explorer.costs, self.explorer.lookup)
        if now - self._rate_at >= 1.0:
            self._measure_rate(now)

    def _measure_rate(self, now: float) -> None:
        """Lookups actually run per second: below the speed asked for when the engine
        cannot keep up within its budget per frame (the header then says so)."""
        done = self.lookups_done - self._rate_count
        self.rate = done / (now - self._rate_at) if self.pacer.playing else 0.0
        self._rate_at, self._rate_count = now, self.lookups_done
        self._update_header()

    def _update_header(self) -> None:
        explorer = self.explorer
        state = "▶ playing" if self.pacer.playing else "⏸ paused"
        caches = []
        if explorer.vm.vcpu_cache:
            caches.append("vcpu")
        if explorer.vm.last_used_slot:
            caches.append("vm")
        self.title = f"mmuscope · {explorer.layout.name}"
        speed = f"{self.pacer.speed:g}/s"
        if self.pacer.playing and 0 < self.rate < 0.9 * self.pacer.speed:
            speed += f" (runs {self.rate:.0f}/s)"
        churn = f" · {self.churn.position}" if self.churn is not None else ""
        self.sub_title = (
            f"{explorer.lookup} · gen {explorer.generation} · cache {'+'.join(caches) or 'off'}"
            f" · {explorer.workload.mix.name}{churn} · {state} {speed}"
        )

    def _show_structure(self) -> None:
        view = self.query_one(StructureView)
        view.set_shape(self.explorer.shape())
        self.window = ""
        self._title_structure()
        if self.record is not None and self.record.generation == self.explorer.generation:
            self._show_record(self.record, self.highlight.shown if self.highlight else None)

    def _title_structure(self) -> None:
        """The strategy, its era and what it is; where that does not fit the drawing's
        border whole, the era goes first, then the description, then the strategy's
        name (the window stays)."""
        cls = STRATEGY_CLASSES[self.explorer.lookup]
        versions = [
            f"{cls.name} ({cls.era}): {cls.title}",
            f"{cls.name}: {cls.title}",
            f"{cls.name} ({cls.era})",
            cls.name,
        ]
        if self.window:  # the strategy is in the header too: the window alone last
            versions = [*(f"{self.window} · {version}" for version in versions), self.window]
        view = self.query_one(StructureView)
        title = fit_title(versions, view.outer_size.width)
        show_title(view, title)

    def on_resize(self) -> None:  # Textual runs MmuScreen.on_resize as well
        self.call_after_refresh(self._title_structure)  # once the drawing has its width

    @on(WindowMoved)
    def show_window(self, moved: WindowMoved) -> None:
        """Where the drawn window is in a big tree, in the drawing's title: as the
        drawing shows it now (a lookup's frame has titled it already; a message that
        arrives after a later move or a switch to an array is stale)."""
        shown = self.query_one(StructureView).window_shown
        if shown is not None:
            self._title_window(shown)

    def _title_window(self, moved: WindowMoved) -> None:
        self.window = ""
        if moved.depth or moved.hidden:
            self.window = (
                f"levels {moved.depth}-{moved.depth + moved.levels - 1} below slot {moved.slot_id}"
                f", {moved.hidden} slots hidden"
            )
        self._title_structure()

    # -- actions: playing -------------------------------------------------------------

    def action_step(self) -> None:
        self.pause()
        if self.highlight is not None and not self.highlight.done:
            self._reveal(self.highlight.shown + 1)
        else:
            self._run(1)
            if self.highlight is not None:
                self._reveal(1)
        self._show_progress(time.monotonic(), force=True)

    def action_next_lookup(self) -> None:
        self.pause()
        self._run(1, whole=True)  # drawn once, whole (not probe 1 first, then all)
        if self.highlight is not None:
            self._reveal(self.highlight.steps)
        self._show_progress(time.monotonic(), force=True)

    # -- actions: strategy, caches, workload ------------------------------------------

    def action_next_strategy(self) -> None:
        names = LOOKUP_STRATEGIES
        self._set_strategy(names[(names.index(self.explorer.lookup) + 1) % len(names)])

    def action_strategy(self, index: int) -> None:
        self._set_strategy(LOOKUP_STRATEGIES[index])

    def _set_strategy(self, name: str) -> None:
        self.explorer.set_lookup(name)
        self._show_structure()
        self.query_one(CostPanel).update_costs(self.explorer.costs, name)
        self._update_header()
        self.notify(STRATEGY_CLASSES[name].summary, title=name, timeout=4)

    def action_toggle_vm_cache(self) -> None:
        self.explorer.set_vm_cache(not self.explorer.vm.last_used_slot)
        self._update_header()

    def action_toggle_vcpu_cache(self) -> None:
        self.explorer.set_vcpu_cache(not self.explorer.vm.vcpu_cache)
        self._update_header()

    def action_next_workload(self) -> None:
        names = list(WORKLOADS)
        self.action_set_workload(
            names[(names.index(self.explorer.workload.mix.name) + 1) % len(names)]
        )

    def action_set_workload(self, mix: str) -> None:
        self.explorer.workload.set_mix(mix)
        self._update_header()
        self.notify(WORKLOADS[mix].description, title=f"workload {mix}", timeout=4)

    def action_caches(self, vcpu: bool, vm: bool) -> None:
        """Both caches at once (scenarios): the vCPU's and the VM's last_used_slot."""
        self.explorer.set_vcpu_cache(vcpu)
        self.explorer.set_vm_cache(vm)
        self._update_header()

    def action_run(self, count: int) -> None:
        """`count` lookups at once (paused); the cost panel takes them all in."""
        self.pause()
        record = None
        for _ in range(count):
            record = self.explorer.step()
            self.lookups_done += 1
            if record.slot is not None:
                self._changed_hits.add(record.slot.id)
        if record is not None:
            self._show_record(record, whole=True)
            if self.highlight is not None:
                self._reveal(self.highlight.steps)
        self._show_progress(time.monotonic(), force=True)

    def action_reset_costs(self) -> None:
        self.explorer.reset_costs()
        self.query_one(SlotTable).clear_hits()
        self.query_one(CostPanel).update_costs(self.explorer.costs, self.explorer.lookup)

    def action_lookup_gfn(self) -> None:
        from .dialogs import GfnDialog, parse_number

        def apply(text: str) -> str | None:
            words = text.split()
            try:
                if len(words) == 2 and words[0].lower() == "gpa":
                    gfn = parse_number(words[1], "gpa") >> 12
                elif len(words) == 1:
                    gfn = parse_number(words[0], "gfn")
                else:
                    return "type a gfn, or 'gpa' and an address"
            except ValueError as err:
                return str(err)
            if gfn >= 1 << 52:
                return f"gfn {gfn:#x} is beyond a 64-bit guest physical space"
            self.pause()
            self._show_record(self.explorer.lookup_gfn(gfn), shown=1)
            self._show_progress(time.monotonic(), force=True)
            return None

        self.app.push_screen(GfnDialog(apply))

    # -- after a memslot update ----------------------------------------------------

    def _slots_changed(self) -> None:
        """Redraw after a memslot update: the old lookup belongs to the old generation."""
        explorer = self.explorer
        self.record = self.highlight = None
        self._show_structure()
        self.query_one(SlotTable).set_slots(explorer.slots(), explorer.names)
        self.query_one(LookupBar).show(None, 0, "", "")
        self.query_one(PathPanel).show(None, (), self.explorer.slot_name)
        self._show_progress(time.monotonic(), force=True)
        self._update_header()

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

    # -- actions: the drawing ---------------------------------------------------------

    def action_zoom(self, delta: int) -> None:
        view = self.query_one(StructureView)
        view.set_zoom(view.zoom + delta)

    def action_levels(self, delta: int) -> None:
        view = self.query_one(StructureView)
        view.levels = max(1, min(64, view.window_depth + delta))

    def action_window_up(self) -> None:
        view = self.query_one(StructureView)
        view.follow = False
        view.reroot_up()

    def action_window_root(self) -> None:
        view = self.query_one(StructureView)
        view.reroot(None)

    def action_toggle_follow(self) -> None:
        view = self.query_one(StructureView)
        view.follow = not view.follow
        self.notify(f"window follows lookups: {'on' if view.follow else 'off'}", timeout=2)

    # -- export -----------------------------------------------------------------------

    def action_export(self) -> None:
        """The drawing as on screen: a big tree's window of levels (E: the whole)."""
        window = self.query_one(StructureView).window_nodes()
        note = "the window on screen; E writes the whole tree" if window is not None else ""
        self.export_found(self.export_dot(), note=note)

    def action_export_whole(self) -> None:
        self.export_found(self.export_dot(whole=True), "-whole")

    def export_dot(self, whole: bool = False) -> tuple[str, int] | None:
        """The structure as dot with the last lookup, and its node count: the tree's
        window drawn now unless `whole`."""
        from mmuscope.engine.export.dot import shape_to_dot  # only when exporting: not at start-up

        explorer = self.explorer
        shape = explorer.shape()
        trace = None
        if self.record is not None and self.record.generation == explorer.generation:
            trace = explorer.explain(self.record)
        title = f"{explorer.layout.name} · {explorer.lookup} · as {explorer.as_id}"
        window = None if whole else self.query_one(StructureView).window_nodes()
        if window is not None and isinstance(shape, TreeView):
            shown = self.query_one(StructureView).window_shown
            if shown is not None:
                title += f" · {self.window or f'window below slot {shown.slot_id}'}"
            return shape_to_dot(shape, title=title, trace=trace, window=window), len(window)
        count = len(shape.nodes) if isinstance(shape, TreeView) else len(shape.entries)
        return shape_to_dot(shape, title=title, trace=trace), count
