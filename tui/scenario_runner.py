"""Running a scenario in the app: the caption, stepping forward, and stepping back.

Forward runs the next step's actions on the scenario's screen, as if its keys had been
pressed.  Back builds the screen afresh and replays the setup and every earlier step:
the screens are deterministic for their seed, so the picture is the one seen before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.screen import Screen

if TYPE_CHECKING:
    from engine.scenarios import Scenario

    from .app import MmuscopeApp

HINT = "> next step · < back"


@dataclass
class ScenarioRun:
    scenario: Scenario
    index: int = -1  # the step shown; -1 before the first

    @property
    def last(self) -> int:
        return len(self.scenario.steps) - 1


async def rebuild_view(app: MmuscopeApp, name: str) -> Screen[None]:
    """A fresh screen under `name`, made current (the old one is removed)."""
    old = app.get_screen(name) if app.is_screen_installed(name) else None
    pause = getattr(old, "pause", None)
    if pause is not None:
        pause()
    new = app.make_screen(name)
    await app.switch_screen(new)
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
        actions = scenario.actions_until(target)
    else:
        app.action_show_view(name)
        screen = app.get_screen(name)
        actions = [a for step in scenario.steps[run.index + 1 : target + 1] for a in step.actions]
    for action in actions:
        await app.run_action(action, screen)
    run.index = target
    show_caption(screen, run)


def show_caption(screen: Screen[object], run: ScenarioRun) -> None:
    from .widgets.caption import Caption

    scenario, step = run.scenario, run.scenario.steps[run.index]
    title = f"{scenario.title} · step {run.index + 1}/{len(scenario.steps)}"
    where = f"seed {scenario.seed.split('_')[0]} · {HINT}"
    for caption in screen.query(Caption):
        caption.show_step(title, step.caption, where)
    screen.add_class("-captioned")  # panels make room for the caption
