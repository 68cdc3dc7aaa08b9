"""Where the files mmuscope reads at run time are, found through the installed packages
(their import specs), never beside a source tree:

- the built-in themes: `themes/*.toml` at the top of the repository, installed as the
  data directory `tui/theme_files/` (pyproject maps the package `tui.theme_files` to
  `themes/`); an editable install or a checkout reads `themes/` itself, as setuptools'
  editable finder does not map a package nested in another;
- the app's stylesheet `tui/app.tcss`;
- the classroom scenarios `engine/scenarios/data/*.toml` (engine.scenarios.SCENARIO_DIR).

`missing_data_files` lists what an incomplete installation lacks, so a command says so in
one line (exit 2) before anything reads them.
"""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

BUILTIN_THEMES = ("mmuscope-dark", "mmuscope-light", "projector", "colorblind")
THEME_PACKAGE_DIR = "theme_files"  # tui/theme_files in a wheel: the repository's themes/
STYLESHEET = "app.tcss"


def installed_dir(package: str) -> Path:
    """The directory of an installed regular package, as `importlib.resources.files` gives
    it for a package on disk (that module and the zipfile module it imports would cost
    each start of the app ~40M instructions, 5 % of Textual's import)."""
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"{package} is not an installed package", name=package)
    return Path(spec.submodule_search_locations[0])


def package_dir() -> Path:
    """The installed `tui` package (a regular package: its files are a directory)."""
    return installed_dir(__package__ or "mmuscope.tui")


def theme_dir() -> Path:
    """The built-in themes: the wheel's data directory, or the checkout's `themes/`."""
    installed = package_dir() / THEME_PACKAGE_DIR
    return installed if installed.is_dir() else package_dir().parent / "themes"


def scenario_dir() -> Path:
    """engine.scenarios.SCENARIO_DIR, found without importing the scenarios' loader."""
    return installed_dir("mmuscope.engine") / "scenarios" / "data"


def stylesheet() -> Path:
    return package_dir() / STYLESHEET


def missing_data_files() -> list[Path]:
    """The run-time files an installation should have and has not (empty: all there)."""
    scenarios = scenario_dir()
    wanted = [theme_dir() / f"{name}.toml" for name in BUILTIN_THEMES]
    wanted.append(stylesheet())
    missing = [path for path in wanted if not path.is_file()]
    if not any(scenarios.glob("*.toml")):
        missing.append(scenarios / "*.toml")
    return missing
