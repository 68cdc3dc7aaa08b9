"""The named reports of `mmuscope query DIR --report NAME`: SQL over the `events` view
(and `memslots`), each a question a KVM developer asks of a fleet's traces.

Each report is one SQL text, so that the same question can be asked of the same files
in Spark (README.md shows one); the tests check each against numbers computed from the
same events without SQL.  Events of one source are ordered by `ts`, then `seq`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Report:
    name: str
    title: str
    sql: str


KVM_STAT = Report(
    "kvm-stat",
    "events per tracepoint per source, as kvm_stat counts them (docs/kvm.md §10): total, "
    "share of the source's events, and the average rate over the source's time span",
    """
SELECT source, system, event,
       count(*) AS total,
       round(100.0 * count(*) / sum(count(*)) OVER (PARTITION BY source), 2) AS pct_total,
       round(count(*) * 1e9 / nullif(max(max(ts)) OVER (PARTITION BY source)
                                      - min(min(ts)) OVER (PARTITION BY source), 0), 1)
           AS avg_per_s
FROM events
GROUP BY source, system, event
ORDER BY source, total DESC, event
""",
)

FAULTS_PER_MEMSLOT = Report(
    "faults-per-memslot",
    "faults per memslot: each kvm_mmu_spte_requested (the gfn a fault maps, under every "
    "MMU) placed in its slot of address space 0; slot NULL in a source without memslots "
    "(replay --layout or --mtree gives them; simulate and kvm write their own)",
    """
SELECT f.source, m.slot, m.name, m.base_gfn, m.npages,
       count(*) AS faults, count(DISTINCT f.gfn) AS gfns
FROM events AS f
LEFT JOIN memslots AS m
  ON m.source = f.source AND m.as_id = 0
 AND f.gfn >= m.base_gfn AND f.gfn < m.base_gfn + m.npages
WHERE f.event = 'kvm_mmu_spte_requested'
GROUP BY ALL
ORDER BY f.source, faults DESC, m.slot
""",
)

ZAPS_PER_GENERATION = Report(
    "zaps-per-generation",
    "zaps and obsolete pages per mmu_valid_gen: for each kvm_mmu_zap_all_fast (traced "
    "before the flip, so it names the generation it retires; zap 0 is before the first), "
    "the pages used then, and the shadow pages zapped, created and zapped obsolete (of the "
    "retired generation) until the next one (docs/kvm.md §4.4)",
    """
WITH marked AS (
  SELECT source, event, mmu_valid_gen, fields,
         count(*) FILTER (WHERE event = 'kvm_mmu_zap_all_fast')
           OVER (PARTITION BY source ORDER BY ts, seq ROWS UNBOUNDED PRECEDING) AS zap
  FROM events
  WHERE event IN ('kvm_mmu_zap_all_fast', 'kvm_mmu_prepare_zap_page', 'kvm_mmu_get_page')
), zaps AS (
  SELECT source, zap, mmu_valid_gen AS retired_gen,
         TRY_CAST(fields['mmu_used_pages'] AS UBIGINT) AS used_pages
  FROM marked WHERE event = 'kvm_mmu_zap_all_fast'
)
SELECT m.source, m.zap, z.retired_gen, z.used_pages,
       count(*) FILTER (WHERE m.event = 'kvm_mmu_prepare_zap_page') AS zapped,
       count(*) FILTER (WHERE m.event = 'kvm_mmu_prepare_zap_page'
                          AND m.mmu_valid_gen = z.retired_gen) AS obsolete,
       count(*) FILTER (WHERE m.event = 'kvm_mmu_get_page'
                          AND m.fields['created'] = 'true') AS created
FROM marked AS m LEFT JOIN zaps AS z USING (source, zap)
GROUP BY ALL
ORDER BY m.source, m.zap
""",
)

FAULT_LATENCY = Report(
    "fault-latency",
    "fault -> set_spte latency per source, in ns: each kvm_page_fault and the "
    "kvm_mmu_set_spte that follows it on the same task and CPU before its next fault "
    "(faults fixed without one, MMIO or spurious, are not mapped); percentiles "
    "interpolated (quantile_cont)",
    """
WITH pairs AS (
  SELECT source, event, ts,
         lag(event) OVER w AS before, lag(ts) OVER w AS before_ts
  FROM events
  WHERE event IN ('kvm_page_fault', 'kvm_mmu_set_spte')
  WINDOW w AS (PARTITION BY source, pid, cpu ORDER BY ts, seq)
)
SELECT source,
       count(*) FILTER (WHERE event = 'kvm_page_fault') AS faults,
       count(*) FILTER (WHERE event = 'kvm_mmu_set_spte' AND before = 'kvm_page_fault')
           AS mapped,
       quantile_cont(ts - before_ts, 0.5) FILTER (WHERE event = 'kvm_mmu_set_spte'
                                                   AND before = 'kvm_page_fault') AS p50_ns,
       quantile_cont(ts - before_ts, 0.9) FILTER (WHERE event = 'kvm_mmu_set_spte'
                                                   AND before = 'kvm_page_fault') AS p90_ns,
       quantile_cont(ts - before_ts, 0.99) FILTER (WHERE event = 'kvm_mmu_set_spte'
                                                    AND before = 'kvm_page_fault') AS p99_ns,
       max(ts - before_ts) FILTER (WHERE event = 'kvm_mmu_set_spte'
                                     AND before = 'kvm_page_fault') AS max_ns
FROM pairs
GROUP BY source
ORDER BY source
""",
)

RMAP_CHAINS = Report(
    "rmap-chains",
    "the longest rmap chains, 10 per source: the gfns (and levels) mapped by the most "
    "distinct sptes (kvm_mmu_set_spte's sptep), the length each gfn's kvm_rmap_head "
    "reached at most (no tracepoint reports an rmap removal; the TDP MMU keeps none), "
    "docs/kvm.md §3",
    """
SELECT source, gfn, level, count(DISTINCT sptep) AS sptes, count(*) AS set_spte
FROM events
WHERE event = 'kvm_mmu_set_spte'
GROUP BY source, gfn, level
QUALIFY row_number() OVER (PARTITION BY source ORDER BY count(DISTINCT sptep) DESC,
                                                        gfn, level) <= 10
ORDER BY source, sptes DESC, gfn, level
""",
)

REPORTS = {
    r.name: r
    for r in (KVM_STAT, FAULTS_PER_MEMSLOT, ZAPS_PER_GENERATION, FAULT_LATENCY, RMAP_CHAINS)
}
