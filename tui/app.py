"""The explorer app and its one factory, `make_app`, used by the CLI, the tests, the
benchmarks and the screenshot script."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, cast

from mmuscope.engine.layouts import DEFAULT_LAYOUT, Layout, preset
from mmuscope.engine.memslots.explorer import MemslotExplorer
from mmuscope.engine.memslots.workload import DEFAULT_WORKLOAD
from mmuscope.engine.pacing import DEFAULT_SPEED, Pacer
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.reactive import Initialize, Reactive
from textual.screen import ModalScreen, Screen

from .resources import stylesheet
from .themes import DEFAULT_THEME, THEME_VARIABLES, register_themes

if TYPE_CHECKING:
    from mmuscope.engine.memslots.churn import RecordedChurn
    from mmuscope.engine.scenarios import Scenario

    from .kvm_launch import KvmLaunch
    from .scenario_runner import ScenarioRun


@dataclass(frozen=True, slots=True)
class AppConfig:
    """What the explorer opens on (`make_app` fills it from its arguments)."""

    layout: Layout = field(default_factory=lambda: preset(DEFAULT_LAYOUT))
    lookup: str = "rbtree"
    workload: str = DEFAULT_WORKLOAD
    seed: int = 1
    speed: float = DEFAULT_SPEED
    playing: bool = True
    theme: str | None = None
    export_dir: Path = Path(".")
    as_id: int = 0
    scenario: Scenario | None = None
    churn: RecordedChurn | None = None  # QEMU's recorded memslot calls, replayed live
    trace: Path | None = None  # `mmuscope replay TRACE`: open on the replay screen
    tracefs: Path | None = None  # `mmuscope live`: the replay screen on trace_pipe
    kvm: KvmLaunch | None = None  # `mmuscope kvm PROGRAM`: a real guest, followed live


#: the keys presenters' clickers send, besides `>` and `<`
NEXT_STEP_KEYS = "pagedown,right,full_stop"
BACK_STEP_KEYS = "pageup,left,b"


class MmuscopeApp(App[None]):
    """mmuscope: KVM's MMU, live."""

    CSS_PATH = stylesheet()  # tui/app.tcss, from the installed package
    TITLE = "mmuscope"
    BINDINGS = [
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("f1", "show_view('memslots')", "Memslots", tooltip="The memslots screen"),
        Binding("f2", "show_view('mmu')", "Shadow MMU", tooltip="Faults, shadow pages, zaps"),
        Binding("f3", "show_view('rmaps')", "Rmaps", tooltip="A fork storm's rmap chains"),
        Binding(
            "f4",
            "show_view('tlb')",
            "TLB flush",
            tooltip="Paravirt TLB flush (the PV-flush thread)",
        ),
        Binding("f5", "show_view('power')", "POWER", tooltip="POWER hash page table keys"),
        Binding(
            "f6",
            "show_view('experiments')",
            "Experiments",
            tooltip="The threads' claims measured: bench tables as bar charts",
        ),
        Binding(
            "f7",
            "show_view('replay')",
            "Replay",
            tooltip="The trace replayed (mmuscope replay TRACE, mmuscope live)",
        ),
        # A presenter's clicker sends PageDown/PageUp, arrows, or `.`/`b`: priority, so a
        # focused table or log cannot take them first (only in a scenario, see check_action)
        Binding(
            f"greater_than_sign,{NEXT_STEP_KEYS}",
            "scenario(1)",
            "Next step",
            key_display=">",
            priority=True,
            tooltip="The scenario's next step (also PageDown, →, a clicker's `.`)",
        ),
        Binding(
            f"less_than_sign,{BACK_STEP_KEYS}",
            "scenario(-1)",
            "Step back",
            key_display="<",
            priority=True,
            tooltip="The scenario's previous step, replayed from the start (also PageUp, ←, b)",
        ),
        Binding(
            "C",
            "whole_caption",
            "Caption",
            show=False,
            tooltip="The scenario's caption whole, or cut to its first lines again",
        ),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("t", "next_theme", "Theme", show=False, tooltip="Cycle the mmuscope themes"),
        Binding("S", "screenshot_svg", "Screenshot", show=False, tooltip="Save an SVG screenshot"),
    ]

    #: The theme the app starts in is the reactive's first value: App.__init__ reads it
    #: (through `current_theme`) for the stylesheet's variables and the dark/light
    #: classes, after registering Textual's own themes; `first_theme` registers
    #: mmuscope's then.  Set after __init__ instead, `theme` would run its watcher, whose
    #: `refresh_css` parses every stylesheet source again and restyles the app before
    #: the first frame (~35M instructions, benchmarks/startup_speed.py).
    theme: Reactive[str] = Reactive(Initialize(lambda app: cast("MmuscopeApp", app).first_theme()))

    def __init__(self, config: AppConfig) -> None:
        self.config = config  # before App.__init__, which reads the theme (first_theme)
        super().__init__()
        self.export_dir = config.export_dir
        self.scenario_run: ScenarioRun | None = None
        if config.scenario:
            from .scenario_runner import ScenarioRun  # only with a scenario: not at start-up

            self.scenario_run = ScenarioRun(config.scenario)

    def first_theme(self) -> str:
        """Register mmuscope's themes (built-in and the user's) beside Textual's; the
        theme the app opens in (`--theme`, or mmuscope-dark)."""
        textual_themes = set(self.available_themes)
        self.theme_warnings = register_themes(self)
        #: mmuscope's themes (built-in and the user's), in the order `t` cycles them
        self.own_themes = [n for n in self.available_themes if n not in textual_themes]
        return self.config.theme or DEFAULT_THEME

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(THEME_VARIABLES)

    def on_mount(self) -> None:
        for warning in self.theme_warnings:
            self.notify(warning, severity="warning", timeout=10, markup=False)
        first = "replay" if self.has_replay else "memslots"
        self.install_screen(self.make_screen(first), first)
        self.push_screen(first)
        if self.scenario_run is not None:
            self.call_after_refresh(self.action_scenario, 1)

    def on_unmount(self) -> None:
        render = sys.modules.get("mmuscope.engine.export.render")
        if render is not None:
            render.kill_running_dots()  # an export still in `dot` does not outlive the app

    def memslots_screen(self) -> Screen[None]:
        from .screens.memslots import MemslotsScreen

        config = self.config
        explorer = MemslotExplorer(
            config.layout,
            config.lookup,
            workload=config.workload,
            seed=config.seed,
            as_id=config.as_id,
        )
        return MemslotsScreen(explorer, Pacer(config.speed, config.playing), config.churn)

    def mmu_screen(self) -> Screen[None]:
        from mmuscope.engine.mmu.tdp.session import TdpSession

        from .screens.shadow_mmu import ShadowMmuScreen

        config = self.config
        session = TdpSession(config.layout, seed=config.seed)  # today's default under EPT
        return ShadowMmuScreen(session, Pacer(config.speed, playing=False), seed=config.seed)

    def rmap_screen(self) -> Screen[None]:
        from .screens.rmaps import RmapScreen

        return RmapScreen(Pacer(self.config.speed, playing=False))

    def tlb_screen(self) -> Screen[None]:
        from .screens.tlb import TlbScreen

        return TlbScreen(Pacer(self.config.speed, playing=False))

    def power_screen(self) -> Screen[None]:
        from .screens.power import PowerScreen

        return PowerScreen(Pacer(self.config.speed, playing=False))

    def experiments_screen(self) -> Screen[None]:
        from .screens.experiments import ExperimentsScreen

        return ExperimentsScreen()

    @property
    def has_replay(self) -> bool:
        config = self.config
        return config.trace is not None or config.tracefs is not None or config.kvm is not None

    def replay_screen(self) -> Screen[None]:
        from .screens.replay import REPLAY_SPEED, ReplayScreen

        config = self.config
        if config.trace is not None:
            return ReplayScreen.for_trace(config.trace, Pacer(REPLAY_SPEED, config.playing))
        if config.kvm is not None:
            from .screens.kvm_replay import KvmReplayScreen

            return KvmReplayScreen(config.kvm, Pacer(REPLAY_SPEED))
        assert config.tracefs is not None
        return ReplayScreen.for_live(config.tracefs, Pacer(REPLAY_SPEED))

    def make_screen(self, name: str) -> Screen[None]:
        """The screen behind a view name (built on first use)."""
        factories = {
            "memslots": self.memslots_screen,
            "mmu": self.mmu_screen,
            "rmaps": self.rmap_screen,
            "tlb": self.tlb_screen,
            "power": self.power_screen,
            "experiments": self.experiments_screen,
        }
        if self.has_replay:
            factories["replay"] = self.replay_screen
        return factories[name]()

    # -- actions ----------------------------------------------------------------------

    def action_show_view(self, name: str) -> None:
        """Switch screens; each keeps its state (and pauses while hidden)."""
        if name == "replay" and not self.has_replay:
            self.notify(
                "no trace to replay: open one with  mmuscope replay TRACE  "
                "(or follow this host with  mmuscope live)",
                title="replay",
                severity="warning",
                markup=False,
            )
            return
        if not self.is_screen_installed(name):
            self.install_screen(self.make_screen(name), name)
        target = self.get_screen(name)
        if self.screen is not target:
            pause = getattr(self.screen, "pause", None)
            if pause is not None:
                pause()  # a hidden screen does not play on in the background
            self.switch_screen(name)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("scenario", "whole_caption"):
            # the keys exist only in a scenario, and not while a dialog takes typing
            return self.scenario_run is not None and not isinstance(self.screen, ModalScreen)
        return True

    async def action_scenario(self, delta: int) -> None:
        """Step the scenario forward (1) or back (-1)."""
        run = self.scenario_run
        if run is None:
            return
        target = max(0, min(run.last, run.index + delta))
        if target == run.index:
            self.notify("that was the last step" if delta > 0 else "this is the first step")
            return
        await goto_step(self, run, target)

    def action_whole_caption(self) -> None:
        """`C`: a caption cut to its first lines (a short terminal) shown whole, and back."""
        from .widgets.caption import Caption

        for caption in self.screen.query(Caption):
            caption.toggle_whole()

    def action_help(self) -> None:
        from .screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.screen))

    def action_next_theme(self) -> None:
        names = self.own_themes
        current = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(current + 1) % len(names)]
        self.notify(f"theme: {self.theme}", timeout=2, markup=False)

    def notify_replacing(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
    ) -> None:
        """A notification that takes the place of those shown (repeated `j` shows the
        latest call, not a stack of them); plain text, no markup."""
        self.clear_notifications()
        self.notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    def action_screenshot_svg(self) -> None:
        """An SVG of the screen as it is, without the notifications on top of it (they are
        cleared, and the picture taken once they are gone from the screen)."""
        self.clear_notifications()
        self.call_after_refresh(self._write_screenshot)

    def _write_screenshot(self) -> None:
        """The SVG written to a temporary name and renamed."""
        from mmuscope.engine.export.render import ExportError, write_atomically

        view = getattr(self.screen, "view_name", "view")
        path = self.export_dir / f"mmuscope-{view}-{time.strftime('%Y%m%d-%H%M%S')}.svg"
        try:
            write_atomically(path, self.export_screenshot(title=f"mmuscope: {view}").encode())
        except ExportError as err:
            self.notify(str(err), title="screenshot", severity="error", timeout=8, markup=False)
            return
        self.notify(f"wrote {path}", title="screenshot", timeout=6, markup=False)

    # -- command palette --------------------------------------------------------------

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        seen: set[str] = set()
        for active in screen.active_bindings.values():
            binding = active.binding
            if binding.action in seen or not binding.description or binding.system:
                continue
            seen.add(binding.action)
            help_text = binding.tooltip or binding.description
            key = binding.key_display or self.get_key_display(binding)
            yield SystemCommand(
                f"{binding.description} ({key})",
                help_text,
                partial(self.run_action, binding.action, active.node),
            )


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
    """Bring the scenario's screen to step `target` (0-based) and caption it: forward,
    the next steps' actions; back, the screen made afresh, its setup and every step up
    to `target` run again (tui/scenario_runner.py)."""
    from .scenario_probe import probe
    from .scenario_runner import show_caption

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


def make_app(
    layout: Layout | str = DEFAULT_LAYOUT,
    *,
    lookup: str = "rbtree",
    workload: str = DEFAULT_WORKLOAD,
    seed: int = 1,
    speed: float = DEFAULT_SPEED,
    playing: bool = True,
    theme: str | None = None,
    export_dir: Path | str = ".",
    as_id: int = 0,
    scenario: Scenario | str | None = None,
    churn: RecordedChurn | None = None,
    trace: Path | str | None = None,
    tracefs: Path | str | None = None,
    kvm: KvmLaunch | None = None,
) -> MmuscopeApp:
    """The explorer on a guest (a preset name or a `Layout`), or on a scenario, whose
    layout and settings replace the guest's, paused on its first step; with a `trace`
    file or a `tracefs` directory, open on the replay screen (F7)."""
    if isinstance(scenario, str):
        from mmuscope.engine.scenarios import load_scenario

        scenario = load_scenario(scenario)
    if scenario is not None:
        layout, playing = scenario.layout, False
        settings = scenario.settings
        lookup = settings.get("lookup", lookup)
        workload = settings.get("workload", workload)
        seed = settings.get("seed", seed)
        speed = settings.get("speed", speed)
    if churn is not None:
        layout = churn.boot  # the guest as QEMU built it, before the recorded updates
    if isinstance(layout, str):
        layout = preset(layout)
    config = AppConfig(
        layout,
        lookup,
        workload,
        seed,
        speed,
        playing,
        theme,
        Path(export_dir),
        as_id,
        scenario,
        churn,
        Path(trace) if trace is not None else None,
        Path(tracefs) if tracefs is not None else None,
        kvm,
    )
    return MmuscopeApp(config)
