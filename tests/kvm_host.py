"""What the real-KVM tests need of this machine, and the reason to skip without it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MMUSCOPE = Path(sys.executable).parent / "mmuscope"


def _kvm_reason() -> str | None:
    if not os.path.exists("/dev/kvm"):
        return "no /dev/kvm on this machine"
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "/dev/kvm is not accessible to this user"
    return None


def _tracefs_reason() -> str | None:
    if os.geteuid() != 0:
        return "recording the kernel's tracepoints needs root"
    roots = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))
    if not any((r / "instances").is_dir() for r in roots) and not Path("/sys/kernel").is_dir():
        return "no tracefs"
    return None


KVM_REASON = _kvm_reason()
needs_kvm = pytest.mark.skipif(KVM_REASON is not None, reason=KVM_REASON or "")
TRACE_REASON = KVM_REASON or _tracefs_reason()
needs_tracing = pytest.mark.skipif(TRACE_REASON is not None, reason=TRACE_REASON or "")


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MMUSCOPE), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def our_instances() -> list[Path]:
    """mmuscope's tracefs instances whose process is gone: leaked (none should outlive a
    run; other runs on this machine may have live ones meanwhile)."""
    found: list[Path] = []
    for root in (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing")):
        instances = root / "instances"
        if instances.is_dir():
            found += [p for p in instances.iterdir() if p.name.startswith("mmuscope-")]
    return [p for p in found if not _alive(p.name.split("-")[-2])]


def _alive(pid: str) -> bool:
    return pid.isdigit() and Path(f"/proc/{pid}").exists()
