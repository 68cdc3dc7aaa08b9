"""mmuscope installed as Python tools are: a wheel, installed into a fresh virtual
environment the way `pipx install .` does — no editable install, no source tree on the
path — adds one name to site-packages (`mmuscope`, a namespace package holding
`mmuscope.engine` and `mmuscope.tui`, and its dist-info), and runs its commands and its
app with every file it reads found in the install.

Offline and quick: the wheel is built with this environment's setuptools (no build
isolation, no download) from a copy of the sources, installed with `--no-deps`, and the
fresh environment reaches this one's dependencies (textual, rich, ...) through a `.pth`
line, which adds their directory without running this environment's own `.pth` files (so
this checkout's editable install is not seen).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pytest
from mmuscope.engine.scenarios.scenario import scenario_names
from mmuscope.tui import __version__
from mmuscope.tui.themes import BUILTIN_THEMES

from tests.terminal import open_and_quit

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("engine", "tui", "themes", "pyproject.toml", "setup.py", "README.md")
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")

HEADLESS = """
import sys
from pathlib import Path

import mmuscope.tui as tui
from mmuscope.tui.app import make_app
from mmuscope.tui.resources import theme_dir
from mmuscope.tui.themes import BUILTIN_THEMES

prefix = Path(sys.prefix).resolve()
assert Path(tui.__file__).resolve().is_relative_to(prefix), tui.__file__
assert theme_dir().resolve().is_relative_to(prefix), theme_dir()


async def start(name):
    app = make_app(theme=name, playing=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert app.theme == name, (app.theme, name)
        assert app.screen.query("*"), "nothing drawn"
    print("started", name)


import asyncio

for name in BUILTIN_THEMES:
    asyncio.run(start(name))
"""


@dataclass
class Installed:
    python: Path
    mmuscope: Path
    cwd: Path
    env: dict[str, str]
    site: Path  # site-packages
    added: set[str]  # what the install added to its top level

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.mmuscope), *args],
            capture_output=True,
            text=True,
            cwd=self.cwd,
            env=self.env,
            timeout=120,
        )


def _new_setuptools() -> bool:
    major = int(version("setuptools").split(".")[0])
    return major >= 77


def _build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=IGNORE)
        else:
            shutil.copy2(path, src / name)
    dist = tmp / "dist"
    build = "import sys; from setuptools import build_meta; build_meta.build_wheel(sys.argv[1])"
    done = subprocess.run(
        [sys.executable, "-c", build, str(dist)], cwd=src, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = dist.glob("mmuscope-*.whl")
    return wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    if not _new_setuptools():
        pytest.skip("needs setuptools>=77 here to build offline: pip install -e '.[test]'")
    tmp = tmp_path_factory.mktemp("install")
    wheel = _build_wheel(tmp)
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    here = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    site = Path(purelib)
    (site / "_mmuscope_test_deps.pth").write_text("\n".join(sorted(here)) + "\n")
    before = {path.name for path in site.iterdir()}
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    done = subprocess.run(
        [*pip, "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    added = {path.name for path in site.iterdir()} - before
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["MMUSCOPE_CONFIG_DIR"] = str(tmp / "config")  # no user themes
    cwd = tmp / "elsewhere"
    cwd.mkdir()
    yield Installed(python, env_dir / "bin" / "mmuscope", cwd, env, site, added)


def test_the_wheel_adds_only_mmuscope_to_site_packages(installed: Installed) -> None:
    """One name: `mmuscope` (a namespace package: no __init__.py) with the engine and the
    app in it, and its dist-info; no top-level `engine` or `tui` to collide with others."""
    assert installed.added == {"mmuscope", f"mmuscope-{__version__}.dist-info"}
    package = installed.site / "mmuscope"
    assert sorted(path.name for path in package.iterdir()) == ["engine", "tui"]
    assert (package / "engine" / "__init__.py").is_file()
    assert (package / "tui" / "__init__.py").is_file()
    top_level = installed.site / f"mmuscope-{__version__}.dist-info" / "top_level.txt"
    if top_level.exists():  # setuptools writes it; the one name it lists
        assert top_level.read_text().split() == ["mmuscope"]


def test_the_installed_commands_run_from_the_wheel(installed: Installed) -> None:
    done = installed.run("--version")
    assert (done.returncode, done.stdout) == (0, f"mmuscope {__version__}\n"), done.stderr
    done = installed.run("scenarios")
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines()[: len(scenario_names())]]
    assert listed == scenario_names()
    done = installed.run("overview")
    assert done.returncode == 0 and "memslots of" in done.stdout, done.stderr
    done = installed.run("bench", "--quick", "--table", "zap")
    assert done.returncode == 0 and "BATCH_ZAP_PAGES" in done.stdout, done.stderr


def test_the_installed_app_starts_with_every_builtin_theme(installed: Installed) -> None:
    done = subprocess.run(
        [str(installed.python), "-c", HEADLESS],
        capture_output=True,
        text=True,
        cwd=installed.cwd,
        env=installed.env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [w for name in BUILTIN_THEMES for w in ("started", name)]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a POSIX pseudo-terminal")
def test_the_installed_command_opens_the_app_in_a_terminal(installed: Installed) -> None:
    env = dict(installed.env, TERM="xterm-256color", TEXTUAL_ANIMATIONS="none")
    wanted = [b"memslots", b"kvm_stat", b"pc-4g"]
    screen, code = open_and_quit(installed.mmuscope, env, wanted, cwd=installed.cwd)
    assert b"memslots" in screen and b"kvm_stat" in screen, screen[-2000:]
    assert code == 0, "the installed mmuscope did not quit on ctrl+q"


def test_a_missing_data_file_is_one_line_and_exit_2(installed: Installed) -> None:
    """Last in this module: it takes files out of the installation."""
    site = Path(str(installed.python.parent.parent))
    (theme,) = site.rglob("tui/theme_files/projector.toml")
    theme.unlink()
    done = installed.run("--paused")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "projector.toml: not installed" in done.stderr
    for path in site.rglob("engine/scenarios/data/*.toml"):
        path.unlink()
    done = installed.run("scenarios")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "no scenario files" in done.stderr
