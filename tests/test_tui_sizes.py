"""Every screen readable at 80×24, 120×40 and 200×60.

One SVG snapshot per screen and size (review them with `--snapshot-update`), and checks
of what the snapshots cannot say: the event log never cuts an event inside its fields
(at 120 columns, on every screen), tables never wrap a row and drop their least
important columns first, and kvm_stat's CurAvg/s is sampled once a second, by one timer.
Deterministic as tests/test_tui_snapshots.py: paused, seeded, no animation, no user
config, and kvm_stat's wall-clock sample pushed out of reach of a snapshot.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from mmuscope.engine.stats import CounterRow, LookupCost
from mmuscope.tui.app import MmuscopeApp, make_app
from mmuscope.tui.screens import base
from mmuscope.tui.widgets.cost_panel import cost_table
from mmuscope.tui.widgets.events import (
    CountersTable,
    EventLog,
    EventPanel,
    LogEntry,
    counters_table,
    event_rows,
)
from textual.pilot import Pilot
from textual.timer import Timer

from tests.datafiles import FIXTURES
from tests.tui_pilot import screen_text

SIZES = [(80, 24), (120, 40), (200, 60)]
SAMPLE = FIXTURES / "trace-kvmmmu-sample.txt"
# The keys that bring each screen to a state with something in every panel.
SCREENS: dict[str, tuple[str, ...]] = {
    "memslots": ("c", "v", "n", "n", "n"),
    "mmu": ("f2", "n", "n", "n", "n", "n", "s"),
    "rmaps": ("f3", *["n"] * 20, "x"),
    "tlb": ("f4", "n", "n", "n"),
    "power": ("f5", "n", "n"),
    "experiments": ("f6",),
    "replay": ("end",),
}

SnapCompare = Callable[..., bool]


@pytest.fixture(autouse=True)
def deterministic(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("MMUSCOPE_CONFIG_DIR", str(tmp_path_factory.mktemp("config")))
    monkeypatch.setattr(base, "COUNTER_REFRESH", 24 * 3600.0)


def screen_app(name: str) -> MmuscopeApp:
    if name == "replay":
        app = make_app(trace=SAMPLE, playing=False)
    else:
        app = make_app("pc-4g", seed=3, playing=False)
    app.animation_level = "none"
    return app


def keys_for(
    name: str, screens: dict[str, tuple[str, ...]] = SCREENS
) -> Callable[[Pilot[object]], Awaitable[None]]:
    async def run(pilot: Pilot[object]) -> None:
        await pilot.pause()
        if name == "replay":
            index = pilot.app.screen.timeline.index  # built in a thread
            for _ in range(500):
                if index.done:
                    break
                await pilot.pause(0.01)
            assert index.done
        await pilot.press(*screens[name])
        await pilot.pause()
        panel = pilot.app.screen.query_one(EventPanel)
        panel.flush_log()
        panel.show_counters()
        pilot.app.clear_notifications()  # "indexed in 0.2 s" follows the wall clock
        await pilot.pause()

    return run


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
@pytest.mark.parametrize("name", SCREENS)
def test_every_screen_at_three_sizes(
    snap_compare: SnapCompare, name: str, size: tuple[int, int]
) -> None:
    """The snapshot, and on the screen it draws the checks of that size: at 120x40 no
    event cut inside its fields; on the tlb screen at 120x40 and 80x24, kvm_stat's
    columns (one app run for both, not one for the snapshot and one for the checks)."""
    checks: list[Callable[[MmuscopeApp], None]] = []
    if size == (120, 40):
        checks.append(lambda app: assert_no_event_is_cut_inside_its_fields(app, name))
    if name == "tlb" and size in ((120, 40), (80, 24)):
        checks.append(assert_kvm_stat_keeps_its_columns)
    failed: list[AssertionError] = []

    async def run_before(pilot: Pilot[object]) -> None:
        await keys_for(name)(pilot)
        for check in checks:
            try:  # raised here, Textual would only log it and end the app
                check(pilot.app)  # type: ignore[arg-type]
            except AssertionError as error:
                failed.append(error)

    matches = snap_compare(screen_app(name), terminal_size=size, run_before=run_before)
    if failed:
        raise failed[0]
    assert matches


def assert_no_event_is_cut_inside_its_fields(app: MmuscopeApp, name: str) -> None:
    """The event log's rows, each on the screen whole; the last events' rows in order.
    Checked at 120x40 on every screen by test_every_screen_at_three_sizes."""
    assert app.size == (120, 40)
    panel = app.screen.query_one(EventPanel)
    log = app.screen.query_one(EventLog)
    width = log.scrollable_content_region.width
    entries = list(panel._kept)
    if name != "experiments":
        assert entries, "the screen logged no event"
    shown = screen_text(app)
    visible = log.lines[-log.scrollable_content_region.height :]
    for row in visible:
        assert len(row) <= width, row
        assert row.rstrip() in shown, f"{row!r} is not on the screen whole"
    for entry in entries[-3:]:  # the last events are on screen, each row whole
        rows = event_rows(entry, width, panel._t0 or 0.0)
        assert all(row in visible for row in rows)
        assert " ".join(" ".join(rows).split()).startswith(" ".join(entry.body.split()))


ENTRY = LogEntry(
    "        qemu-kvm-0 [001]     0.000004: kvm_mmu_get_page:     sp gen 0 gfn 100000 l2 "
    "8-byte q0 direct wux nxe ad root 0 sync new",
    1,
    12.000004,
    "kvm_mmu_get_page: sp gen 0 gfn 100000 l2 8-byte q0 direct wux nxe ad root 0 sync new",
)


def test_an_event_line_puts_name_and_fields_first_where_it_does_not_fit() -> None:
    assert event_rows(ENTRY, 200) == [ENTRY.line]  # trace-cmd report's line, whole
    (row,) = event_rows(ENTRY, 100, t0=12.0)
    assert row.startswith(ENTRY.body) and row.endswith("[1] +4µs") and len(row) == 100
    for width in (40, 50, 66):
        rows = event_rows(ENTRY, width, t0=12.0)
        assert len(rows) > 1 and all(len(row) <= width for row in rows)
        assert rows[0].startswith("kvm_mmu_get_page: sp gen 0")
        assert all(row.startswith("  ") for row in rows[1:])  # continuation rows
        words = " ".join(rows).split()
        assert words == [*ENTRY.body.split(), "[1]", "+4µs"]
    assert event_rows(ENTRY._replace(ts=14.5), 100, t0=12.0)[0].endswith("+2.500000s")


def test_kvm_stat_drops_percent_then_kvm_before_it_cuts_a_name() -> None:
    rows = [CounterRow("kvm_mmu_prepare_zap_page", 12345, 60.0, 3.0)]
    wide = counters_table(rows, 60).plain.splitlines()
    assert "%Total" in wide[0] and "kvm_mmu_prepare_zap_page" in wide[1]
    narrow = counters_table(rows, 40).plain.splitlines()
    assert "%Total" not in narrow[0] and "CurAvg/s" in narrow[0]
    assert "kvm_mmu_prepare_zap_page" in narrow[1] and narrow[1].split()[1:] == ["12345", "3"]
    assert all(len(line) <= 40 for line in narrow)
    bare = counters_table(rows, 37).plain.splitlines()  # 22 columns for the names
    assert bare[0].startswith("Event (-kvm_) ") and bare[1].startswith("mmu_prepare_zap_page ")
    assert all(len(line) <= 37 for line in bare)
    cut = counters_table(rows, 30).plain.splitlines()
    assert all(len(line) <= 30 for line in cut) and cut[1].startswith("mmu_prepare_za…")
    other = counters_table([*rows, CounterRow("fast_page_fault", 2, 0.0, 0.0)], 37)
    assert other.plain.splitlines()[2].startswith("fast_page_fault ")  # no kvm_ to leave off


def test_the_models_mark_costs_kvm_stat_no_column() -> None:
    """A `*` after the model's own names may take the blanks left of their totals: the
    mark alone never drops %Total, and a name cut short keeps its mark."""
    rows = [CounterRow("smp_invalidate_interrupt", 13, 17.8, 0.0)]
    own = {"smp_invalidate_interrupt"}
    lines = counters_table(rows, 46, own).plain.splitlines()  # kvm_stat's room at 120x40
    assert lines[0].split() == ["Event", "Total", "%Total", "CurAvg/s"]
    assert lines[1].split() == ["smp_invalidate_interrupt*", "13", "17.8", "0"]
    assert all(len(line) <= 46 for line in lines)
    narrow = counters_table(rows, 37, own).plain.splitlines()  # and at 80x24
    assert narrow[1].split() == ["smp_invalidate_interrupt*", "13", "0"]
    big = [CounterRow("smp_invalidate_interrupt", 123456, 17.8, 0.0)]
    cut = counters_table(big, 37, own).plain.splitlines()
    name = cut[1].split()[0]
    assert name.startswith("smp_invalidate_int") and name.endswith("…*"), name
    assert all(len(line) <= 37 for line in cut)


def assert_kvm_stat_keeps_its_columns(app: MmuscopeApp) -> None:
    """The tlb screen's kvm_stat at 120x40 (every column) and 80x24 (no %Total), its
    model's own names whole and marked.  Checked by test_every_screen_at_three_sizes."""
    table = app.screen.query_one(CountersTable)
    lines = str(table.content).splitlines()
    heads = ["Total", "%Total", "CurAvg/s"] if app.size[0] == 120 else ["Total", "CurAvg/s"]
    assert lines[0].split()[-len(heads) :] == heads, lines[0]
    names = [line.split()[0] for line in lines[1:]]
    assert "smp_invalidate_interrupt*" in names, names  # whole, and marked the model's
    assert all(len(line) <= table.content_region.width for line in lines)


def test_the_cost_table_shortens_then_drops_worst_then_miss_and_never_wraps() -> None:
    cost = LookupCost("rbtree")
    cost.add(3, 1, False, False)
    costs = {"linear": LookupCost("linear"), "rbtree": cost}
    heads = {}
    for width in (60, 45, 39, 36, 30):
        lines = cost_table(costs, "rbtree", width).plain.splitlines()
        assert all(len(line) <= width for line in lines), (width, lines)
        heads[width] = lines[0].split()
    assert heads[60] == ["strategy", "bare", "cached", "miss", "worst"]
    assert heads[45] == heads[39] == heads[60]  # shorter figures: the captions cite all four
    row = cost_table(costs, "rbtree", 39).plain.splitlines()[2].split()
    assert row == ["▶", "rbtree", "3.0", "4.0", "3.0", "3"]
    assert heads[36] == ["strategy", "bare", "cached"]
    assert heads[30] == ["strategy", "cached"]


@pytest.mark.parametrize("keys", [(), ("f2",), ("f4",)])
async def test_each_screen_samples_kvm_stat_with_one_timer(
    keys: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Textual runs each class's on_mount along the MRO and the screens call super()
    as well: two or three timers sampled a millisecond apart, and CurAvg/s read 0.
    The timers counted as the screens ask Textual for them (set_interval: Textual keeps
    no public list of a screen's timers)."""
    started: list[tuple[object, Timer]] = []
    set_interval = base.MmuScreen.set_interval

    def counting(screen: base.MmuScreen, *args: object, **kwargs: object) -> Timer:
        timer = set_interval(screen, *args, **kwargs)  # type: ignore[arg-type]
        started.append((screen, timer))
        return timer

    monkeypatch.setattr(base.MmuScreen, "set_interval", counting)
    app = make_app("pc-4g", playing=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press(*keys)
        await pilot.pause()
        timers = [t for s, t in started if s is app.screen and t.name == "counters"]
        assert len(timers) == 1


def test_the_kernels_run_names_the_host_kind_its_numbers_hold_for() -> None:
    """The real-kvm scenario's panel: a shadow-MMU host's pages and zaps, and on an EPT
    host's TDP MMU what it shows instead (no rmaps, nothing zapped for the budget)."""
    from mmuscope.tui.widgets.rmap_panels import kernel_run_rows

    stats = {"max_mmu_rmap_size": 12, "mmu_shadow_zapped": 65}
    shadow = {"host": "kvm_pvm · shadow MMU · MMIO caching off", "kernel": "6.18", "mmu": "shadow",
              "stats": stats, "by_event": {"kvm_mmu_get_page": 105}}  # fmt: skip
    rows = kernel_run_rows(shadow, 21, 21)
    assert rows[0].startswith("kvm_pvm · shadow MMU") and "shadow pages 105 · zapped 65" in rows
    assert "max_mmu_rmap_size 12 · model 21" in rows and all(len(r) <= 39 for r in rows)
    tdp = {**shadow, "host": "kvm_intel · TDP MMU · MMIO caching on", "mmu": "tdp",
           "stats": {"max_mmu_rmap_size": 0}, "by_event": {}}  # fmt: skip
    assert kernel_run_rows(tdp, 21, 21)[2:] == [
        "max_mmu_rmap_size 0 · model 21",
        "TDP MMU: no rmaps, 0 zapped",
    ]
