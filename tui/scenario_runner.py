"""A scenario's run in the app: the step shown, the screen's probes, and the caption.

The app steps it (`goto_step` in tui/app.py): forward runs the next step's actions on the
scenario's screen, as if its keys had been pressed; back builds the screen afresh and
replays the setup and every earlier step: the screens are deterministic for their seed,
so the picture is the one seen before.  After the setup and after each step the screen's
probe is taken (`tui/scenario_probe.py`): the captions' `{...}` fields are the model's own
numbers, and the tests check each step's `expect` against the same values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mmuscope.engine.scenarios.checks import CheckError, Values, render
from textual.screen import Screen

from .scenario_probe import Probe

if TYPE_CHECKING:
    from mmuscope.engine.scenarios import Scenario

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


def show_caption(screen: Screen[Any], run: ScenarioRun) -> None:
    from .widgets.caption import Caption

    scenario = run.scenario
    title = f"{scenario.title} · step {run.index + 1}/{len(scenario.steps)}"
    hints = (  # the fullest that fits beside the title
        f"{scenario.follows} · {HINT}",
        f"{scenario.follows_short} · {SHORT_HINT}",
        SHORT_HINT,
    )
    text = run.caption()
    for caption in screen.query(Caption):
        caption.show_step(title, text, *hints, needs=scenario.size)
    screen.add_class("-captioned")  # panels make room for the caption
    from .screens.base import MmuScreen

    if isinstance(screen, MmuScreen):
        screen.caption_text = f"{scenario.steps[run.index].caption}\n{text}"  # fields too
        screen.events_panel.focus_text = screen.caption_text
        screen.events_panel.show_counters()
        screen.events_panel.show_latest()  # the step's own events, not step 1's
        show_state = getattr(screen, "show_state", None)
        if show_state is not None:
            show_state()  # the side panels keep what the caption names
