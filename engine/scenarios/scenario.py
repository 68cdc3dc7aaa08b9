"""Loading and checking scenario files (see the package docstring for the format)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from ..threads import THREADS
from .checks import CheckError, caption_fields, parse, shown_pattern

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    # tomli is installed on 3.10 only: mypy (python_version 3.10) checks this branch
    # everywhere, and the ignore is unused where tomli is found
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

SCENARIO_DIR = Path(str(files(__package__ or "mmuscope.engine.scenarios") / "data"))
"""The scenario files, installed with the package (pyproject's package-data)."""
SCREENS = ("memslots", "mmu", "rmaps", "tlb", "power")
SETTINGS = {"lookup": str, "workload": str, "seed": int, "speed": (int, float)}
ACTION = re.compile(r"^[a-z_][a-z0-9_]*(\([^()]*\))?$")
REF = re.compile(r"^§\d+(\.\d+)*$")
STEP_KEYS = {"caption", "actions", "sources", "expect", "shows"}
SMALLEST = (80, 24)  # the app's own smallest screen (README); a scenario may need more
SIZE = re.compile(r"^(\d+)x(\d+)$")
KERNEL_CODE = re.compile(r"^[a-z_][a-z0-9_]*\(\), \d+\.\d+ [a-z_/]+\.[ch]$")  # as docstrings cite


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True, slots=True)
class Source:
    """Where a caption's claim comes from: a passage of a thread (`thread` is its id in
    engine/threads.py, `quote` the words as the thread has them, which docs/threads.md
    quotes), or a section of docs/kvm.md (`ref = "§5.2"`, optionally with a `quote` of it)."""

    thread: str = ""
    ref: str = ""
    quote: str = ""


@dataclass(frozen=True, slots=True)
class ScenarioStep:
    caption: str
    actions: tuple[str, ...] = ()
    sources: tuple[Source, ...] = ()
    expect: tuple[str, ...] = ()  # engine.scenarios.checks expressions over the probe
    shows: tuple[str, ...] = ()  # regular expressions the drawn screen matches after it

    def quotes(self) -> list[str]:
        """The caption's double-quoted passages (the thread's words; screen labels are
        single-quoted)."""
        return re.findall(r'"([^"]+)"', self.caption)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    title: str
    thread: str  # the id of the thread it follows (engine/threads.py), or ""
    screen: str
    layout: str
    steps: tuple[ScenarioStep, ...]
    settings: dict[str, Any] = field(default_factory=dict)
    setup: tuple[str, ...] = ()
    size: tuple[int, int] = SMALLEST  # the smallest terminal its screens are drawn for
    kernel: str = ""  # or the kernel code it demonstrates: "fast_page_fault(), 6.18 mmu.c"

    @property
    def follows(self) -> str:
        """What the scenario follows, for its caption's title: "the fast-zap thread (kvm,
        2013)", or, for one no thread discusses, the model's own demonstration of a kernel
        function, cited as the docstrings cite it."""
        if self.thread:
            return THREADS[self.thread].name
        return f"the model's own demonstration of the kernel's {self.kernel}"

    @property
    def follows_short(self) -> str:
        """The same where the title has less room: "fast-zap thread", "kernel's
        fast_page_fault()"."""
        if self.thread:
            return f"{THREADS[self.thread].label} thread"
        return f"kernel's {self.kernel.split(',')[0]}"

    def fits(self, width: int, height: int) -> bool:
        """Whether a terminal of that size shows what every step's caption points at."""
        return width >= self.size[0] and height >= self.size[1]

    def actions_until(self, index: int) -> list[str]:
        """Every action from the setup through step `index` (0-based), in order."""
        actions = list(self.setup)
        for step in self.steps[: index + 1]:
            actions += step.actions
        return actions


def list_scenarios(directory: Path = SCENARIO_DIR) -> list[Scenario]:
    """Every scenario, in file-name order (the files are numbered by mechanism)."""
    paths = sorted(directory.glob("*.toml"))
    if not paths:
        raise ScenarioError(f"no scenario files in {directory}: the installation is incomplete")
    return [load_scenario(path) for path in paths]


def scenario_names(directory: Path = SCENARIO_DIR) -> list[str]:
    return [_name(path) for path in sorted(directory.glob("*.toml"))]


def _name(path: Path) -> str:
    """`03-vtlb.toml` is the scenario `vtlb`."""
    return re.sub(r"^\d+-", "", path.stem)


def load_scenario(which: str | Path, directory: Path = SCENARIO_DIR) -> Scenario:
    """A scenario by name (`vtlb`) or path."""
    path = Path(which)
    if not path.suffix:
        found = [p for p in sorted(directory.glob("*.toml")) if _name(p) == str(which)]
        if not found:
            names = ", ".join(scenario_names(directory))
            raise ScenarioError(f"no scenario {str(which)!r}; choose from {names}")
        path = found[0]
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise ScenarioError(f"{path}: cannot read: {err}") from None
    except tomllib.TOMLDecodeError as err:
        raise ScenarioError(f"{path}: not TOML: {err}") from None
    return parse_scenario(_name(path), data, where=str(path))


def parse_scenario(name: str, data: dict[str, Any], where: str = "scenario") -> Scenario:
    from ..layouts import PRESETS

    def need(key: str, kind: type, table: dict[str, Any] = data, at: str = "") -> Any:
        value = table.get(key)
        if not isinstance(value, kind) or (isinstance(value, str) and not value.strip()):
            raise ScenarioError(f"{where}: {at}{key} must be a non-empty {kind.__name__}")
        return value

    keys = {"title", "thread", "kernel", "screen", "layout", "settings", "setup", "steps", "size"}
    unknown = set(data) - keys
    if unknown:
        raise ScenarioError(f"{where}: unknown keys {', '.join(sorted(unknown))}")
    screen, layout = need("screen", str), need("layout", str)
    if ("thread" in data) == ("kernel" in data):
        raise ScenarioError(f"{where}: a scenario follows a thread or kernel code, not both")
    thread = need("thread", str) if "thread" in data else ""
    kernel = need("kernel", str) if "kernel" in data else ""
    if screen not in SCREENS:
        raise ScenarioError(f"{where}: screen {screen!r} is not one of {', '.join(SCREENS)}")
    if layout not in PRESETS:
        raise ScenarioError(f"{where}: layout {layout!r} is not a preset")
    if thread and thread not in THREADS:
        raise ScenarioError(f"{where}: thread {thread!r} is not one of {', '.join(THREADS)}")
    if kernel and not KERNEL_CODE.match(kernel):
        raise ScenarioError(f"{where}: kernel {kernel!r} is not cited as 'name(), 6.18 file.c'")
    settings = data.get("settings", {})
    if not isinstance(settings, dict):
        raise ScenarioError(f"{where}: settings must be a table")
    for key, value in settings.items():
        if key not in SETTINGS or not isinstance(value, SETTINGS[key]):  # type: ignore[arg-type]
            raise ScenarioError(f"{where}: settings.{key} is not a known setting of its type")
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        raise ScenarioError(f"{where}: a scenario needs at least one [[steps]]")
    return Scenario(
        name=name,
        title=need("title", str),
        thread=thread,
        screen=screen,
        layout=layout,
        steps=tuple(_step(s, i, where, need) for i, s in enumerate(steps, 1)),
        settings=dict(settings),
        setup=_actions(data.get("setup", []), f"{where}: setup"),
        size=_size(data.get("size", "80x24"), where),
        kernel=kernel,
    )


def _size(text: Any, where: str) -> tuple[int, int]:
    """`size = "120x40"`: columns x rows, at least the app's own 80x24."""
    found = SIZE.match(text) if isinstance(text, str) else None
    if found is None or int(found[1]) < SMALLEST[0] or int(found[2]) < SMALLEST[1]:
        raise ScenarioError(f"{where}: size must be COLUMNSxROWS, at least 80x24, like 120x40")
    return int(found[1]), int(found[2])


def _step(step: Any, number: int, where: str, need: Any) -> ScenarioStep:
    if not isinstance(step, dict) or set(step) - STEP_KEYS:
        raise ScenarioError(f"{where}: step {number} may have only {', '.join(sorted(STEP_KEYS))}")
    at = f"{where}: step {number}"
    caption = " ".join(need("caption", str, step, f"step {number}: ").split())
    expect = _strings(step.get("expect", []), f"{at}: expect")
    shows = _strings(step.get("shows", []), f"{at}: shows")
    try:
        caption_fields(caption)
        for expr in expect:
            parse(expr)
        for pattern in shows:
            caption_fields(pattern)
            shown_pattern(pattern)
    except CheckError as err:
        raise ScenarioError(f"{at}: {err}") from None
    return ScenarioStep(
        caption,
        _actions(step.get("actions", []), at),
        _sources(step.get("sources", []), at),
        expect,
        shows,
    )


def _strings(values: Any, where: str) -> tuple[str, ...]:
    if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
        raise ScenarioError(f"{where} must be a list of non-empty strings")
    return tuple(values)


def _sources(sources: Any, where: str) -> tuple[Source, ...]:
    if not isinstance(sources, list):
        raise ScenarioError(f"{where}: sources must be a list of tables")
    found = []
    for source in sources:
        if not isinstance(source, dict) or set(source) - {"thread", "ref", "quote"}:
            raise ScenarioError(f"{where}: a source has thread, ref and quote only")
        if not all(isinstance(v, str) for v in source.values()):
            raise ScenarioError(f"{where}: a source's fields are strings")
        item = Source(**{k: " ".join(v.split()) for k, v in source.items()})
        if bool(item.thread) == bool(item.ref):
            raise ScenarioError(f"{where}: a source names a thread or a ref, not both")
        if item.thread and item.thread not in THREADS:
            ids = ", ".join(THREADS)
            raise ScenarioError(f"{where}: thread {item.thread!r} is not one of {ids}")
        if item.thread and not item.quote:
            raise ScenarioError(f"{where}: thread {item.thread!r} needs a quote")
        if item.ref and not REF.match(item.ref):
            raise ScenarioError(
                f"{where}: ref {item.ref!r} is not a section of docs/kvm.md like §5.2"
            )
        found.append(item)
    return tuple(found)


def _actions(actions: Any, where: str) -> tuple[str, ...]:
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise ScenarioError(f"{where}: actions must be a list of strings")
    for action in actions:
        if not ACTION.match(action):
            raise ScenarioError(f"{where}: {action!r} is not an action name")
    return tuple(actions)
