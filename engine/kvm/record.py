"""One recorded run: a guest program on the host's KVM with its tracefs instance on.

`record()` makes the instance (kvm + kvmmmu events, the VMM's pid only, a ring buffer
sized for the program's largest slice), starts it once the VM exists, drains it after
every slice, stops it before the VM is closed (closing zaps every shadow page) and
removes it, on success, error and Ctrl+C alike.  The result carries the statistics
before and after, the events lost (overruns), and the host.

Every mode reads the same thing: the instance's per-CPU ring buffers in binary
(`rawtrace.RawPipes`, `per_cpu/cpuN/trace_pipe_raw`), decoded with the host's format
files.  A drain hands them on as its caller asks: the pipes themselves (`on_raw`: the
summary counts what it needs), `Event`s as the text parser makes them (`on_events`:
the comparison), `--jsonl`'s lines (`on_json`), the lines `trace_pipe` would have
printed (`on_text`: `--trace-out`, the app), or the records themselves (`on_records`:
`--parquet`, the summary of a run whose lines go to a file), `CHUNK` records at a
time, so that memory holds a chunk, not a slice.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..events import Event
from .host import HostMmu, kernel_release, read_host_mmu
from .program import GuestProgram
from .rawtrace import Decoder, Format, RawEvent, RawPipes, read_formats
from .runner import KernelRun, SliceResult, run_on_kernel
from .stats import stats_delta
from .tracing import TraceInstance, find_tracefs

BYTES_PER_ACCESS = 1536  # ~10 events of ~120 bytes per faulting access, with room
MIN_BUFFER_KB, MAX_BUFFER_KB = 2048, 65536
CHUNK = 4096  # records decoded and handed on at a time


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


def buffer_kb(program: GuestProgram) -> int:
    largest = max((sum(s.count for s in sl.sweeps) for sl in program.slices), default=1)
    return max(MIN_BUFFER_KB, min(MAX_BUFFER_KB, largest * BYTES_PER_ACCESS // 1024))


def own_comms() -> dict[int, str]:
    """pid -> comm of this process's threads, as the kernel keeps them: the events are
    this process's own (the instance's `set_event_pid`), and `trace_pipe`'s comm column
    would come from saved_cmdlines (`trace_find_cmdline()`, 6.18
    kernel/trace/trace_sched_switch.c), which prints `<...>` for a pid it has not seen
    and, the map being kept by pid, a stale name after `pid_max` wrapped."""
    comms: dict[int, str] = {}
    for task in Path("/proc/self/task").glob("*"):
        try:
            comms[int(task.name)] = (task / "comm").read_text().rstrip("\n")
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
    return comms


def record(
    program: GuestProgram,
    *,
    on_text: Callable[[str], None] | None = None,
    on_events: Callable[[list[Event]], None] | None = None,
    on_slice: Callable[[SliceResult], None] | None = None,
    on_start: Callable[[KernelRun], None] | None = None,
    trace: bool = True,
    on_raw: Callable[[RawPipes, dict[int, Format]], None] | None = None,
    on_records: Callable[[list[RawEvent], Decoder], None] | None = None,
    on_json: Callable[[str], None] | None = None,
) -> Recording:
    """Run `program` with tracing (or, `trace=False`, without: the benchmark's baseline).
    After each slice the ring buffers are drained: to `on_raw` (the pipes and the
    host's formats: it reads them itself), else a chunk at a time: the records as read
    (`on_records`, with the `Decoder` the other hooks use: the host's formats), then
    decoded, to `on_events`, `on_json` and `on_text` (the same records as `Event`s, as
    `--jsonl`'s lines and as `trace_pipe`'s, each line ending in a newline)."""
    host = read_host_mmu()
    if not trace:
        run = run_on_kernel(program, on_slice=on_slice, on_ready=on_start)
        return Recording(run, 0, host, kernel_release(), "")
    root = find_tracefs()
    with TraceInstance(root, pid=os.getpid(), buffer_kb=buffer_kb(program)) as instance:
        pipes: RawPipes | None = None
        formats: dict[int, Format] = {}
        decoder = Decoder(formats, own_comms())

        def hand_on(chunk: list[RawEvent]) -> None:
            if on_records is not None:
                on_records(chunk, decoder)
            if on_events is not None:
                on_events([decoder.event(raw) for raw in chunk])
            if on_json is not None:
                on_json(decoder.jsonl(chunk))
            if on_text is not None:
                on_text(decoder.lines(chunk))

        def drain() -> None:
            if pipes is None:
                return
            if on_raw is not None:
                on_raw(pipes, formats)
                return
            if on_events is None and on_text is None and on_records is None and on_json is None:
                for _ in pipes.iter_available():
                    pass
                return
            chunk: list[RawEvent] = []
            for raw in pipes.iter_available():
                chunk.append(raw)
                if len(chunk) >= CHUNK:
                    hand_on(chunk)
                    chunk = []
            if chunk:
                hand_on(chunk)

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

        try:  # a signal may end the run anywhere from here on, opening the pipes included
            pipes = RawPipes(instance.path)
            formats.update(read_formats(instance.path / "events", instance.subsystems))
            run = run_on_kernel(program, on_ready=ready, on_slice=sliced, before_close=closing)
        finally:
            if pipes is not None:
                pipes.close()  # before the instance goes: an open pipe keeps it busy
        lost = instance.lost()
        name = instance.path.name
    return Recording(run, lost, host, kernel_release(), name)
