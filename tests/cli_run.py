"""Run the `mmuscope` command line the way a user runs it: the installed console script in
a subprocess, with the checks the CLI tests share (docs/architecture.md §6.3).

`here(...)` runs the same command through the same entry point, `main(argv)`, inside the
test process, with stdout and stderr captured: for tests that run many commands whose
output is the point (not the process: its exit on a signal, the console script), without
an interpreter and the command's libraries (DuckDB, pyarrow) started for each one.

Exit codes: 0 success, 2 bad input or a missing tool (one line on stderr, no traceback).
Real QEMU dumps and traces are read from ../shared/realdata beside the checkout
(or $MMUSCOPE_REALDATA); tests of them are skipped when the files are absent.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.datafiles import FIXTURES, realdata_path

MMUSCOPE = Path(sys.executable).parent / "mmuscope"
STRATEGIES = ("linear", "size-sorted", "binary", "wbtree", "rbtree", "wbtree-compact")

MTREE_FLAT = FIXTURES / "cli-mtree-flat.txt"
MTREE_TREE = FIXTURES / "cli-mtree-tree.txt"
STRACE = FIXTURES / "cli-strace.txt"
PC_6G = "qemu-info-mtree-x86-pc-kvm-6g.txt"
Q35 = "qemu-info-mtree-x86-q35-kvm-intel-iommu-pt.txt"
TCG_FLAT = "qemu-info-mtree-f-x86-pc-tcg-flatview.txt"


def run(
    *args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    assert MMUSCOPE.exists(), f"console script not installed next to {sys.executable}"
    return subprocess.run(
        [str(MMUSCOPE), *map(str, args)],
        cwd=cwd,
        env=dict(os.environ) if env is None else env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def here(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`mmuscope ARGS` through `main(argv)` in this process: its exit code (argparse's
    SystemExit too) and what it wrote to stdout and stderr.  The SIGTERM and SIGHUP
    handlers the command installs (`end_on_signals`) are put back after it."""
    from mmuscope.tui.cli import main

    argv = list(map(str, args))
    out, err = io.StringIO(), io.StringIO()
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as ended:
                code = ended.code if isinstance(ended.code, int) else 2
    finally:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    return subprocess.CompletedProcess(["mmuscope", *argv], code, out.getvalue(), err.getvalue())


def ok_here(*args: str | Path) -> str:
    """`here`, expecting success with nothing on stderr; stdout."""
    done = here(*args)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def ok(*args: str | Path, cwd: Path | None = None) -> str:
    """Run, expect success with nothing on stderr, return stdout."""
    done = run(*args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def assert_user_error(done: subprocess.CompletedProcess[str]) -> str:
    """Exit 2, nothing on stdout, exactly one line on stderr that names the program."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    assert done.stderr.endswith("\n") and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("mmuscope"), done.stderr
    return done.stderr


def realdata(name: str) -> Path:
    return realdata_path(name)


def layout_json(*args: str | Path) -> list[dict[str, Any]]:
    rows = json.loads(ok("layout", *args, "--json"))
    assert isinstance(rows, list)
    return rows
