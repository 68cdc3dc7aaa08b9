"""The POWER screen's keys through Pilot (F5): step a fault slot by slot, run to the next
one, play and pause, change speed, switch era on the same fault, export the searched
groups; and the layout at the 80×24 minimum and at 120×40."""

from __future__ import annotations

from pathlib import Path

from mmuscope.engine.ppc.faults import CLASSIFY, FORWARDED, NO_SEARCH
from mmuscope.tui.app import MmuscopeApp
from mmuscope.tui.screens.power import PowerScreen
from mmuscope.tui.widgets.lookup_bar import LookupBar
from mmuscope.tui.widgets.power_panels import FaultSteps, HptGroups, PowerCounters

from tests.tui_pilot import build, drawn_lines, press_export, until

SIZE = (120, 40)


def power(app: MmuscopeApp) -> PowerScreen:
    screen = app.screen
    assert isinstance(screen, PowerScreen), f"expected the POWER screen: {screen!r}"
    return screen


def bar(screen: PowerScreen) -> str:
    return str(screen.query_one(LookupBar).content)


async def test_s_steps_slot_by_slot_and_n_runs_to_the_next_fault(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f5")
        await pilot.pause()
        screen = power(app)
        assert screen.record is None and "no fault yet" in bar(screen)
        await pilot.press("n")
        record = screen.record
        assert record is not None and record.seq == 1 and screen.done
        assert record.purpose == CLASSIFY and len(screen.phases) == 1 + 16 + 1
        assert "forwarded" in bar(screen) and "H_ENTER" in bar(screen)
        await pilot.press("s")  # the next fault, its first step only
        assert screen.record is not None and screen.record.seq == 2 and screen.shown == 1
        assert "DSISR_NOHPTE" in bar(screen)
        await pilot.press("s", "s")
        assert screen.shown == 3 and "(2/16)" in bar(screen)
        assert "2/8 examined" in str(screen.query_one(FaultSteps).content)
        for _ in range(15):  # 18 steps: the exit, 16 slots, the outcome
            await pilot.press("s")
        assert screen.done and screen.run.counters.faults == 2
        assert "faults (HDSI)" in str(screen.query_one(PowerCounters).content)
        screen.run.machine.audit()


async def test_space_plays_and_pauses_and_speed_keys(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f5")
        screen = power(app)
        speed = screen.pacer.speed
        await pilot.press("plus")
        assert screen.pacer.speed > speed
        await pilot.press("minus", "minus")
        assert screen.pacer.speed < speed
        await pilot.press("space")  # 2 faults a second, each revealed step by step
        await until(pilot, lambda: screen.run.counters.faults >= 1 and screen.shown >= 1)
        assert screen.pacer.playing and screen.run.counters.faults >= 1
        assert screen.record is not None and 1 <= screen.shown <= len(screen.phases)
        assert "playing" in screen.sub_title
        await pilot.press("space")
        faults = screen.run.counters.faults
        await pilot.pause(0.2)
        assert not screen.pacer.playing and screen.run.counters.faults == faults
        assert "paused" in screen.sub_title
        screen.run.audit()


async def test_k_switches_era_on_the_same_fault(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f5")
        screen = power(app)
        for _ in range(5):
            await pilot.press("n")
        before = screen.record
        assert before is not None and screen.era == "today"
        await pilot.press("k")
        after = screen.record
        assert screen.era == "2014-keys" and after is not None
        assert (after.seq, after.vpn, after.outcome) == (before.seq, before.vpn, FORWARDED)
        assert after.purpose == NO_SEARCH and after.search is None
        assert screen.run.counters.searches == 0 and screen.run.counters.saved_searches == 5
        assert "key 30: the host's" in str(screen.query_one(PowerCounters).content)
        assert "2014-keys" in screen.sub_title
        await pilot.press("n")
        assert screen.record is not None and screen.record.seq == 6
        await pilot.press("k")  # the 2014 kernel before the series: searches like today
        assert screen.era == "2014" and screen.record is not None
        assert screen.record.seq == 6 and screen.run.counters.searches == 6
        await pilot.press("k")
        assert screen.era == "today" and screen.record is not None
        assert screen.record.seq == 6 and screen.run.counters.searches == 6
        screen.run.audit()


async def test_e_exports_the_searched_groups(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f5")
        await pilot.press("n")
        await press_export(pilot)
    dots = list(tmp_path.glob("mmuscope-power-*.dot"))
    assert len(dots) == 1
    text = dots[0].read_text()
    assert text.startswith("digraph hpt_search {") and "primary group" in text


async def test_the_screen_reads_at_80x24_and_120x40(tmp_path: Path) -> None:
    for size, steps_shown in (((80, 24), False), ((120, 40), True)):
        app = build(tmp_path)
        async with app.run_test(size=size) as pilot:
            await pilot.press("f5")
            await pilot.press("n")
            await pilot.pause()
            screen = power(app)
            assert not screen.has_class("-too-small")
            groups = screen.query_one(HptGroups)
            lines = drawn_lines(groups)
            assert any("primary group" in line for line in lines)
            assert any("secondary group" in line for line in lines)
            assert sum("▶" in line for line in lines) == 2  # both searched groups in view
            assert all(len(line) <= groups.outer_size.width for line in lines)
            counters = drawn_lines(screen.query_one(PowerCounters))
            assert any("hash searches" in line for line in counters)
            assert screen.query_one(FaultSteps).display == steps_shown


async def test_scenario_actions_run_and_switch_era(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f5")
        screen = power(app)
        await app.run_action("run(4)", screen)
        assert screen.record is not None and screen.record.seq == 4 and screen.done
        await app.run_action("run_to('emulated')", screen)
        assert screen.record is not None and screen.record.outcome == "emulated"
        seq = screen.record.seq
        await app.run_action("era('2014-keys')", screen)
        assert screen.era == "2014-keys" and screen.record is not None
        assert screen.record.seq == seq and screen.record.keyfault
        assert screen.record.outcome == "emulated" and screen.record.purpose == "locate"
        screen.run.audit()


def counter(screen: PowerScreen, name: str) -> str:
    for line in str(screen.query_one(PowerCounters).content).splitlines():
        if line.startswith(name):
            return line[len(name) :].strip()
    raise AssertionError(f"no {name!r} line")


async def test_the_counters_follow_what_is_revealed(tmp_path: Path) -> None:
    """In class, "HPTEs examined 16" while the path shows 2/16 gives the answer away."""
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f5")
        await pilot.pause()
        screen = power(app)
        await pilot.press("n")  # fault 1, complete: 16 HPTEs examined
        await pilot.pause()
        assert counter(screen, "HPTEs examined") == "16"
        forwarded = counter(screen, " forwarded")
        await pilot.press("s", "s", "s")  # fault 2: its exit and two slots
        await pilot.pause()
        assert "(2/16)" in bar(screen)
        assert counter(screen, "HPTEs examined") == "18"  # 16 + the 2 shown
        assert counter(screen, "faults (HDSI)") == "2"
        assert counter(screen, " forwarded") == forwarded  # its class: not yet
        while not screen.done:
            await pilot.press("s")
        await pilot.pause()
        assert counter(screen, "HPTEs examined") == str(screen.run.counters.hptes_examined)
