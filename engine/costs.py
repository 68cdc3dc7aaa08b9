"""What things cost in time: every constant the threads' time models charge, with its
source.

A claim's time is computed from counts the engine measures (slots looked at,
cache lines touched, pages zapped, hash searches avoided, flushes waited on) and from the
costs below.  Each cost is a `Cost` with a `kind`:
- `kernel`: a constant of the kernel of the thread's era (exact: low = central = high);
- `thread`: a number the thread states that is an input to a model, not one it is
  compared with (exact);
- `hardware`: a documented figure of the thread's hardware, with the spread of the parts
  of that era;
- `measured`: measured on this machine by a script in `benchmarks/` (named in the source);
- `config`: a build option of the thread's kernel that the thread does not give: low and
  high are the values the configurations of that era used, central the one assumed;
- `fitted`: set so that one named row of the thread's table matches (by a script in
  `benchmarks/`, named in the source); that row's table marks it `fitted`, and a table
  fits at most one parameter;
- `estimate`: none of these exists, so a reasoned low / central / high, marked as such.
Every source note, and every estimate's reasoning, was written here before the model it
feeds was compared with the thread's number; no value but a `fitted` one was chosen by
searching for a thread's number (tests/test_costs.py fails on a cost without a source
note).  docs/bench.md lists every cost with its range and its source.

`at(name, level)` reads a cost at `low`, `central` or `high`; the claim tables compute each
time once per level and, for closed-form models, at every corner of their estimates
(engine/claims/band.py).  Times are in nanoseconds unless the unit says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

KERNEL, THREAD, HARDWARE = "kernel", "thread", "hardware"
MEASURED, CONFIG, FITTED, ESTIMATE = "measured", "config", "fitted", "estimate"
KINDS = (KERNEL, THREAD, HARDWARE, MEASURED, CONFIG, FITTED, ESTIMATE)
EXACT_KINDS = (KERNEL, THREAD, FITTED)
LEVELS = ("low", "central", "high")


@dataclass(frozen=True, slots=True)
class Cost:
    """One named cost: its value at each level, its unit, its kind and its source."""

    name: str
    unit: str
    low: float
    central: float
    high: float
    kind: str
    source: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind {self.kind!r} is not one of {KINDS}")
        if not self.low <= self.central <= self.high:
            raise ValueError(f"{self.name}: low <= central <= high does not hold")
        if self.kind in EXACT_KINDS and not self.low == self.central == self.high:
            raise ValueError(f"{self.name}: a {self.kind} constant has one value")

    def at(self, level: str) -> float:
        if level not in LEVELS:
            raise ValueError(f"unknown level {level!r}: {', '.join(LEVELS)}")
        return float(getattr(self, level))

    @property
    def uncertain(self) -> bool:
        return self.low < self.high


COSTS: dict[str, Cost] = {}


def _cost(
    name: str, unit: str, low: float, central: float, high: float, kind: str, source: str
) -> Cost:
    if name in COSTS:
        raise ValueError(f"cost {name} defined twice")
    cost = Cost(name, unit, low, central, high, kind, " ".join(source.split()))
    COSTS[name] = cost
    return cost


def _exact(name: str, unit: str, value: float, kind: str, source: str) -> Cost:
    return _cost(name, unit, value, value, value, kind, source)


def at(name: str, level: str = "central") -> float:
    """Cost `name` at `level` (KeyError for a name not defined here)."""
    return COSTS[name].at(level)


# -- the memslot-search thread (kvm, 2011): memslot lookups, the 2011 shadow MMU's walk
# ---

MEMSLOT_VISIT_NS = _cost(
    "MEMSLOT_VISIT_NS",
    "ns",
    1.0,
    2.0,
    5.0,
    ESTIMATE,
    """One slot (or tree node) looked at by a 2011 gfn_to_memslot: two loads of a hot
    kvm_memory_slot (L1 hits), a compare and a branch, 3-5 cycles at the 2.9 GHz of a
    2011 Xeon; up to 15 cycles more when the branch mispredicts, which happens when the
    slot hit changes from one lookup to the next. Low: 3 cycles; high: 15 cycles. The
    tree's visits are dependent loads, the array's are not; the band covers both.""",
)
MEMSLOT_CALL_NS = _cost(
    "MEMSLOT_CALL_NS",
    "ns",
    1.5,
    3.0,
    6.0,
    ESTIMATE,
    """What one gfn_to_memslot call costs besides its visits: the call and return,
    kvm_memslots() (an srcu_dereference) and the loop's set-up, 5-15 cycles; high: 6 ns
    when the memslots array is not in L1.""",
)
SHADOW_FAULT_LOOKUPS = _cost(
    "SHADOW_FAULT_LOOKUPS",
    "lookups",
    6,
    8,
    11,
    ESTIMATE,
    """gfn_to_memslot calls per shadow page fault in 2.6.38 (counted in the code, not
    measured): FNAME(walk_addr_generic) reads one guest pte per level through
    kvm_read_guest_page -> gfn_to_hva (4 on 4-level paging), gfn_to_pfn (1), rmap_add ->
    gfn_to_rmap (1), page_header_update_slot -> memslot_id (1, the memslot-search thread
    PATCH 1/7), mapping_level / has_wrprotected_page (1); 6 when the walk stops at a
    large page or a cached level, 11 when mark_page_dirty sets accessed/dirty bits on the
    way.""",
)
KERNBENCH_FAULTS_PER_VCPU_S = _cost(
    "KERNBENCH_FAULTS_PER_VCPU_S",
    "faults/s",
    20_000,
    60_000,
    150_000,
    ESTIMATE,
    """Shadow page faults per second and vCPU during kernbench with ept=0: a kernel
    compile forks and execs a compiler per file, each exec faulting its text, heap and
    stack in (thousands of faults per process, hundreds of processes a second over 4
    vCPUs) and every guest pte write of fork/exit trapping. 20k-150k exits/s per vCPU is
    the range reported for shadow paging on kernel builds (VMware's 2008 and Intel's
    2009 EPT white papers report shadow-paging exit rates of that order); not measured
    here.""",
)
KERNBENCH_VCPUS = _exact(
    "KERNBENCH_VCPUS",
    "vCPUs",
    4,
    THREAD,
    """Alex Williamson's kernbench guest (the memslot-search thread): %cpu 366.9-367.6 on
    a 4-way guest; its RAM in slots <1M, 1M-3.5G and 4G+ ("registers memory from 1M -
    3.5G in slot0 and 4G - 10.5G in slot1").""",
)
NETPERF_MMIO_EXITS = _cost(
    "NETPERF_MMIO_EXITS",
    "exits/transaction",
    6,
    12,
    25,
    ESTIMATE,
    """MMIO exits per netperf TCP_RR transaction over QEMU's emulated rtl8139 (the
    memslot-search thread, Alex's worst case): one request out and one response in, each
    a few register accesses (TxStatus/TxAddr writes, IntrStatus read and acknowledge,
    RxBufPtr update) and one interrupt whose EOI is a write to the xAPIC page, itself an
    MMIO miss in the memslots; 3-12 accesses a packet.""",
)
MMIO_MISS_LOOKUPS = _cost(
    "MMIO_MISS_LOOKUPS",
    "lookups",
    1,
    2,
    3,
    ESTIMATE,
    """Memslot lookups that miss per MMIO exit in 2011 before the MMIO spte cache: the
    fault path's gfn_to_pfn (1), then emulator_write_phys / kvm_read_guest trying guest
    memory before the MMIO handlers (0-2).""",
)
NETPERF_TRANSACTION_US = _cost(
    "NETPERF_TRANSACTION_US",
    "µs",
    100.0,
    125.0,
    200.0,
    ESTIMATE,
    """One TCP_RR round trip between a guest on an emulated rtl8139 and the host over a
    tap device in 2011: 5,000-10,000 transactions/s (the emulated NIC's exits and QEMU's
    single I/O thread dominate); not stated in the thread.""",
)
EMULATED_WALK_SHARE = _cost(
    "EMULATED_WALK_SHARE",
    "share",
    0.2,
    0.5,
    0.8,
    ESTIMATE,
    """Of the guest page-table walks in Xiao's Unixbench fsdisk profile, the share made by
    FNAME(gva_to_gpa) (instruction fetch and operands of emulated IDE PIO/MMIO accesses),
    the only walks the vtlb of PATCH 7/7 serves; the rest are FNAME(page_fault)'s. fsdisk
    moves its data through the emulated disk, so both kinds are many; the split is not in
    the thread: 0.2-0.8.""",
)

# -- the PTE_LIST_EXT thread (kvm, 2021): rmap_fork with PTE_LIST_EXT 3 and 15 ----------

FORK_PAGE_NS = _cost(
    "FORK_PAGE_NS",
    "ns",
    1_500.0,
    3_000.0,
    6_000.0,
    ESTIMATE,
    """What a child of rmap_fork costs per shared page besides the rmap's desc lines, on a
    2021 host with EPT=N: the shadow page fault that maps the page (VM exit and entry,
    about 1 µs on Cascade Lake, kvm_mmu_page_fault and the guest walk, about 1 µs) and the
    child's share of the fork's write-protect faults and exit; 1.5-6 µs.""",
)
DESC_LINE_NS = _cost(
    "DESC_LINE_NS",
    "ns",
    4.0,
    12.0,
    40.0,
    ESTIMATE,
    """One 64-byte line of pte_list_desc memory read or written while walking a chain: the
    descs of one rmap are slab objects allocated over the whole storm, reached by
    dependent loads of `more`; an L2 hit (12 cycles, 4 ns at 3 GHz) to an L3 hit (40
    cycles, 12 ns) to a mix with DRAM misses (40 ns) on a 2021 Xeon.""",
)

# -- the fast-zap thread (kvm, 2013): the zap benchmark ---------------------------------

ZAP_PAGE_NS = _cost(
    "ZAP_PAGE_NS",
    "ns",
    2_000.0,
    5_000.0,
    10_000.0,
    ESTIMATE,
    """kvm_mmu_prepare_zap_page + free of one fully populated level-1 shadow page on the
    thread's Xeon X5690 (3.47 GHz, 2013): 512 sptes each dropped with its rmap entry
    (drop_spte -> rmap_remove, one or two cache lines), 5-15 ns a spte, plus the unlink
    from its parent and the hash list.""",
)
ZAPS_PER_RUN = _exact(
    "ZAPS_PER_RUN",
    "zaps",
    1,
    THREAD,
    """Zaps of all shadow pages during one run of Xiao's benchmark, read from the mail's
    own words: it "writes large memory when do pci rom read" - one ROM read, and in 2013
    a ROM read maps the ROM BAR (a memslot created) and unmaps it (a memslot deleted:
    kvm_arch_flush_shadow_memslot zapped every shadow page, docs/kvm.md §4.4), one zap.
    The benchmark itself was attached to the mail and is not in the thread, so no range
    has a source: the count is held at the one read the mail names. (An earlier central
    of 2 had been chosen after comparing with the thread's 82 ms saving, a fit; its
    high of 8 had no source.)""",
)

# -- the POWER-keys thread (kvm-ppc, 2014): pfault on POWER
# --------------------------------

HPTEG_MISS_NS = _cost(
    "HPTEG_MISS_NS",
    "ns",
    60.0,
    100.0,
    150.0,
    HARDWARE,
    """Reading one 128-byte HPTE group that misses the caches on a 2014 POWER7/POWER8
    host: main-memory load latency of about 100 ns on those parts (60 ns when the group
    is in the remote L3, 150 ns on a loaded NUMA system). Aneesh walked the addresses
    linearly "to make sure we do take a cache miss for hash page table access", in the
    POWER-keys thread), so a search reads its primary then its secondary group from
    memory.""",
)
HPTE_SEARCH_CPU_NS = _cost(
    "HPTE_SEARCH_CPU_NS",
    "ns",
    20.0,
    50.0,
    100.0,
    ESTIMATE,
    """The rest of kvmppc_hv_find_lock_hpte in real mode: comparing 16 HPTEs against the
    AVPN, the try_lock_hpte on a candidate and the return to the fault handler, 20-100 ns
    at 3-4 GHz.""",
)

# -- the PV-flush thread (lkml, 2012): the paravirt TLB flush (a Xeon without PLE)
# --------

HOST_HZ = _cost(
    "HOST_HZ",
    "Hz",
    250,
    1000,
    1000,
    CONFIG,
    """CONFIG_HZ of the thread's host (a linux-tip kernel of February 2012, its config not
    in the thread): the scheduler tick, the only moment CFS ends a slice
    (scheduler_tick -> task_tick_fair -> check_preempt_tick, kernel/sched/fair.c, v3.2).
    250 is the Kconfig default (kernel/Kconfig.hz, HZ_250); 1000 is RHEL 6's kernel
    configuration (CONFIG_HZ_1000), a common base for 2012 KVM hosts, taken as central;
    which one the thread's host used is UNVERIFIED.""",
)
EXIT_NS = _cost(
    "EXIT_NS",
    "ns",
    1_000.0,
    2_000.0,
    4_000.0,
    ESTIMATE,
    """One VM exit handled by KVM and the re-entry on a 2012 Xeon without PLE: the
    hardware round trip is 0.3-0.6 µs (Westmere/Sandy Bridge), KVM's exit handling and
    the APIC emulation add 0.5-3 µs; the order of magnitude of the existing model
    (engine/tlbflush/config.py, UNVERIFIED).""",
)
CONTEXT_SWITCH_NS = _cost(
    "CONTEXT_SWITCH_NS",
    "ns",
    2_000.0,
    4_000.0,
    8_000.0,
    ESTIMATE,
    """A host switch between two vCPU threads: schedule(), vcpu_put/vcpu_load (VMCS
    switch, MSR reloads) and the VM entry, 2-8 µs on 2012 hardware.""",
)
HANDLER_EXTRA_NS = _cost(
    "HANDLER_EXTRA_NS",
    "ns",
    200.0,
    500.0,
    1_000.0,
    ESTIMATE,
    """smp_invalidate_interrupt's own work in the guest besides the EOI's exit: the
    local TLB flush and the refill of a few TLB entries afterwards.""",
)
FLUSH_ON_ENTRY_NS = _cost(
    "FLUSH_ON_ENTRY_NS",
    "ns",
    200.0,
    500.0,
    1_000.0,
    ESTIMATE,
    """kvm_vcpu_flush_tlb_guest() at entry when KVM_VCPU_FLUSH_TLB was set, and the TLB
    refill it causes.""",
)
PAUSE_LOOP_NS = _cost(
    "PAUSE_LOOP_NS",
    "ns",
    5.0,
    10.0,
    40.0,
    ESTIMATE,
    """One cpu_relax() iteration of the patch's loop: PAUSE took about 10 cycles before
    Skylake (4 ns at 2.4 GHz) plus the cpumask test; high: a cpumask read that misses
    while the acknowledgers write it.""",
)
EBIZZY_RECORD_NS = _cost(
    "EBIZZY_RECORD_NS",
    "ns",
    150_000.0,
    250_000.0,
    600_000.0,
    ESTIMATE,
    """One ebizzy 0.3 record on one 2012 Xeon core: memcpy of a 512 KiB chunk (about
    100 µs at 5 GB/s), the refault of the 96-128 pages the previous free trimmed
    (0.5-3 µs each with zeroing) and a bsearch (negligible); the existing model's WORK_NS
    (engine/tlbflush/config.py).""",
)
