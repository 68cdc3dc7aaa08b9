"""One recorded run: a guest program on the host's KVM with its tracefs instance on.

`record()` makes the instance (kvm + kvmmmu events, the VMM's pid only, a ring buffer
sized for the program's largest slice), starts it once the VM exists, drains
`trace_pipe` after every slice (the text goes to `on_text` as it comes: a file, the
replay model), stops it before the VM is closed (closing zaps every shadow page) and
removes it, on success, error and Ctrl+C alike.  The result carries the kernel's own
text, the statistics before and after, the events lost (overruns), and the host.

The text's comm column: `trace_pipe` prints it with `trace_find_cmdline()` (6.18
kernel/trace/trace_sched_switch.c), from the saved_cmdlines map that the sched_switch
probe fills, and only once an event was recorded on that CPU: a run in a private
instance often ends first, and the kernel prints `<...>`; and since the map is kept by pid, a
pid reused after `pid_max` wrapped prints the comm of the task that had it before (a `grep`
of an hour ago).  The events are this process's own (the instance's `set_event_pid`), so
`CommFiller` writes, for our own threads, the comm that the task has
(`/proc/self/task/TID/comm`), as a global trace would show it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .host import HostMmu, kernel_release, read_host_mmu
from .program import GuestProgram
from .rawtrace import Format, RawPipes, read_formats
from .runner import KernelRun, SliceResult, run_on_kernel
from .stats import stats_delta
from .tracing import TraceInstance, find_tracefs

BYTES_PER_ACCESS = 1536  # ~10 events of ~120 bytes per faulting access, with room
MIN_BUFFER_KB, MAX_BUFFER_KB = 2048, 65536


@dataclass
class Recording:
    run: KernelRun
    lost: int  # events the ring buffer overwrote or dropped
    host: HostMmu
    kernel: str
    instance: str  # the tracefs instance's name

    def stats(self) -> dict[str, int]:
        """VM and vCPU statistics' deltas over the run, by name (vCPU names that clash
        with a VM statistic get a ``vcpu0.`` prefix)."""
        run = self.run
        return merged_stats(
            stats_delta(run.vm_before, run.vm_after, run.peaks),
            stats_delta(run.vcpu_before, run.vcpu_after, run.peaks),
        )


def merged_stats(vm: dict[str, int], vcpu: dict[str, int]) -> dict[str, int]:
    """VM and vCPU statistics in one dict; a vCPU name that clashes gets ``vcpu0.``."""
    out = dict(vm)
    for name, value in vcpu.items():
        out["vcpu0." + name if name in out else name] = value
    return out


UNKNOWN_COMM = "<...>"  # trace_find_cmdline(), a pid not in saved_cmdlines
# trace_print_context()'s "%16s-%-7d ": the comm (at most 15 characters) right-aligned in 16
_HEAD = re.compile(r"^(.{16})-(\d+)", re.MULTILINE)


def own_comms() -> dict[int, str]:
    """pid -> comm of this process's threads, as the kernel keeps them."""
    comms: dict[int, str] = {}
    for task in Path("/proc/self/task").glob("*"):
        try:
            comms[int(task.name)] = (task / "comm").read_text().rstrip("\n")
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
    return comms


class CommFiller:
    """`trace_pipe`'s text with the comm column of this process's threads written from
    the tasks themselves (`own_comms()`, looked up when a pid is first met), whatever
    saved_cmdlines gave (`<...>` or a stale name), the column kept 16 wide; other pids'
    lines as the kernel printed them.  A drain may end inside a line: that part waits
    for the next (`flush()` hands out the rest)."""

    def __init__(self, on_text: Callable[[str], None]) -> None:
        self.on_text = on_text
        self.comms: dict[int, str | None] = {}  # None: not one of our threads
        self._rest = ""

    def __call__(self, text: str) -> None:
        whole, _, self._rest = (self._rest + text).rpartition("\n")
        if whole or text.endswith("\n"):
            self.on_text(self.fill(whole + "\n"))

    def flush(self) -> None:
        rest, self._rest = self._rest, ""
        if rest:
            self.on_text(self.fill(rest))

    def fill(self, text: str) -> str:
        return _HEAD.sub(self._comm, text)

    def _comm(self, match: re.Match[str]) -> str:
        pid = int(match[2])
        if pid not in self.comms:
            self.comms.update(own_comms())
            self.comms.setdefault(pid, None)
        comm = self.comms[pid]
        return match[0] if comm is None else f"{comm:>16}-{pid}"


def buffer_kb(program: GuestProgram) -> int:
    largest = max((sum(s.count for s in sl.sweeps) for sl in program.slices), default=1)
    return max(MIN_BUFFER_KB, min(MAX_BUFFER_KB, largest * BYTES_PER_ACCESS // 1024))


def record(
    program: GuestProgram,
    *,
    on_text: Callable[[str], None] | None = None,
    on_slice: Callable[[SliceResult], None] | None = None,
    on_start: Callable[[KernelRun], None] | None = None,
    trace: bool = True,
    on_raw: Callable[[RawPipes, dict[int, Format]], None] | None = None,
) -> Recording:
    """Run `program` with tracing (or, `trace=False`, without: the benchmark's baseline).
    The kernel's events go to `on_text` as `trace_pipe` prints them, or, with `on_raw`,
    as the per-CPU ring buffers hold them: `on_raw` drains the pipes itself (`rawtrace`:
    no text made or parsed), with the host's formats to decode them."""
    host = read_host_mmu()
    if not trace:
        run = run_on_kernel(program, on_slice=on_slice, on_ready=on_start)
        return Recording(run, 0, host, kernel_release(), "")
    root = find_tracefs()
    filler = CommFiller(on_text) if on_text is not None else None
    with TraceInstance(root, pid=os.getpid(), buffer_kb=buffer_kb(program)) as instance:
        pipes: RawPipes | None = None
        formats: dict[int, Format] = {}

        def drain() -> None:
            if on_raw is not None and pipes is not None:
                on_raw(pipes, formats)
            elif filler is not None:
                filler(instance.read_available())

        def sliced(result: SliceResult) -> None:
            drain()
            if on_slice is not None:
                on_slice(result)

        def ready(run: KernelRun) -> None:
            instance.start()
            if on_start is not None:
                on_start(run)

        def closing() -> None:
            instance.stop()
            drain()
            if filler is not None:
                filler.flush()

        try:  # a signal may end the run anywhere from here on, opening the pipes included
            if on_raw is not None:
                pipes = RawPipes(instance.path)
                formats = read_formats(instance.path / "events", instance.subsystems)
            run = run_on_kernel(program, on_ready=ready, on_slice=sliced, before_close=closing)
        finally:
            if pipes is not None:
                pipes.close()  # before the instance goes: an open pipe keeps it busy
        lost = instance.lost()
        name = instance.path.name
    return Recording(run, lost, host, kernel_release(), name)
