"""The explorer's start-up does its work once, and only the first frame's (benchmarks/
startup_speed.py measures what the first frame costs): it opens in the theme asked for
without restyling the app, its stylesheet parsed once, and that stylesheet holds no other
screen's layout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mmuscope.tui.resources import stylesheet
from mmuscope.tui.themes import BUILTIN_THEMES, DEFAULT_THEME, load_themes
from textual.color import Color
from textual.css.stylesheet import Stylesheet

from tests.tui_pilot import SIZE, build, memslots


@pytest.mark.parametrize("theme", [None, "mmuscope-light", "projector"])
async def test_the_app_opens_in_its_theme_without_reparsing_its_css(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, theme: str | None
) -> None:
    reparsed: list[Stylesheet] = []
    reparse = Stylesheet.reparse

    def counted(stylesheet: Stylesheet) -> None:
        reparsed.append(stylesheet)
        reparse(stylesheet)

    monkeypatch.setattr(Stylesheet, "reparse", counted)
    app = build(tmp_path, theme=theme)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = memslots(app)
        name = theme or DEFAULT_THEME
        (wanted,) = [t for t in load_themes()[0] if t.name == name]
        assert app.theme == name
        assert app.current_theme.name == name
        assert app.has_class("-dark-mode") is wanted.dark
        assert app.has_class("-light-mode") is not wanted.dark
        assert app.own_themes == list(BUILTIN_THEMES)
        assert screen.styles.background == Color.parse(wanted.background or "")
        assert reparsed == []  # a theme set after App.__init__ would restyle everything


async def test_the_app_stylesheet_styles_only_the_first_screen(tmp_path: Path) -> None:
    """tui/app.tcss, parsed before the first frame, holds what every screen shares and
    the memslots screen; each other screen's layout is its own DEFAULT_CSS, parsed when
    it is first shown (each id app.tcss names is on the memslots screen)."""
    ids = set(re.findall(r"#([a-z][\w-]*)", stylesheet().read_text()))
    assert {"structure", "slots", "counters"} <= ids
    app = build(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = memslots(app)
        assert sorted(i for i in ids if not screen.query(f"#{i}")) == []
