"""`mmuscope bench` table `ppc_keys`: hash searches per fault with and without keys on
the POWER-keys thread's pfault program, beside the thread's "Without Fix" / "With Fix"
times.

The thread measured `time ./pfault` in the guest: real 8.438 s, user 0.855 s, sys 7.540 s
without the series, real 7.833 s, user 0.782 s, sys 7.038 s with it ("about half a
second out of 8", Benjamin Herrenschmidt; Aneesh had seen 2 s before another patch of
his).  Both times are of 2014 kernels (`kernel`); the model counts what the series
changes — hash searches and the HPTEs they examine — in the eras of those kernels
(`era`): `2014`, the handler the series changed (every NO_HPTE fault searches the hash
table; today's handler is the same but for its later MMIO HPTE cache, which only matters
for MMIO, which pfault does not do; docs/kvm.md §8), and `2014-keys`, the series.  The
time without the series is an input; the time with it is predicted: 8.438 s less each
avoided search at HPTEG_MISS_NS a group read and HPTE_SEARCH_CPU_NS (engine/costs.py,
docs/bench.md).  The direction judged is "keys reduce the searches".
"""

from __future__ import annotations

from ..ppc.faults import OUTCOMES
from ..ppc.keys import ERAS
from ..ppc.machine import FULL_MISS, PpcCounters
from ..ppc.pfault import ITERATIONS, PAGES, PASSES, PFAULT, PRESSURE, PfaultProgram, PfaultRun
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
)
from .table import Cell, ClaimTable

THREAD = "power-keys"
WITHOUT, WITH = "2014", "2014-keys"  # the thread's "Without Fix", then "With Fix"
THREAD_REAL_S = {WITHOUT: 8.438, WITH: 7.833}  # `time ./pfault`, real
THREAD_SYS_S = {WITHOUT: 7.540, WITH: 7.038}
ERA_ORDER = (WITHOUT, WITH)
THREAD_KERNEL = {WITHOUT: "2014, without the series", WITH: "2014, with the series"}
MODEL_KERNEL = THREAD_KERNEL
SCALED = (2048, 2)  # pages, iterations: the quick run, and the seeds' spread
COLUMNS = [
    "variant",
    "kernel",
    "era",
    "guest_keys",
    "faults",
    "no_hpte",
    "keyfaults",
    "hash_searches",
    "searches_per_fault",
    "hptes_examined",
    "hptes_per_fault",
    "hpteg_reads",
    "saved_searches",
    "role",
    "thread_time_s",
    "thread_sys_s",
    *BAND_COLUMNS,
]
TIME_COSTS = ("HPTEG_MISS_NS", "HPTE_SEARCH_CPU_NS")
CLAIM = (
    'Marking MMIO and host-swapped HPTEs with keys 31 and 30 lets KVM "forward a NO_HPTE '
    'fault directly to guest without doing the expensive hash pagetable lookup": pfault '
    "8.438 s -> 7.833 s"
)


def _programs(quick: bool) -> list[tuple[str, PfaultProgram]]:
    if quick:
        return [
            ("pfault (scaled)", PFAULT.scaled(*SCALED)),
            ("pfault+reclaim+mmio (model)", PRESSURE.scaled(*SCALED)),
        ]
    return [
        ("pfault", PFAULT),
        ("pfault+reclaim+mmio (model)", PRESSURE.scaled(PAGES // 20, ITERATIONS // 2)),
    ]


def _row(variant: str, era: str, program: PfaultProgram, c: PpcCounters) -> list[Cell]:
    timed = program.is_thread_program  # the thread's program, at full size or scaled
    return [
        variant,
        THREAD_KERNEL[era] if timed else MODEL_KERNEL[era],
        era,
        len(ERAS[era].guest_keys),
        c.faults,
        c.no_hpte,
        c.keyfaults,
        c.searches,
        round(c.searches / c.faults, 4) if c.faults else 0.0,
        c.hptes_examined,
        round(c.hptes_examined / c.faults, 3) if c.faults else 0.0,
        c.groups_read,
        c.saved_searches,
        (INPUT if era == WITHOUT else PREDICTED) if timed else PREDICTED,
        THREAD_REAL_S[era] if timed else None,
        THREAD_SYS_S[era] if timed else None,
    ]


def _classes(c: PpcCounters) -> tuple[int, ...]:
    return tuple(getattr(c, outcome) for outcome in OUTCOMES)


def saved_on_thread_program(
    program: PfaultProgram, without: PpcCounters, with_keys: PpcCounters
) -> tuple[float, float]:
    """(searches the keys avoid, HPTE groups each avoided search reads) on the thread's
    full program, counted per touch on `program` (the full one or a scaled run)."""
    touches = len(PASSES) * program.pages * program.iterations
    saved = with_keys.saved_searches / touches * len(PASSES) * PAGES * ITERATIONS
    groups = without.groups_read / without.searches if without.searches else 0.0
    return saved, groups


def pfault_s(saved: float, groups: float, values: Values) -> float:
    """`time ./pfault` with keys: the thread's run without them, less each avoided search
    — its HPTE groups read from memory and the compare loop (engine/costs.py)."""
    per_search = groups * values["HPTEG_MISS_NS"] + values["HPTE_SEARCH_CPU_NS"]
    return THREAD_REAL_S[WITHOUT] - saved * per_search * 1e-9


def seeds_saved() -> list[float]:
    """Searches the keys avoid per touch of the scaled program, seed by seed (the
    model's spread over seeds; the full program's counts scale from a touch)."""
    program = PFAULT.scaled(*SCALED)
    touches = len(PASSES) * program.pages * program.iterations
    return [PfaultRun(WITH, program, seed=seed).run().saved_searches / touches
            for seed in SEEDS]  # fmt: skip


def time_band(saved: float, groups: float, per_touch: list[float]) -> Band:
    touches = len(PASSES) * PAGES * ITERATIONS
    seconds = [pfault_s(p * touches, groups, _central()) for p in per_touch]
    sources = (
        no_thread_spread(THREAD, "one `time ./pfault` run each"),
        seeds_source(seconds, " s", "scaled program"),
    )
    return band_of(
        lambda v: pfault_s(saved, groups, v),
        TIME_COSTS,
        base=THREAD_REAL_S[WITHOUT],
        seeds=seconds,
        sources=sources,
    )


def _central() -> dict[str, float]:
    from .band import values_at

    return values_at(TIME_COSTS, "central")


def ppc_keys_table(quick: bool = False, seed: int = 1) -> ClaimTable:
    """Run pfault (and the model's variant) in both eras; one row each."""
    rows: list[list[Cell]] = []
    runs: dict[tuple[str, str], PpcCounters] = {}
    thread_program = _programs(quick)[0][1]
    for variant, program in _programs(quick):
        for era in ERA_ORDER:
            counters = PfaultRun(era, program, seed=seed).run()
            runs[variant, era] = counters
            rows.append(_row(variant, era, program, counters))
    thread_variant = _programs(quick)[0][0]
    without, with_keys = runs[thread_variant, WITHOUT], runs[thread_variant, WITH]
    band = time_band(*saved_on_thread_program(thread_program, without, with_keys), seeds_saved())
    at = COLUMNS.index
    for row in rows:
        timed = row[at("variant")] == thread_variant and row[at("era")] == WITH
        row += band.cells(THREAD_REAL_S[WITH], 3) if timed else NO_BAND
    fewer = with_keys.searches < without.searches
    fewer_hptes = with_keys.hptes_examined < without.hptes_examined
    same = all(
        _classes(runs[variant, WITHOUT]) == _classes(runs[variant, WITH])
        for variant, _ in _programs(quick)
    )
    checks = {
        "keys_avoid_searches": fewer,
        "keys_avoid_hptes": fewer_hptes,
        "same_classification": same,
    }
    extra = _beside_the_thread(_programs(quick)[0][1], without, with_keys)
    implied_ns = extra["implied_ns_per_avoided_search"]
    note = _note(quick, without, with_keys, same, implied_ns, fewer and fewer_hptes and same)
    note += " " + _time_note(band)
    out: dict[str, object] = {**extra, "quick": quick, "time_costs": list(TIME_COSTS)}
    places = {c: 3 for c in ("thread_time_s", "thread_sys_s", "low", "central", "high")}
    return ClaimTable(
        "ppc_keys", COLUMNS, rows, THREAD, CLAIM, checks, note, out, decimals={**places, "noise": 4}
    )


def _time_note(band: Band) -> str:
    measured = THREAD_REAL_S[WITH]
    error = band.error(measured)
    return (
        f"Time with keys: the thread's 8.438 s (input) less each avoided search at its HPTE "
        f"groups read from memory (HPTEG_MISS_NS) and the compare loop (HPTE_SEARCH_CPU_NS): "
        f"model {band.central:.3f} s [{band.lo:.3f}–{band.hi:.3f}], thread {measured:.3f} s, "
        f"error {100 * (error or 0):+.1f} % on the saving: {band.verdict(measured)}"
        + _beyond(band, measured)
    )


def _beyond(band: Band, measured: float) -> str:
    if measured < band.lo:
        return "; the thread saved more than the avoided searches' memory reads can explain."
    if measured > band.hi:
        return "; the thread saved less than the avoided searches cost in the model."
    return "."


def _beside_the_thread(
    program: PfaultProgram, without: PpcCounters, with_keys: PpcCounters
) -> dict[str, float | int | None]:
    """The thread's saving, and what it means per search the model says the keys avoid
    on the thread's full program (a run scaled down counts per touch, then scales up)."""
    touches = len(PASSES) * program.pages * program.iterations
    saved_per_touch = with_keys.saved_searches / touches
    thread_touches = len(PASSES) * PAGES * ITERATIONS
    saving = THREAD_REAL_S[WITHOUT] - THREAD_REAL_S[WITH]
    implied = saving / (saved_per_touch * thread_touches) * 1e9 if saved_per_touch else None
    return {
        "thread_saving_real_s": round(saving, 3),
        "thread_saving_sys_s": round(THREAD_SYS_S[WITHOUT] - THREAD_SYS_S[WITH], 3),
        "thread_program_faults_model": round(thread_touches * without.faults / touches),
        "implied_ns_per_avoided_search": round(implied, 1) if implied else None,
    }


def _note(
    quick: bool,
    without: PpcCounters,
    with_keys: PpcCounters,
    same: bool,
    implied_ns: float | None,
    reproduced: bool,
) -> str:
    scale = (
        "quick: pfault scaled to 2048 pages x 2 iterations; per-fault figures are those "
        "of the full program. "
        if quick
        else ""
    )
    verdict = "reproduced" if reproduced else "NOT reproduced"
    parts = [
        f"{scale}Direction {verdict}: with keys {with_keys.searches} hash searches "
        f"({with_keys.hptes_examined} HPTEs examined) against {without.searches} "
        f"({without.hptes_examined}) without, for {without.faults} faults.",
        f"Every pfault fault is the guest's own NO_HPTE miss, a full {FULL_MISS}-HPTE, "
        "2-group search without keys and no search with them; the HDSI exit itself stays.",
        "thread_time_s is the thread's measurement (kernel: which 2014 kernel it timed); "
        "low/central/high are the model's time.",
    ]
    if implied_ns is not None:
        parts.append(
            f"The thread's 0.605 s saving over the model's avoided searches is "
            f"{implied_ns:.0f} ns per avoided search, each a read of 2 HPTEGs (Aneesh walked "
            'the addresses linearly "to make sure we do take a cache miss for hash page '
            'table access").'
        )
    parts.append(
        "Model variant with host reclaim and an MMIO doorbell: key faults still search once "
        "to locate their HPTE; neither 2014 era has today's MMIO HPTE cache, which later "
        "skipped repeated MMIO searches (era today, the POWER screen)."
    )
    if not same:
        parts.append("The eras classified the faults differently: a model bug.")
    parts.append("The price: guests lose keys 30 and 31 (guest_keys 30 instead of 32).")
    return " ".join(parts)
