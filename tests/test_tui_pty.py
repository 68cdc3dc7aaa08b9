"""The real `mmuscope` command in a pseudo-terminal: it draws the explorer and quits
cleanly on ctrl+q, as a user at a terminal sees it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests.terminal import open_and_quit

MMUSCOPE = Path(sys.executable).with_name("mmuscope")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a POSIX pseudo-terminal")
def test_mmuscope_opens_in_a_terminal_and_quits_on_ctrl_q(tmp_path: Path) -> None:
    assert MMUSCOPE.exists(), f"console script not installed next to {sys.executable}"
    env = dict(
        os.environ,
        TERM="xterm-256color",
        MMUSCOPE_CONFIG_DIR=str(tmp_path),
        TEXTUAL_ANIMATIONS="none",
    )
    screen, code = open_and_quit(MMUSCOPE, env, [b"memslots", b"kvm_stat", b"pc-4g"])
    assert b"memslots" in screen and b"kvm_stat" in screen, screen[-2000:]
    assert b"pc-4g" in screen
    assert code == 0, "mmuscope did not quit on ctrl+q"
