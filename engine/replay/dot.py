"""The replayed shadow pages as a Graphviz graph, in the look of `engine.export.mmu_dot`:
one box per page, ranked by level; obsolete pages (another `mmu_valid_gen`) dashed and
grey, the page that appeared last filled.  A trace does not say which spte links a page
to its parent, so levels are stacked by invisible edges instead of drawn as a tree."""

from __future__ import annotations

import itertools

from ..export.dot import EMPTY_FONT, FONT, VISIT_FILL, VISIT_LINE, format_attrs, graph_label, quote
from .model import ReplayModel
from .records import ReplayPage
from .views import page_levels

MAX_DOT_PAGES = 3000  # the newest pages drawn (dot needs minutes beyond this)


def _label(page: ReplayPage) -> str:
    level = f"l{page.level}" if page.level is not None else "l?"
    role = "direct" if page.direct else "indirect"
    gen = f"gen {page.gen}" if page.gen is not None else "gen ?"
    copies = f" ×{page.copies}" if page.copies > 1 else ""
    seen = ", before the trace" if page.adopted else ""
    return f"gfn {page.gfn:#x}{copies}\n{level} {role}\n{gen}{seen}"


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
    lines.append("}")
    return "\n".join(lines) + "\n", drawn
