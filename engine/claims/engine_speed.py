"""Engine speed and memory for `mmuscope bench`: plain numbers, and baselines measured in
the same run so they can be quoted as ratios (timings alone depend on the machine).

- `faults_per_s(n)`: bare 4K TDP faults (EPT, `huge_pages=False`, no listener) on `n`
  distinct gfns of a guest with one big slot, in gfn order (a guest touching its memory:
  neighbours share their page tables) or shuffled (most faults make tables of their own).
- `dict_inserts_per_s(n)`: the baseline, a dict insert per gfn over the same gpas.
- `populate(gib)`: a guest of one `gib` GiB slot faulted at 4K gfn by gfn, in a fresh
  interpreter so the peak RSS is the populate's own (`peak_rss_mb`): seconds, peak RSS
  MB, and the peak before the first fault (interpreter, engine, empty guest).
- `fast_zap(pages)`: touch one gfn per 2 MiB of a big sparse guest until `pages` shadow
  pages exist, `zap_all_fast()`, and report the largest lock hold (BATCH_ZAP_PAGES is the
  kernel's bound); `zap_all(pages)` does the same with the old single-hold `zap_all()`.
- `engine_rows(quick)`: all of it as (name, value, unit) rows, the `engine` table of
  `mmuscope bench --json`.  `quick` keeps the row names but measures less: fewer faults, a
  ¼ GiB populate, a smaller zap; the rows `quick`, `faults_n`, `populate_gib` and
  `fast_zap_pages` say what was measured, and the `populate_6g_*` bars only apply when
  `quick` is 0.

Nothing here prints; `tui/bench.py` formats the rows.
"""

from __future__ import annotations

import gc
import json
import random
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import NamedTuple

from ..memslots.vm import Vm
from ..mmu.direct.mmu import DirectMmu
from ..mmu.mmu_pages import BATCH_ZAP_PAGES
from ..mmu.spte import SPTE_CONFIGS

PAGE_SHIFT = 12
GiB = 1 << 30
HVA = 0x7F00_0000_0000  # userspace_addr of the slot: congruent to gpa 0 modulo 2 MiB
GFNS_PER_2M = 512
REPEAT = 3

Row = tuple[str, float | int, str]


def one_slot_guest(npages: int) -> Vm:
    """A VM with one RAM slot of `npages` 4K pages (rounded up to 2 MiB) at gpa 0."""
    npages = -(-npages // GFNS_PER_2M) * GFNS_PER_2M
    vm = Vm(track_all=False)
    vm.set_user_memory_region(0, 0, 0, npages << PAGE_SHIFT, HVA)
    return vm


def bare_mmu(vm: Vm) -> DirectMmu:
    """EPT, 4K leaves only, no event listener, and no `direct_pte_prefetch()`: the rows
    time one fault per gfn (with prefetch, 7 of each 8 gfns touched in order are mapped
    by their group's first fault and never fault themselves)."""
    return DirectMmu(vm, SPTE_CONFIGS["ept"], huge_pages=False, pte_prefetch=False)


def _best(run: Callable[[], float], repeat: int) -> float:
    return min(run() for _ in range(repeat))


def fault_gpas(n: int, shuffled: bool = False, seed: int = 1) -> list[int]:
    gpas = [gfn << PAGE_SHIFT for gfn in range(n)]
    if shuffled:
        random.Random(seed).shuffle(gpas)
    return gpas


def faults_per_s(n: int, *, shuffled: bool = False, repeat: int = REPEAT) -> float:
    """Bare 4K faults per second on `n` distinct gfns, best of `repeat` fresh guests."""
    gpas = fault_gpas(n, shuffled)

    def run() -> float:
        mmu = bare_mmu(one_slot_guest(n))
        fault = mmu.page_fault
        start = time.perf_counter()
        for gpa in gpas:
            fault(0, gpa)
        elapsed = time.perf_counter() - start
        if mmu.stat["pf_fixed"] != n:
            raise AssertionError(f"{mmu.stat['pf_fixed']} of {n} faults fixed")
        return elapsed

    return n / _best(run, repeat)


def dict_inserts_per_s(n: int, *, repeat: int = REPEAT) -> float:
    """The baseline: one dict insert per gfn (`d[gpa >> 12] = gpa`) over the same gpas."""
    gpas = fault_gpas(n)

    def run() -> float:
        table: dict[int, int] = {}
        start = time.perf_counter()
        for gpa in gpas:
            table[gpa >> PAGE_SHIFT] = gpa
        return time.perf_counter() - start

    return n / _best(run, repeat)


# -- populate, in a child interpreter ---------------------------------------------------


def peak_rss_mb() -> float:
    """This process's peak RSS: `ru_maxrss` (KiB on Linux), but from `VmHWM` when /proc has
    it.  Linux carries `ru_maxrss` over fork and exec (`setmax_mm_hiwater_rss` of the old
    mm), so a child of a big parent would report the parent's peak; `VmHWM` belongs to the
    child's own address space."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass(frozen=True, slots=True)
class Populate:
    gib: float
    gfns: int
    seconds: float
    peak_rss_mb: float
    start_rss_mb: float  # the interpreter, the engine and the empty guest


def populate_here(gib: float) -> Populate:
    """Fault every gfn of a `gib` GiB guest at 4K, bare, in this process."""
    npages = int(gib * GiB) >> PAGE_SHIFT
    mmu = bare_mmu(one_slot_guest(npages))
    fault = mmu.page_fault
    start_rss = peak_rss_mb()
    start = time.perf_counter()
    for gfn in range(npages):
        fault(0, gfn << PAGE_SHIFT)
    seconds = time.perf_counter() - start
    if mmu.stat["pf_fixed"] != npages:
        raise AssertionError(f"{mmu.stat['pf_fixed']} of {npages} gfns faulted")
    return Populate(gib, npages, seconds, peak_rss_mb(), start_rss)


def _populate_main(gib: float) -> None:
    """The child's entry point: one JSON object on stdout."""
    print(json.dumps(asdict(populate_here(gib))))


def populate(gib: float = 6) -> Populate:
    """`populate_here(gib)` in a fresh `sys.executable`, so the peak RSS is its own."""
    code = (
        f"from mmuscope.engine.claims.engine_speed import _populate_main; _populate_main({gib!r})"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"populate child failed: {done.stderr.strip()}")
    return Populate(**json.loads(done.stdout))


# -- zapping ----------------------------------------------------------------------------


def sparse_guest_with_pages(pages: int) -> DirectMmu:
    """A bare MMU holding `pages` shadow pages (one or two more at most): a guest with
    2 MiB of slot per wanted page, one 4K fault per 2 MiB, so each fault adds a level-1
    page (and every 512th a level-2 page).  The default budget (slot pages / 50) is ten
    times what this needs, so nothing is recycled on the way."""
    mmu = bare_mmu(one_slot_guest(pages * GFNS_PER_2M))
    region = 0
    while mmu.pages.n_used_mmu_pages < pages:
        mmu.page_fault(0, region * GFNS_PER_2M << PAGE_SHIFT)
        region += 1
    if mmu.pages.stat["mmu_recycled"]:
        raise AssertionError("the page budget recycled pages while building")
    return mmu


@dataclass(frozen=True)
class Zap:
    pages: int  # shadow pages zapped
    lock_holds: int  # mmu_lock holds
    max_lock_hold: int  # pages zapped in the longest hold
    seconds: float


def _zap(pages: int, zap: Callable[[DirectMmu], int]) -> Zap:
    mmu = sparse_guest_with_pages(pages)
    gc.collect()
    start = time.perf_counter()
    zapped = zap(mmu)
    seconds = time.perf_counter() - start
    holds = mmu.pages.lock_holds
    mmu.free_obsolete_roots()  # vCPU 0 lets go of its zapped root: the last page freed
    if sum(holds) != zapped or mmu.pages.n_used_mmu_pages:
        raise AssertionError("the zap left pages behind or lost count of its holds")
    return Zap(zapped, len(holds), max(holds, default=0), seconds)


def fast_zap(pages: int = 100_000) -> Zap:
    """`kvm_mmu_zap_all_fast()` of `pages` shadow pages while a vCPU waits for mmu_lock
    (`mmu_lock_contended`): at most BATCH_ZAP_PAGES a hold.  The root vCPU 0 still uses
    adds nothing to a batch; it is freed when the vCPU drops it."""
    return _zap(pages, lambda mmu: mmu.zap_all_fast())


def zap_all(pages: int = 100_000) -> Zap:
    """The old `kvm_mmu_zap_all()`: every page under one hold."""
    return _zap(pages, lambda mmu: mmu.pages.zap_all())


def fast_zap_max_lock_hold(pages: int = 100_000) -> int:
    return fast_zap(pages).max_lock_hold


# -- the table --------------------------------------------------------------------------


class Sizes(NamedTuple):
    """What the engine table measures: faults a timed run, the populated guest, and the
    shadow pages each zap takes down."""

    faults: int
    populate_gib: float
    zap_pages: int


FULL = Sizes(faults=200_000, populate_gib=6, zap_pages=100_000)
# --quick: the best of REPEAT runs of 20,000 faults (~0.1 s each at the bar) still ranks
# the engine against its bar and the dict; the populate is not judged (FULL_ONLY_BARS)
QUICK = Sizes(faults=20_000, populate_gib=0.25, zap_pages=20_000)


def engine_rows(quick: bool = False) -> list[Row]:
    """The `engine` table of `mmuscope bench`, with baselines and ratios."""
    size = QUICK if quick else FULL
    n = size.faults
    repeat = REPEAT
    rows: list[Row] = [("quick", int(quick), "flag")]

    fps = faults_per_s(n, repeat=repeat)
    shuffled = faults_per_s(n, shuffled=True, repeat=repeat)
    dps = dict_inserts_per_s(n, repeat=repeat)
    rows += [
        ("faults_per_s", round(fps), "faults/s"),
        ("faults_shuffled_per_s", round(shuffled), "faults/s"),
        ("faults_n", n, "faults"),
        ("dict_inserts_per_s", round(dps), "inserts/s"),
        ("faults_vs_dict_insert", round(fps / dps, 4), "ratio"),
        ("shuffled_vs_dict_insert", round(shuffled / dps, 4), "ratio"),
    ]

    pop = populate(size.populate_gib)
    dict_s = pop.gfns / dict_inserts_per_s(pop.gfns, repeat=repeat)
    rows += [
        ("populate_gib", pop.gib, "GiB"),
        ("populate_gfns", pop.gfns, "gfns"),
        ("populate_6g_s", round(pop.seconds, 3), "s"),
        ("populate_6g_peak_rss_mb", round(pop.peak_rss_mb, 1), "MB"),
        ("populate_start_rss_mb", round(pop.start_rss_mb, 1), "MB"),
        ("populate_dict_insert_s", round(dict_s, 3), "s"),
        ("populate_vs_dict_insert", round(dict_s / pop.seconds, 4), "ratio"),
    ]

    fast = fast_zap(size.zap_pages)
    slow = zap_all(size.zap_pages)
    rows += [
        ("fast_zap_pages", fast.pages, "pages"),
        ("fast_zap_max_lock_hold_pages", fast.max_lock_hold, "pages"),
        ("fast_zap_lock_holds", fast.lock_holds, "holds"),
        ("fast_zap_s", round(fast.seconds, 3), "s"),
        ("zap_all_lock_hold_pages", slow.max_lock_hold, "pages"),
        ("zap_all_s", round(slow.seconds, 3), "s"),
        ("batch_zap_pages", BATCH_ZAP_PAGES, "pages"),
    ]
    return rows


# The engine's bars: (row, comparison, value); the populate bars are for the 6 GiB run.
BARS: dict[str, tuple[str, float]] = {
    "faults_per_s": (">=", 200_000),
    "populate_6g_s": ("<=", 10),
    "populate_6g_peak_rss_mb": ("<=", 1024),
    "fast_zap_max_lock_hold_pages": ("<=", 10),
}
FULL_ONLY_BARS = ("populate_6g_s", "populate_6g_peak_rss_mb")


def bar_met(name: str, value: float) -> bool | None:
    """Whether a row meets its bar; None for rows without one."""
    bar = BARS.get(name)
    if bar is None:
        return None
    op, limit = bar
    return value >= limit if op == ">=" else value <= limit
