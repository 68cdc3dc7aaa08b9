"""The replayed shadow pages as a Graphviz graph, in the look of `engine.export.mmu_dot`:
one box per page, ranked by level; obsolete pages (another `mmu_valid_gen`) dashed and
grey, the page that appeared last filled.

A trace does not say which spte links a page to its parent, but a direct page's place
follows from its gfn and level: a level-L direct page maps the 512**L gfns from its gfn
(`direct_map()` gets it by `kvm_mmu_get_child_sp()` for the gfn rounded by
`gfn_round_for_level()` to the level above), so its parent is
the direct page of level L+1, of the same generation and SMM bit, whose range holds that
gfn, through its spte `(gfn >> 9L) & 511` (`SPTE_INDEX`).  Those links are drawn,
labelled with the index.  An indirect page shadows a guest page table, whose place the
guest's walks show (`ReplayModel.guest_links`: the table of level L-1 that a walk's
level-L entry points to, and that entry's index): each is linked to the page of level
L+1, of the same generation and SMM bit, that shadows its parent table; a link from a
root is dashed (the top table is CR3's, which no event prints: the model takes the root
its vCPU loaded last).  A direct page under an indirect one (`FNAME(fetch)` maps a huge
guest page with smaller pages) is linked to the table whose huge entry it maps.  Levels
are stacked by invisible edges, for pages whose parent is not drawn."""

from __future__ import annotations

import itertools

from ..export.dot import EMPTY_FONT, FONT, VISIT_FILL, VISIT_LINE, format_attrs, graph_label, quote
from .model import ReplayModel
from .records import ReplayPage
from .views import page_levels

SPTE_INDEX_BITS = 9  # SPTE_LEVEL_BITS: 512 sptes a page
SPTES_PER_PAGE = 1 << SPTE_INDEX_BITS
MAX_DOT_PAGES = 3000  # the newest pages drawn (dot needs minutes beyond this)


def _label(page: ReplayPage) -> str:
    level = f"l{page.level}" if page.level is not None else "l?"
    role = "direct" if page.direct else "indirect"
    gen = f"gen {page.gen}" if page.gen is not None else "gen ?"
    copies = f" ×{page.copies}" if page.copies > 1 else ""
    seen = ", before the trace" if page.adopted else ""
    return f"gfn {page.gfn:#x}{copies}\n{level} {role}\n{gen}{seen}"


def _direct_place(page: ReplayPage) -> tuple[int | None, object, int] | None:
    """(generation, SMM bit, level) of a direct page of known level, else None."""
    if not page.direct or page.level is None:
        return None
    return page.gen, dict(page.key[2]).get("smm"), page.level


def direct_links(pages: list[ReplayPage]) -> list[tuple[ReplayPage, ReplayPage, int]]:
    """(parent, child, spte index) for each direct page whose parent is among `pages`."""
    at: dict[tuple[int | None, object, int, int], ReplayPage] = {}
    for page in pages:
        place = _direct_place(page)
        if place is not None:
            at.setdefault((*place, page.gfn), page)
    links = []
    for page in pages:
        place = _direct_place(page)
        if place is None:
            continue
        gen, smm, level = place
        span = 1 << (SPTE_INDEX_BITS * (level + 1))  # gfns the parent maps
        parent = at.get((gen, smm, level + 1, page.gfn & ~(span - 1)))
        if parent is not None:
            index = (page.gfn >> (SPTE_INDEX_BITS * level)) & (SPTES_PER_PAGE - 1)
            links.append((parent, page, index))
    return links


def shadow_links(
    model: ReplayModel, pages: list[ReplayPage]
) -> list[tuple[ReplayPage, ReplayPage, int, bool]]:
    """(parent, child, entry index, from an assumed root) for each page whose parent
    table a walk showed (an indirect page's table, or a direct page's huge guest entry)
    and whose indirect parent page is among `pages` (of several with that gfn and level,
    the newest one older than the child)."""
    at: dict[tuple[int | None, object, int, int], list[ReplayPage]] = {}
    for page in sorted(pages, key=lambda p: p.seq):
        if not page.direct and page.level is not None:
            place = (page.gen, dict(page.key[2]).get("smm"), page.level, page.gfn)
            at.setdefault(place, []).append(page)
    links, placed = [], model.placed_tables()
    for page in pages:
        link = placed.get((page.gfn, page.level)) if page.level else None
        if page.level is None or link is None:
            continue
        table, index, assumed = link
        smm = dict(page.key[2]).get("smm")
        parents = at.get((page.gen, smm, page.level + 1, table), [])
        older = [parent for parent in parents if parent.seq < page.seq] or parents
        if older:
            links.append((older[-1], page, index, assumed))
    return links


def replay_to_dot(model: ReplayModel, *, title: str = "") -> tuple[str, int]:
    """(dot text, nodes) for the newest MAX_DOT_PAGES pages."""
    rows = page_levels(model, newest=MAX_DOT_PAGES)
    drawn = sum(len(row.newest) for row in rows)
    gen = "?" if model.mmu_valid_gen is None else str(model.mmu_valid_gen)
    words = [title, f"mmu_valid_gen {gen}, {model.flips_total} fast zaps, {len(model.pages)} pages"]
    if drawn < len(model.pages):
        words.append(f"the newest {drawn} pages drawn")
    lines = [
        "digraph replay_pages {",
        f"  graph [rankdir=TB, fontname={quote(FONT)}, label={graph_label(filter(None, words))}];",
        f"  node [shape=box, style=rounded, fontname={quote(FONT)}, fontsize=10];",
        f"  edge [fontname={quote(FONT)}, fontsize=9];",  # labels as the nodes
    ]
    newest = max(model.pages.values(), key=lambda p: p.seq, default=None)
    firsts = []
    for row in rows:
        ids = []
        for page in row.newest:
            attrs = {"label": _label(page)}
            if model.is_obsolete(page):
                attrs |= {"style": "rounded,dashed", "fontcolor": EMPTY_FONT, "color": EMPTY_FONT}
            elif page is newest:
                attrs |= {"style": "rounded,filled", "fillcolor": VISIT_FILL, "color": VISIT_LINE}
            ids.append(f"p{page.seq}")
            lines.append(f"  p{page.seq} {format_attrs(attrs)};")
        lines.append(f"  {{ rank=same; {' '.join(ids)} }}")
        firsts.append(ids[0])
    for upper, lower in itertools.pairwise(firsts):
        lines.append(f"  {upper} -> {lower} [style=invis];")
    drawn_pages = [page for row in rows for page in row.newest]
    for parent, child, index in direct_links(drawn_pages):
        lines.append(f"  p{parent.seq} -> p{child.seq} [label={quote(f'spte[{index}]')}];")
    for parent, child, index, assumed in shadow_links(model, drawn_pages):
        dashed = ", style=dashed" if assumed else ""
        lines.append(f"  p{parent.seq} -> p{child.seq} [label={quote(f'spte[{index}]')}{dashed}];")
    lines.append("}")
    return "\n".join(lines) + "\n", drawn
