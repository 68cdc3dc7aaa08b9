"""`mmuscope overview`: a guest's memslots (the default one, or --layout/--mtree) and a
few explained lookups, printed with rich (for a pipe, a log or a terminal where the
explorer cannot run)."""

from __future__ import annotations

import argparse

from mmuscope.engine import Vm
from mmuscope.engine.layouts import DEFAULT_LAYOUT, Layout
from mmuscope.engine.lookup import LOOKUP_STRATEGIES
from mmuscope.engine.memslots.constants import PAGE_SHIFT
from rich.console import Console
from rich.table import Table

SAMPLE_GFNS = (
    (0x1_2345, "RAM below the PCI hole"),
    (0x10_2345, "RAM above 4 GiB"),
    (0xF_0010, "VGA framebuffer"),
    (0xF_EE00, "local APIC (MMIO, no slot)"),
    (0xF_EBC0, "emulated NIC BAR (MMIO, no slot)"),
)
SAMPLE_SLOTS = 6  # memslots sampled in another guest's cost table
SLOT_ROWS = 24  # a bigger guest's table shows its first and last 12 memslots


def slot_table(layout: Layout, vm: Vm, as_id: int = 0) -> Table:
    title = f"{layout.title}: memslots of address space {as_id}"
    table = Table(title=title, min_width=len(title))  # the title on one line
    for column in ("slot", "name", "base_gfn", "end", "npages", "flags"):
        table.add_column(column, justify="right" if column != "name" else "left")
    slots = vm.memslots(as_id)
    half = SLOT_ROWS // 2
    for i, slot in enumerate(slots):
        if len(slots) > SLOT_ROWS and half <= i < len(slots) - half:
            if i == half:
                hidden = f"{len(slots) - SLOT_ROWS:,} more (the layout command lists them all)"
                table.add_row("…", hidden, "", "", "", "")
            continue
        flags = " ".join(
            f for f, on in (("RO", slot.readonly), ("DIRTY", slot.dirty_logging)) if on
        )
        table.add_row(
            str(slot.id),
            layout.name_of(as_id, slot.id),
            f"{slot.base_gfn:#x}",
            f"{slot.end_gfn - 1:#x}",
            str(slot.npages),
            flags,
        )
    return table


def sample_gfns(layout: Layout, vm: Vm, as_id: int) -> list[tuple[int, str]]:
    """The default guest's five telling gfns; for another guest, the middle of up to
    SAMPLE_SLOTS memslots spread over the address space (named after each) and the local
    APIC's page."""
    if layout.name == DEFAULT_LAYOUT and as_id == 0:
        return list(SAMPLE_GFNS)
    slots = vm.memslots(as_id)
    picked = sorted({i * (len(slots) - 1) // max(SAMPLE_SLOTS - 1, 1) for i in range(SAMPLE_SLOTS)})
    samples = [
        (slot.base_gfn + slot.npages // 2, layout.name_of(as_id, slot.id))
        for slot in (slots[i] for i in picked if i < len(slots))
    ]
    apic = 0xF_EE00
    if vm.memslot_set(as_id).search_explained(apic, with_probes=False).slot is None:
        samples.append((apic, "local APIC (MMIO, no slot)"))
    return samples


def cost_table(layout: Layout, vm: Vm, as_id: int = 0) -> Table:
    slots = vm.memslot_set(as_id)
    table = Table(
        title="slots or nodes visited per lookup, no cache (the memslot-search thread's argument)"
    )
    table.add_column("gfn", justify="right")
    table.add_column("what")
    for name in LOOKUP_STRATEGIES:
        table.add_column(name, justify="right")
    for gfn, what in sample_gfns(layout, vm, as_id):
        row = [f"{gfn:#x}", what]
        for name in LOOKUP_STRATEGIES:
            trace = slots.search_explained(gfn, name)
            row.append(f"{trace.visited}{'' if trace.found else ' miss'}")
        table.add_row(*row)
    return table


def show_overview(args: argparse.Namespace) -> int:
    """A guest's memslots (the default, or --layout/--mtree, --as) and what each lookup
    strategy visits to find a few of its gfns."""
    from .commands import load_guest

    layout, vm = load_guest(args)
    console = Console()
    console.print(slot_table(layout, vm, args.as_id))
    console.print(cost_table(layout, vm, args.as_id))
    console.print(
        "Try: [bold]mmuscope lookup 0xfee00 --lookup wbtree[/]  ·  "
        "[bold]mmuscope export -o tree.pdf --lookup wbtree --path 0xfee00[/]  ·  "
        f"[bold]mmuscope --help[/]   (gfn = gpa >> {PAGE_SHIFT})"
    )
    return 0
