"""The rmap screen (F3): a fork storm on the shadow MMU growing one gfn's rmap, drawn as
`pte_list_desc` boxes, the `mmu_rmaps_stat` histogram beside it, and the PTE_LIST_EXT
era switchable live (the PTE_LIST_EXT thread, docs/kvm.md §3)."""

from __future__ import annotations

import subprocess
import time

from mmuscope.engine.mmu.rmap import ERAS
from mmuscope.engine.mmu.shadow.rmap_lab import ForkLab
from mmuscope.engine.mmu.shadow.rmap_workloads import DATA_GFN
from mmuscope.engine.pacing import Pacer
from mmuscope.engine.words import count
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.worker import get_current_worker

from ..widgets.fit import show_title
from ..widgets.rmap_panels import KernelRun, RmapBars, RmapChain, kernel_run_rows
from .base import PlayerScreen

ERA_NAMES = tuple(ERAS)


class RmapScreen(PlayerScreen):
    BINDINGS = [
        Binding("space", "play_pause", "Play/Pause", tooltip="Fork children continuously"),
        Binding("n", "fork", "Fork", tooltip="fork(): one more child maps the shared pages"),
        Binding("x", "exit_child", "Exit", tooltip="The oldest child exits (pte_list_remove)"),
        Binding("E", "next_era", "Era", tooltip="PTE_LIST_EXT 3, 15, 14, 6.4: same storm"),
        Binding("b", "toggle_buckets", "Buckets", tooltip="The kernel's ffs() or log2"),
        Binding("plus,equals_sign", "faster", "Faster", key_display="+"),
        Binding("minus", "slower", "Slower", key_display="-"),
    ]

    # Under the bars (which drop empty buckets first), the kernel's run of the same storm
    # (the real-kvm scenario), once asked for.
    DEFAULT_CSS = """
    RmapScreen #chain { height: 1fr; }
    RmapScreen #rmap-side { width: 2fr; min-width: 46; }
    RmapScreen.-narrow #rmap-side { width: 40; min-width: 0; }
    RmapScreen #bars { height: 1fr; }
    RmapScreen #kernel { display: none; height: 6; }
    RmapScreen #kernel.-shown { display: block; }
    """

    view_name = "rmaps"

    def __init__(self, pacer: Pacer, *, era: str = "6.4") -> None:
        super().__init__(pacer)
        self.lab = ForkLab(era, emit=self.pending_events.append)
        self.log2 = False
        self.kernel_note = ""  # what the real guest of action_real_fork showed

    def compose_main(self) -> ComposeResult:
        with Vertical(id="left"):
            yield RmapChain(id="chain")
        with Vertical(id="rmap-side"):
            yield RmapBars(id="bars")
            yield KernelRun(id="kernel")

    def on_mount(self) -> None:
        show_title(self.query_one("#bars"), "mmu_rmaps_stat")
        self.redraw()

    def tick(self, now: float, dt: float) -> None:
        for _ in range(min(self.pacer.advance(dt), 20)):
            self.lab.fork()
        self.flush_events()
        self.redraw()

    def show_state(self) -> None:
        self.redraw()

    def redraw(self) -> None:
        lab = self.lab
        chain = self.query_one(RmapChain)
        show_title(chain, f"rmap of gfn {DATA_GFN:#x} (shared by the parent and its children)")
        chain.show(lab.head(0), DATA_GFN)
        self.query_one(RmapBars).show(lab.histogram(log2=self.log2), self.log2)
        state = "▶ playing" if self.pacer.playing else "⏸ paused"
        self.title = f"mmuscope · {lab.layout} · rmaps"
        self.sub_title = (
            f"shadow paging (EPT off) · PTE_LIST_EXT era {lab.era} · "
            f"{count(len(lab.children), 'child', 'children')} · {state} {self.pacer.speed:g}/s"
        )

    def export_dot(self) -> tuple[str, int] | None:
        """The shared gfn's rmap chain as a graph."""
        from mmuscope.engine.export.mmu_dot import rmap_to_dot

        head = self.lab.head(0)
        if head is None or head.is_empty:
            return None
        children = count(len(self.lab.children), "child", "children")
        title = f"fork storm, {children}, PTE_LIST_EXT era {self.lab.era}"
        return rmap_to_dot(head, DATA_GFN, title=title), len(head.descs) + 1

    def action_fork(self) -> None:
        self.pause()
        self.lab.fork()
        self.flush_events(force=True)
        self.redraw()

    def action_exit_child(self) -> None:
        self.pause()
        self.lab.exit()
        self.flush_events(force=True)
        self.redraw()

    def action_fork_many(self, count: int) -> None:
        self.pause()
        for _ in range(count):
            self.lab.fork()
        self.flush_events(force=True)
        self.redraw()

    def action_next_era(self) -> None:
        self.action_era(ERA_NAMES[(ERA_NAMES.index(self.lab.era) + 1) % len(ERA_NAMES)])

    def action_era(self, era: str) -> None:
        """Replay the same storm under one PTE_LIST_EXT era: "3", "15", "14" or "6.4"."""
        self.lab = self.lab.with_era(era)
        self.notify(f"PTE_LIST_EXT era {era}: {ERAS[era].layout}", timeout=4)
        self.redraw()

    def action_real_fork(self, children: int) -> None:
        """The same storm on this machine's own KVM (`mmuscope kvm fork`): the kernel's
        counts drawn in a panel under the mmu_rmaps_stat bars; without KVM, the panel says so
        and the step shows the model only."""
        from mmuscope.engine.kvm.vmm import kvm_unavailable_reason

        panel = self.query_one(KernelRun)
        reason = kvm_unavailable_reason()
        if reason is not None:
            panel.show_rows([f"{reason}:", "this step shows the model only"])
            return
        panel.show_rows([f"running fork, {children} children…"])
        self._real_fork(children)

    @staticmethod
    def fork_argv(children: int) -> list[str]:
        """The command the real storm runs: this mmuscope, `kvm fork` with 16 pages."""
        import sys

        return [sys.executable, "-m", "mmuscope.tui", "kvm", "fork", "--pages", "16",
                "--children", str(children), "--summary"]  # fmt: skip

    class KernelRunDone(Message):
        """The real fork's panel rows and the line the scenario quotes, from the worker."""

        def __init__(self, rows: list[str], note: str = "") -> None:
            super().__init__()
            self.rows = rows
            self.note = note

    @work(thread=True, exclusive=True, group="real-kvm")
    def _real_fork(self, children: int) -> None:
        """Run `mmuscope kvm fork` in a child process. The result comes back as a message,
        which Textual drops once this screen is gone (a scenario may step on while the guest
        runs); leaving the screen cancels the worker, which ends the child process as
        Ctrl+C would, so that it removes its tracefs instance."""
        import json

        worker = get_current_worker()
        argv = self.fork_argv(children)
        pipe = subprocess.PIPE
        with subprocess.Popen(argv, stdout=pipe, stderr=pipe, stdin=subprocess.DEVNULL,
                              text=True) as child:  # fmt: skip
            deadline = time.monotonic() + 120
            while True:
                try:
                    stdout, stderr = child.communicate(timeout=0.25)
                    break
                except subprocess.TimeoutExpired:
                    if worker.is_cancelled or time.monotonic() > deadline:
                        _end(child)
                        if not worker.is_cancelled:
                            self.post_message(self.KernelRunDone(["the run took over 120 s"]))
                        return
        if child.returncode != 0:
            why = stderr.strip().splitlines()[-1] if stderr.strip() else "failed"
            self.post_message(self.KernelRunDone(["the run failed:", why]))
            return
        out = json.loads(stdout)
        stats = out["stats"]
        head = self.lab.head(0)
        rows = kernel_run_rows(out, children + 1, head.count() if head is not None else 0)
        pages = out["by_event"].get("kvm_mmu_get_page", 0)
        note = (
            f"{out['kernel']} ({out['mmu']} MMU): {children + 1} processes, "
            f"max_mmu_rmap_size {stats.get('max_mmu_rmap_size')}, "
            f"{stats.get('pf_fixed')} faults fixed, {pages} shadow pages"
        )
        self.post_message(self.KernelRunDone(rows, note))

    @on(KernelRunDone)
    def _on_kernel_run_done(self, message: KernelRunDone) -> None:
        self.query_one(KernelRun).show_rows(message.rows)
        if message.note:
            self.kernel_note = message.note

    def action_toggle_buckets(self) -> None:
        self.log2 = not self.log2
        self.redraw()


def _end(child: subprocess.Popen[str]) -> None:
    """SIGTERM first: `mmuscope kvm` then closes its VM and removes its tracefs instance
    (README, "The command line"); SIGKILL only if it has not ended within 5 s."""
    child.terminate()
    try:
        child.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
