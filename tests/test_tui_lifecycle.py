"""Textual's lifecycle as Textual means it: Textual dispatches a message to the handler
each class of the MRO defines itself, so each screen class's `on_mount` runs once per
mount and none calls its base's (a chained one ran MmuScreen's three times: three
kvm_stat counter timers, whose CurAvg/s then read 0 while playing).  Border titles are
set one way: through widgets/fit.py's show_title and show_subtitle, which set Textual's
public `border_title`/`border_subtitle` when the text changes (a set repaints the widget
whole, to the same text too)."""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from mmuscope.tui.screens.base import MmuScreen
from mmuscope.tui.screens.experiments import ExperimentsScreen
from mmuscope.tui.screens.memslots import MemslotsScreen
from mmuscope.tui.screens.power import PowerScreen
from mmuscope.tui.screens.rmaps import RmapScreen
from mmuscope.tui.screens.shadow_mmu import ShadowMmuScreen
from mmuscope.tui.screens.tlb import TlbScreen

from tests.tui_pilot import SIZE, build

ROOT = Path(__file__).resolve().parent.parent
TITLES_SET_IN = ROOT / "tui" / "widgets" / "fit.py"

VIEWS = {
    "memslots": MemslotsScreen,
    "mmu": ShadowMmuScreen,
    "rmaps": RmapScreen,
    "tlb": TlbScreen,
    "power": PowerScreen,
    "experiments": ExperimentsScreen,
}


def _count_on_mount(monkeypatch: pytest.MonkeyPatch, calls: Counter[str]) -> None:
    """Count the calls of each screen class's own on_mount (the method in its __dict__,
    where Textual's dispatch finds it)."""

    def counting(name: str, own: Callable[[MmuScreen], None]) -> Callable[[MmuScreen], None]:
        def on_mount(self: MmuScreen) -> None:
            calls[name] += 1
            own(self)

        return on_mount

    for cls in {cls for screen in VIEWS.values() for cls in screen.__mro__}:
        own = cls.__dict__.get("on_mount")
        if own is not None and issubclass(cls, MmuScreen):
            monkeypatch.setattr(cls, "on_mount", counting(cls.__name__, own))


@pytest.mark.parametrize("view", list(VIEWS))
async def test_each_screen_class_mounts_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, view: str
) -> None:
    calls: Counter[str] = Counter()
    _count_on_mount(monkeypatch, calls)
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        if view != "memslots":  # the first screen: mounted at start
            calls.clear()
            app.action_show_view(view)
            await pilot.pause()
        screen = app.screen
        assert isinstance(screen, VIEWS[view])
        expected = {
            cls.__name__: 1
            for cls in type(screen).__mro__
            if issubclass(cls, MmuScreen) and "on_mount" in cls.__dict__
        }
        assert expected["MmuScreen"] == 1
        assert dict(calls) == expected


def handler_chains_and_title_writes(path: Path) -> list[str]:
    """`super().on_x(…)`/`super()._on_x(…)` calls, or `Base.on_x(self, …)` (a handler
    calling its base's, which Textual runs anyway), and writes of `border_title`/
    `border_subtitle` (`setattr` with the name written out too), in one module."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.removeprefix("_").startswith("on_")
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id == "super"
        ):
            found.append((node.lineno, f"super().{node.attr}"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr.removeprefix("_").startswith("on_")
            and node.args
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "self"
        ):
            found.append((node.lineno, f"{ast.unparse(node.func)}(self)"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "setattr"
            and len(node.args) == 3
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in ("border_title", "border_subtitle")
            and path != TITLES_SET_IN
        ):
            found.append((node.lineno, f"{ast.unparse(node)}"))
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and node.attr in ("border_title", "border_subtitle")
            and path != TITLES_SET_IN
        ):
            found.append((node.lineno, f"{ast.unparse(node)} ="))
    return [f"line {line}: {text}" for line, text in sorted(found)]


def test_the_scan_finds_a_chain_and_a_title_write(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "class S(Screen):\n"
        "    def on_mount(self) -> None:\n"
        "        super().on_mount()\n"
        "        self.query_one('#a').border_title = 'a'\n"
        "    def on_resize(self, event) -> None:\n"
        "        MmuScreen.on_resize(self, event)\n"
        "        setattr(self, 'border_subtitle', 'b')\n"
    )
    assert handler_chains_and_title_writes(sample) == [
        "line 3: super().on_mount",
        "line 4: self.query_one('#a').border_title =",
        "line 6: MmuScreen.on_resize(self)",
        "line 7: setattr(self, 'border_subtitle', 'b')",
    ]


@pytest.mark.parametrize(
    "path", sorted((ROOT / "tui").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_no_handler_chain_and_titles_set_one_way(path: Path) -> None:
    assert not handler_chains_and_title_writes(path)
