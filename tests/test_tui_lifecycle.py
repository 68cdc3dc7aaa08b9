"""Textual's lifecycle as Textual means it: Textual dispatches a message to the handler
each class of the MRO defines itself, so each screen class's `on_mount` runs once per
mount and none calls its base's (a chained one ran MmuScreen's three times: three
kvm_stat counter timers, whose CurAvg/s then read 0 while playing)."""

from __future__ import annotations

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
