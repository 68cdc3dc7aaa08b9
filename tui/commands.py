"""The text commands: `lookup`, `export`, `layout`, `rmaps-stat` (plain text and JSON, no TUI)."""

from __future__ import annotations

import argparse
import json
import sys

from mmuscope.engine import KvmError, Vm
from mmuscope.engine.layouts import Layout, build_vm
from mmuscope.engine.lookup.base import LookupTrace, Probe
from mmuscope.engine.lookup.describe import describe_probe
from mmuscope.engine.memslots.constants import PAGE_SHIFT
from mmuscope.engine.memslots.memslot import MemorySlot

from .cliparts import CliError, load_layout, read_text

PROBE_LIMIT = 24  # long linear scans print the head and tail unless --all


def load_guest(args: argparse.Namespace, layout: Layout | None = None) -> tuple[Layout, Vm]:
    """The layout asked for (or `layout`, already loaded) and the VM it registers."""
    if layout is None:
        layout = load_layout(args.layout, args.mtree, args.as_id)
    try:
        vm = build_vm(layout, args.lookup)
    except KvmError as err:
        raise CliError(f"{layout.name}: the layout is refused by KVM: {err}") from None
    if not 0 <= args.as_id < vm.address_spaces:
        raise CliError(f"address space {args.as_id} does not exist (0..{vm.address_spaces - 1})")
    return layout, vm


# -- lookup ---------------------------------------------------------------------------


def format_trace(trace: LookupTrace, layout: Layout, show_all: bool) -> list[str]:
    def name_of(slot: MemorySlot) -> str:
        return layout.name_of(slot.as_id, slot.id)

    lines = []
    for cache in trace.cache_probes:
        held = f"slot {cache.slot.id}" if cache.slot is not None else "empty"
        state = "hit" if cache.hit else "miss"
        note = f" ({cache.note})" if cache.note else ""
        lines.append(f"  cache {cache.cache:<4} last_used_slot: {held} -> {state}{note}")
    probes: list[tuple[int, Probe | None]] = list(enumerate(trace.probes, 1))
    skipped = ""
    if not show_all and len(probes) > PROBE_LIMIT:
        hidden = len(probes) - PROBE_LIMIT
        probes = [*probes[: PROBE_LIMIT - 4], (0, None), *probes[-4:]]
        skipped = f"  ... {hidden} more probes (--all prints them)"  # printed at the gap
    for number, probe in probes:
        if probe is None:
            lines.append(skipped)
            continue
        lines.append(f"  #{number:<4} {describe_probe(probe, name_of)}")
    return lines


def trace_verdict(trace: LookupTrace, layout: Layout) -> str:
    cost = f"{trace.visited} visited, {trace.comparisons} comparisons"
    if trace.slot is None:
        return f"miss: no slot holds gfn {trace.gfn:#x} (MMIO) after {cost}"
    name = layout.name_of(trace.slot.as_id, trace.slot.id)
    via = "the cache" if trace.cache_hit else trace.strategy
    return f"hit slot {trace.slot.id} ({name}) via {via} after {cost}"


def run_lookup(args: argparse.Namespace) -> int:
    layout, vm = load_guest(args)
    gfn = args.gfn >> PAGE_SHIFT if args.gpa else args.gfn
    if gfn >= 1 << (64 - PAGE_SHIFT):
        raise CliError(f"gfn {gfn:#x} is beyond a 64-bit guest physical address space")
    vm.set_last_used_slot(not args.no_cache)
    slots = vm.memslot_set(args.as_id)
    strategy = slots.lookup
    print(
        f"lookup gfn {gfn:#x} (gpa {gfn << PAGE_SHIFT:#x}) in address space {args.as_id} of "
        f"{layout.name}: {strategy.name} ({strategy.era}), {len(strategy)} slots"
    )
    trace = vm.explain(gfn, args.as_id)
    print("\n".join(format_trace(trace, layout, args.all)))
    print(f"  {trace_verdict(trace, layout)}")
    if args.compare:
        print("\nthe same gfn under every strategy (no cache):")
        for name in sorted(slots.structures(), key=lambda s: s.name):
            other = slots.search_explained(gfn, name.name)
            print(
                f"  {name.name:<12} {other.visited:>6} visited {other.comparisons:>7} comparisons"
            )
    return 0


# -- export ---------------------------------------------------------------------------


def run_export(args: argparse.Namespace) -> int:
    from mmuscope.engine.export.dot import shape_to_dot
    from mmuscope.engine.export.render import ExportError, check_dot_size, write_export

    layout = load_layout(args.layout, args.mtree, args.as_id)
    if args.output.suffix.lower() != ".dot":
        # refused up front, from the layout's slots in that address space: the `max`
        # layout's 32764 take ~3 s to register and draw before dot would be asked
        slots_in_as = {region.slot for region in layout.regions if region.as_id == args.as_id}
        try:
            check_dot_size(len(slots_in_as), layout.name)
        except ExportError as err:
            raise CliError(str(err)) from None
    layout, vm = load_guest(args, layout)
    if args.path is not None and args.path >= 1 << (64 - PAGE_SHIFT):
        raise CliError(f"--path gfn {args.path:#x} is beyond a 64-bit guest physical space")
    slots = vm.memslot_set(args.as_id)
    trace = slots.search_explained(args.path, args.lookup) if args.path is not None else None
    title = f"{layout.name} · {args.lookup} · as {args.as_id}"
    text = shape_to_dot(slots.structure(args.lookup).shape(), title=title, trace=trace)
    try:
        write_export(text, args.output)
    except ExportError as err:
        raise CliError(str(err)) from None
    print(f"wrote {args.output}")
    return 0


# -- layout ---------------------------------------------------------------------------


# KVM's address spaces on x86 (KVM_ADDRESS_SPACE_NUM 2): as_id 1 is what a vCPU in SMM sees
ADDRESS_SPACES = {0: "memory", 1: "SMM (QEMU's KVM-SMRAM)"}


def run_layout(args: argparse.Namespace) -> int:
    if args.trace is not None:
        return _replay_trace(args)
    if args.mtree is not None:
        from mmuscope.engine.layouts.qemu_mtree import MtreeError, read_mtree

        try:
            slots = read_mtree(read_text(args.mtree), args.address_space, source=str(args.mtree))
        except MtreeError as err:
            raise CliError(str(err)) from None
        rows: list[dict[str, str | int | bool]] = [
            {"name": r.name, "gpa": r.gpa, "size": r.size, "readonly": r.readonly}
            for r in slots.regions
        ]
        if not args.json:
            print(f"# {slots.describe()}")
    else:
        layout = load_layout(args.preset, None)
        rows = [
            {
                "name": r.name,
                "gpa": r.gpa,
                "size": r.size,
                "readonly": r.readonly,
                "slot": r.slot,
                "as_id": r.as_id,
            }
            for r in sorted(layout.regions, key=lambda r: (r.as_id, r.gpa))
        ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    spaces = {int(row.get("as_id", 0)) for row in rows}
    headed: int | None = None
    for row in rows:
        as_id = int(row.get("as_id", 0))
        if len(spaces) > 1 and as_id != headed:
            print(f"# address space {as_id}: {ADDRESS_SPACES.get(as_id, '')}")
            headed = as_id
        ro = " readonly" if row["readonly"] else ""
        end = int(row["gpa"]) + int(row["size"]) - 1
        print(f"{int(row['gpa']):#018x}-{end:#018x} {int(row['size']):>14} {row['name']}{ro}")
    return 0


def _replay_trace(args: argparse.Namespace) -> int:
    from mmuscope.engine.layouts.qemu_trace import (
        TraceFormatError,
        parse_memory_region_calls,
        replay_calls,
    )

    try:
        calls = parse_memory_region_calls(read_text(args.trace))
    except TraceFormatError as err:
        raise CliError(f"{args.trace}: {err}") from None
    results = replay_calls(Vm(), calls)
    if args.json:
        print(json.dumps([_result_json(r) for r in results], indent=2))
        return 0
    for r in results:
        c = r.call
        verdict = "ok" if r.ret == 0 else f"{r.errno_name}: {r.reason}"
        mismatch = "" if r.matches_recorded in (True, None) else "  (recorded ret differs!)"
        print(
            f"line {c.lineno:>5} slot {c.slot:#x} gpa {c.guest_phys_addr:#x} size "
            f"{c.memory_size:#x} flags {c.flags:#x}: {verdict}, gen {r.generation}{mismatch}"
        )
    return 0


def _result_json(r: object) -> dict[str, object]:
    from mmuscope.engine.layouts.qemu_trace import ReplayResult

    assert isinstance(r, ReplayResult)
    c = r.call
    return {
        "line": c.lineno,
        "slot": c.slot,
        "flags": c.flags,
        "gpa": c.guest_phys_addr,
        "size": c.memory_size,
        "ret": r.ret,
        "errno": r.errno_name,
        "reason": r.reason,
        "generation": r.generation,
        "recorded_ret": c.recorded_ret,
        "matches_recorded": r.matches_recorded,
    }


# -- rmaps-stat -----------------------------------------------------------------------


def run_rmaps_stat(args: argparse.Namespace) -> int:
    """The VM's `mmu_rmaps_stat` after a workload, byte for byte as debugfs prints it; on a
    terminal, the processes run so far on stderr (tui/progress.py)."""
    from mmuscope.engine.mmu.shadow.rmap_workloads import (
        MAX_PAGES,
        MAX_PROCESSES,
        run_rmap_workload,
    )

    from .progress import steps, watched

    if not 0 <= args.children <= MAX_PROCESSES:
        raise CliError(f"--children {args.children}: give 0 to {MAX_PROCESSES}")
    if not 1 <= args.pages <= MAX_PAGES:
        raise CliError(f"--pages {args.pages}: give 1 to {MAX_PAGES}")
    total = args.children if args.workload == "fork" else max(args.children, 1)
    what = "children" if args.workload == "fork" else "processes"
    title = f"rmaps-stat {args.workload}"
    with steps(title, total, shown=watched()) as progress:
        mmu = run_rmap_workload(
            args.workload,
            children=args.children,
            pages=args.pages,
            pte_list_era=args.era,
            on_process=lambda n: progress.finished(f"{n} {what} ran"),
        )
    sys.stdout.write(mmu.rmaps_stat(log2=args.log2).format())
    return 0
