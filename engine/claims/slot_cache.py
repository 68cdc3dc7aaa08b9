"""The `slot_cache` bench table: how often the last-used-slot cache answers a memslot
lookup, per workload and layout (the memslot-search thread, PATCH 5/7).

Xiao Guangrong: "Cache the last used slot, the hit ratio is more than 35% during my
test" — one `slots->slot_cache` per VM, checked before the search and set by every hit.
Avi Kivity answered: "If we sort the slots by size, or use a weighted balanced tree, this
should come for free."  The model runs each seeded workload on a `Vm` with only that
VM-wide cache (`vcpu_cache=False`: before 2021 the vCPU path used it too) and counts its
hits; beside it, the per-vCPU `last_used_slot` of 2021 on the same stream, and how often
Avi's alternatives find the slot at their first look (the size-sorted array's first
entry, the wbtree's root), which is what "for free" means in slots looked at.

Xiao's test was a general guest (Unixbench fsdisk, with the guest page-table walk hot in
his profile), so the claim is judged on the workloads that model a general guest and a
RAM-heavy one (`mixed`, `kernbench`); `netperf` (60% MMIO misses, which no slot cache
can answer) and `scatter` (no locality by design: a cache's worst case) are shown, not
judged.  That choice was made before the numbers were run.  Every row is `predicted`;
the thread's number is a lower bound ("more than 35%"), so a row has no error in % and
the bound is judged by `above_35_percent`.
"""

from __future__ import annotations

from ..layouts import build_vm, preset
from ..memslots.workload import WORKLOADS, Workload
from .band import PREDICTED
from .table import Cell, ClaimTable

THREAD = "memslot-search"
THREAD_HIT_RATIO = 0.35  # "the hit ratio is more than 35% during my test"
CLAIM = (
    'Xiao Guangrong, PATCH 5/7: "Cache the last used slot, the hit ratio is more than 35% '
    'during my test"'
)
LAYOUTS = ("pc-4g", "assigned-devices")
WORKLOAD_NAMES = tuple(WORKLOADS)  # mixed, kernbench, netperf, scatter
JUDGED_WORKLOADS = ("mixed", "kernbench")
NR_VCPUS = 2
RUN_SEED = 1
FULL_LOOKUPS = 20_000
QUICK_LOOKUPS = 5_000
COLUMNS = [
    "workload",
    "layout",
    "lookups",
    "ram_share",
    "vm_cache_hit_ratio",
    "vcpu_cache_hit_ratio",
    "size_sorted_first_look",
    "wbtree_root",
    "role",
    "thread_hit_ratio",
]


def hit_ratio(layout: str, workload: str, lookups: int, *, per_vcpu: bool) -> tuple[float, float]:
    """(hit ratio, RAM share) of the VM-wide cache (2011) or the per-vCPU one (2021)."""
    vm = build_vm(preset(layout), "rbtree", last_used_slot=True, vcpu_cache=per_vcpu)
    stream = Workload(vm.memslots(), workload, seed=RUN_SEED, nr_vcpus=NR_VCPUS)
    hits = found = 0
    for access in stream.take(lookups):
        trace = vm.explain(access.gfn, vcpu=access.vcpu, with_probes=False)
        hits += trace.cache_hit
        found += trace.slot is not None
    return hits / lookups, found / lookups


def first_looks(layout: str, workload: str, lookups: int) -> tuple[float, float]:
    """Share of lookups the size-sorted array answers at entry 0 and the wbtree at its
    root: Avi's "should come for free"."""
    vm = build_vm(preset(layout), "rbtree")
    slots = vm.memslot_set(0)
    sized, wb = slots.structure("size-sorted"), slots.structure("wbtree")
    stream = Workload(vm.memslots(), workload, seed=RUN_SEED, nr_vcpus=NR_VCPUS)
    first_sized = first_wb = 0
    for access in stream.take(lookups):
        slot = slots.gfn_tree.search(access.gfn)
        if slot is None:
            continue
        first_sized += sized.visits(access.gfn, slot) == 1
        first_wb += wb.visits(access.gfn, slot) == 1
    return first_sized / lookups, first_wb / lookups


def measure(lookups: int) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for layout in LAYOUTS:
        for workload in WORKLOAD_NAMES:
            vm_ratio, ram_share = hit_ratio(layout, workload, lookups, per_vcpu=False)
            vcpu_ratio, _ = hit_ratio(layout, workload, lookups, per_vcpu=True)
            sized, root = first_looks(layout, workload, lookups)
            rows.append(
                [
                    workload,
                    layout,
                    lookups,
                    round(ram_share, 3),
                    round(vm_ratio, 3),
                    round(vcpu_ratio, 3),
                    round(sized, 3),
                    round(root, 3),
                    PREDICTED,
                    THREAD_HIT_RATIO,
                ]
            )
    return rows


def judge(rows: list[list[Cell]]) -> dict[str, bool]:
    """Above 35% on every judged workload; Avi's "for free" reported beside it."""
    at = {name: COLUMNS.index(name) for name in COLUMNS}

    def value(row: list[Cell], column: str) -> float:
        cell = row[at[column]]
        assert isinstance(cell, int | float)
        return float(cell)

    judged = [row for row in rows if row[at["workload"]] in JUDGED_WORKLOADS]
    return {
        "above_35_percent": bool(judged)
        and all(value(r, "vm_cache_hit_ratio") > THREAD_HIT_RATIO for r in judged),
        "per_vcpu_at_least_vm_wide": all(
            value(r, "vcpu_cache_hit_ratio") >= value(r, "vm_cache_hit_ratio") for r in judged
        ),
        "size_sorted_for_free": all(
            value(r, "size_sorted_first_look") >= value(r, "vm_cache_hit_ratio") for r in judged
        ),
        "wbtree_for_free": all(
            value(r, "wbtree_root") >= value(r, "vm_cache_hit_ratio") for r in judged
        ),
    }


def _note(rows: list[list[Cell]], checks: dict[str, bool], quick: bool) -> str:
    verdict = {True: "holds", False: "NOT reproduced"}
    at = {name: COLUMNS.index(name) for name in COLUMNS}
    ratios = ", ".join(
        f"{row[at['workload']]}/{row[at['layout']]} {row[at['vm_cache_hit_ratio']]}" for row in rows
    )
    parts = [
        f"VM-wide last-used-slot hit ratio: {ratios}.",
        f"Above 35% on {' and '.join(JUDGED_WORKLOADS)} (a general guest, as Xiao's test): "
        f"{verdict[checks['above_35_percent']]}.  netperf's misses and scatter's lack of "
        "locality are shown, not judged (a slot cache cannot answer a miss).",
        "Avi's \"should come for free\" (the size-sorted array's first entry / the wbtree's "
        f"root find the slot at least as often as the cache): size-sorted "
        f"{verdict[checks['size_sorted_for_free']]}, wbtree {verdict[checks['wbtree_for_free']]}.",
        "The per-vCPU cache of 2021 hits at least as often as the VM-wide one: "
        f"{verdict[checks['per_vcpu_at_least_vm_wide']]} ({NR_VCPUS} vCPUs interleaved, judged "
        "workloads).",
    ]
    if quick:
        parts.append(f"--quick: {QUICK_LOOKUPS} lookups per row.")
    return " ".join(parts)


def slot_cache_table(quick: bool = False) -> ClaimTable:
    rows = measure(QUICK_LOOKUPS if quick else FULL_LOOKUPS)
    checks = judge(rows)
    return ClaimTable(
        name="slot_cache",
        columns=list(COLUMNS),
        rows=rows,
        thread=THREAD,
        claim=CLAIM,
        checks=checks,
        note=_note(rows, checks, quick),
        extra={"judged_workloads": list(JUDGED_WORKLOADS)},
    )
