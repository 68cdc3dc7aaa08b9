"""Tests for tui.themes: the built-in theme files, user themes, and Textual integration."""

from __future__ import annotations

import sys
from itertools import combinations
from pathlib import Path

import pytest
from mmuscope.tui import themes
from mmuscope.tui.themes import (
    BUILTIN_THEME_DIR,
    BUILTIN_THEMES,
    DEFAULT_THEME,
    THEME_VARIABLES,
    ThemeFileError,
    load_theme_file,
    load_themes,
    register_themes,
    user_theme_dir,
)
from textual.app import App, ComposeResult
from textual.color import Color
from textual.widgets import Static

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

EXPECTED_VARIABLES = {
    "node-idle",
    "node-path",
    "node-compare",
    "node-hit",
    "node-miss",
    "node-cache-hit",
    "node-stub",
    "node-empty",
    "edge",
    "edge-path",
    "rb-red",
    "rb-black",
    "slot-ram",
    "slot-rom",
    "slot-dirty",
    "event-name",
    "event-error",
    "counter-rate",
    "caption",
}
NODE_STATES = ("node-idle", "node-path", "node-compare", "node-hit", "node-miss", "node-cache-hit")
OKABE_ITO = {
    "#E69F00",
    "#56B4E9",
    "#009E73",
    "#F0E442",
    "#0072B2",
    "#D55E00",
    "#CC79A7",
    "#000000",
    "#999999",
}
GOOD_USER_THEME = """\
name = "my-theme"
dark = false
description = "mine"
[colors]
primary = "#123456"
background = "#ffffff"
[variables]
node-hit = "#00aa00"
"""


@pytest.fixture(autouse=True)
def config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the user config at an empty temp dir so no test reads the real one."""
    monkeypatch.setenv("MMUSCOPE_CONFIG_DIR", str(tmp_path / "config"))
    return tmp_path / "config"


def raw(name: str) -> dict:
    with (BUILTIN_THEME_DIR / f"{name}.toml").open("rb") as fh:
        return tomllib.load(fh)


def hexcolor(value: str) -> str:
    return Color.parse(value).hex.upper()


def luminance(value: str) -> float:
    """WCAG 2.x relative luminance."""

    def channel(c: int) -> float:
        s = c / 255
        return s / 12.92 if s <= 0.04045 else ((s + 0.055) / 1.055) ** 2.4

    color = Color.parse(value)
    return 0.2126 * channel(color.r) + 0.7152 * channel(color.g) + 0.0722 * channel(color.b)


def contrast(a: str, b: str) -> float:
    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_variable_names_are_the_agreed_list() -> None:
    assert set(THEME_VARIABLES) == EXPECTED_VARIABLES
    assert DEFAULT_THEME in BUILTIN_THEMES


def test_defaults_are_mmuscope_dark() -> None:
    assert raw("mmuscope-dark")["variables"] == THEME_VARIABLES


@pytest.mark.parametrize("name", BUILTIN_THEMES)
def test_builtin_loads_and_defines_every_variable(name: str) -> None:
    data = raw(name)
    assert set(data["variables"]) == EXPECTED_VARIABLES
    theme = load_theme_file(BUILTIN_THEME_DIR / f"{name}.toml")
    assert theme.name == name
    assert theme.variables == data["variables"]
    assert theme.primary == data["colors"]["primary"]


@pytest.mark.parametrize("name", BUILTIN_THEMES)
def test_node_states_pairwise_distinct(name: str) -> None:
    variables = raw(name)["variables"]
    for a, b in combinations(NODE_STATES, 2):
        assert hexcolor(variables[a]) != hexcolor(variables[b]), (name, a, b)


@pytest.mark.parametrize("name", BUILTIN_THEMES)
def test_node_states_and_rb_black_visible_on_background(name: str) -> None:
    data = raw(name)
    background = data["colors"]["background"]
    for key in (*NODE_STATES, "rb-black", "caption"):
        ratio = contrast(data["variables"][key], background)
        assert ratio >= 3, (name, key, round(ratio, 2))


def test_contrast_helper() -> None:
    assert contrast("#000000", "#ffffff") == pytest.approx(21)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)


def test_projector_high_contrast() -> None:
    data = raw("projector")
    assert hexcolor(data["colors"]["background"]) == "#000000"
    assert contrast(data["colors"]["foreground"], data["colors"]["background"]) >= 7
    assert contrast(data["variables"]["caption"], data["colors"]["background"]) >= 7


def test_colorblind_uses_okabe_ito() -> None:
    variables = raw("colorblind")["variables"]
    for key in NODE_STATES:
        assert hexcolor(variables[key]) in OKABE_ITO, key


def test_user_theme_dir_env_override(config_dir: Path) -> None:
    assert user_theme_dir() == config_dir / "themes"


def test_user_themes_good_and_broken(config_dir: Path) -> None:
    user = config_dir / "themes"
    user.mkdir(parents=True)
    (user / "good.toml").write_text(GOOD_USER_THEME)
    (user / "broken.toml").write_text('name = "broken"\n[colors]\nprimary = "not-a-colour"\n')
    (user / "notes.txt").write_text("ignored")
    loaded, warnings = load_themes()
    by_name = {t.name: t for t in loaded}
    assert set(BUILTIN_THEMES) | {"my-theme"} == set(by_name)
    mine = by_name["my-theme"]
    assert mine.dark is False
    assert mine.variables["node-hit"] == "#00aa00"
    assert mine.variables["node-miss"] == THEME_VARIABLES["node-miss"]
    assert len(warnings) == 1
    assert "broken.toml" in warnings[0] and "\n" not in warnings[0]


def test_user_theme_overrides_builtin(tmp_path: Path) -> None:
    (tmp_path / "zz-projector.toml").write_text(
        'name = "projector"\n[colors]\nprimary = "#ff0000"\n'
    )
    loaded, warnings = load_themes(tmp_path)
    assert warnings == []
    projector = [t for t in loaded if t.name == "projector"]
    assert len(projector) == 1
    assert projector[0].primary == "#ff0000"


def test_missing_user_dir_is_fine(tmp_path: Path) -> None:
    loaded, warnings = load_themes(tmp_path / "nope")
    assert [t.name for t in loaded] == list(BUILTIN_THEMES)
    assert warnings == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[colors]\nprimary = "#fff"\n', "name"),
        ('name = "a b"\n[colors]\nprimary = "#fff"\n', "name"),
        ('name = "x"\n[colors]\nsecondary = "#fff"\n', "primary"),
        ('name = "x"\n[colors]\nprimary = "#fff"\nprimery = "#000"\n', "primery"),
        ('name = "x"\ncolours = 1\n[colors]\nprimary = "#fff"\n', "colours"),
        ('name = "x"\n[colors]\nprimary = "#ggg"\n', "colors.primary"),
        ('name = "x"\n[colors]\nprimary = 7\n', "colors.primary"),
        ('name = "x"\n[colors]\nprimary = "#fff"\n[variables]\nnode-hot = "#f00"\n', "node-hot"),
        ('name = "x"\n[colors]\nprimary = "#fff"\n[variables]\nedge = "blurple"\n', "edge"),
        ('name = "x"\ndark = "yes"\n[colors]\nprimary = "#fff"\n', "dark"),
        ('name = "x"\ncolors = "red"\n', "colors"),
        ('name = "x\n', "invalid TOML"),
    ],
)
def test_load_theme_file_errors(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad-theme.toml"
    path.write_text(text)
    with pytest.raises(ThemeFileError) as info:
        load_theme_file(path)
    message = str(info.value)
    assert "bad-theme.toml" in message
    assert problem in message
    assert "\n" not in message


def test_broken_builtin_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in BUILTIN_THEMES:
        (tmp_path / f"{name}.toml").write_bytes((BUILTIN_THEME_DIR / f"{name}.toml").read_bytes())
    (tmp_path / "projector.toml").write_text('name = "projector"\n')
    monkeypatch.setattr(themes, "BUILTIN_THEME_DIR", tmp_path)
    with pytest.raises(ThemeFileError, match=r"projector\.toml"):
        load_themes()


class ThemedApp(App[None]):
    CSS = """
    #hit { color: $node-hit; background: $node-empty; }
    #miss { color: $node-miss; border: solid $edge-path; }
    #caption { color: $caption; }
    """

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return THEME_VARIABLES

    def compose(self) -> ComposeResult:
        yield Static("hit", id="hit")
        yield Static("miss", id="miss")
        yield Static("caption", id="caption")


async def test_themes_apply_in_textual_app() -> None:
    app = ThemedApp()
    async with app.run_test(size=(40, 10)) as pilot:
        assert register_themes(app) == []
        for name in BUILTIN_THEMES:
            app.theme = name
            await pilot.pause()
            expected = raw(name)["variables"]
            assert app.current_theme.name == name
            assert app.theme_variables["node-hit"] == expected["node-hit"]
            assert app.theme_variables["caption"] == expected["caption"]
            hit = app.query_one("#hit", Static)
            assert hit.styles.color == Color.parse(expected["node-hit"])
            assert hit.styles.background == Color.parse(expected["node-empty"])
            assert app.has_class(f"-theme-{name}")
