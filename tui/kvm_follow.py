"""The child that ``mmuscope kvm PROGRAM`` (the app) starts: ``--follow DIR``.

It records the program (tui/kvm_record.py), writes the kernel's text into the FIFO
``DIR/trace`` as each slice's drain brings it, and after each slice one JSON line into
``DIR/stats.jsonl``: the KVM_GET_STATS_FD deltas so far and, on a shadow-paging host, the
comparison rows so far — the same program advanced one slice on the engine's shadow MMU
(`engine.kvm.model.ModelRunner`), against the kernel's events counted as they came.  The
last line says ``done`` (with the events lost) or carries the one-line ``error``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TextIO

from .cliparts import CliError
from .kvm_launch import STATS_FILE, TRACE_FIFO
from .kvm_record import record_or_fail, write_atomically


class LiveCompare:
    """The kernel's counts from the text so far against the model, slice by slice."""

    def __init__(self, program: Any) -> None:
        from mmuscope.engine.kvm.compare import KernelCounts, host_config
        from mmuscope.engine.kvm.host import host_phys_bits, read_host_mmu
        from mmuscope.engine.kvm.model import ModelRunner
        from mmuscope.engine.kvm.program import build_program

        host = read_host_mmu()
        self.enabled = not host.tdp
        self.program = build_program(program.name, program.pages, program.children)
        cfg = host_config(host.mmio_caching, host_phys_bits())
        self.model = ModelRunner(self.program, cfg) if self.enabled else None
        self.kernel = KernelCounts()
        self._rest = ""

    def text(self, text: str) -> None:
        from mmuscope.engine.trace.reader import iter_events

        *lines, self._rest = (self._rest + text).split("\n")
        self.kernel.add(iter_events(line + "\n" for line in lines))

    def rows(self, index: int, stats: dict[str, int], mmio_exits: int) -> list[dict[str, Any]]:
        from mmuscope.engine.kvm.compare import MODEL_MISSING, compare

        if self.model is None:
            return []
        self.model.run_slice(self.program.slices[index])
        rows = compare(self.program, self.kernel, stats, mmio_exits, self.model.run,
                       MODEL_MISSING)  # fmt: skip
        return [r.to_json() for r in rows]


def run_follow(args: argparse.Namespace, program: Any) -> int:
    folder: Path = args.follow
    kept: list[str] = []
    live = LiveCompare(program)
    with open(folder / TRACE_FIFO, "w") as fifo, open(folder / STATS_FILE, "a") as stats:
        state: dict[str, Any] = {"run": None, "mmio_exits": 0}

        def on_text(text: str) -> None:
            fifo.write(text)
            fifo.flush()
            live.text(text)
            if args.trace_out is not None:
                kept.append(text)

        def on_start(run: Any) -> None:
            state["run"] = run

        def on_slice(result: Any) -> None:
            state["mmio_exits"] += result.mmio_exits
            _write(stats, _slice_record(state, result, live))

        try:
            recording = record_or_fail(program, on_text, on_slice=on_slice, on_start=on_start)
        except CliError as err:
            _write(stats, {"error": str(err)})
            raise
        _write(stats, {"done": True, "lost": recording.lost, "slices": len(recording.run.slices)})
    if args.trace_out is not None:
        write_atomically(args.trace_out, "".join(kept))
    return 0


def _slice_record(state: dict[str, Any], result: Any, live: LiveCompare) -> dict[str, Any]:
    from mmuscope.engine.kvm.record import merged_stats
    from mmuscope.engine.kvm.stats import stats_delta

    run = state["run"]
    vm = stats_delta(run.vm_before, result.vm_stats, run.peaks)
    vcpu = stats_delta(run.vcpu_before, result.vcpu_stats, run.peaks)
    rows = live.rows(result.index, merged_stats(vm, vcpu), state["mmio_exits"])
    return {"slice": result.index, "label": result.slice.label,
            "mmio_exits": result.mmio_exits, "vm": vm, "vcpu": vcpu, "rows": rows}  # fmt: skip


def _write(stats: TextIO, record: dict[str, Any]) -> None:
    stats.write(json.dumps(record) + "\n")
    stats.flush()
