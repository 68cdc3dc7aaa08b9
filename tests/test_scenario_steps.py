"""Every scenario, step by step, in the app (headless): after each step the screen shows
what the step declares (`expect` over the screen's probe; `shows`, regular expressions
with the caption's values filled in, in the screen as drawn, pop-ups left out), the
caption's `{...}` fields are filled from the same values, and no panel is cut at the
bottom: at 120×40 each panel's rows fit the part of it on screen, beside a caption of up
to six lines (and at 200×60 after the last step).  At 80×24, beside a caption cut to
five lines, the panels drop rows and say so rather than cut one, and the scenarios that
work there (a scenario file's `size`, the README's list) show what every step declares."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from mmuscope.engine.scenarios import Scenario, list_scenarios, load_scenario
from mmuscope.engine.scenarios.checks import failures, unshown
from mmuscope.tui.app import MmuscopeApp, goto_step, make_app
from mmuscope.tui.scenario_runner import ScenarioRun
from mmuscope.tui.widgets.caption import Caption
from mmuscope.tui.widgets.event_log import EventLog
from textual.pilot import Pilot
from textual.scroll_view import ScrollView
from textual.scrollbar import ScrollBar, ScrollBarCorner

from tests.tui_pilot import drawn_lines, laid_out, screen_text, until

SIZE = (120, 40)
WIDE = (200, 60)
SMALL = (80, 24)
CAPTION_LINES = 6  # the caption's max-height 7, less its top border (tui/widgets/caption.py)
#: the classroom scenarios (real-kvm runs the host's KVM: tests/test_kvm_app.py checks
#: its steps on the kernel, the walks here its steps before that)
CHECKED = [s.name for s in list_scenarios() if s.name != "real-kvm"]
WALKED = [s.name for s in list_scenarios()]
README = Path(__file__).resolve().parent.parent / "README.md"


def model_steps(scenario: Scenario) -> list[int]:
    """The steps that run on the model alone: those before the first that runs a guest
    on this machine's KVM (`real_fork`)."""
    return [
        index
        for index in range(len(scenario.steps))
        if not any(a.startswith("real_fork") for a in scenario.actions_until(index))
    ]


def cut_panels(app: MmuscopeApp) -> list[str]:
    """Each drawn widget whose content is taller than the part of it on screen, with
    no way to see the rest (scrolling views, the log and the tables with a scrollbar,
    are left out): the rows its content takes at its width against the rows shown."""
    cut = []
    for widget, region, clip in laid_out(app.screen):
        if widget.children or not region.area:
            continue
        if isinstance(widget, (ScrollView, ScrollBar, ScrollBarCorner)):
            continue
        content = widget.content_region
        shown = content.intersection(clip).height
        drawn_rows = getattr(widget, "drawn_rows", None)  # a panel that fits its rows
        if drawn_rows is not None:
            needed = drawn_rows(content.width)
        else:
            needed = widget.get_content_height(content.size, content.size, content.width)
        if needed > shown:
            cut.append(f"{widget!r}: {needed} rows, {shown} shown")
    return cut


async def first_step(app: MmuscopeApp, pilot: Pilot[None]) -> ScenarioRun:
    """The run once its first step is shown (the app starts it after its first frame:
    under load, a few pauses later; a bounded wait)."""
    run = app.scenario_run
    assert run is not None
    for _ in range(100):
        await pilot.pause()
        if run.index == 0:
            break
    assert run.index == 0
    return run


async def walk(name: str, size: tuple[int, int], tmp_path: Path, every_step: bool = True) -> int:
    """One scenario at one size, rendered once and walked step by step: after each step
    the screen as a student sees it (laid out, drawn, pop-up notifications cleared away:
    they go and are not panels) is checked, and every problem is reported at the end by
    scenario, step and size.  At 120×40 (`SIZE`), and at 80×24 for the scenarios that
    say they work there (README), every step; at 80×24 for the others, the first step,
    every other one after it and the last, for their panels only (the steps between run
    unseen: the walk costs their frames, not their actions).  At 120×40 the steps come
    by the `>` key, as a student steps (the caption's "step N/M", and `>` past the last
    step stays); at 80×24 by goto_step, what the key runs.

    At 120×40 the event log on screen, if the scenario's screen has one, shows rows of
    each step's own events after a step that logs any (not the first step's: a log that
    stopped following the end kept showing the rows of step 1, fast-zap's
    `kvm_mmu_set_spte: gfn 1099a8` at every step).  Returns how many steps it checked
    that way."""
    scenario = load_scenario(name)
    full = size == SIZE or scenario.fits(*SMALL)
    app = make_app(scenario=name, export_dir=tmp_path, playing=False)
    app.animation_level = "none"
    last = model_steps(scenario)[-1]
    steps = range(last + 1) if full else sorted({*range(0, last + 1, 2), last})
    async with app.run_test(size=size) as pilot:
        run = await first_step(app, pilot)
        if size == SIZE:  # the scenario's own screen, whose actions its steps name
            assert app.screen is app.get_screen(scenario.screen)
            for action in scenario.actions_until(len(scenario.steps) - 1):
                method = re.match(r"[a-z_0-9]+", action)
                assert method and hasattr(type(app.screen), f"action_{method[0]}"), action
        problems = []
        logged = 0  # steps whose new event-log rows were looked for on screen
        for index in steps:
            logs = app.screen.query(EventLog) if size == SIZE else None
            before = set(logs.first().lines) if logs else set()
            if index and size == SIZE:  # by the key a student presses
                await pilot.press("greater_than_sign")
                await until(pilot, lambda index=index: run.index == index)  # type: ignore[misc]
                assert run.index == index, f"{name}: `>` did not bring step {index + 1}"
            elif index:
                await goto_step(app, run, index)
            where = f"{name} step {index + 1} at {size[0]}×{size[1]}"
            step = scenario.steps[index]
            if size == SIZE:
                shown = f"{app.screen.query_one(Caption).border_title}"
                assert f"step {index + 1}/{len(scenario.steps)}" in shown, f"{where}: {shown}"
            if size == SIZE and name in CHECKED:
                problems += [f"{where}: {f}" for f in failures(step.expect, run.values())]
                caption = run.caption()
                assert "{" not in caption, f"{where}: a caption field was not filled: {caption}"
                lines = len(textwrap.wrap(caption, SIZE[0] - 4))  # inside the border, padding
                assert lines <= CAPTION_LINES, (
                    f"{where}: {lines} lines, the caption shows {CAPTION_LINES}"
                )
            app.clear_notifications()
            await pilot.pause()  # laid out and drawn: the screen as a student sees it
            caption_panel = app.screen.query_one(Caption)
            rows = caption_panel.region.height  # its text and its top rule
            assert rows <= CAPTION_LINES + (size != SMALL), f"{where}: the caption takes {rows}"
            need = "needs {}×{}".format(*scenario.size)  # on a terminal it does not fit
            title = str(caption_panel.border_title)
            assert (need in title) != scenario.fits(*size), f"{where}: the caption's {title!r}"
            problems += [f"{where}: cut at the bottom: {cut}" for cut in cut_panels(app)]
            new_rows = (
                {row.rstrip() for row in logs.first().lines if row not in before} if logs else set()
            )
            if index and new_rows:  # a step that logs nothing keeps the rows before it
                shown = log_rows_shown(app)
                if not new_rows & set(shown):
                    problems.append(f"{where}: the event log shows none of its rows: {shown}")
                logged += 1
            if full:
                screen = screen_text(app)
                problems += [f"{where}: the screen does not show {pattern!r}"
                             for pattern in unshown(step.shows, run.values(), screen)]  # fmt: skip
        if size == SIZE and last == len(scenario.steps) - 1:
            await pilot.press("greater_than_sign")  # past the end: stays
            await pilot.pause()
            assert run.index == last, f"{name}: `>` went past the last step"
            app.clear_notifications()  # "that was the last step"
        if size == SIZE:
            await pilot.resize_terminal(*WIDE)  # the last step at 200×60 too: one relayout
            await pilot.pause()
            problems += [f"{name} at {WIDE}: cut at the bottom: {cut}" for cut in cut_panels(app)]
        assert not problems, "\n".join(problems)
    return logged


#: scenarios whose event log gets new rows at two steps or more
LOGGING = ["fast-zap", "mmio-generation-wrap", "fast-page-fault"]


@pytest.mark.parametrize("name", WALKED)
async def test_each_step_shows_what_it_declares(name: str, tmp_path: Path) -> None:
    logged = await walk(name, SIZE, tmp_path)
    assert name not in LOGGING or logged >= 2, f"{name}: {logged} steps logged events"


@pytest.mark.parametrize("name", WALKED)
async def test_each_step_at_80x24(name: str, tmp_path: Path) -> None:
    await walk(name, SMALL, tmp_path)


def test_the_readme_names_the_scenarios_drawn_for_80x24() -> None:
    """The README's list of the scenarios that work on 80×24 is the scenario files'."""
    text = " ".join(README.read_text(encoding="utf-8").split())
    said = text.split("show everything their captions point at on 80×24:", 1)[1]
    listed = set(re.findall(r"`([a-z0-9-]+)`", said.split(".", 1)[0]))
    assert listed == {s.name for s in list_scenarios() if s.fits(*SMALL)}


def test_every_step_declares_what_the_screen_shows() -> None:
    for scenario in map(load_scenario, CHECKED):
        for number, step in enumerate(scenario.steps, 1):
            assert step.expect, f"{scenario.name} step {number} declares nothing to check"
            assert step.shows, f"{scenario.name} step {number} declares nothing drawn"


def log_rows_shown(app: MmuscopeApp) -> list[str]:
    """The event log's rows on screen, inside its border and left of its scrollbar."""
    log = app.screen.query_one(EventLog)
    return [line[1:-2].rstrip() for line in drawn_lines(log)[1:-1]]
