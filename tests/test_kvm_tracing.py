"""A tracefs instance left by an mmuscope that died without closing it (SIGKILL) is
removed by the next run, and a live run's instance is never touched."""

from __future__ import annotations

import os
import subprocess
import sys

from mmuscope.engine.kvm.tracing import (
    TraceInstance,
    find_tracefs,
    reap_stale_instances,
    stale_instance_pid,
)

from tests.kvm_host import needs_tracing, our_instances


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_stale_instance_pid_reads_the_name() -> None:
    gone = dead_pid()
    assert stale_instance_pid(f"mmuscope-{gone}-3") == gone
    assert stale_instance_pid(f"mmuscope-live-{gone}-0") == gone
    assert stale_instance_pid(f"mmuscope-{os.getpid()}-0") is None
    assert stale_instance_pid("someone-else-1-2") is None
    assert stale_instance_pid("mmuscope-x-0") is None


@needs_tracing
def test_a_killed_runs_instance_is_reaped_by_the_next_one() -> None:
    root = find_tracefs()
    leftover = root / "instances" / f"mmuscope-{dead_pid()}-0"
    leftover.mkdir()
    try:
        with TraceInstance(root) as mine:
            assert not leftover.exists()
            assert mine.path.is_dir() and mine.path.name not in reap_stale_instances(root)
        assert not mine.path.exists()
    finally:
        if leftover.exists():
            leftover.rmdir()
    assert not our_instances()
