"""Read-only views of the shadow MMU for drawing: pages by level, one page's 512 sptes,
the path a fault took, a fast zap replayed batch by batch, and the pages as a graph.

KVM's pages form a DAG, not a tree: a page is found in the hash by (gfn, role) and
linked under every parent spte that needs it (`mmu_page_add_parent_pte`), so two roots
(two vCPUs in different address spaces, or two processes whose guest tables point at
the same table) can share a subtree.  `page_dag()` builds that graph with networkx, and
`root_reach()` says, for each root in use, how many pages of each level hang below it
and how many of them another root reaches too — the shadow-MMU screen's summary line.

Nothing here changes the MMU; the app's shadow-MMU screen draws these, and tests check
them against the model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .mmu_pages import KvmMmuPage, MmuPages
from .spte import (
    FROZEN_SPTE,
    REMOVED_SPTE,
    SpteConfig,
    check_mmio_spte,
    get_mmio_spte_generation,
    is_empty_spte,
    is_mmio_spte,
)
from .walk import fault_path as fault_path
from .walk import last_on_path as last_on_path

if TYPE_CHECKING:  # networkx is imported on first use: it costs start-up time
    import networkx as nx  # type: ignore[import-untyped]

# spte states, one colour each on screen; UNACCESSED: a leaf whose Accessed bit is clear
# (a prefetch, `make_spte(prefetch=true)`, the guest has not touched since)
NONE, NONLEAF, LEAF, LARGE_LEAF, MMIO, MMIO_STALE, FROZEN, UNACCESSED = (
    "none", "nonleaf", "leaf", "large", "mmio", "mmio-stale", "frozen", "unaccessed"
)  # fmt: skip
PT_PAGE_SIZE_MASK = 1 << 7


@dataclass(frozen=True, slots=True)
class SpteCell:
    index: int
    state: str
    spte: int
    gen: int | None  # MMIO sptes: the memslot generation they were made in


@dataclass(frozen=True, slots=True)
class LevelSummary:
    level: int
    pages: tuple[KvmMmuPage, ...]  # oldest first
    obsolete: int


def pages_by_level(pages: MmuPages) -> list[LevelSummary]:
    """Active pages grouped by level, highest first (roots at the top)."""
    return levels_of(pages.pages(), pages.is_obsolete)


def levels_of(
    pages: Iterable[KvmMmuPage], is_obsolete: Callable[[KvmMmuPage], bool]
) -> list[LevelSummary]:
    """Any pages (a zap replay adds the ones already gone) grouped by level, oldest
    first within a level."""
    grouped: dict[int, list[KvmMmuPage]] = {}
    for sp in sorted(pages, key=lambda sp: sp.seq):
        grouped.setdefault(sp.role.level, []).append(sp)
    return [
        LevelSummary(level, tuple(grouped[level]), sum(map(is_obsolete, grouped[level])))
        for level in sorted(grouped, reverse=True)
    ]


def spt_cells(
    pages: MmuPages, sp: KvmMmuPage, cfg: SpteConfig, memslots_gen: int
) -> list[SpteCell]:
    """The 512 sptes of `sp`, each classified."""
    cells = []
    for index, spte in enumerate(sp.spt):
        cells.append(_cell(pages, sp, index, spte, cfg, memslots_gen))
    return cells


def _cell(
    pages: MmuPages, sp: KvmMmuPage, index: int, spte: int, cfg: SpteConfig, gen: int
) -> SpteCell:
    if is_empty_spte(spte):  # SHADOW_NONPRESENT_VALUE (6.10+) or 0
        return SpteCell(index, NONE, spte, None)
    if spte in (FROZEN_SPTE, REMOVED_SPTE):
        return SpteCell(index, FROZEN, spte, None)
    if is_mmio_spte(cfg, spte):
        state = MMIO if check_mmio_spte(cfg, spte, gen) else MMIO_STALE
        return SpteCell(index, state, spte, get_mmio_spte_generation(spte))
    if pages.child_at(sp, index) is not None:
        return SpteCell(index, NONLEAF, spte, None)
    accessed = cfg.shadow_accessed_mask
    if accessed and not sp.role.ad_disabled and not spte & accessed:
        return SpteCell(index, UNACCESSED, spte, None)
    return SpteCell(index, LARGE_LEAF if spte & PT_PAGE_SIZE_MASK else LEAF, spte, None)


def zap_batches(lock_holds: Iterable[int]) -> list[tuple[int, int]]:
    """A zap replayed: (pages zapped so far, pages in this lock hold) per hold."""
    done, out = 0, []
    for hold in lock_holds:
        out.append((done, hold))
        done += hold
    return out


# -- the pages as a graph ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RootReach:
    root: KvmMmuPage
    vcpus: tuple[int, ...]  # the vCPUs whose root this is
    per_level: tuple[int, ...]  # pages reachable at level 4, 3, 2, 1 (the root included)
    shared: int  # of those, pages another root in use reaches as well


def page_dag(pages: MmuPages) -> nx.DiGraph:
    """Nodes: active pages by `seq` (attributes gfn, level, obsolete); edges parent →
    child, one per parent spte (a `MultiDiGraph` would count them; reachability does
    not need to)."""
    import networkx as nx

    graph = nx.DiGraph()
    for sp in pages.pages():
        graph.add_node(
            sp.seq, gfn=sp.gfn, level=sp.role.level, obsolete=pages.is_obsolete(sp), page=sp
        )
    for sp in pages.pages():
        for sptep in sp.parent_ptes:
            graph.add_edge(pages.page_of_sptep(sptep).seq, sp.seq)
    return graph


def root_reach(
    pages: MmuPages, roots: Mapping[int, KvmMmuPage], graph: Any = None
) -> list[RootReach]:
    """For each distinct root in `roots` (vcpu → root), oldest first."""
    import networkx as nx

    graph = page_dag(pages) if graph is None else graph
    by_root: dict[int, list[int]] = {}
    for vcpu, root in sorted(roots.items()):
        by_root.setdefault(root.seq, []).append(vcpu)
    reach = {seq: nx.descendants(graph, seq) | {seq} for seq in sorted(by_root) if seq in graph}
    out = []
    for seq, below in reach.items():
        others = set().union(*(r for s, r in reach.items() if s != seq))
        levels = [graph.nodes[n]["level"] for n in below]
        out.append(
            RootReach(
                graph.nodes[seq]["page"],
                tuple(by_root[seq]),
                tuple(levels.count(level) for level in (4, 3, 2, 1)),
                len(below & others),
            )
        )
    return out
