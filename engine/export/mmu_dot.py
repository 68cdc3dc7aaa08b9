"""The shadow pages as a Graphviz graph: one node per `kvm_mmu_page`, an edge per
non-leaf spte (parent → child), ranked by level; the pages a fault walked are filled, and
obsolete pages (an old `mmu_valid_gen`) are dashed and grey."""

from __future__ import annotations

from collections.abc import Iterable

from ..mmu.mmu_pages import SPTES_PER_PAGE, KvmMmuPage, MmuPages
from ..mmu.rmap import KvmRmapHead
from ..mmu.spte import is_empty_spte
from .dot import EMPTY_FONT, FONT, VISIT_FILL, VISIT_LINE, format_attrs, graph_label, quote


def page_id(sp: KvmMmuPage) -> str:
    return f"sp{sp.seq}"


def page_label(pages: MmuPages, sp: KvmMmuPage) -> str:
    used = sum(1 for spte in sp.spt if not is_empty_spte(spte))
    role = sp.role
    return (
        f"gfn {sp.gfn:#x}\nl{role.level} {'direct' if role.direct else 'indirect'} "
        f"{role.access_str}\ngen {sp.mmu_valid_gen}, {used}/{SPTES_PER_PAGE} sptes"
    )


def pages_to_dot(pages: MmuPages, *, title: str = "", path: Iterable[KvmMmuPage] = ()) -> str:
    """dot text for every active page and the links between them."""
    walked = {sp.seq for sp in path}
    lines = [
        "digraph shadow_pages {",
        f"  graph [rankdir=TB, fontname={quote(FONT)}, label={graph_label([title])}];",
        f"  node [shape=box, style=rounded, fontname={quote(FONT)}, fontsize=10];",
        f"  edge [fontname={quote(FONT)}, fontsize=9];",  # labels as the nodes
    ]
    by_level: dict[int, list[str]] = {}
    for sp in pages.pages():
        attrs = {"label": page_label(pages, sp)}
        if pages.is_obsolete(sp):
            attrs |= {"style": "rounded,dashed", "fontcolor": EMPTY_FONT, "color": EMPTY_FONT}
        elif sp.seq in walked:
            attrs |= {"style": "rounded,filled", "fillcolor": VISIT_FILL, "color": VISIT_LINE}
        lines.append(f"  {page_id(sp)} {format_attrs(attrs)};")
        by_level.setdefault(sp.role.level, []).append(page_id(sp))
    for sp in pages.pages():
        for index in range(SPTES_PER_PAGE):
            child = pages.child_at(sp, index)
            if child is not None:
                edge = {"label": str(index), "fontsize": "8"}
                if sp.seq in walked and child.seq in walked:
                    edge |= {"color": VISIT_LINE, "penwidth": "2"}
                lines.append(f"  {page_id(sp)} -> {page_id(child)} {format_attrs(edge)};")
    for ids in by_level.values():
        lines.append(f"  {{ rank=same; {' '.join(ids)} }}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def rmap_to_dot(head: KvmRmapHead, gfn: int, *, title: str = "") -> str:
    """One rmap as Graphviz: `kvm_rmap_head.val` → each `pte_list_desc` as a row of its
    PTE_LIST_EXT cells (filled = an sptep), linked by `more`."""
    era = head.era
    lines = [
        "digraph rmap {",
        f"  graph [rankdir=LR, fontname={quote(FONT)}, label={graph_label([title])}];",
        f"  node [shape=plaintext, fontname={quote(FONT)}, fontsize=10];",
        f"  edge [fontname={quote(FONT)}, fontsize=9];",  # labels as the nodes
        f"  head {format_attrs({'shape': 'box', 'label': _head_label(head, gfn)})};",
    ]
    previous = "head"
    for number, desc in enumerate(head.descs):
        used = desc.used()
        cells = "".join(
            f'<TD BGCOLOR="{VISIT_FILL if i < used and desc.sptes[i] else "#ffffff"}"> </TD>'
            for i in range(era.ext)
        )
        counts = f"spte_count {desc.spte_count}" if era.has_spte_count else ""
        if era.has_tail_count:
            counts += f" tail_count {desc.tail_count}"
        label = (
            f'<<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0"><TR><TD COLSPAN="{era.ext}">'
            f"desc {number} {counts}</TD></TR><TR>{cells}</TR></TABLE>>"
        )
        lines.append(f"  d{number} {format_attrs({'label': label})};")
        lines.append(f"  {previous} -> d{number};")
        previous = f"d{number}"
    lines.append("}")
    return "\n".join(lines) + "\n"


def _head_label(head: KvmRmapHead, gfn: int) -> str:
    return f"rmap_head of gfn {gfn:#x}\ncount {head.count()}, PTE_LIST_EXT {head.era.ext}"
