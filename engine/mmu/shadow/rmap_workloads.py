"""Workloads that grow rmap chains, for `mmuscope rmaps-stat` (the PTE_LIST_EXT thread).

Peter Xu's case for a bigger PTE_LIST_EXT was shadow paging (EPT=N) with fork: every
process that maps a page adds one spte to that gfn's rmap, so `./rmap_fork 500` gives the
shared pages 501 sptes each.  `fork` reproduces that on `ShadowMmu`: a parent maps
`pages` pages, faults them in, then `children` forked children each read all of them.
`kernbench` is the contrast: processes touching their own pages, one spte per gfn.
The result is the VM's `mmu_rmaps_stat` as debugfs prints it (empty heads included).
"""

from __future__ import annotations

from collections.abc import Callable

from ...layouts import build_vm, preset
from ..spte import SPTE_CONFIGS
from .mmu import ShadowMmu

RMAP_WORKLOADS = ("fork", "kernbench")
GVA = 0x40_0000  # 4 MiB: the first data page of every process
DATA_GFN = 0x1000  # guest RAM of pc-4g's slot 1 (above 1 MiB)
#: Every process's tables take 5 pages of the guest's page-table pool (PML4, the kernel
#: half's table, PDPT, PD and one PT: the pages fit one 2 MiB PT), and the pool holds
#: DEFAULT_POOL_PAGES (16384): 3276 processes fit, a parent and 3275 children.
MAX_PROCESSES = 3000
MAX_PAGES = 512  # one page table's worth, from GVA (2 MiB-aligned)


def run_rmap_workload(
    workload: str = "fork",
    *,
    children: int = 500,
    pages: int = 16,
    layout: str = "pc-4g",
    pte_list_era: str = "6.4",
    on_process: Callable[[int], object] | None = None,
) -> ShadowMmu:
    """The shadow MMU after the workload (audited); `on_process(n)` after the n-th child
    (or process) has touched its pages."""
    if workload not in RMAP_WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; choose from {', '.join(RMAP_WORKLOADS)}")
    if not 0 <= children <= MAX_PROCESSES or not 1 <= pages <= MAX_PAGES:
        raise ValueError(f"children must be 0 to {MAX_PROCESSES} and pages 1 to {MAX_PAGES}")
    vm = build_vm(preset(layout))
    mmu = ShadowMmu(vm, SPTE_CONFIGS["shadow"], pte_list_era=pte_list_era)
    done = on_process or (lambda n: None)
    if workload == "fork":
        _fork_storm(mmu, children, pages, done)
    else:
        _kernbench(mmu, children, pages, done)
    mmu.audit()
    return mmu


def _touch_all(mmu: ShadowMmu, vcpu: int, cr3: int, pages: int) -> None:
    for i in range(pages):
        mmu.page_fault(vcpu, cr3, GVA + i * 4096)


def _fork_storm(mmu: ShadowMmu, children: int, pages: int, done: Callable[[int], object]) -> None:
    parent = mmu.guest.spawn()
    for i in range(pages):
        mmu.guest.map(parent, GVA + i * 4096, DATA_GFN + i)
    _touch_all(mmu, 0, parent, pages)
    for n in range(children):
        _touch_all(mmu, 1 + n % 3, mmu.guest.fork(parent), pages)
        done(n + 1)


def _kernbench(mmu: ShadowMmu, processes: int, pages: int, done: Callable[[int], object]) -> None:
    for n in range(max(processes, 1)):
        cr3 = mmu.guest.spawn()
        for i in range(pages):
            mmu.guest.map(cr3, GVA + i * 4096, DATA_GFN + n * pages + i)
        _touch_all(mmu, n % 4, cr3, pages)
        done(n + 1)
