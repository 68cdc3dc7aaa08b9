"""The rmap screen's drawings: one gfn's rmap as head → `pte_list_desc` boxes with their
PTE_LIST_EXT cells, and the `mmu_rmaps_stat` histogram as bars.

Shorter than the chain (80×24 under a scenario's caption), the chain keeps its head, its
first descriptors and its last, with "… N more descriptors …" between them; the bars
leave out the empty buckets first and say so on their bottom border (tui/widgets/fit.py)."""

from __future__ import annotations

from typing import Any

from mmuscope.engine.mmu.rmap import KvmRmapHead
from mmuscope.engine.mmu.rmap.stat import RmapHistogram, bucket_labels
from rich.text import Text
from textual.geometry import Size

from .fit import fit_rows, more_rows, refit_in_render, show_subtitle, show_title
from .mmu_panels import MmuDrawing
from .wrap import wrapped_height

MAX_DESCS = 8  # boxes drawn; longer chains say how many more


class RmapChain(MmuDrawing):
    """`kvm_rmap_head.val`, then each descriptor: counts, cells used and free, `more`."""

    _shown: tuple[KvmRmapHead | None, int] | None = None
    _fitted_for = Size(0, 0)

    def show(self, head: KvmRmapHead | None, gfn: int) -> None:
        self._shown = (head, gfn)
        self._fit()

    def render(self) -> Text:
        if self._shown is not None and self._fitted_for != self.content_size:
            refit_in_render(self, self._fit)  # laid out again (a caption came or went)
        return super().render()

    def _fit(self) -> None:
        """The head and as many descriptors as fit: the first ones and the last, the
        ones between elided."""
        assert self._shown is not None
        head, gfn = self._shown
        self._fitted_for = self.content_size
        width, room = self.content_size
        text = Text(no_wrap=True, overflow="ellipsis")
        if head is None or head.is_empty:
            text.append(f"gfn {gfn:#x}: rmap empty (val = 0)", style=self.style_of("label"))
            self.show_text(text)
            return
        top = self._head(head, gfn)
        blocks = [self._desc(head, number) for number in range(len(head.descs))]
        used = sum(_height(row, width) for row in top)
        shown = min(len(blocks), MAX_DESCS)
        while shown > 1 and room > 0:
            elided = len(blocks) - shown
            need = used + sum(_height(r, width) for b in blocks[:shown] for r in b) + bool(elided)
            if need <= room:
                break
            shown -= 1
        rows = list(top)
        elided = len(blocks) - shown
        first = shown - 1 if elided and shown > 1 else shown  # and the last after the gap
        for block in blocks[:first]:
            rows.extend(block)
        if elided:
            words = f"  … {elided} more descriptors" + (" …" if first < shown else "")
            rows.append(Text(words, style=self.style_of("label")))
        if first < shown:
            rows.extend(blocks[-1])  # the chain's last descriptor, `more = NULL`
        for row in rows:
            text.append_text(row)
            text.append("\n")
        text.rstrip()
        self.show_text(text)

    def _head(self, head: KvmRmapHead, gfn: int) -> list[Text]:
        """`val` and the count, then the descriptors' size and a walk's cache lines: on
        one row where it fits, else on two (each wrapping under its own indent)."""
        era = head.era
        label = self.style_of("label")
        words = (
            f"val {_val_words(head)}  count {head.count()}",
            f"{len(head.descs)} descs × {era.sizeof} B (PTE_LIST_EXT {era.ext})  "
            f"{head.cache_lines_touched_by_walk()} cache lines a walk",
        )
        line = Text(f"gfn {gfn:#x}  ", style=self.style_of("path"))
        width = self.content_size.width
        if not width or len(line) + len("  ".join(words)) <= width:
            rows = [line.append("  ".join(words), style=label)]
        else:
            rows = [line.append(words[0], style=label), Text(f"  {words[1]}", style=label)]
        if head.is_single:
            rows.append(Text("  a single spte: val holds the sptep itself, no descriptor"))
        return rows

    def _desc(self, head: KvmRmapHead, number: int) -> list[Text]:
        """A descriptor's two rows: its counts, then its cells and `more`."""
        era, desc = head.era, head.descs[number]
        counts = f"spte_count {desc.spte_count}" if era.has_spte_count else "no counts"
        if era.has_tail_count:
            counts += f"  tail_count {desc.tail_count}"
        more = "  more ↓" if desc.more is not None else "  more = NULL"
        width = self.content_size.width
        gap = " " if not width or 4 + 2 * era.ext + len(more) <= width else ""  # or packed
        cells = Text("    ")
        used = desc.used()
        for index in range(era.ext):
            style = "leaf" if index < used and desc.sptes[index] else "none"
            cells.append(("■" if style == "leaf" else "·") + gap, style=self.style_of(style))
        cells.append(more, style=self.style_of("nonleaf"))
        return [Text(f"  desc {number}  {counts}", style=self.style_of("label")), cells]


class RmapBars(MmuDrawing):
    """The 4K row of `mmu_rmaps_stat` as bars (the empty heads' bucket 0 left out);
    shorter than its rows, the empty buckets go first."""

    _shown: tuple[RmapHistogram, bool] | None = None
    _fitted_for = Size(0, 0)

    def show(self, histogram: RmapHistogram, log2: bool) -> None:
        self._shown = (histogram, log2)
        self._fit()

    def render(self) -> Text:
        if self._shown is not None and self._fitted_for != self.content_size:
            refit_in_render(self, self._fit)
        return super().render()

    def _fit(self) -> None:
        assert self._shown is not None
        histogram, log2 = self._shown
        self._fitted_for = self.content_size
        width, room = self.content_size
        title = "log2 buckets" if log2 else "the kernel's ffs() buckets"
        rows = [Text(f"Level=4K, {title}", style=self.style_of("label"))]
        row = dict(histogram.rows())["4K"]
        top = max(row[1:], default=0) or 1
        counts = []
        for label, count in list(zip(bucket_labels(), row, strict=True))[1:]:
            bar = Text(f"{label:>9} {count:>6} ", style=self.style_of("label"))
            bar.append("█" * (count * 18 // top), style=self.style_of("large"))
            rows.append(bar)
            counts.append(count)
        full = [i + 1 for i, count in enumerate(counts) if count]
        order = [0, *full, *(i + 1 for i, count in enumerate(counts) if not count)]
        kept, dropped = fit_rows(rows, width, room, order)
        note = more_rows(dropped)
        show_subtitle(self, note)
        self.show_text(Text("\n", no_wrap=True).join(rows[i] for i in kept))


def _height(row: Text, width: int) -> int:
    return wrapped_height(row, width) if width > 0 else 1


def _val_words(head: KvmRmapHead) -> str:
    """`val` as the kernel reads it; desc addresses come from a process-wide slab, so
    they are named, not printed (the drawing stays the same from run to run)."""
    if head.is_single:
        return f"= sptep {head.val:#x}"
    return "= &desc 0 | 1"


def kernel_run_rows(out: dict[str, Any], processes: int, model_sptes: int) -> list[str]:
    """What `mmuscope kvm fork --summary` reports of the same storm on this machine's KVM,
    and which host kind its numbers hold for: where KVM shadow-pages (kvm-pvm, or
    ept=0/npt=0) the 64-page budget (KVM_MIN_ALLOC_MMU_PAGES) zaps the oldest shadow
    pages, so max_mmu_rmap_size stays below the processes; an EPT/NPT host's TDP MMU
    keeps no rmaps at all (max_mmu_rmap_size 0, no shadow pages)."""
    stats, events = out.get("stats", {}), out.get("by_event", {})
    rows = [
        f"{out.get('host', out.get('mmu', '?'))}",
        f"{out.get('kernel', '?')} · {processes} processes",
        f"max_mmu_rmap_size {stats.get('max_mmu_rmap_size', '?')} · model {model_sptes}",
    ]
    if out.get("mmu") == "shadow":
        pages = events.get("kvm_mmu_get_page", 0)
        rows.append(f"shadow pages {pages} · zapped {stats.get('mmu_shadow_zapped', '?')}")
    else:
        rows.append("TDP MMU: no rmaps, 0 zapped")
    return rows


class KernelRun(MmuDrawing):
    """The same fork storm run on this machine's KVM (the real-kvm scenario): the
    kernel's counts beside the model's chain, drawn in a panel, not only in a pop-up.
    Hidden until a run is asked for; while it runs, and without KVM, it says so."""

    WRAP = False

    def show_rows(self, rows: list[str]) -> None:
        text = Text("\n", no_wrap=True, overflow="ellipsis").join(
            Text(row, style=self.style_of("label"), no_wrap=True, overflow="ellipsis")
            for row in rows
        )
        show_title(self, "this machine's KVM")
        self.show_text(text)
        self.add_class("-shown")
