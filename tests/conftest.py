"""Fixtures shared by the test files of this directory."""

from __future__ import annotations

import pytest

# The Pilot and CLI helpers assert on what the app shows: let pytest explain their failures too.
pytest.register_assert_rewrite("tests.tui_pilot", "tests.cli_run")


@pytest.fixture(autouse=True)
def no_user_config(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Never read the real config (user themes) during a test."""
    monkeypatch.setenv("MMUSCOPE_CONFIG_DIR", str(tmp_path_factory.mktemp("config")))
