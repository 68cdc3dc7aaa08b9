"""The child that ``mmuscope kvm PROGRAM`` (the app) starts: ``--follow DIR``.

It records the program (tui/kvm_record.py), writes the kernel's text (the ring
buffers' records as `trace_pipe` prints them) into the FIFO ``DIR/trace`` as each
slice's drain brings it, and after each slice one JSON line into
``DIR/stats.jsonl``: the KVM_GET_STATS_FD deltas so far and, on a shadow-paging host, the
comparison so far (``compare``: `kvm --compare --json`'s object, its ``rows`` also at the
top level) — the same program advanced one slice on the engine's shadow MMU
(`engine.kvm.compare.Comparison`), against the kernel's events as they came.  The last
line says ``done`` (with the events lost and the final comparison) or carries the
one-line ``error``.

Started as ``python -m mmuscope.tui``, the child's task would be called ``python``: it
names itself ``mmuscope`` first (PR_SET_NAME, through ``/proc/self/comm``), so that the
trace's comm column says what the command line's does.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Any, TextIO

from .cliparts import CliError
from .kvm_launch import STATS_FILE, TRACE_FIFO
from .kvm_record import record_or_fail, text_sink


def run_follow(args: argparse.Namespace, program: Any) -> int:
    from mmuscope.engine.kvm.compare import Comparison
    from mmuscope.engine.kvm.host import read_host_mmu

    with contextlib.suppress(OSError):
        Path("/proc/self/comm").write_text("mmuscope")  # the CLI's comm (its script's name)
    folder: Path = args.follow
    host = read_host_mmu()
    with open(folder / TRACE_FIFO, "w") as fifo, open(folder / STATS_FILE, "a") as stats, \
            text_sink(args.trace_out) as kept:  # fmt: skip
        state: dict[str, Any] = {"run": None, "mmio_exits": 0, "compare": None}

        def on_text(text: str) -> None:
            fifo.write(text)
            fifo.flush()
            if kept is not None:
                kept.write(text)

        def on_events(events: list[Any]) -> None:
            if state["compare"] is not None:
                state["compare"].kernel_events(events)

        def on_start(run: Any) -> None:
            state["run"] = run
            if not host.tdp:  # the model is the shadow MMU
                state["compare"] = Comparison(program, host, run.address_spaces)

        def on_slice(result: Any) -> None:
            state["mmio_exits"] += result.mmio_exits
            _write(stats, _slice_record(state, result))

        try:
            recording = record_or_fail(program, on_text, on_events=on_events,
                                       on_slice=on_slice, on_start=on_start)  # fmt: skip
        except CliError as err:
            _write(stats, {"error": str(err)})
            raise
        done: dict[str, Any] = {"done": True, "lost": recording.lost,
                                "slices": len(recording.run.slices)}  # fmt: skip
        if state["compare"] is not None:
            verdict = state["compare"].verdict(
                recording.stats(), recording.run.mmio_exits, recording.lost
            )
            done["compare"] = verdict.to_json()
            done["rows"] = done["compare"]["rows"]
        _write(stats, done)
    return 0


def _slice_record(state: dict[str, Any], result: Any) -> dict[str, Any]:
    from mmuscope.engine.kvm.record import merged_stats
    from mmuscope.engine.kvm.stats import stats_delta

    run = state["run"]
    vm = stats_delta(run.vm_before, result.vm_stats, run.peaks)
    vcpu = stats_delta(run.vcpu_before, result.vcpu_stats, run.peaks)
    record = {"slice": result.index, "label": result.slice.label,
              "mmio_exits": result.mmio_exits, "vm": vm, "vcpu": vcpu, "rows": []}  # fmt: skip
    comparison = state["compare"]
    if comparison is not None:
        comparison.run_slice(result.index)
        so_far = comparison.so_far(merged_stats(vm, vcpu), state["mmio_exits"]).to_json()
        record.update(compare=so_far, rows=so_far["rows"])
    return record


def _write(stats: TextIO, record: dict[str, Any]) -> None:
    stats.write(json.dumps(record) + "\n")
    stats.flush()
