"""Recording the kernel's kvm and kvmmmu tracepoints in a private tracefs instance.

`TraceInstance` makes `instances/mmuscope-PID-N` when its `with` block starts
(Documentation/trace/ftrace.rst, "Instances"): its own ring buffer (`buffer_size_kb`),
its own `events/kvm/enable` and `events/kvmmmu/enable`, `set_event_pid` (only the
VMM's thread), and `tracing_on`; the global buffer and every other instance are left
as they are, whatever the global `tracing_on` says.  Its ring buffers are read in
binary (`engine.kvm.rawtrace`); `lost()` sums the `overrun` and `dropped
events` of `per_cpu/cpu*/stats`, so a run that lost events can say so.  `close()`
turns it off and removes it (`rmdir`).

An instance whose process died without closing it (SIGKILL, a lost machine) is
removed by the next `TraceInstance` on the same tracefs (`reap_stale_instances`), so
no leftover keeps recording or fails a later run's check.

`find_tracefs()` mounts tracefs at /sys/kernel/tracing when it is absent and we are
root; anything else is a `TracefsError` carrying the one-line fix.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

TRACEFS = Path("/sys/kernel/tracing")
DEBUGFS_TRACING = Path("/sys/kernel/debug/tracing")
SUBSYSTEMS = ("kvm", "kvmmmu")
DEFAULT_BUFFER_KB = 8192  # per CPU
# MMU-notifier invalidations of *any* range of the VMM's address space (Python's own
# allocator unmapping arenas): thousands a second that say nothing about the guest, and
# reading them makes more.  The VMM's memslots never change under it.
QUIET_EVENTS = ("kvm/kvm_unmap_hva_range", "kvm/kvm_age_hva", "kvm/kvm_test_age_hva")
RMDIR_TRIES, RMDIR_WAIT = 100, 0.05
_serial = itertools.count()


class TracefsError(Exception):
    """tracefs cannot be used: the message says how to fix it."""


def find_tracefs(mount: bool = True) -> Path:
    """A tracefs root with `instances/` (mounted here first if absent and root)."""
    for root in (TRACEFS, DEBUGFS_TRACING):
        try:
            if (root / "instances").is_dir():
                return root
        except PermissionError:  # tracefs is mode 700: root's
            raise TracefsError(f"cannot look into {root}: recording the kernel's events "
                               "needs root (run it with sudo)") from None  # fmt: skip
    if os.geteuid() != 0:
        raise TracefsError(f"tracefs is not mounted and mounting it needs root: "
                           f"sudo mount -t tracefs nodev {TRACEFS}")  # fmt: skip
    if not mount:
        raise TracefsError(f"tracefs is not mounted: mount -t tracefs nodev {TRACEFS}")
    done = subprocess.run(
        ["mount", "-t", "tracefs", "nodev", str(TRACEFS)], capture_output=True, text=True
    )
    if done.returncode != 0 or not (TRACEFS / "instances").is_dir():
        why = done.stderr.strip() or "no instances/ after mounting"
        raise TracefsError(f"cannot mount tracefs at {TRACEFS} ({why}); "
                           "is CONFIG_TRACING on?")  # fmt: skip
    return TRACEFS


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stale_instance_pid(name: str) -> int | None:
    """The pid in `mmuscope-[TAG-]PID-N` when that process is gone, else None."""
    parts = name.split("-")
    if len(parts) < 3 or parts[0] != "mmuscope" or not parts[-2].isdigit():
        return None
    pid = int(parts[-2])
    return None if _pid_alive(pid) else pid


def reap_stale_instances(root: Path) -> list[str]:
    """Turn off and remove mmuscope's instances whose process is gone; their names."""
    reaped: list[str] = []
    instances = root / "instances"
    for path in sorted(instances.glob("mmuscope-*")):
        if stale_instance_pid(path.name) is None:
            continue
        with contextlib.suppress(OSError):
            (path / "tracing_on").write_text("0")
        with contextlib.suppress(OSError):
            path.rmdir()
            reaped.append(path.name)
    return reaped


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP held back while the block runs (delivered right after), so
    that an instance is never made without its cleanup armed, nor half removed."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class TraceInstance:
    """A private tracefs instance recording `SUBSYSTEMS` for one pid."""

    def __init__(
        self,
        root: Path,
        *,
        pid: int | None = None,
        buffer_kb: int = DEFAULT_BUFFER_KB,
        subsystems: tuple[str, ...] = SUBSYSTEMS,
        tag: str = "",
    ) -> None:
        self.root = root
        name = f"mmuscope-{tag + '-' if tag else ''}{os.getpid()}-{next(_serial)}"
        self.path = root / "instances" / name
        reap_stale_instances(root)
        self.subsystems = subsystems
        self._pid, self._buffer_kb = pid, buffer_kb

    def open(self) -> None:
        """mkdir and configure; on any failure or Ctrl+C (held back meanwhile, raised
        here at the latest) it is removed again before the exception goes on."""
        try:
            with deferred_interrupts():
                self._make()
        except BaseException:
            self.close()
            raise

    def _make(self) -> None:
        try:
            self.path.mkdir()
        except PermissionError:
            raise TracefsError(f"cannot create {self.path}: tracing needs root") from None
        except OSError as err:
            raise TracefsError(f"cannot create {self.path}: {err.strerror}") from None
        self._configure(self._pid, self._buffer_kb)

    def _write(self, name: str, value: str) -> None:
        (self.path / name).write_text(value)

    def _configure(self, pid: int | None, buffer_kb: int) -> None:
        self._write("tracing_on", "0")
        self._write("buffer_size_kb", str(buffer_kb))
        for sub in self.subsystems:
            if not (self.path / "events" / sub).is_dir():
                raise TracefsError(f"no {sub} events in {self.root / 'events'}: "
                                   "is kvm loaded? (modprobe kvm)")  # fmt: skip
            self._write(f"events/{sub}/enable", "1")
        for event in QUIET_EVENTS:
            if (self.path / "events" / event).is_dir():
                self._write(f"events/{event}/enable", "0")
        if pid is not None:
            self._write("set_event_pid", str(pid))

    def start(self) -> None:
        self._write("tracing_on", "1")

    def stop(self) -> None:
        self._write("tracing_on", "0")

    def lost(self) -> int:
        """Events the ring buffer overwrote or dropped, over every CPU."""
        total = 0
        for stats in sorted((self.path / "per_cpu").glob("cpu*/stats")):
            with contextlib.suppress(OSError):
                for line in stats.read_text().splitlines():
                    key, _, value = line.partition(":")
                    if key.strip() in ("overrun", "dropped events"):
                        total += int(value.split()[0])
        return total

    def close(self) -> None:
        """Off, closed, removed (idempotent); a Ctrl+C meanwhile waits till it is done."""
        with deferred_interrupts():
            self._close()

    def _close(self) -> None:
        if self.path.is_dir():
            with contextlib.suppress(OSError):
                self._write("tracing_on", "0")
            for sub in self.subsystems:
                with contextlib.suppress(OSError):
                    self._write(f"events/{sub}/enable", "0")
            self._rmdir()

    def _rmdir(self) -> None:
        """`rmdir`, waiting a little while a reader (`mmuscope live`'s tail thread,
        between two polls) still holds a pipe open: the kernel says EBUSY until it lets go."""
        for _ in range(RMDIR_TRIES):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as err:
                if err.errno != errno.EBUSY:
                    raise
                time.sleep(RMDIR_WAIT)
        raise TracefsError(f"{self.path} stays busy: a reader still has its trace_pipe open")

    def __enter__(self) -> TraceInstance:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
