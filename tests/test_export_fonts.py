"""Every figure the screens export draws node and edge labels in one font (Helvetica):
the TLB and POWER exports once labelled their edges in Graphviz's default serif."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.tui_pilot import build

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' is missing")


@needs_dot
@pytest.mark.parametrize(("key", "moves"), [("f4", ("s", "s")), ("f5", ("n",)), ("f2", ("n",))])
async def test_exported_labels_use_one_font(
    tmp_path: Path, key: str, moves: tuple[str, ...]
) -> None:
    app = build(tmp_path)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press(key)
        await pilot.pause()
        await pilot.press(*moves)
        await pilot.pause()
        found = app.screen.export_dot()  # type: ignore[attr-defined]
    assert found is not None
    text, _ = found
    assert " -> " in text and "label=" in text
    svg = subprocess.run(
        ["dot", "-Tsvg"], input=text, capture_output=True, text=True, timeout=60, check=True
    ).stdout
    fonts = set(re.findall(r'font-family="([^"]+)"', svg))
    assert fonts == {"Helvetica,sans-Serif"}, fonts
