"""The shadow pages as a graph: `kvm_mmu_page`s linked by their `parent_ptes`.

KVM's pages form a DAG, not a tree: a page is found in the hash by (gfn, role) and
linked under every parent spte that needs it (`mmu_page_add_parent_pte`), so two roots
(two vCPUs in different address spaces, or two processes whose guest tables point at
the same table) can share a subtree.  `page_dag()` builds that graph with networkx, and
`root_reach()` says, for each root in use, how many pages of each level hang below it
and how many of them another root reaches too — the shadow-MMU screen's summary line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .mmu_pages import KvmMmuPage, MmuPages

if TYPE_CHECKING:  # networkx is imported on first use: it costs start-up time
    import networkx as nx  # type: ignore[import-untyped]


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
