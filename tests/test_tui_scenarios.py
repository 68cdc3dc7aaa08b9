"""Scenarios in the app (Pilot): each names the thread it follows, a clicker's keys step
it, and `<` steps back to the same picture a fresh replay gives.  Each scenario stepped
to its end with `>`: tests/test_scenario_steps.py (its walk at 120×40)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mmuscope.engine.scenarios import list_scenarios, load_scenario
from mmuscope.engine.threads import THREADS
from mmuscope.tui.app import MmuscopeApp, make_app
from mmuscope.tui.widgets.caption import Caption

from tests.tui_pilot import until

SIZE = (120, 40)
MMUSCOPE = Path(sys.executable).parent / "mmuscope"


async def settle(pilot: object, rounds: int = 6) -> None:
    for _ in range(rounds):
        await pilot.pause(0.02)  # type: ignore[attr-defined]


def caption_text(app: MmuscopeApp) -> str:
    caption = app.screen.query_one(Caption)
    return f"{caption.border_title} {caption.content}"


ONE_PER_THREAD = sorted({s.thread or s.kernel: s.name for s in list_scenarios()}.values())


@pytest.mark.parametrize("name", ONE_PER_THREAD)
async def test_the_caption_names_the_thread_it_follows(name: str, tmp_path: Path) -> None:
    """By its short name where the title has room (a long title keeps the keys only);
    a scenario no thread discusses, as the model's own demonstration of kernel code."""
    scenario = load_scenario(name)
    followed = THREADS[scenario.thread].name if scenario.thread else scenario.follows
    app = make_app(scenario=name, export_dir=tmp_path)
    async with app.run_test(size=(200, 50)) as pilot:
        await until(pilot, lambda: "step 1/" in caption_text(app))  # the first step shown
        assert f"{followed} · > next step · < back" in caption_text(app)
        title = str(app.screen.query_one(Caption).border_title)
        assert scenario.thread or "thread" not in title, title


async def test_stepping_back_replays_to_the_same_state(tmp_path: Path) -> None:
    app = make_app(scenario="mmio-caching", export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.scenario_run is not None and app.scenario_run.index == 0)
        run = app.scenario_run
        assert run is not None
        await pilot.press("greater_than_sign")
        await until(pilot, lambda: run.index == 1)
        first = app.screen
        state = (first.session.steps, first.session.exits, dict(first.session.results))  # type: ignore[attr-defined]
        await pilot.press("greater_than_sign", "less_than_sign")
        # `<` makes the screen afresh and replays its steps; the index comes last
        await until(pilot, lambda: app.screen is not first and run.index == 1)
        again = app.screen
        assert again is not first and app.scenario_run.index == 1  # type: ignore[union-attr]
        assert (again.session.steps, again.session.exits, dict(again.session.results)) == state  # type: ignore[attr-defined]
        assert "step 2/4" in caption_text(app)


async def test_without_a_scenario_the_step_keys_do_nothing(tmp_path: Path) -> None:
    app = make_app(playing=False, export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("greater_than_sign")
        await settle(pilot)
        assert app.scenario_run is None
        assert not app.screen.query_one(Caption).display


def test_scenarios_command_lists_them_and_a_bad_name_exits_2() -> None:
    out = subprocess.run([MMUSCOPE, "scenarios"], capture_output=True, text=True, check=True)
    lines = {line.split()[0]: line.split() for line in out.stdout.splitlines() if line}
    for s in list_scenarios():
        assert lines[s.name][1:3] == [s.screen, s.thread or "kernel"]  # the thread by its id
    bad = subprocess.run([MMUSCOPE, "--scenario", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "no scenario 'nope'" in bad.stderr


#: the first scenario of each screen: what could take a clicker's keys is the screen's
#: focusable widgets, the same for every scenario on that screen (the event log; the
#: memslots screen's structure and table too); every scenario steps by `>` in
#: tests/test_scenario_steps.py
ONE_PER_SCREEN = [
    s.name
    for s in list_scenarios()
    if s == next(t for t in list_scenarios() if t.screen == s.screen)
]


@pytest.mark.parametrize("name", ONE_PER_SCREEN)
async def test_a_clickers_keys_step_on_every_screen_whatever_has_focus(
    name: str, tmp_path: Path
) -> None:
    """Clickers send PageDown/PageUp (some arrows, `.` and `b`): the focused widget (the
    memslot table, the event log) must not take them before the scenario does.  One
    scenario per screen (a stepping back replays its scenario from the start: all eleven
    took ~38 s of CPU, the five screens' take ~15 s)."""
    app = make_app(scenario=name, export_dir=tmp_path)
    app.animation_level = "none"
    async with app.run_test(size=SIZE) as pilot:
        # each wait ends when the step is there (goto_step sets the index, then the
        # caption), 10 s at most: a key the focused widget took never brings it
        await until(pilot, lambda: app.scenario_run is not None and app.scenario_run.index == 0)
        run = app.scenario_run
        assert run is not None and run.index == 0
        focusable = [w for w in app.screen.query("*") if w.focusable]
        if focusable:
            focusable[0].focus()  # whatever takes keys on this screen, focused
        await pilot.pause()
        assert not focusable or app.focused is focusable[0]
        for key, index in (("pagedown", 1), ("right", 2), ("pageup", 1), ("left", 0)):
            await pilot.press(key)
            await until(pilot, lambda index=index: run.index == index)  # type: ignore[misc]
            assert run.index == index, (key, app.focused)
        await pilot.press("full_stop")
        await until(pilot, lambda: run.index == 1)
        assert run.index == 1
        await pilot.press("b")
        await until(pilot, lambda: run.index == 0)
        assert run.index == 0 and "step 1/" in caption_text(app)


async def test_the_step_keys_type_into_a_dialog_in_a_scenario(tmp_path: Path) -> None:
    app = make_app(scenario="memslot-search", export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("f")  # the filter dialog: typing, not stepping
        await settle(pilot)
        await pilot.press("b", "full_stop", "left", "right")
        await settle(pilot)
        assert app.scenario_run is not None and app.scenario_run.index == 0
        assert app.focused is not None and getattr(app.focused, "value", None) == "b."


async def test_stepping_back_keeps_the_event_filter(tmp_path: Path) -> None:
    from mmuscope.tui.widgets.events import EventLog, EventPanel

    app = make_app(scenario="mmio-caching", export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.scenario_run is not None and app.scenario_run.index == 0)
        run = app.scenario_run
        assert run is not None
        await pilot.press("greater_than_sign", "greater_than_sign")
        await until(pilot, lambda: run.index == 2)
        first = app.screen
        await pilot.press("f")
        await until(pilot, lambda: bool(app.screen.query("Input")))  # the filter dialog
        app.screen.query_one("Input").value = "mmio"  # type: ignore[attr-defined]
        await pilot.press("enter")
        await until(pilot, lambda: app.screen is first)  # the dialog closed
        await pilot.press("less_than_sign")
        await until(pilot, lambda: app.screen is not first and run.index == 1)
        assert app.screen is not first and app.scenario_run.index == 1  # type: ignore[union-attr]
        panel = app.screen.query_one(EventPanel)
        assert panel.filter_text == "mmio"
        assert "/mmio/" in str(app.screen.query_one(EventLog).border_title)
        assert all("mmio" in r.event for r in panel.counters.rows(panel.pattern))
        lines = app.screen.query_one(EventLog).lines
        assert all("mmio" in line for line in lines if not line.startswith(" ")), lines
