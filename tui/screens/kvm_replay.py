"""The replay screen on a real guest run (``mmuscope kvm PROGRAM``): the live model of
the kernel's shadow pages fed by the run's own tracefs instance, and beside it the VM's
and vCPU's statistics from KVM_GET_STATS_FD (kvm_stat's other source), slice by slice,
and under them the comparison so far: the same program advanced slice by slice on the
engine's shadow MMU, row by row against the kernel (differences first, in bold).  The
header says what ran where: kernel release, KVM module, shadow or TDP MMU.

The guest runs in a child process (tui/kvm_app.py); this screen starts it, tails its
FIFO through the replay screen's live reader, polls its statistics file, and interrupts
it when the screen goes.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
from typing import Any

from mmuscope.engine.events import Event
from mmuscope.engine.kvm.asm import decode_emulated
from mmuscope.engine.pacing import Pacer
from mmuscope.engine.replay.live import LiveTimeline
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.notifications import SeverityLevel

from ..kvm_launch import KvmLaunch
from ..widgets.fit import show_title
from ..widgets.panel import TextPanel
from .replay import ReplayScreen

POLL = 0.25  # seconds between looks at the child's statistics
FIRST = ("pf_taken", "pf_fixed", "pf_emulate", "mmio_exits", "insn_emulation",
         "mmu_cache_miss", "mmu_shadow_zapped", "mmu_unsync", "pages_4k",
         "max_mmu_rmap_size")  # fmt: skip


class KernelStats(TextPanel):
    WRAP = True  # the status line is a sentence

    DEFAULT_CSS = """
    KernelStats { height: 1fr; padding: 0 1; border: round $panel;
        border-title-color: $text-muted; }
    """

    def show(self, stats: dict[str, int], status: str, insn: str = "") -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f"{status}\n", style="bold")
        if insn:
            text.append(f"emulated {insn}\n")
        names = [n for n in FIRST if n in stats]
        names += sorted(n for n in stats if n not in FIRST and stats[n])
        for name in names:
            text.append(f"{name:<24}{stats[name]:>8}\n")
        self.show_content(text)


class ComparePanel(TextPanel):
    """The kernel against the model so far (engine.kvm.compare): equal or the first
    difference (why, and the two events), the events per kind (event, kernel, model,
    equal), then one row per quantity.  A name may run into the blanks before its first
    figure (as kvm_stat's names do); one longer still goes on a row of its own above its
    figures, never cut."""

    WRAP = True

    DEFAULT_CSS = """
    ComparePanel { height: 1fr; padding: 0 1; border: round $panel;
        border-title-color: $text-muted; }
    """

    def show(self, rows: list[dict[str, Any]], compare: dict[str, Any] | None = None) -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        if not rows and compare is None:
            text.append("the comparison comes after the first slice\n(shadow-paging hosts)")
            self.show_content(text)
            return
        shown = self.content_region.width or 44
        if compare is not None:  # a name, then three figures of 7
            self._events(text, compare, max(8, shown - 21))
        room = max(8, shown - 17)  # a name, two figures of 7, the mark
        names = [str(row["what"]).split(" (")[0] for row in rows]
        width = min(room, max([1, *(len(name) for name in names)]) + 1)
        unequal = [r for r in rows if r["explained"] is not None]
        text.append(f"{len(rows) - len(unequal)} rows equal · {len(unequal)} differ\n",
                    style="bold")  # fmt: skip
        for row in sorted(rows, key=lambda r: r["explained"] is None):
            what = str(row["what"]).split(" (")[0]
            mark = "=" if row["explained"] is None else "≠"
            style = "" if row["explained"] is None else "bold"
            self._figures(text, what, width, (row["kernel"], row["model"]), mark, style)
        self.show_content(text)

    def _events(self, text: Text, compare: dict[str, Any], room: int) -> None:
        events, first = compare["events"], compare.get("first_difference")
        if first is None:
            lost = compare.get("lost", 0)
            state = "equal" if not lost else f"LOST {lost} EVENTS"
            text.append(f"events {state} · {events['compared']} compared\n", style="bold")
        else:
            text.append(f"DIFFERENT after {first['position']} equal events\n", style="bold")
            text.append(f"{first.get('kind', 'different')}: {first['why']}\n")
            for side in ("kernel", "model"):
                event = first[side]
                shown = event["text"] if event is not None else "(no more events)"
                text.append(f"{side:<6} > {shown}\n", style="bold")
        kinds = compare.get("kinds", [])
        width = min(room, max([5, *(len(k["event"]) for k in kinds)]) + 1)
        text.append(f"{'event':<{width}}{'kernel':>7}{'model':>7}{'equal':>7}\n", style="bold")
        for k in kinds:
            same = k["kernel"] == k["model"] == k["equal"]
            figures = (k["kernel"], k["model"], k["equal"])
            self._figures(text, k["event"], width, figures, "" if same else "≠",
                          "" if same else "bold")  # fmt: skip
        text.append("\n")

    @staticmethod
    def _figures(
        text: Text, what: str, width: int, figures: tuple[object, ...], mark: str, style: str
    ) -> None:
        first, rest = _n(figures[0]), "".join(f"{_n(v):>7}" for v in figures[1:])
        if len(what) + 1 + len(first) > width + 7:  # its own row, the figures under it
            text.append(f"{what}\n", style=style)
            what = ""
        head = what.ljust(width + 7 - len(first)) + first  # a name may use the blanks
        text.append(f"{head}{rest} {mark}".rstrip() + "\n", style=style)


def _n(value: object) -> str:
    return "-" if value is None else str(value)


class KvmReplayScreen(ReplayScreen):
    DEFAULT_CSS = """
    KvmReplayScreen #replay-state { min-width: 36; }
    KvmReplayScreen.-narrow #replay-state { min-width: 0; }
    KvmReplayScreen #kvm-side { width: 2fr; min-width: 48; }
    KvmReplayScreen.-narrow #kvm-side { width: 36; min-width: 0; }
    """

    def __init__(self, launch: KvmLaunch, pacer: Pacer) -> None:
        pacer.playing = True
        super().__init__(LiveTimeline(), pacer, source=f"kvm {launch.program}", pipe=launch.fifo)
        self.launch = launch
        self.child: subprocess.Popen[bytes] | None = None
        self.kernel_stats: dict[str, int] = {}
        self.rows: list[dict[str, Any]] = []  # the comparison after the last slice
        self.compare: dict[str, Any] | None = None  # its events, first difference, kinds
        self.last_insn = ""  # the last kvm_emulate_insn, decoded
        self.status = "starting the guest"
        self.finished = False
        self._read = 0

    def compose_main(self) -> ComposeResult:
        yield from super().compose_main()
        with Vertical(id="kvm-side"):
            panel = KernelStats(id="kernel-stats")
            show_title(panel, "KVM_GET_STATS_FD")
            yield panel
            compare = ComparePanel(id="kvm-compare")
            show_title(compare, "kernel · model")
            yield compare

    def on_mount(self) -> None:
        stderr = (self.launch.folder / "stderr").open("wb")
        with stderr:
            self.child = subprocess.Popen(
                list(self.launch.argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=stderr,
            )  # fmt: skip
        self.set_interval(POLL, self.poll_child, name="kvm-child")
        self.show_kernel_stats()

    def on_unmount(self) -> None:
        self.stop_child()

    def stop_child(self) -> None:
        child = self.child
        if child is None or child.poll() is not None:
            return
        child.send_signal(signal.SIGINT)  # KeyboardInterrupt: its finally blocks clean up
        try:
            child.wait(5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()

    def poll_child(self) -> None:
        if self.leaving:  # on_unmount stops the child
            return
        for record in self._new_records():
            self._take(record)
        child = self.child
        if child is not None and not self.finished and child.poll() is not None:
            self.finished = True
            if child.returncode != 0 and not self.status.startswith("error"):
                err = (self.launch.folder / "stderr").read_text(errors="replace").strip()
                self.status = f"error: {err.splitlines()[-1] if err else child.returncode}"
            severity: SeverityLevel = "error" if self.status.startswith("error") else "information"
            self.notify(self.status, title="kvm", severity=severity, timeout=8)
        self.show_kernel_stats()

    def _new_records(self) -> list[dict[str, Any]]:
        try:
            with self.launch.stats.open() as handle:
                handle.seek(self._read)
                lines = handle.readlines()
        except OSError:
            return []
        complete = [line for line in lines if line.endswith("\n")]
        self._read += sum(len(line) for line in complete)
        out = []
        for line in complete:
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out

    def _take(self, record: dict[str, Any]) -> None:
        if "error" in record:
            self.status = f"error: {record['error']}"
        elif record.get("done"):
            lost = record.get("lost", 0)
            self.status = f"done: {record['slices']} slices"
            if lost:
                self.status += f" · LOST {lost} EVENTS"
            self.rows = record.get("rows", self.rows)
            self.compare = record.get("compare", self.compare)
        else:
            self.kernel_stats = {**record.get("vm", {}), **record.get("vcpu", {})}
            self.rows = record.get("rows", [])
            self.compare = record.get("compare")
            self.status = f"slice {record['slice'] + 1}: {record['label']}"

    def show_events(self, events: list[Event]) -> None:
        """The replay screen's, and the last emulated instruction decoded (iced-x86)."""
        for event in reversed(events):
            if event.name == "kvm_emulate_insn" and "insn" in event.fields:
                insn = decode_emulated(str(event.fields["insn"]), int(event.fields["rip"]))
                self.last_insn = f"{insn} @{int(event.fields['rip']):#x}"
                break
        super().show_events(events)

    def show_kernel_stats(self) -> None:
        found = self.query(KernelStats)
        if found:
            found.first().show(self.kernel_stats, self.status, self.last_insn)
        compare = self.query(ComparePanel)
        if compare:
            compare.first().show(self.rows, self.compare)

    def _update_header(self) -> None:
        super()._update_header()
        self.title = f"mmuscope · kvm {self.launch.program} · {self.launch.header}"
