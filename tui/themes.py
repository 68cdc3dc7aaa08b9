"""Theme loading for mmuscope: built-in TOML themes plus the user's own.

A theme file is TOML with top-level ``name`` (required), ``dark`` and ``description``,
a ``[colors]`` table holding the colour fields of :class:`textual.theme.Theme`
(``primary`` is required) and a ``[variables]`` table with mmuscope's own theme
variables (see :data:`THEME_VARIABLES`; a user theme may leave any of them out).

Built-in themes live in ``themes/`` at the top of the repository, installed with the
package (see tui/resources.py). User themes are
read from ``<user config dir>/mmuscope/themes/*.toml`` (or
``$MMUSCOPE_CONFIG_DIR/themes``). A broken built-in is a bug and raises; a broken
user theme is skipped and reported as a one-line warning.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import platformdirs
from textual.app import App
from textual.color import Color, ColorParseError
from textual.theme import Theme

from .resources import BUILTIN_THEMES, theme_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    # tomli is installed on 3.10 only: mypy (python_version 3.10) checks this branch
    # everywhere, and the ignore is unused where tomli is found
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = [
    "BUILTIN_THEMES",
    "BUILTIN_THEME_DIR",
    "DEFAULT_THEME",
    "THEME_VARIABLES",
    "ThemeFileError",
    "load_theme_file",
    "load_themes",
    "register_themes",
    "user_theme_dir",
]

DEFAULT_THEME = "mmuscope-dark"
BUILTIN_THEME_DIR = theme_dir()

THEME_VARIABLES: dict[str, str] = {
    "node-idle": "#7d8a99",
    "node-path": "#5fafd7",
    "node-compare": "#ffb454",
    "node-hit": "#7fd962",
    "node-miss": "#f07178",
    "node-cache-hit": "#c792ea",
    "node-stub": "#a3b1c2",
    "node-empty": "#3e4652",
    "edge": "#4f5b66",
    "edge-path": "#5fafd7",
    "rb-red": "#ff5f5f",
    "rb-black": "#c8ccd4",
    "slot-ram": "#89ddff",
    "slot-rom": "#ffcb6b",
    "slot-dirty": "#f78c6c",
    "event-name": "#82aaff",
    "event-error": "#ff5370",
    "counter-rate": "#c3e88d",
    "caption": "#e6e1cf",
}
"""Defaults (mmuscope-dark's values) for the app's own theme variables."""

COLOR_FIELDS = (
    "primary",
    "secondary",
    "warning",
    "error",
    "success",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
)
_TOP_LEVEL_KEYS = frozenset({"name", "dark", "description", "colors", "variables"})
# Textual turns the name into the CSS class "-theme-<name>", so it must be an identifier.
_NAME_RE = re.compile(r"[A-Za-z0-9_-]+")


class ThemeFileError(ValueError):
    """A theme file that cannot be used; the message is one line naming the file."""

    def __init__(self, path: Path, problem: str) -> None:
        self.path = path
        self.problem = " ".join(problem.split())
        super().__init__(f"{path}: {self.problem}")


def user_theme_dir() -> Path:
    """Directory of user themes; ``$MMUSCOPE_CONFIG_DIR/themes`` if that is set."""
    override = os.environ.get("MMUSCOPE_CONFIG_DIR")
    base = Path(override) if override else platformdirs.user_config_path("mmuscope")
    return base / "themes"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            data: dict[str, Any] = tomllib.load(fh)
            return data
    except tomllib.TOMLDecodeError as exc:
        raise ThemeFileError(path, f"invalid TOML: {exc}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ThemeFileError(path, f"cannot read: {exc}") from exc


def _table(path: Path, data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ThemeFileError(path, f"[{key}] must be a table")
    return value


def _colour(path: Path, where: str, value: object) -> str:
    if not isinstance(value, str):
        raise ThemeFileError(path, f"{where} must be a colour string, got {value!r}")
    try:
        Color.parse(value)
    except ColorParseError as exc:
        raise ThemeFileError(path, f"{where} = {value!r} is not a colour: {exc}") from exc
    return value


def _check_keys(path: Path, where: str, keys: Iterable[str], allowed: Iterable[str]) -> None:
    unknown = sorted(set(keys) - set(allowed))
    if unknown:
        raise ThemeFileError(path, f"unknown {where}: {', '.join(unknown)}")


def _check_header(path: Path, data: dict[str, Any]) -> tuple[str, bool]:
    _check_keys(path, "top-level key(s)", data, _TOP_LEVEL_KEYS)
    name = data.get("name")
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ThemeFileError(path, f"name must be letters, digits, '-' or '_', got {name!r}")
    dark = data.get("dark", True)
    if not isinstance(dark, bool):
        raise ThemeFileError(path, f"dark must be true or false, got {dark!r}")
    if not isinstance(data.get("description", ""), str):
        raise ThemeFileError(path, "description must be a string")
    return name, dark


def load_theme_file(path: Path) -> Theme:
    """Parse and validate one theme file; raise :class:`ThemeFileError` if unusable."""
    data = _read_toml(path)
    name, dark = _check_header(path, data)
    colors = _table(path, data, "colors")
    variables = _table(path, data, "variables")
    _check_keys(path, "colour(s) in [colors]", colors, COLOR_FIELDS)
    _check_keys(path, "variable(s) in [variables]", variables, THEME_VARIABLES)
    if "primary" not in colors:
        raise ThemeFileError(path, "[colors] must define primary")
    fields: dict[str, Any] = {
        key: _colour(path, f"colors.{key}", value) for key, value in colors.items()
    }
    merged = dict(THEME_VARIABLES)
    merged.update({k: _colour(path, f"variables.{k}", v) for k, v in variables.items()})
    theme = Theme(name=name, primary=fields.pop("primary"), dark=dark, variables=merged)
    return replace(theme, **fields)


def _load_builtins() -> list[Theme]:
    themes: list[Theme] = []
    for name in BUILTIN_THEMES:
        path = BUILTIN_THEME_DIR / f"{name}.toml"
        theme = load_theme_file(path)
        if theme.name != name:
            raise ThemeFileError(path, f"built-in theme must be named {name!r}")
        themes.append(theme)
    return themes


def load_themes(user_dir: Path | None = None) -> tuple[list[Theme], list[str]]:
    """Load the built-in themes, then the user's; return (themes, warnings).

    A user theme with the name of an earlier one replaces it. Broken user theme
    files are skipped, each producing one warning line.
    """
    themes = {theme.name: theme for theme in _load_builtins()}
    warnings: list[str] = []
    directory = user_theme_dir() if user_dir is None else user_dir
    for path in sorted(directory.glob("*.toml")) if directory.is_dir() else []:
        try:
            theme = load_theme_file(path)
        except ThemeFileError as exc:
            warnings.append(f"theme skipped: {exc}")
            continue
        themes[theme.name] = theme
    return list(themes.values()), warnings


def register_themes(app: App[Any], user_dir: Path | None = None) -> list[str]:
    """Register every built-in and user theme on ``app``; return the warnings."""
    themes, warnings = load_themes(user_dir)
    for theme in themes:
        app.register_theme(theme)
    return warnings
