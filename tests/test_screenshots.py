"""The README's screenshots are what `scripts/screenshots.py` draws today: `make test`
draws them again beside the suite (the Makefile's `screenshots` step; the same app
factory, keys, size and seed, no wall clock in a shot), so a change of the look shows in
`git status` as changed images to commit.  Here: every README image is a shot, every shot
is committed, and a shot drawn twice is the same, byte for byte."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "screenshots.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mmuscope_screenshots", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


SHOTS = load_script().SHOTS


def test_every_screenshot_in_the_readme_is_drawn_by_the_script() -> None:
    readme = (ROOT / "README.md").read_text()
    used = {part.split(".svg")[0] for part in readme.split("](screenshots/")[1:]}
    drawn = {shot.name for shot in SHOTS}
    assert used <= drawn, f"README images no shot draws: {sorted(used - drawn)}"
    committed = {path.stem for path in (ROOT / "screenshots").glob("*.svg")}
    assert committed == drawn, f"screenshots/ and the shots differ: {committed ^ drawn}"


async def test_a_shot_is_drawn_the_same_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """What `make test` relies on: drawn again, an image changes only when the look does
    (a shot with lookups, kvm_stat's CurAvg/s and the event log)."""
    script = load_script()
    # draw() pushes kvm_stat's wall-clock sample out of reach; the other tests get it back
    monkeypatch.setattr(script.base, "COUNTER_REFRESH", script.base.COUNTER_REFRESH)
    shot = next(shot for shot in script.SHOTS if shot.name == "memslots-linear")
    first, second = await script.draw(shot), await script.draw(shot)
    assert first == second
    assert "CurAvg/s" in first.replace("&#160;", " ")
