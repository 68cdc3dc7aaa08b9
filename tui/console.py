"""`mmuscope overview`: the default guest's memslots and a few explained lookups, printed
with rich (for a pipe, a log or a terminal where the explorer cannot run)."""

from __future__ import annotations

from mmuscope.engine.layouts import DEFAULT_LAYOUT, build_vm, preset
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


def slot_table(layout_name: str) -> Table:
    layout = preset(layout_name)
    vm = build_vm(layout)
    table = Table(title=f"{layout.title}: memslots of address space 0")
    for column in ("slot", "name", "base_gfn", "end", "npages", "flags"):
        table.add_column(column, justify="right" if column != "name" else "left")
    for slot in vm.memslots():
        flags = " ".join(
            f for f, on in (("RO", slot.readonly), ("DIRTY", slot.dirty_logging)) if on
        )
        table.add_row(
            str(slot.id),
            layout.name_of(0, slot.id),
            f"{slot.base_gfn:#x}",
            f"{slot.end_gfn - 1:#x}",
            str(slot.npages),
            flags,
        )
    return table


def cost_table(layout_name: str) -> Table:
    vm = build_vm(preset(layout_name))
    slots = vm.memslot_set(0)
    table = Table(
        title="slots or nodes visited per lookup, no cache (the memslot-search thread's argument)"
    )
    table.add_column("gfn", justify="right")
    table.add_column("what")
    for name in LOOKUP_STRATEGIES:
        table.add_column(name, justify="right")
    for gfn, what in SAMPLE_GFNS:
        row = [f"{gfn:#x}", what]
        for name in LOOKUP_STRATEGIES:
            trace = slots.search_explained(gfn, name)
            row.append(f"{trace.visited}{'' if trace.found else ' miss'}")
        table.add_row(*row)
    return table


def show_overview(args: object = None) -> int:
    console = Console()
    console.print(slot_table(DEFAULT_LAYOUT))
    console.print(cost_table(DEFAULT_LAYOUT))
    console.print(
        "Try: [bold]mmuscope lookup 0xfee00 --lookup wbtree[/]  ·  "
        "[bold]mmuscope export -o tree.pdf --lookup wbtree --path 0xfee00[/]  ·  "
        f"[bold]mmuscope --help[/]   (gfn = gpa >> {PAGE_SHIFT})"
    )
    return 0
