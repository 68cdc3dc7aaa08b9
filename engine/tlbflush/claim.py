"""The `tlb_flush` bench table: the model's ebizzy score per protocol beside seed 001's.

Seed 001 (Nikunj A Dadhania, 20 Feb 2012), "ebizzy score - Records/sec", 8CPU Intel
Xeon, HT disabled, 64 bit VM (8vcpu, 1G RAM), non-PLE hardware:

    |     | baseline | gang    | pv_flush |
    | 2VM | 3979.50  | 8818.00 | 11002.50 |
    | 4VM | 1817.50  | 6236.50 | 6196.75  |
    | 8VM |  922.12  | 4043.00 | 4001.38  |

The claim judged is the table's point, which Ingo Molnar answered with "Very nice
results!": under overcommit both pv_flush and gang scheduling beat the IPI-and-spin
baseline.  The thread's finer points are checked too and reported in `checks` and the
note, never folded into `reproduced`: the pv_flush/baseline gap growing with overcommit
(the seed's ratios 2.8×, 3.4×, 4.3×), pv_flush beating gang on 2 VMs ("massively faster
on 2 VMs than even the gang scheduling hack"), and Peter Zijlstra's flush-on-enter doing
at least as well as the patch.  The model's constants come from config.py and are not
fitted to these numbers.
"""

from __future__ import annotations

import itertools

from ..claims.table import Cell, ClaimTable
from .config import NS_PER_MS, NS_PER_S, SCHED_LATENCY_NS, VCPUS_PER_VM, TlbConfig
from .metrics import TlbMetrics
from .protocols import PROTOCOL_NAMES
from .sim import TlbSim

SEED_FILE = "001_8696687ca16d9e5e.txt"
SEED_TABLE: dict[int, tuple[float, float, float]] = {  # baseline, gang, pv_flush
    2: (3979.50, 8818.00, 11002.50),
    4: (1817.50, 6236.50, 6196.75),
    8: (922.12, 4043.00, 4001.38),
}
SEED_COLUMNS = ("seed_baseline", "seed_gang", "seed_pv_flush")
COLUMNS = ["vms", *PROTOCOL_NAMES, *SEED_COLUMNS]
ROWS_VMS = (1, 2, 4, 8)
FULL_NS = 1000 * NS_PER_MS
QUICK_NS = 150 * NS_PER_MS
SEED = 1
CLAIM = (
    "Under overcommit (2, 4 and 8 VMs of 8 vCPUs on 8 pCPUs, ebizzy) the paravirt flush "
    "(spin, then halt; the last acknowledger kicks) and gang scheduling both beat the "
    "IPI-and-spin baseline (seed: 3979.50 → 11002.50 records/s on 2 VMs)"
)


def measure(vms: int, protocol: str, duration_ns: int, seed: int = SEED) -> TlbMetrics:
    """One run: its metrics, whose `records_per_s` is ebizzy's score per VM."""
    sim = TlbSim(TlbConfig(vms=vms, protocol=protocol, seed=seed, duration_ns=duration_ns))
    sim.run()
    return sim.metrics()


def tlb_flush_table(quick: bool = False) -> ClaimTable:
    duration = QUICK_NS if quick else FULL_NS
    runs = {
        vms: {name: measure(vms, name, duration) for name in PROTOCOL_NAMES} for vms in ROWS_VMS
    }
    model = {
        vms: {name: m.records_per_s for name, m in by_name.items()} for vms, by_name in runs.items()
    }
    rows: list[list[Cell]] = []
    for vms in ROWS_VMS:
        seed_row: tuple[Cell, ...] = SEED_TABLE.get(vms, (None, None, None))
        rows.append([vms, *(round(model[vms][name], 1) for name in PROTOCOL_NAMES), *seed_row])
    checks = _checks(model)
    reproduced = checks["pv_flush_beats_baseline"] and checks["gang_beats_baseline"]
    return ClaimTable(
        name="tlb_flush",
        columns=list(COLUMNS),
        rows=rows,
        seed=SEED_FILE,
        claim=CLAIM,
        reproduced=reproduced,
        note=_note(model, checks, quick, runs[2]["pv_flush"]),
        extra={"checks": checks, "units": "records/s per VM (ebizzy's score)"},
    )


def _over(vms: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(v for v in vms if v > 1)


def _ratio(row: dict[str, float], top: str, bottom: str) -> float:
    return row[top] / row[bottom] if row[bottom] else float("inf")


def _checks(model: dict[int, dict[str, float]]) -> dict[str, bool]:
    over = _over(ROWS_VMS)
    gaps = [_ratio(model[v], "pv_flush", "baseline") for v in over]
    return {
        "pv_flush_beats_baseline": all(model[v]["pv_flush"] > model[v]["baseline"] for v in over),
        "gang_beats_baseline": all(model[v]["gang"] > model[v]["baseline"] for v in over),
        "pv_gap_grows_with_overcommit": all(a < b for a, b in itertools.pairwise(gaps)),
        "pv_flush_beats_gang_on_2_vms": model[2]["pv_flush"] > model[2]["gang"],
        "flush_on_enter_at_least_pv_flush": all(
            model[v]["flush_on_enter"] >= model[v]["pv_flush"] for v in over
        ),
    }


def _note(
    model: dict[int, dict[str, float]], checks: dict[str, bool], quick: bool, pv2: TlbMetrics
) -> str:
    over = _over(ROWS_VMS)
    per_period = VCPUS_PER_VM * NS_PER_S / SCHED_LATENCY_NS
    ours = ", ".join(f"{_ratio(model[v], 'pv_flush', 'baseline'):.1f}×" for v in over)
    seeds = ", ".join(f"{SEED_TABLE[v][2] / SEED_TABLE[v][0]:.1f}×" for v in over)
    base = ", ".join(f"{model[v]['baseline']:.0f}" for v in over)
    verdict = {True: "holds", False: "NOT reproduced"}
    parts = [
        f"pv_flush/baseline: model {ours}, seed {seeds}; the gap growing with overcommit: "
        f"{verdict[checks['pv_gap_grows_with_overcommit']]}.",
        f"The model's baseline ({base} records/s per VM on {', '.join(map(str, over))} VMs; "
        f"one record per vCPU per 24 ms CFS period would be {per_period:.0f}) collapses "
        "because a flush almost always waits for a preempted target while its sender spins "
        "out its slice; the seed's baseline stays far higher and halves with each doubling "
        "of VMs (pCPU slice phases are drawn at random here, and vCPUs are pinned).",
        f"pv_flush beats gang on 2 VMs (Ingo Molnar): "
        f"{verdict[checks['pv_flush_beats_gang_on_2_vms']]} — gang costs nothing here but "
        "its strict slots, since ebizzy's vCPUs never idle.",
        f"flush_on_enter at least as good as pv_flush (Peter Zijlstra): "
        f"{verdict[checks['flush_on_enter_at_least_pv_flush']]}.",
        f"On 2 VMs the patch's halt() returned before every target acknowledged in "
        f"{pv2.early_returns} of {pv2.halts} halts (it returns on any interrupt and the "
        "patch does not re-check the mask).",
        "Constants are not fitted to the seed (engine/tlbflush/config.py says where each "
        "comes from).",
    ]
    if quick:
        parts.append(f"--quick: {QUICK_NS // NS_PER_MS} ms simulated per run.")
    return " ".join(parts)
