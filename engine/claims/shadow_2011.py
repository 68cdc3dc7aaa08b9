"""The `shadow_2011` bench table: the memslot-search thread's timed numbers — kernbench,
netperf, the perf profile shares and Unixbench — from the engine's counts and
engine/costs.py.

The memslot-search thread (kvm, 2011) is two 2011 patch series on memslot lookups (and Xiao
Guangrong's vtlb) under the shadow MMU.  Their times, and how each is modelled:
- Alex Williamson's kernbench, ept=0, 4-way guest with RAM in slots <1M, 1M-3.5G, 4G+:
  elapsed 42.809 s (the unsorted array), 42.160 s (the array reordered, 4G+ first),
  42.305 s (wbtree).  Model: the thread's base run less what each lookup saves — the
  engine's slots looked at per RAM lookup, in each order, on that layout (the `kernbench`
  mix, weighted by slot size), at MEMSLOT_VISIT_NS a look, SHADOW_FAULT_LOOKUPS lookups
  a fault and KERNBENCH_FAULTS_PER_VCPU_S faults a second.
- Alex's netperf TCP_RR over an emulated rtl8139: +3% with the wbtree ("only traversing
  6-7 tree nodes until we don't find a match, versus the full 32 entries").  Model: the
  engine's looks per miss on 2011's 35-entry array and on the wbtree, NETPERF_MMIO_EXITS
  exits a transaction, MMIO_MISS_LOOKUPS misses an exit, NETPERF_TRANSACTION_US.
- Xiao's perf profile (Unixbench fsdisk, ept=0): `gfn_to_memslot` 2.03% -> 0.81% of
  cycles and `paging64_walk_addr_generic` 3.93% -> 1.80% after his series (memslots
  sorted with binary search and a last-used-slot cache, PATCH 1-6; the vtlb, PATCH 7).
  Model: each function's cost scales by what the engine says the series changes — the
  lookup's looks (MEMSLOT_CALL_NS + looks x MEMSLOT_VISIT_NS), and the walks the vtlb
  serves (the shadow session's vtlb hit ratio on emulated accesses, on the
  EMULATED_WALK_SHARE of walks that come from emulation); shares renormalised by the
  cycles saved.
- Unixbench (-c 10 fsdisk), three columns: 2090.5 1882.5 1845.2 before, 2237.4 2151.8
  2118.0 after the vtlb, 2392.5 2485.9 2416.1 after the sorted memslots.  Model: a score
  is inverse to the cycles it takes; each step saves the profiled function's share times
  the model's saving, judged from the thread's score before that step.
The "before" numbers (42.809 s, the profile's before shares, the scores before the
series) are the `input` rows; every other row is `predicted` — Unixbench after the
sorted memslots from the model's own score after the vtlb, never from the thread's.  The
engine's counts come from seeded workloads, run with seeds 1-5 (SEEDS): the central is
the model on their mean counts, (b) the model on each seed's.  Alex's kernbench gives
its σ (0.19 s base, 0.22 reorder, 0.23 wbtree): (a), the input's σ plus the predicted
run's.  The three Unixbench numbers of a line are its three fsdisk tests, not repeated
runs: no spread.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from ..layouts import build_vm
from ..layouts.layout import Layout, assign_host_addresses
from ..memslots.slot_set import MemslotSet
from ..memslots.workload import Workload
from ..mmu.shadow.session import ShadowSession
from .band import (
    BAND_COLUMNS,
    INPUT,
    NO_BAND,
    PREDICTED,
    SEEDS,
    Band,
    Values,
    band_of,
    no_thread_spread,
    seeds_source,
    thread_spread,
    values_at,
)
from .memslot_lookup import alex_layout
from .table import Cell, ClaimTable

THREAD = "memslot-search"
CLAIM = (
    "Alex Williamson: kernbench ept=0 42.809 s -> 42.305 s with the wbtree (42.160 s "
    "reordered) and netperf TCP_RR +3%; Xiao Guangrong: gfn_to_memslot 2.03% -> 0.81% and "
    "paging64_walk_addr_generic 3.93% -> 1.80% of cycles, Unixbench 2090.5 -> 2237.4 -> "
    "2392.5"
)
COLUMNS = ["quantity", "unit", "role", "thread", *BAND_COLUMNS]
KERNBENCH_BASE_S = 42.809
KERNBENCH_THREAD_S = {"reorder": 42.160, "wbtree": 42.305}
KERNBENCH_SIGMA_S = {"base": 0.19, "reorder": 0.22, "wbtree": 0.23}  # Alex's "(stdev)"
NETPERF_GAIN = 1.03  # "This series resulted in a 3% improvement for this test"
PROFILE = {  # function -> (before, after), % of cycles
    "gfn_to_memslot": (2.03, 0.81),
    "paging64_walk_addr_generic": (3.93, 1.80),
}
UNIXBENCH = (  # before, after vtlb, after memslots sorted; three columns (fsdisk's tests)
    (2090.5, 2237.4, 2392.5),
    (1882.5, 2151.8, 2485.9),
    (1845.2, 2118.0, 2416.1),
)
PLACES = {"s": 3, "ratio": 2, "% of cycles": 2, "score": 1}  # as the thread prints them
GiB, MiB, KiB = 1 << 30, 1 << 20, 1 << 10
ALEX_HOST = 0x7E00_0000_0000
KERNBENCH = ("KERNBENCH_FAULTS_PER_VCPU_S", "SHADOW_FAULT_LOOKUPS", "MEMSLOT_VISIT_NS")
NETPERF = ("NETPERF_MMIO_EXITS", "MMIO_MISS_LOOKUPS", "MEMSLOT_VISIT_NS", "NETPERF_TRANSACTION_US")
PROFILE_COSTS = ("MEMSLOT_CALL_NS", "MEMSLOT_VISIT_NS", "EMULATED_WALK_SHARE")
FULL = {"lookups": 20_000, "accesses": 3000}
QUICK = {"lookups": 4000, "accesses": 1500}
RUN_SEED = 1


def kernbench_layout(order: str) -> Layout:
    """Alex's kernbench guest: RAM <1M, 1M-3.5G and 4G+ (10 GiB in all), registered in
    that order ("base") or with 4G+ first ("reorder": "0: 4G+, 1: 1M-3.5G, 2: <1M")."""
    below = ("ram-below-1m", 640 * KiB // 4096, 0, 640 * KiB)
    low = ("ram-1m-3.5g", 0, 1 * MiB, 3584 * MiB - 1 * MiB)
    high = ("ram-4g+", 0, 4 * GiB, 6656 * MiB)
    regions = [below, low, high] if order == "base" else [high, low, below]
    specs = [(name, slot, gpa, size, 0) for slot, (name, _, gpa, size) in enumerate(regions)]
    return Layout(
        f"alex-kernbench-{order}",
        "Alex's 10G kernbench guest",
        assign_host_addresses(specs, ALEX_HOST),
    )


# -- the engine's counts --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Counts:
    ram_looks: dict[str, float]  # kernbench: looks per RAM lookup (base, reorder, wbtree)
    miss_looks: dict[str, float]  # netperf: looks per miss (2011 array, wbtree)
    lookup_looks: dict[str, float]  # Xiao: looks per lookup before and after his series
    vtlb_hit: float  # the vtlb's share of emulation walks served


def ram_looks(order: str, strategy: str, lookups: int, seed: int = RUN_SEED) -> float:
    vm = build_vm(kernbench_layout(order), strategy, last_used_slot=False, vcpu_cache=False)
    structure = vm.memslot_set(0).lookup
    stream = Workload(vm.memslots(), "kernbench", seed=seed, nr_vcpus=4)
    total = 0
    for access in stream.take(lookups):
        total += structure.visits(access.gfn, vm.gfn_to_memslot(access.gfn))
    return total / lookups


def miss_looks(strategy: str, seed: int = RUN_SEED) -> float:
    vm = build_vm(alex_layout(), strategy, last_used_slot=False, vcpu_cache=False)
    structure = vm.memslot_set(0).lookup
    gfns = Workload(vm.memslots(), "mixed", seed=seed).mmio
    return sum(structure.visits(g, None) for g in gfns) / len(gfns)


def xiao_looks(lookups: int, seed: int = RUN_SEED) -> dict[str, float]:
    """Looks per lookup on 2011's pc-4g with its private slots, the general `mixed`
    stream: the unsorted array (before), binary search behind the VM-wide last-used-slot
    cache (after PATCH 1-6; the cache check counts as one look).  No MMIO spte cache:
    it came months later."""
    vm = build_vm(alex_layout(), "linear", last_used_slot=False, vcpu_cache=False)
    slots: MemslotSet = vm.memslot_set(0)
    linear, binary = slots.structure("linear"), slots.structure("binary")
    stream = Workload(vm.memslots(), "mixed", seed=seed)
    before = after = 0
    cached = None
    for access in stream.take(lookups):
        slot = vm.gfn_to_memslot(access.gfn)
        before += linear.visits(access.gfn, slot)
        after += 1
        if cached is not None and cached.base_gfn <= access.gfn < cached.end_gfn:
            continue
        after += binary.visits(access.gfn, slot)
        if slot is not None:
            cached = slot
    return {"before": before / lookups, "after": after / lookups}


def vtlb_hit_ratio(accesses: int, seed: int = RUN_SEED) -> float:
    """Share of guest walks the vtlb saves when every walk comes from emulation: the
    shadow session's `netperf` (emulated device accesses) on 2011's shadow MMU."""
    from ..layouts import preset

    session = ShadowSession(
        preset("pc-4g"),
        workload="netperf",
        spte_config="2011-shadow-no-mmio-cache",
        vtlb=True,
        seed=seed,
    )
    session.run(accesses)
    saved = session.mmu.vtlbs.walks_saved if session.mmu.vtlbs else 0
    return saved / session.guest_walks if session.guest_walks else 0.0


def count(sizes: dict[str, int], seed: int = RUN_SEED) -> Counts:
    n = sizes["lookups"]
    return Counts(
        ram_looks={
            "base": ram_looks("base", "linear", n, seed),
            "reorder": ram_looks("reorder", "linear", n, seed),
            "wbtree": ram_looks("base", "wbtree", n, seed),
        },
        miss_looks={"array": miss_looks("linear", seed), "wbtree": miss_looks("wbtree", seed)},
        lookup_looks=xiao_looks(n, seed),
        vtlb_hit=vtlb_hit_ratio(sizes["accesses"], seed),
    )


def mean_counts(runs: Sequence[Counts]) -> Counts:
    """Each count averaged over the seeds' runs."""

    def avg(pick: Callable[[Counts], dict[str, float]]) -> dict[str, float]:
        return {k: statistics.fmean(pick(c)[k] for c in runs) for k in pick(runs[0])}

    return Counts(
        ram_looks=avg(lambda c: c.ram_looks),
        miss_looks=avg(lambda c: c.miss_looks),
        lookup_looks=avg(lambda c: c.lookup_looks),
        vtlb_hit=statistics.fmean(c.vtlb_hit for c in runs),
    )


# -- the time models ------------------------------------------------------------------


def kernbench_s(c: Counts, variant: str, v: Values) -> float:
    saved_looks = c.ram_looks["base"] - c.ram_looks[variant]
    per_s = v["KERNBENCH_FAULTS_PER_VCPU_S"] * v["SHADOW_FAULT_LOOKUPS"]
    share = per_s * saved_looks * v["MEMSLOT_VISIT_NS"] * 1e-9  # of each vCPU's time
    return KERNBENCH_BASE_S * (1 - share)


def netperf_gain(c: Counts, v: Values) -> float:
    saved_looks = c.miss_looks["array"] - c.miss_looks["wbtree"]
    saved_ns = v["NETPERF_MMIO_EXITS"] * v["MMIO_MISS_LOOKUPS"] * saved_looks
    saved_ns *= v["MEMSLOT_VISIT_NS"]
    transaction = v["NETPERF_TRANSACTION_US"] * 1e3
    return transaction / (transaction - saved_ns)


def cost_ratios(c: Counts, v: Values) -> dict[str, float]:
    """What each profiled function costs after the series, against before."""
    call, visit = v["MEMSLOT_CALL_NS"], v["MEMSLOT_VISIT_NS"]
    before = call + c.lookup_looks["before"] * visit
    after = call + c.lookup_looks["after"] * visit
    return {
        "gfn_to_memslot": after / before,
        "paging64_walk_addr_generic": 1 - v["EMULATED_WALK_SHARE"] * c.vtlb_hit,
    }


def profile_share(c: Counts, function: str, v: Values) -> float:
    ratios = cost_ratios(c, v)
    saved = sum(PROFILE[f][0] * (1 - r) for f, r in ratios.items())
    return PROFILE[function][0] * ratios[function] / (1 - saved / 100)


def unixbench(c: Counts, column: int, step: int, v: Values) -> float:
    """The score after `step` (1: the vtlb, 2: the sorted memslots as well), from the
    thread's score before the series (the input) through the model's own steps; step 2's
    share of gfn_to_memslot is renormalised by step 1's saving."""
    ratios = cost_ratios(c, v)
    walk_saved = (
        PROFILE["paging64_walk_addr_generic"][0] / 100 * (1 - ratios["paging64_walk_addr_generic"])
    )
    after_vtlb = UNIXBENCH[column][0] / (1 - walk_saved)
    if step == 1:
        return after_vtlb
    share = PROFILE["gfn_to_memslot"][0] / 100 / (1 - walk_saved)
    return after_vtlb / (1 - share * (1 - ratios["gfn_to_memslot"]))


# -- the table --------------------------------------------------------------------------


ModelFn = Callable[[Counts, Values], float]


@dataclass(frozen=True, slots=True)
class Quantity:
    """One predicted row: its label, unit, the thread's number, the input it changes
    from, the model, the costs it charges and the thread's spread (a)."""

    label: str
    unit: str
    measured: float
    base: float
    model: ModelFn
    costs: tuple[str, ...]
    thread_noise: float = 0.0
    noise_source: str = ""


def quantities() -> tuple[list[tuple[str, str, float]], list[Quantity]]:
    """(the input rows: label, unit, number) and the predicted quantities."""
    inputs = [("kernbench elapsed, base (unsorted array)", "s", KERNBENCH_BASE_S)]
    predicted = [
        Quantity(
            f"kernbench elapsed, {variant}",
            "s",
            KERNBENCH_THREAD_S[variant],
            KERNBENCH_BASE_S,
            partial(_kernbench, variant),
            KERNBENCH,
            KERNBENCH_SIGMA_S["base"] + KERNBENCH_SIGMA_S[variant],
            thread_spread(
                THREAD,
                f"σ {KERNBENCH_SIGMA_S['base']} s (base) + {KERNBENCH_SIGMA_S[variant]} s"
                f" ({variant}), 10 runs each",
            ),
        )
        for variant in ("reorder", "wbtree")
    ]
    predicted.append(
        Quantity(
            "netperf TCP_RR transactions/s, wbtree / array",
            "ratio",
            NETPERF_GAIN,
            1.0,
            netperf_gain,
            NETPERF,
            noise_source=no_thread_spread(THREAD, "one netperf gain, 3 %"),
        )
    )
    for function, (before, after) in PROFILE.items():
        inputs.append((f"perf share of {function}, before", "% of cycles", before))
        predicted.append(
            Quantity(
                f"perf share of {function}, after",
                "% of cycles",
                after,
                before,
                partial(_share, function),
                PROFILE_COSTS,
                noise_source=no_thread_spread(THREAD, "one perf profile each"),
            )
        )
    for column, scores in enumerate(UNIXBENCH):
        inputs.append((f"Unixbench test {column + 1}, before", "score", scores[0]))
    for step, label in ((1, "after the vtlb"), (2, "after sorted memslots")):
        for column, scores in enumerate(UNIXBENCH):
            predicted.append(
                Quantity(
                    f"Unixbench test {column + 1}, {label}",
                    "score",
                    scores[step],
                    scores[0],
                    partial(_unixbench, column, step),
                    PROFILE_COSTS,
                    noise_source=no_thread_spread(THREAD, "one score per fsdisk test"),
                )
            )
    return inputs, predicted


def _kernbench(variant: str, c: Counts, v: Values) -> float:
    return kernbench_s(c, variant, v)


def _share(function: str, c: Counts, v: Values) -> float:
    return profile_share(c, function, v)


def _unixbench(column: int, step: int, c: Counts, v: Values) -> float:
    return unixbench(c, column, step, v)


def band(q: Quantity, mean: Counts, per_seed: Sequence[Counts]) -> Band:
    central = values_at(q.costs, "central")
    seeds = [q.model(c, central) for c in per_seed]
    sources = (q.noise_source, seeds_source(seeds, f" {q.unit}" if q.unit == "s" else ""))
    return band_of(
        partial(q.model, mean),
        q.costs,
        q.base,
        seeds=seeds,
        thread_noise=q.thread_noise,
        sources=sources,
    )


def rows_of(mean: Counts, per_seed: Sequence[Counts]) -> tuple[list[list[Cell]], list[int]]:
    """The rows (inputs first, then the predictions) and each row's places."""
    inputs, predicted = quantities()
    rows: list[list[Cell]] = []
    places: list[int] = []
    for label, unit, number in inputs:
        rows.append([label, unit, INPUT, number, *NO_BAND])
        places.append(PLACES[unit])
    for q in predicted:
        places.append(PLACES[q.unit])
        cells = band(q, mean, per_seed).cells(q.measured, PLACES[q.unit])
        rows.append([q.label, q.unit, PREDICTED, q.measured, *cells])
    return rows, places


def judge(c: Counts, rows: list[list[Cell]]) -> dict[str, bool]:
    """The directions the thread states, from the engine's counts and central times."""
    at = {name: COLUMNS.index(name) for name in COLUMNS}
    central = {str(r[at["quantity"]]): r[at["central"]] for r in rows}

    def less(a: str, b: float) -> bool:
        value = central[a]
        return isinstance(value, int | float) and value < b

    return {
        "wbtree_fewer_ram_looks": c.ram_looks["wbtree"] < c.ram_looks["base"],
        "reorder_at_least_as_good_as_wbtree": c.ram_looks["reorder"] <= c.ram_looks["wbtree"],
        "wbtree_misses_6_7_against_32": c.miss_looks["wbtree"] <= 7 < 32 <= c.miss_looks["array"],
        "kernbench_faster": less("kernbench elapsed, wbtree", KERNBENCH_BASE_S),
        "profile_shares_drop": all(
            less(f"perf share of {f}, after", before) for f, (before, _) in PROFILE.items()
        ),
    }


def _note(c: Counts, rows: list[list[Cell]], quick: bool) -> str:
    at = {name: COLUMNS.index(name) for name in COLUMNS}
    looks = c.ram_looks
    parts = [
        f"Engine counts: kernbench looks per RAM lookup base {looks['base']:.2f}, reorder "
        f"{looks['reorder']:.2f}, wbtree {looks['wbtree']:.2f}; per miss on 2011's array "
        f"{c.miss_looks['array']:.1f}, wbtree {c.miss_looks['wbtree']:.1f}; Xiao's lookups "
        f"{c.lookup_looks['before']:.2f} looks before, {c.lookup_looks['after']:.2f} after; "
        f"the vtlb serves {c.vtlb_hit:.1%} of emulation walks.",
    ]
    for row in rows:
        if row[at["role"]] != PREDICTED:
            continue
        parts.append(
            f"{row[at['quantity']]}: model {row[at['central']]} [{row[at['low']]}–"
            f"{row[at['high']]}], thread {row[at['thread']]}, error {row[at['error_pct']]:+} % "
            f"on the change: {row[at['verdict']]}."
        )
    parts.append(
        "The Unixbench gains are several times what the profiled functions' own shares "
        "can save: a score moves at most by the share of cycles a patch removes, so the "
        "rest of the thread's gain came from elsewhere (or from run-to-run spread)."
        if _unixbench_above(rows)
        else "The Unixbench gains stay within what the profiled shares can save."
    )
    parts.append(
        "Alex's kernbench runs differ by 1-2 stdevs (0.19-0.23 s), Alex Williamson: \"the "
        'standard deviation suggests the runs are mostly within the noise of each other".'
    )
    if quick:
        parts.append(f"--quick: {QUICK['lookups']} lookups a count, {QUICK['accesses']} accesses.")
    return " ".join(parts)


def _unixbench_above(rows: list[list[Cell]]) -> bool:
    at = {name: COLUMNS.index(name) for name in COLUMNS}
    unix = [
        r
        for r in rows
        if str(r[at["quantity"]]).startswith("Unixbench") and r[at["role"]] == PREDICTED
    ]
    return all(
        isinstance(r[at["high"]], int | float)
        and isinstance(r[at["thread"]], int | float)
        and r[at["thread"]] > r[at["high"]]  # type: ignore[operator]
        for r in unix
    )


def shadow_2011_table(quick: bool = False) -> ClaimTable:
    per_seed = [count(QUICK if quick else FULL, seed) for seed in SEEDS]
    counts = mean_counts(per_seed)
    rows, places = rows_of(counts, per_seed)
    return ClaimTable(
        name="shadow_2011",
        columns=list(COLUMNS),
        rows=rows,
        thread=THREAD,
        claim=CLAIM,
        checks=judge(counts, rows),
        note=_note(counts, rows, quick),
        decimals={
            **{c: list(places) for c in ("thread", "low", "central", "high")},
            "noise": [p + 1 for p in places],
        },
        extra={
            "seeds": list(SEEDS),
            "counts": {
                "ram_looks": counts.ram_looks,
                "miss_looks": counts.miss_looks,
                "lookup_looks": counts.lookup_looks,
                "vtlb_hit": round(counts.vtlb_hit, 4),
            },
        },
    )
