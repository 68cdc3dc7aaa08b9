"""The README's screenshots are what `scripts/screenshots.py` draws today: each committed
SVG in screenshots/ is drawn again (the same app factory, keys, size and seed; no wall
clock reaches a shot) and must be the same, byte for byte.  A change of the look fails
here until `make screenshots` draws the images again (look at them before committing)."""

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


@pytest.mark.parametrize("name", [shot.name for shot in SHOTS])
async def test_the_committed_screenshot_is_what_the_script_draws(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = load_script()
    shot = next(shot for shot in script.SHOTS if shot.name == name)
    # draw() pushes kvm_stat's wall-clock sample out of reach; the other tests get it back
    monkeypatch.setattr(script.base, "COUNTER_REFRESH", script.base.COUNTER_REFRESH)
    drawn = await script.draw(shot)
    committed = (ROOT / "screenshots" / f"{name}.svg").read_text()
    assert drawn == committed, (
        f"screenshots/{name}.svg is not what scripts/screenshots.py draws today: "
        "run `make screenshots`, look at the images, and commit them"
    )
