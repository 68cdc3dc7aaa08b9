"""engine.replay: the MMU a trace implies (pages by key, fast-zap generations, MMIO sptes,
TDP sptes), events with byte offsets that restart exactly, the timeline index (bounded,
seeks equal to a straight replay), and the live window — against a simple reference
model and with random and recorded event sequences."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mmuscope.engine.events import Event
from mmuscope.engine.mmu.spte import SPTE_CONFIGS, make_mmio_spte
from mmuscope.engine.replay.cursor import TraceCursor
from mmuscope.engine.replay.dot import replay_to_dot
from mmuscope.engine.replay.filters import EventFilter, describe_ids, parse_ids
from mmuscope.engine.replay.index import TraceIndex, build_index
from mmuscope.engine.replay.live import LiveTimeline
from mmuscope.engine.replay.model import ReplayModel
from mmuscope.engine.replay.records import LARGE, LEAF, MMIO, NONE, TABLE, classify, page_key
from mmuscope.engine.replay.stream import EventAssembler, iter_positioned
from mmuscope.engine.replay.views import LevelRow, mmio_rows, page_levels, spte_table, vcpu_rows
from mmuscope.engine.trace.reader import iter_events

from tests.datafiles import FIXTURES, REALDATA

SAMPLE = FIXTURES / "trace-kvmmmu-sample.txt"
WRAPPED = FIXTURES / "trace-wrapped-mail.txt"
SP = "sp gen {gen} gfn {gfn:x} l{level} 8-byte q0 direct wux nxe ad root 0 sync"


def line(name: str, text: str, ts: float = 1.0, cpu: int = 0, pid: int = 42) -> str:
    return f"       CPU 0/KVM-{pid:<7} [{cpu:03d}] ...1. {ts:12.6f}: {name}: {text}\n"


def events_of(lines: list[str]) -> list[Event]:
    return [p.event for p in iter_positioned(io.BytesIO("".join(lines).encode()))]


def replay(events: list[Event], model: ReplayModel | None = None) -> ReplayModel:
    model = model or ReplayModel()
    for event in events:
        model.apply(event)
        model.audit()
    return model


def state(model: ReplayModel) -> tuple[object, ...]:
    snap = model.snapshot()
    return tuple(sorted(snap.tables.items())), tuple(sorted(snap.scalars.items(), key=str))


# -- spte classes ---------------------------------------------------------------------


def test_classify_tells_present_tables_leaves_mmio_and_nothing() -> None:
    assert classify(0, 1) == NONE
    assert classify(0x5A0, 1) == NONE  # REMOVED_SPTE: frozen, not present
    assert classify(0x6000001A2B3CB77, 1) == LEAF  # MMU-present (bit 11)
    assert classify(0x6000001A2B3CB77, 2) == TABLE
    assert classify(0x6000001A2B3CB77 | 1 << 7, 2) == LARGE
    for config in ("ept", "shadow"):
        assert classify(make_mmio_spte(SPTE_CONFIGS[config], 0xFEE01, 6, 0x3A), 1) == MMIO


# -- events with offsets --------------------------------------------------------------


def fixture_files() -> list[Path]:
    real = sorted(REALDATA.glob("*trace*.txt")) if REALDATA.is_dir() else []
    return [SAMPLE, WRAPPED, *real]


@pytest.mark.parametrize("path", fixture_files(), ids=lambda p: p.name)
def test_positioned_events_are_iter_events_and_restart_exactly(path: Path) -> None:
    with path.open(encoding="utf-8", errors="replace", newline="") as text:
        expected = list(iter_events(text))
    data = path.read_bytes()
    found = list(iter_positioned(io.BytesIO(data)))
    assert [p.event for p in found] == expected
    for k, start in enumerate(found):
        again = [p.event for p in iter_positioned(io.BytesIO(data), start.offset)]
        assert again == expected[k:], (path.name, k)
    replay(expected)  # recorded sequences: the model audits after every event


SAMPLE_LINES = [x + "\n" for x in SAMPLE.read_text().splitlines()]


@st.composite
def wrapped_traces(draw: st.DrawFn) -> list[str]:
    """Lines of the sample, some cut in two as a mail client would."""
    lines = draw(st.lists(st.sampled_from(SAMPLE_LINES), min_size=1, max_size=25))
    out = []
    for text in lines:
        body = text.rstrip("\n")
        if len(body) > 10 and draw(st.booleans()):
            cut = draw(st.integers(1, len(body) - 1))
            out += [body[:cut] + "\n", body[cut:] + "\n"]
        else:
            out.append(text)
    return out


@settings(max_examples=60, deadline=None)
@given(wrapped_traces())
def test_assembler_agrees_with_iter_events_and_restarts_anywhere(lines: list[str]) -> None:
    data = "".join(lines).encode()
    found = list(iter_positioned(io.BytesIO(data)))
    assert [p.event for p in found] == list(iter_events(lines))
    lazy = list(iter_positioned(io.BytesIO(data), fields_for=frozenset({"kvm_mmu_get_page"})))
    assert [(p.offset, p.event.name, p.event.ts) for p in lazy] == [
        (p.offset, p.event.name, p.event.ts) for p in found
    ]
    for k in range(0, len(found), 3):
        assert [p.event for p in iter_positioned(io.BytesIO(data), found[k].offset)] == [
            p.event for p in found[k:]
        ]


def test_assembler_fed_line_by_line_flushes_the_held_event() -> None:
    assembler = EventAssembler()
    assert assembler.feed(line("kvm_entry", "vcpu 1, rip 0x10"), 0) is None  # held back
    found = assembler.flush()
    assert found is not None and found.event.fields == {"vcpu_id": 1, "rip": 0x10}
    assert assembler.flush() is None


# -- the model against a reference ----------------------------------------------------

GFNS = st.integers(0, 3)
LEVELS = st.integers(1, 2)
KEYS = st.sampled_from([(0, 1, 0), (1, 1, 0), (0, 2, 1)])  # (gfn, level, gen): few pages
GET = st.builds(lambda k, new: ("get", *k, new), KEYS, st.booleans())
ZAP = st.builds(lambda k: ("zap", *k), KEYS)
OPS = st.one_of(
    GET,
    GET,
    GET,  # pages made and zapped more often than the rest, on few keys: copies happen
    ZAP,
    ZAP,
    st.tuples(st.just("flip")),
    st.tuples(st.just("mmio"), GFNS, st.integers(0, 7)),
    st.tuples(st.just("check"), st.integers(0, 7), st.booleans()),
    st.tuples(st.just("tdp"), GFNS, LEVELS, st.sampled_from([0, 0x5A0, 0xB77, 0x8B7, 0x6])),
    st.tuples(st.just("vcpu"), st.sampled_from(["kvm_exit", "kvm_entry", "kvm_page_fault"])),
    st.tuples(st.just("text"), st.sampled_from(["kvm_mmu_get_page", "mark_mmio_spte"])),
)


EXIT = (
    "vcpu 1 reason HLT rip 0x1 info1 0x0000000000000000 info2 0x0000000000000000"
    " intr_info 0x00000000 error_code 0x00000000"
)
VCPU_TEXT = {
    "kvm_exit": EXIT,
    "kvm_entry": "vcpu 1, rip 0x1",
    "kvm_page_fault": "vcpu 1 rip 0x1 address 0x0000000000001000 error_code 0x6",
}


def op_line(op: tuple[Any, ...], gen: int) -> tuple[str, str]:
    """(event name, printk text) of one operation."""
    kind = op[0]
    if kind == "get":
        _, gfn, level, page_gen, created = op
        text = SP.format(gen=page_gen, gfn=gfn, level=level)
        return "kvm_mmu_get_page", text + (" new" if created else " existing")
    if kind == "zap":
        _, gfn, level, page_gen = op
        return "kvm_mmu_prepare_zap_page", SP.format(gen=page_gen, gfn=gfn, level=level)
    if kind == "flip":
        return "kvm_mmu_zap_all_fast", f"kvm-mmu-valid-gen {gen} used_pages 2c"
    if kind == "mmio":
        return "mark_mmio_spte", f"sptep:0000000000001000 gfn {op[1]:x} access 6 gen {op[2]:x}"
    if kind == "check":
        return "check_mmio_spte", f"spte 6 kvm_gen {op[1]:x} spte-gen 0 valid {int(op[2])}"
    if kind == "tdp":
        _, gfn, level, spte = op
        text = f"as id 0 gfn {gfn:x} level {level} old_spte 0 new_spte {spte:x}"
        return "kvm_tdp_mmu_spte_changed", text
    if kind == "vcpu":
        return op[1], VCPU_TEXT[op[1]]
    return op[1], "sp gen 1 gfn"  # truncated: a text-only event


def make_event(op: tuple[Any, ...], gen: int, ts: float) -> Event:
    events = events_of([line(*op_line(op, gen), ts)])
    assert len(events) == 1, op
    return events[0]


def walked_levels(model: ReplayModel, newest: int) -> list[LevelRow]:
    """page_levels the plain way: every page walked (the model's tallies must agree)."""
    rows: dict[int | None, list[Any]] = {}
    for page in reversed(model.pages.values()):
        row = rows.setdefault(page.level, [0, 0, []])
        row[0] += page.copies
        row[1] += page.copies if model.is_obsolete(page) else 0
        row[2] += [page] if len(row[2]) < newest else []
    order = sorted(rows, key=lambda level: -1 if level is None else level, reverse=True)
    return [LevelRow(lv, rows[lv][0], rows[lv][1], tuple(rows[lv][2])) for lv in order]


@settings(max_examples=100, deadline=None)
@given(st.lists(OPS, min_size=8, max_size=60))
def test_the_model_tracks_pages_like_a_multiset_and_audits(ops: list[tuple[Any, ...]]) -> None:
    model = ReplayModel()
    pages: Counter[tuple[object, ...]] = Counter()
    mmio: dict[int, int] = {}
    unknown = 0
    pending: tuple[int, int, tuple[object, ...]] | None = None  # a new page, not linked yet
    tdp_seen = False
    for step, op in enumerate(ops):
        event = make_event(op, model.mmu_valid_gen or 0, float(step))
        model.apply(event)
        model.audit()
        key = page_key(event.fields)
        if pending is not None:  # the next event: its link, or (TDP trace) it was freed
            gfn, level, made = pending
            linked = op[0] == "tdp" and op[1:3] == (gfn, level + 1)
            linked = linked and classify(op[3], level + 1) == TABLE
            if not linked and (tdp_seen or op[0] == "tdp") and pages[made]:
                pages[made] -= 1
            pending = None
        tdp_seen = tdp_seen or op[0] == "tdp"
        if op[0] == "get" and op[4]:
            pending = (op[1], op[2], key)
        if op[0] == "get" and (op[4] or pages[key] == 0):
            pages[key] += 1
        elif op[0] == "zap":
            if pages[key]:
                pages[key] -= 1
            else:
                unknown += 1
        elif op[0] == "mmio":
            mmio[op[1]] = op[2]
        assert {k: p.copies for k, p in model.pages.items()} == +pages
        assert {g: s.gen for g, s in model.mmio.items()} == mmio
        assert model.unknown_zaps == unknown
        assert page_levels(model, 2) == walked_levels(model, 2)
    assert model.events == len(ops) == sum(model.totals().values())


@settings(max_examples=50, deadline=None)
@given(st.lists(OPS, min_size=4, max_size=40), st.integers(0, 40))
def test_a_snapshot_replays_the_same_as_going_on(ops: list[tuple[Any, ...]], cut: int) -> None:
    events = [make_event(op, 0, float(i)) for i, op in enumerate(ops)]
    straight = replay(events)
    first = replay(events[:cut])
    resumed = replay(events[cut:], ReplayModel.from_snapshot(first.snapshot()))
    assert state(resumed) == state(straight)
    assert state(first) == state(replay(events[:cut]))  # the snapshot did not alias it


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted({"kvm_mmu_get_page", "mark_mmio_spte",
       "kvm_tdp_mmu_spte_changed", "kvm_mmu_zap_all_fast", "kvm_exit", "fast_page_fault",
       "kvm_mmu_set_spte", "kvm_mmu_prepare_zap_page", "check_mmio_spte"})),
       st.dictionaries(st.sampled_from(["gfn", "gen", "level", "created", "as_id", "new_spte",
       "role", "vcpu_id", "vcpu", "mmu_valid_gen", "spte", "kvm_gen", "text", "fixed"]),
       st.one_of(st.integers(-3, 1 << 64), st.booleans(), st.text(max_size=3)))),
       max_size=30))  # fmt: skip
def test_odd_fields_never_make_the_model_raise(raw: list[tuple[str, dict[str, object]]]) -> None:
    model = ReplayModel()
    for name, fields in raw:
        model.apply(Event(name, fields))  # type: ignore[arg-type]
        model.audit()


def test_fast_zap_toggles_the_generation_and_old_pages_are_obsolete() -> None:
    events = events_of([
        line("kvm_mmu_get_page", SP.format(gen=0, gfn=0x10, level=4) + " new"),
        line("kvm_mmu_zap_all_fast", "kvm-mmu-valid-gen 0 used_pages 1", 2.0),
        line("kvm_mmu_get_page", SP.format(gen=1, gfn=0x10, level=4) + " new", 3.0),
    ])  # fmt: skip
    model = replay(events)
    assert model.mmu_valid_gen == 1 and model.flips_total == 1
    old, new = sorted(model.pages.values(), key=lambda p: p.seq)
    assert model.is_obsolete(old) and not model.is_obsolete(new)
    assert page_levels(model)[0].obsolete == 1 and page_levels(model)[0].count == 2
    flipped = replay(events_of([line("kvm_mmu_zap_all_fast", "kvm-mmu-valid-gen 1 used_pages 0")]))
    assert flipped.mmu_valid_gen == 0
    counter_era = ReplayModel()
    counter_era.max_gen_seen = 0x1A  # a pre-2019 trace (sp gen printed in hex)
    replay(events_of([line("kvm_mmu_zap_all_fast", "kvm-mmu-valid-gen 1a used_pages 0")]),
           counter_era)  # fmt: skip
    assert counter_era.mmu_valid_gen == 0x1B


def test_the_tdp_mmu_frees_a_page_when_its_table_spte_goes() -> None:
    table = 0x1A2B3CB07  # MMU-present, not huge: points to a page table
    model = replay(events_of([
        line("kvm_mmu_get_page", SP.format(gen=0, gfn=0x200, level=1) + " new"),
        line("kvm_tdp_mmu_spte_changed", f"as id 0 gfn 200 level 2 old_spte 0 new_spte {table:x}"),
        line("kvm_mmu_zap_all_fast", "kvm-mmu-valid-gen 0 used_pages 1"),
        line("kvm_mmu_get_page", SP.format(gen=0, gfn=0x200, level=1) + " new"),  # gen 0: TDP
    ]))  # fmt: skip
    (page,) = model.pages.values()
    assert page.copies == 2 and model.is_obsolete(page)  # the older copy decides
    cleared = f"as id 0 gfn 200 level 2 old_spte {table:x} new_spte 5a0"
    replay(events_of([line("kvm_tdp_mmu_spte_changed", cleared)]), model)
    assert model.tdp_freed == 1 and model.last_change[0] == "vanished"
    assert model.mmu_valid_gen == 1  # TDP pages print gen 0: they do not undo the flip


def test_a_trace_starting_mid_run_is_counted_not_fatal() -> None:
    events = events_of([
        line("kvm_mmu_prepare_zap_page", SP.format(gen=0, gfn=0x99, level=1)),
        line("kvm_mmu_get_page", SP.format(gen=0, gfn=0x98, level=1) + " existing"),
        line("kvm_mmu_prepare_zap_page", "2 q0 w-x invalid pae !nxe wp smep smm root 1 unsync"),
    ])  # fmt: skip
    model = replay(events)
    assert (model.unknown_zaps, model.adopted, model.unkeyed_zaps) == (1, 1, 1)
    assert [p.adopted for p in model.pages.values()] == [True]


def test_caps_drop_the_oldest_and_count_them() -> None:
    model = ReplayModel(max_pages=3, max_tdp=2, max_mmio=2)
    lines = [line("kvm_mmu_get_page", SP.format(gen=0, gfn=g, level=1) + " new") for g in range(5)]
    lines += [line("mark_mmio_spte", f"sptep:(nil) gfn {g:x} access 6 gen 1") for g in range(4)]
    tdp = "as id 0 gfn {:x} level 1 old_spte 0 new_spte b77"
    lines += [line("kvm_tdp_mmu_spte_changed", tdp.format(g)) for g in range(4)]
    replay(events_of(lines), model)
    assert len(model.pages) == 3 and model.evicted_pages == 2
    assert sorted(model.mmio) == [2, 3] and len(model.tdp) == 2 and model.evicted_sptes == 4


def test_views_of_the_sample() -> None:
    model = replay(events_of(SAMPLE_LINES))
    table = spte_table(model)
    assert table is not None and len(table.cells) == 512 and table.changed is not None
    assert table.cells[table.changed].kind == LEAF
    assert [state for _, state in mmio_rows(model, 5)] == ["obsolete"]  # before the fast zap
    assert [vcpu for vcpu, _ in vcpu_rows(model, 4)] == [0, 1]
    text, nodes = replay_to_dot(model, title="sample")
    assert text.startswith("digraph replay_pages {") and nodes == len(model.pages) == 1
    # the plugin's new direct page: the next event of its CPU does not link it, so the
    # TDP MMU freed it unlinked (tdp_mmu_free_sp; the hand-made sample's order)
    assert model.tdp_unlinked == 1 and model.tdp_freed == 0
    (page,) = model.pages.values()  # found after the fast zap: of the new generation
    assert page.adopted and not model.is_obsolete(page) and "rounded,filled" in text


def test_seek_words() -> None:
    from mmuscope.engine.replay.seek import SeekTarget, parse_seek

    assert parse_seek("#1,234", 100.0, 10.0, 104.0) == SeekTarget(event=1234)
    assert parse_seek("50%", 100.0, 10.0, 104.0) == SeekTarget(ts=105.0)
    assert parse_seek("+0.5", 100.0, 10.0, 104.0) == SeekTarget(ts=104.5)
    assert parse_seek("-1", 100.0, 10.0, 104.0) == SeekTarget(ts=103.0)
    assert parse_seek("@7", 100.0, 10.0, 104.0) == SeekTarget(ts=7.0)
    assert parse_seek(" 2 ", 100.0, 10.0, 104.0) == SeekTarget(ts=102.0)
    for bad in ("", "x", "#1.5", "%"):
        with pytest.raises(ValueError, match="not a time"):
            parse_seek(bad, 0.0, 1.0, 0.0)


def test_per_cpu_and_pid_totals_and_filters() -> None:
    model = replay(events_of([line("kvm_entry", "vcpu 0, rip 0x1", cpu=c, pid=p)
                              for c, p in [(0, 10), (1, 10), (1, 11)]]))  # fmt: skip
    assert model.totals() == {"kvm_entry": 3}
    assert model.totals(cpus=frozenset({1})) == {"kvm_entry": 2}
    assert model.totals(frozenset({1}), frozenset({11})) == {"kvm_entry": 1}
    assert parse_ids("0,2-4") == frozenset({0, 2, 3, 4}) and parse_ids(" ") is None
    assert describe_ids(frozenset({0, 2, 3, 4})) == "0,2-4"
    for bad in ("x", "3-1", "-2"):
        with pytest.raises(ValueError):
            parse_ids(bad)
    keep = EventFilter(cpus=frozenset({1}))
    assert keep.active and keep.matches(Event("e", cpu=1)) and not keep.matches(Event("e"))


# -- the index, the cursor, the live window -------------------------------------------


def big_trace(tmp_path: Path, rounds: int) -> Path:
    """The sample's event lines repeated with rising timestamps."""
    body = [x for x in SAMPLE_LINES if x.strip() and not x.startswith("#")]
    path = tmp_path / "trace.txt"
    with path.open("w") as out:
        for r in range(rounds):
            for i, text in enumerate(body):
                event = events_of([text])
                if event and event[0].ts > 5000:  # the recent-kernel part, re-timed
                    out.write(text.replace(f"{event[0].ts:.6f}", f"{5000 + r + i / 100:.6f}"))
                else:
                    out.write(text)
    return path


def test_index_stays_bounded_and_seeks_equal_a_straight_replay(tmp_path: Path) -> None:
    path = big_trace(tmp_path, 60)
    index = TraceIndex(path.stat().st_size, every=8, max_checkpoints=8)
    with path.open("rb") as handle:
        end = build_index(handle, index)
    index.audit()
    assert index.done and index.progress == 1.0 and index.thinned >= 3
    assert len(index.checkpoints) <= 8 and index.events == end.events
    with path.open() as text:
        everything = list(iter_events(text))
    cursor = TraceCursor(path, index)
    try:
        for target in (index.events // 2, 5, index.events - 1, 0, index.events, 17):
            cursor.seek_event(target)
            assert cursor.position == target
            assert state(cursor.model) == state(replay(everything[:target]))
        cursor.seek_event(0)
        assert cursor.step(3) == everything[:3]
        ts = everything[400].ts
        cursor.seek_time(ts)
        assert cursor.peek() is not None and cursor.peek().event.ts >= ts  # type: ignore[union-attr]
        assert cursor.model.last_ts is None or cursor.model.last_ts < ts
    finally:
        cursor.close()


def test_snapshot_budget_thins_too() -> None:
    model = replay(events_of([line("kvm_mmu_get_page", SP.format(gen=0, gfn=g, level=1) + " new")
                              for g in range(10)]))  # fmt: skip
    from mmuscope.engine.replay.index import Checkpoint

    index = TraceIndex(every=1, budget=25)
    for event in range(6):
        index.add(Checkpoint(event * index.every, event * 100, 0.0, model.snapshot()))
    assert index.entries <= 25 or len(index.checkpoints) == 1


def test_live_window_feeds_follows_seeks_back_and_forgets(tmp_path: Path) -> None:
    events = events_of(SAMPLE_LINES) * 20
    timeline = LiveTimeline(keep=64)
    applied = []
    for start in range(0, len(events), 25):
        applied += timeline.feed(events[start : start + 25])
        timeline.audit()
    assert applied == events and timeline.position == timeline.total == len(events)
    assert timeline.start > 0 and len(timeline.window) < 64 + 8
    straight = replay(events)
    assert state(timeline.model) == state(straight)
    back = timeline.total - 30
    timeline.seek_event(back)
    timeline.audit()
    assert not timeline.following and state(timeline.model) == state(replay(events[:back]))
    timeline.seek_event(0)  # older than what is kept: the oldest kept event
    assert timeline.position == timeline.start
    timeline.feed(events[:200])  # paused: the position falls out of the window
    timeline.audit()
    assert timeline.lost > 0 and timeline.position == timeline.start
    timeline.follow()
    assert timeline.at_end and timeline.following


def test_a_root_zapped_in_use_is_zapped_again_when_put_not_unmatched() -> None:
    """`kvm_mmu_zap_all_fast` zaps a root a vCPU still uses (`root 1`): it turns invalid
    and stays until its last user puts it, when mmu_free_root_page() zaps it again
    (`invalid ... root 0`), as the kernel's churn trace shows.  The second zap closes
    the first; a second zap of a page never zapped in use stays unmatched."""
    root = "sp gen 0 gfn 2 l4 8-byte q0 wux nxe ad root {n} sync"
    model = replay(events_of([
        line("kvm_mmu_get_page", root.format(n=0) + " new"),
        line("kvm_mmu_zap_all_fast", "kvm-mmu-valid-gen 0 used_pages 1"),
        line("kvm_mmu_prepare_zap_page", root.format(n=1)),
        line("kvm_mmu_get_page", root.replace("gen 0", "gen 1").format(n=0) + " new"),
        line("kvm_mmu_prepare_zap_page", root.replace("wux", "wux invalid").format(n=0)),
    ]))  # fmt: skip
    assert (model.zapped, model.unknown_zaps) == (1, 0)
    assert not model.invalid_roots and [p.gen for p in model.pages.values()] == [1]
    replay(events_of([line("kvm_mmu_prepare_zap_page",
                           root.replace("wux", "wux invalid").format(n=0))]), model)  # fmt: skip
    assert model.unknown_zaps == 1


def test_direct_pages_are_drawn_linked_to_their_parents(tmp_path: Path) -> None:
    """A direct page's parent follows from gfn and level (direct_map() gets each child
    for the gfn rounded to the level above): the replay's dot draws those links,
    labelled with the parent's spte index, and Graphviz renders it."""
    from mmuscope.engine.replay.dot import direct_links

    pages = [(0, 4), (0, 3), (0x40000, 2), (0x40200, 1), (0x40000, 1)]
    lines = [
        line("kvm_mmu_get_page", SP.format(gen=0, gfn=g, level=lv) + " new") for g, lv in pages
    ]
    model = replay(events_of(lines))
    links = {
        (p.gfn, p.level, c.gfn, c.level, i) for p, c, i in direct_links(list(model.pages.values()))
    }
    assert links == {
        (0, 4, 0, 3, 0),
        (0, 3, 0x40000, 2, 1),  # 0x40000 >> 18 = 1
        (0x40000, 2, 0x40200, 1, 1),  # 0x40200 >> 9 & 511 = 1
        (0x40000, 2, 0x40000, 1, 0),
    }
    text, nodes = replay_to_dot(model)
    assert nodes == 5 and text.count('[label="spte[') == 4
    if shutil.which("dot"):
        out = subprocess.run(["dot", "-Tsvg"], input=text, capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.count('class="edge"') >= 4


def test_a_shadow_paging_trace_draws_each_page_under_its_parent() -> None:
    """kvm fork recorded on a shadow-MMU host: indirect pages, whose place gfn and level do
    not give.  The guest's walks do: the level-L entry a walk reads points to the table
    of level L-1, so every page below a root is drawn linked to its parent, labelled with
    the entry's index (the address's bits for that level), and Graphviz draws the edges."""
    trace = (FIXTURES / "kvm-fork-follow" / "trace.txt").read_text()
    model = replay(events_of(trace.splitlines(keepends=True)))
    pages = list(model.pages.values())
    assert pages and not any(p.direct for p in pages)
    text, _ = replay_to_dot(model)
    seq = {(p.gfn, p.level): p.seq for p in pages}
    edges = {tuple(map(int, m)) for m in re.findall(r"p(\d+) -> p(\d+) \[label", text)}
    assert (seq[0x2, 4], seq[0x3, 3]) in edges  # the walk of 0x400030: pte 3007 at level 4
    assert (seq[0x4, 2], seq[0x5, 1]) in edges and (seq[0x4, 2], seq[0xE, 1]) in edges
    assert 'label="spte[8]"' in text  # 0x1000000 >> 21 & 511: table e under table 4
    below_roots = [p for p in pages if p.level is not None and p.level < 4]
    assert {child for _, child in edges} == {p.seq for p in below_roots}
    if shutil.which("dot"):
        out = subprocess.run(["dot", "-Tsvg"], input=text, capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.count('class="edge"') >= len(below_roots)


def test_a_simulated_shadow_run_replays_into_linked_trees() -> None:
    """Shadow paging: every page but the roots (one per guest process) has its parent
    drawn, a direct page for a huge guest page included."""
    from mmuscope.engine.replay.dot import direct_links, shadow_links

    done = subprocess.run(
        [sys.executable, "-m", "mmuscope.tui", "simulate", "--mmu", "shadow",
         "--workload", "kernbench", "--accesses", "1500"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    model = replay(events_of(done.stdout.splitlines(keepends=True)))
    pages = [p for p in model.pages.values() if not model.is_obsolete(p)]
    links = shadow_links(model, pages)
    children = {id(c) for _, c, _, _ in links} | {id(c) for _, c, _ in direct_links(pages)}
    orphans = [p for p in pages if id(p) not in children]
    assert any(c.direct for _, c, _, _ in links)  # a huge guest page's direct page
    assert len(pages) > 10 and {(p.level, p.direct) for p in orphans} == {(4, False)}


def test_a_simulated_direct_run_replays_into_one_linked_tree() -> None:
    """Every direct page of a simulated run but its root has its parent drawn."""
    from mmuscope.engine.replay.dot import direct_links

    done = subprocess.run(
        [sys.executable, "-m", "mmuscope.tui", "simulate", "--mmu", "direct",
         "--workload", "kernbench", "--accesses", "1500"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    model = replay(events_of(done.stdout.splitlines(keepends=True)))
    pages = [p for p in model.pages.values() if p.direct and not model.is_obsolete(p)]
    children = {id(c) for _, c, _ in direct_links(pages)}
    orphans = [p for p in pages if id(p) not in children]
    assert len(pages) > 10 and [p.level for p in orphans] == [4], orphans
