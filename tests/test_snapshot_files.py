"""Every SVG snapshot under tests/__snapshots__ belongs to a test that still exists.

syrupy fails a serial run on an unused snapshot (a test renamed or a parameter dropped
leaves its old SVG behind), but under pytest-xdist, as `make test` runs the suite, it
cannot see the other workers' tests and says nothing: this test keeps that check.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
SNAPSHOTS = TESTS / "__snapshots__"


def collected(modules: list[str]) -> set[str]:
    """The node ids pytest collects from tests/<module>.py, in a fresh process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    args = ["--collect-only", "-q", "-o", "addopts=", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args, *(f"tests/{m}.py" for m in modules)],
        cwd=TESTS.parent,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return {line for line in done.stdout.splitlines() if "::" in line}


def test_every_svg_snapshot_has_its_test() -> None:
    modules = sorted(d.name for d in SNAPSHOTS.iterdir() if d.is_dir())
    assert modules, "no snapshot directories"
    ids = collected(modules)
    unused = [
        f"{module}/{svg.name}"
        for module in modules
        for svg in sorted((SNAPSHOTS / module).glob("*.svg"))
        if f"tests/{module}.py::{svg.stem}" not in ids
    ]
    assert not unused, f"snapshots without a test (delete them): {unused}"
