"""The rmap screen's drawings: one gfn's rmap as head → `pte_list_desc` boxes with their
PTE_LIST_EXT cells, and the `mmu_rmaps_stat` histogram as bars."""

from __future__ import annotations

from rich.text import Text

from engine.mmu.rmap import KvmRmapHead
from engine.mmu.rmaps_stat import RmapHistogram, bucket_labels

from .mmu_panels import MmuDrawing

MAX_DESCS = 8  # boxes drawn; longer chains say how many more


class RmapChain(MmuDrawing):
    """`kvm_rmap_head.val`, then each descriptor: counts, cells used and free, `more`."""

    def show(self, head: KvmRmapHead | None, gfn: int) -> None:
        text = Text(no_wrap=True, overflow="ellipsis")
        if head is None or head.is_empty:
            text.append(f"gfn {gfn:#x}: rmap empty (val = 0)", style=self.style_of("label"))
            self.show_text(text)
            return
        era = head.era
        text.append(f"gfn {gfn:#x}  ", style=self.style_of("path"))
        text.append(
            f"val {_val_words(head)}  count {head.count()}  {len(head.descs)} descs × "
            f"{era.sizeof} B (PTE_LIST_EXT {era.ext})  "
            f"{head.cache_lines_touched_by_walk()} cache lines a walk\n",
            style=self.style_of("label"),
        )
        if head.is_single:
            text.append("  a single spte: val holds the sptep itself, no descriptor\n")
        for number, desc in enumerate(head.descs[:MAX_DESCS]):
            counts = f"spte_count {desc.spte_count}" if era.has_spte_count else "no counts"
            if era.has_tail_count:
                counts += f"  tail_count {desc.tail_count}"
            text.append(f"  desc {number}  {counts}\n", style=self.style_of("label"))
            text.append("    ")
            used = desc.used()
            for index in range(era.ext):
                style = "leaf" if index < used and desc.sptes[index] else "none"
                text.append("■ " if style == "leaf" else "· ", style=self.style_of(style))
            more = "  more ↓" if desc.more is not None else "  more = NULL"
            text.append(more + "\n", style=self.style_of("nonleaf"))
        if len(head.descs) > MAX_DESCS:
            text.append(f"  ... {len(head.descs) - MAX_DESCS} more descriptors\n")
        self.show_text(text)


class RmapBars(MmuDrawing):
    """The 4K row of `mmu_rmaps_stat` as bars (the empty heads' bucket 0 left out)."""

    def show(self, histogram: RmapHistogram, log2: bool) -> None:
        text = Text(no_wrap=True)
        title = "log2 buckets" if log2 else "the kernel's ffs() buckets"
        text.append(f"Level=4K, {title}\n", style=self.style_of("label"))
        row = dict(histogram.rows())["4K"]
        top = max(row[1:], default=0) or 1
        for label, count in list(zip(bucket_labels(), row, strict=True))[1:]:
            text.append(f"{label:>9} {count:>6} ", style=self.style_of("label"))
            text.append("█" * (count * 18 // top) + "\n", style=self.style_of("large"))
        self.show_text(text)


def _val_words(head: KvmRmapHead) -> str:
    """`val` as the kernel reads it; desc addresses come from a process-wide slab, so
    they are named, not printed (the drawing stays the same from run to run)."""
    if head.is_single:
        return f"= sptep {head.val:#x}"
    return "= &desc 0 | 1"
