"""Running a scenario in the app: the caption, stepping forward, and stepping back.

Forward runs the next step's actions on the scenario's screen, as if its keys had been
pressed.  Back builds the screen afresh and replays the setup and every earlier step:
the screens are deterministic for their seed, so the picture is the one seen before.
After the setup and after each step the runner takes the screen's probe
(`tui/scenario_probe.py`): the captions' `{...}` fields are the model's own numbers, and
the tests check each step's `expect` against the same values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mmuscope.engine.scenarios.checks import CheckError, Values, render
from mmuscope.engine.threads import thread
from textual.screen import Screen

from .scenario_probe import Probe, probe

if TYPE_CHECKING:
    from mmuscope.engine.scenarios import Scenario

    from .app import MmuscopeApp

HINT = "> next step · < back"
SHORT_HINT = "> next · < back"


@dataclass
class ScenarioRun:
    scenario: Scenario
    index: int = -1  # the step shown; -1 before the first
    before: Probe = field(default_factory=dict)  # the screen after the setup
    probes: list[Probe] = field(default_factory=list)  # after each step up to `index`

    @property
    def last(self) -> int:
        return len(self.scenario.steps) - 1

    def values(self) -> Values:
        return Values(self.before, self.probes[: self.index + 1])

    def caption(self) -> str:
        """The step's caption with the model's numbers filled in (as written if a field
        cannot be computed: a lecture goes on, the scenario tests report it)."""
        text = self.scenario.steps[self.index].caption
        try:
            return render(text, self.values())
        except (CheckError, ValueError, TypeError, ZeroDivisionError):
            return text


async def rebuild_view(app: MmuscopeApp, name: str) -> Screen[None]:
    """A fresh screen under `name`, made current (the old one is removed)."""
    old = app.get_screen(name) if app.is_screen_installed(name) else None
    pause = getattr(old, "pause", None)
    if pause is not None:
        pause()
    from .screens.base import MmuScreen

    pattern = old.events_panel.pattern if isinstance(old, MmuScreen) and old.is_mounted else None
    new = app.make_screen(name)
    await app.switch_screen(new)
    if pattern is not None and isinstance(new, MmuScreen):
        new.events_panel.set_filter(pattern)  # the `f` filter outlives the rebuild
    if old is not None:
        app.uninstall_screen(name)
        if old.is_attached:
            await old.remove()
    app.install_screen(new, name)
    return new


async def goto_step(app: MmuscopeApp, run: ScenarioRun, target: int) -> None:
    """Bring the scenario's screen to step `target` (0-based) and caption it."""
    scenario, name = run.scenario, run.scenario.screen
    if target <= run.index or run.index < 0 or not app.is_screen_installed(name):
        screen = await rebuild_view(app, name)
        for action in scenario.setup:
            await app.run_action(action, screen)
        run.before, run.probes, first = probe(screen), [], 0
    else:
        app.action_show_view(name)
        screen = app.get_screen(name)
        first = run.index + 1
    del run.probes[first:]
    for step in scenario.steps[first : target + 1]:
        for action in step.actions:
            await app.run_action(action, screen)
        run.probes.append(probe(screen))
    run.index = target
    show_caption(screen, run)


def show_caption(screen: Screen[object], run: ScenarioRun) -> None:
    from .widgets.caption import Caption

    scenario = run.scenario
    title = f"{scenario.title} · step {run.index + 1}/{len(scenario.steps)}"
    where = f"{thread(scenario.thread).name} · {HINT}"
    text = run.caption()
    for caption in screen.query(Caption):
        caption.show_step(title, text, where, SHORT_HINT)
    screen.add_class("-captioned")  # panels make room for the caption
    from .screens.base import MmuScreen

    if isinstance(screen, MmuScreen):
        screen.caption_text = f"{scenario.steps[run.index].caption}\n{text}"  # fields too
        screen.events_panel.focus_text = screen.caption_text
        screen.events_panel.show_counters()
        show_state = getattr(screen, "show_state", None)
        if show_state is not None:
            show_state()  # the side panels keep what the caption names
