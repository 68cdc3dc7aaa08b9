"""The `tlb_flush` bench table: the model's ebizzy score per protocol beside the PV-flush
thread's, each with its band (engine/claims/band.py).

The PV-flush thread (lkml, 2012), Nikunj A Dadhania, 20 Feb 2012: "ebizzy score -
Records/sec", 8CPU Intel Xeon, HT disabled, 64 bit VM (8vcpu, 1G RAM), non-PLE hardware:

    |     | baseline | gang    | pv_flush |
    | 2VM | 3979.50  | 8818.00 | 11002.50 |
    | 4VM | 1817.50  | 6236.50 | 6196.75  |
    | 8VM |  922.12  | 4043.00 | 4001.38  |

One row per quantity: the nine cells (records/s per VM) and the ratios pv_flush/baseline
and gang/baseline on 2, 4 and 8 VMs, plus the model's 1-VM and flush_on_enter rows (no
number in the thread).  Each is simulated three times, with engine/costs.py's estimates
at low, central and high (`TlbConfig.level`); the band is the smallest and largest of the
three.  The sub-claims judged, all from the thread: both pv_flush and gang beat the
baseline under overcommit (the table's point, "Very nice results!"), the
pv_flush/baseline gap grows with overcommit (2.8×, 3.4×, 4.3×), and pv_flush beats gang
on 2 VMs ("massively faster on 2 VMs than even the gang scheduling hack").  Peter
Zijlstra's flush-on-enter was not measured in the thread: shown, not judged.
"""

from __future__ import annotations

import itertools

from ..costs import LEVELS
from ..tlbflush.config import NS_PER_MS, NS_PER_S, SCHED_LATENCY_NS, VCPUS_PER_VM, TlbConfig
from ..tlbflush.metrics import TlbMetrics
from ..tlbflush.protocols import PROTOCOL_NAMES
from ..tlbflush.sim import TlbSim
from .band import BAND_COLUMNS, NO_BAND, Band, band_of_levels
from .table import Cell, ClaimTable

THREAD = "pv-flush"
THREAD_TABLE: dict[int, tuple[float, float, float]] = {  # baseline, gang, pv_flush
    2: (3979.50, 8818.00, 11002.50),
    4: (1817.50, 6236.50, 6196.75),
    8: (922.12, 4043.00, 4001.38),
}
THREAD_PROTOCOLS = ("baseline", "gang", "pv_flush")
RATIOS = (("pv_flush", "baseline"), ("gang", "baseline"))
COLUMNS = ["vms", "quantity", "unit", "thread", *BAND_COLUMNS]
ROWS_VMS = (1, 2, 4, 8)
OVER = tuple(v for v in ROWS_VMS if v > 1)
RATIO_GOAL = 1.5  # central ratios within 1.5× of the thread's
FULL_NS = 1000 * NS_PER_MS
QUICK_NS = 150 * NS_PER_MS
RUN_SEED = 1  # the random seed of every run
CLAIM = (
    "Under overcommit (2, 4 and 8 VMs of 8 vCPUs on 8 pCPUs, ebizzy) the paravirt flush "
    "(spin, then halt; the last acknowledger kicks) and gang scheduling both beat the "
    "IPI-and-spin baseline, by 2.8×, 3.4× and 4.3× for pv_flush (the thread: 3979.50 → "
    "11002.50 records/s on 2 VMs)"
)
MISSING_MECHANISM = (
    "Missing mechanism: the thread's baseline loses about the same pCPU time per record "
    "whatever the overcommit, as if only a small share of records waited for a preempted "
    "vCPU; in the model every ebizzy record ends in a flush of all 7 other vCPUs (glibc "
    "2.15 trims a thread's arena on every free; MADV_DONTNEED reaches flush_tlb_others), "
    "and no vCPU ever leaves the mm's cpumask, because ebizzy's threads never block and "
    "so no vCPU goes idle (lazy TLB) — what keeps the real baseline's waits short is not "
    "modelled."
)

Runs = dict[str, dict[int, dict[str, TlbMetrics]]]  # level -> vms -> protocol -> metrics


def measure(
    vms: int, protocol: str, duration_ns: int, seed: int = RUN_SEED, level: str = "central"
) -> TlbMetrics:
    """One run: its metrics, whose `records_per_s` is ebizzy's score per VM."""
    config = TlbConfig(vms=vms, protocol=protocol, seed=seed, duration_ns=duration_ns)
    sim = TlbSim(config if level == "central" else _at_level(config, level))
    sim.run()
    return sim.metrics()


def _at_level(config: TlbConfig, level: str) -> TlbConfig:
    return TlbConfig(
        vms=config.vms,
        protocol=config.protocol,
        seed=config.seed,
        duration_ns=config.duration_ns,
        level=level,
    )


def run_all(duration: int) -> Runs:
    """Every protocol on every VM count at central; at low and high where the thread has a
    number to compare (the overcommitted rows)."""
    runs: Runs = {}
    for level in LEVELS:
        counts = ROWS_VMS if level == "central" else OVER
        runs[level] = {
            vms: {name: measure(vms, name, duration, level=level) for name in PROTOCOL_NAMES}
            for vms in counts
        }
    return runs


def score(runs: Runs, level: str, vms: int, protocol: str) -> float:
    return runs[level][vms][protocol].records_per_s


def ratio(runs: Runs, level: str, vms: int, top: str, bottom: str) -> float:
    low = score(runs, level, vms, bottom)
    return score(runs, level, vms, top) / low if low else float("inf")


def thread_ratio(vms: int, top: str, bottom: str) -> float:
    row = dict(zip(THREAD_PROTOCOLS, THREAD_TABLE[vms], strict=True))
    return row[top] / row[bottom]


def rows_of(runs: Runs) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for vms in ROWS_VMS:
        for name in PROTOCOL_NAMES:
            measured = dict(zip(THREAD_PROTOCOLS, THREAD_TABLE.get(vms, ()), strict=False)).get(
                name
            )
            if vms in OVER:
                results = {lv: score(runs, lv, vms, name) for lv in LEVELS}
                cells = band_of_levels(results).cells(measured, 5)
            else:
                central = round(score(runs, "central", vms, name), 1)
                cells = [None, central, None, None, None, None]
            rows.append([vms, name, "records/s per VM", measured, *cells])
    for top, bottom in RATIOS:
        for vms in OVER:
            results = {lv: ratio(runs, lv, vms, top, bottom) for lv in LEVELS}
            band = band_of_levels(results, base=1.0)
            measured = thread_ratio(vms, top, bottom)
            rows.append(
                [vms, f"{top}/{bottom}", "ratio", round(measured, 3), *band.cells(measured, 4)]
            )
    return rows


def _central(runs: Runs) -> dict[int, dict[str, float]]:
    return {
        vms: {name: m.records_per_s for name, m in by_name.items()}
        for vms, by_name in runs["central"].items()
    }


def judge(runs: Runs) -> dict[str, bool]:
    model = _central(runs)
    gaps = [model[v]["pv_flush"] / model[v]["baseline"] for v in OVER]
    return {
        "pv_flush_beats_baseline": all(model[v]["pv_flush"] > model[v]["baseline"] for v in OVER),
        "gang_beats_baseline": all(model[v]["gang"] > model[v]["baseline"] for v in OVER),
        "pv_gap_grows_with_overcommit": all(a < b for a, b in itertools.pairwise(gaps)),
        "pv_flush_beats_gang_on_2_vms": model[2]["pv_flush"] > model[2]["gang"],
    }


def observe(runs: Runs) -> dict[str, bool]:
    """Beyond the thread's measurements (not judged)."""
    model = _central(runs)
    gaps = {v: model[v]["pv_flush"] / model[v]["baseline"] for v in OVER}
    return {
        "flush_on_enter_at_least_pv_flush": all(
            model[v]["flush_on_enter"] >= model[v]["pv_flush"] for v in OVER
        ),
        "pv_ratios_within_1_5x": all(
            1 / RATIO_GOAL <= gaps[v] / thread_ratio(v, "pv_flush", "baseline") <= RATIO_GOAL
            for v in OVER
        ),
    }


def tlb_flush_table(quick: bool = False) -> ClaimTable:
    runs = run_all(QUICK_NS if quick else FULL_NS)
    checks = judge(runs)
    seen = observe(runs)
    return ClaimTable(
        name="tlb_flush",
        columns=list(COLUMNS),
        rows=rows_of(runs),
        thread=THREAD,
        claim=CLAIM,
        checks=checks,
        note=_note(runs, checks, seen, quick),
        extra={
            "observations": seen,
            "units": "records/s per VM (ebizzy's score), ratios",
            "missing_mechanism": None if seen["pv_ratios_within_1_5x"] else MISSING_MECHANISM,
            "time_costs": [
                "EXIT_NS",
                "CONTEXT_SWITCH_NS",
                "HANDLER_EXTRA_NS",
                "FLUSH_ON_ENTRY_NS",
                "PAUSE_LOOP_NS",
                "EBIZZY_RECORD_NS",
            ],
        },
    )


def _note(runs: Runs, checks: dict[str, bool], seen: dict[str, bool], quick: bool) -> str:
    model = _central(runs)
    per_period = VCPUS_PER_VM * NS_PER_S / SCHED_LATENCY_NS
    ours = ", ".join(f"{model[v]['pv_flush'] / model[v]['baseline']:.1f}×" for v in OVER)
    theirs = ", ".join(f"{thread_ratio(v, 'pv_flush', 'baseline'):.1f}×" for v in OVER)
    base = ", ".join(f"{model[v]['baseline']:.0f}" for v in OVER)
    verdict = {True: "holds", False: "NOT reproduced"}
    pv2 = runs["central"][2]["pv_flush"]
    parts = [
        f"pv_flush/baseline (central): model {ours}, thread {theirs}; the gap growing with "
        f"overcommit: {verdict[checks['pv_gap_grows_with_overcommit']]}; within "
        f"{RATIO_GOAL}× of the thread's: {'yes' if seen['pv_ratios_within_1_5x'] else 'no'}.",
        f"The model's baseline ({base} records/s per VM on {', '.join(map(str, OVER))} VMs; "
        f"one record per vCPU per 24 ms CFS period would be {per_period:.0f}) collapses "
        "because a flush almost always waits for a preempted target while its sender spins "
        "out its slice; the thread's baseline stays far higher and halves with each doubling "
        "of VMs (pCPU slice phases are drawn at random here, and vCPUs are pinned).",
        f"{_lost_per_record(runs)}",
        f"pv_flush beats gang on 2 VMs (Ingo Molnar): "
        f"{verdict[checks['pv_flush_beats_gang_on_2_vms']]} — gang costs nothing here but "
        "its strict slots, since ebizzy's vCPUs never idle.",
        "Shown, not judged (not measured in the thread): flush_on_enter at least as good as "
        f"pv_flush (Peter Zijlstra): {_yes(seen['flush_on_enter_at_least_pv_flush'])}.",
        f"On 2 VMs the patch's halt() returned before every target acknowledged in "
        f"{pv2.early_returns} of {pv2.halts} halts (it returns on any interrupt and the "
        "patch does not re-check the mask).",
        "Each cell is simulated with engine/costs.py's estimates at low, central and high "
        "(the band); none is fitted to the thread.",
    ]
    if not seen["pv_ratios_within_1_5x"]:
        parts.append(MISSING_MECHANISM)
    if quick:
        parts.append(f"--quick: {QUICK_NS // NS_PER_MS} ms simulated per run.")
    return " ".join(parts)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _lost_per_record(runs: Runs) -> str:
    """What the thread's own numbers say the baseline loses per record, beside the
    model."""
    parts = []
    for vms in OVER:
        thread_base, _, thread_pv = THREAD_TABLE[vms]
        share = VCPUS_PER_VM / vms  # pCPUs' worth of time each VM gets
        lost_thread = share / thread_base - share / thread_pv
        model = _central(runs)[vms]
        lost_model = share / model["baseline"] - share / model["pv_flush"]
        parts.append(f"{vms} VMs {lost_thread * 1e3:.2f} ms (model {lost_model * 1e3:.1f})")
    return (
        "pCPU time the baseline loses per record against pv_flush, from the thread's scores: "
        + ", ".join(parts)
        + "."
    )


def band_for(runs: Runs, vms: int, protocol: str) -> Band:
    """The band of one cell (for the TLB screen and tests)."""
    return band_of_levels({lv: score(runs, lv, vms, protocol) for lv in LEVELS})


__all__ = ["NO_BAND", "tlb_flush_table"]
