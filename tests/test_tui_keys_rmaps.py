"""The rmap screen's keys through Pilot (F3): forks grow the shared gfn's rmap, exits
shrink it, the era switch replays the storm with another pte_list_desc, buckets toggle."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from mmuscope.engine.mmu.shadow.rmap_lab import ForkLab
from mmuscope.tui.app import MmuscopeApp
from mmuscope.tui.screens.rmaps import RmapScreen
from mmuscope.tui.widgets.rmap_panels import RmapBars, RmapChain

from tests.tui_pilot import SIZE, build, press_export, until


def rmaps(app: MmuscopeApp) -> RmapScreen:
    screen = app.screen
    assert isinstance(screen, RmapScreen), f"expected the rmap screen: {screen!r}"
    return screen


def test_the_lab_grows_and_shrinks_the_shared_rmap() -> None:
    lab = ForkLab("6.4", pages=2)
    for _ in range(20):
        lab.fork()
    head = lab.head(0)
    assert head is not None and head.count() == 21 and len(head.descs) == 2
    lab.exit()
    assert lab.head(0).count() == 20  # type: ignore[union-attr]
    old = lab.with_era("3")
    assert old.head(0).count() == 20 and len(old.head(0).descs) == 7  # type: ignore[union-attr]
    lab.mmu.audit()
    old.mmu.audit()


async def test_fork_exit_era_and_buckets(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        await pilot.pause()
        screen = rmaps(app)
        for _ in range(15):
            await pilot.press("n")
        assert screen.lab.head(0).count() == 16  # type: ignore[union-attr]
        assert "count 16" in str(screen.query_one(RmapChain).content)
        await pilot.press("x")
        assert screen.lab.head(0).count() == 15  # type: ignore[union-attr]
        eras = []
        for _ in range(4):
            await pilot.press("E")
            eras.append(screen.lab.era)
            assert screen.lab.head(0).count() == 15  # type: ignore[union-attr]
        assert sorted(eras) == sorted(["3", "15", "14", "6.4"])
        assert "ffs()" in str(screen.query_one(RmapBars).content)
        await pilot.press("b")
        assert screen.log2 and "log2" in str(screen.query_one(RmapBars).content)
        await pilot.press("space")
        await until(pilot, lambda: len(screen.lab.children) > 14)
        assert len(screen.lab.children) > 14
        screen.lab.mmu.audit()


async def test_e_exports_the_rmap_chain(tmp_path: Path) -> None:
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f3")
        await pilot.pause()
        for _ in range(20):
            await pilot.press("n")
        await press_export(pilot)
    dots = list(tmp_path.glob("mmuscope-rmaps-*.dot"))
    assert len(dots) == 1
    text = dots[0].read_text()
    assert text.startswith("digraph rmap {") and "d0 -> d1" in text
    if shutil.which("dot"):
        done = subprocess.run(["dot", "-Tplain"], input=text, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert len(list(tmp_path.glob("mmuscope-rmaps-*.pdf"))) == 1
