"""What the replay screen draws, computed from a `ReplayModel` (no drawing here): the
shadow pages by level, one table of TDP sptes as a grid of 512 gfns, the MMIO sptes and
the vCPUs."""

from __future__ import annotations

from dataclasses import dataclass

from .model import ReplayModel
from .records import NONE, MmioSpte, ReplayPage, TdpKey, VcpuCounts, gfns_per_spte

SPTES_PER_TABLE = 512


@dataclass(frozen=True, slots=True)
class LevelRow:
    level: int | None  # None: the trace did not say
    count: int  # pages (copies included)
    obsolete: int
    newest: tuple[ReplayPage, ...]  # the latest to appear, newest first


@dataclass(frozen=True, slots=True)
class GridCell:
    index: int  # 0..511 in the table
    gfn: int  # the first gfn the spte maps
    kind: str  # model.NONE, TABLE, LEAF, LARGE, MMIO


@dataclass(frozen=True, slots=True)
class SpteTable:
    as_id: int
    level: int
    base_gfn: int  # the table's first gfn
    cells: tuple[GridCell, ...]
    changed: int | None  # index of the last change, when it is in this table


def page_levels(model: ReplayModel, newest: int = 8) -> list[LevelRow]:
    """Per level (highest first, unknown last): how many pages, how many obsolete, and
    the `newest` latest to appear.  The counts are the model's own tallies; only the
    newest pages are looked for, from the newest on, until each level has its share."""
    count = model.level_copies
    latest: dict[int | None, list[ReplayPage]] = {level: [] for level in count}
    wanted = {level: min(newest, copies) for level, copies in count.items()}
    missing = sum(wanted.values())
    for page in reversed(model.pages.values()):  # newest first (dicts keep insertion order)
        if not missing:
            break
        shown = latest[page.level]
        if len(shown) < newest:
            shown.append(page)
            if len(shown) <= wanted[page.level]:
                missing -= 1
    order = sorted(count, key=lambda level: -1 if level is None else level, reverse=True)
    return [LevelRow(lv, count[lv], model.level_obsolete(lv), tuple(latest[lv])) for lv in order]


def spte_table(model: ReplayModel, key: TdpKey | None = None) -> SpteTable | None:
    """The 512 sptes of the table holding `key` (default: the last spte changed)."""
    key = key or model.last_tdp or next(reversed(model.tdp), None)
    if key is None:
        return None
    as_id, level, gfn = key
    span = gfns_per_spte(level)
    base = gfn - gfn % (span * SPTES_PER_TABLE)
    tdp = model.tdp
    cells = []
    for index in range(SPTES_PER_TABLE):
        first = base + index * span
        found = tdp.get((as_id, level, first))
        cells.append(GridCell(index, first, found.kind if found is not None else NONE))
    changed = (gfn - base) // span if key == model.last_tdp else None
    return SpteTable(as_id, level, base, tuple(cells), changed)


def mmio_rows(model: ReplayModel, count: int) -> list[tuple[MmioSpte, str]]:
    """The latest MMIO sptes cached, newest first, each with its state: ``valid``,
    ``stale`` (generation moved on) or ``obsolete`` (cached before the last fast zap)."""
    rows: list[tuple[MmioSpte, str]] = []
    for spte in reversed(model.mmio.values()):
        if len(rows) == count:
            break
        state = "valid"
        if model.mmio_is_obsolete(spte):
            state = "obsolete"
        elif model.mmio_is_stale(spte):
            state = "stale"
        rows.append((spte, state))
    return rows


def vcpu_rows(model: ReplayModel, count: int) -> list[tuple[int, VcpuCounts]]:
    """The busiest vCPUs (by exits + faults), at most `count`, by vCPU number."""
    busiest = sorted(model.vcpus.items(), key=lambda kv: -(kv[1].exits + kv[1].faults))
    return sorted(busiest[:count])
