"""`mmuscope simulate`: a simulated guest run printed as `trace-cmd report` text (or as
`replay --jsonl` objects), so a teacher can hand out a trace that `mmuscope replay`, or
any tool that reads trace text, reads back.

    mmuscope simulate --mmu {tdp,direct,shadow} --workload NAME [--accesses N] [--seed N]
                      [--zap fast|slow|roots --at K] [--layout NAME] [--jsonl]
                      [--race-rate P] [--smi-every N] [--pml on|off]
                      [--dirty-log legacy|manual|ring] [--dirty-ring-size N]
                      [--kernel VERSION] [--ioeventfd] [--enable-apicv]

The model follows the 6.18 kernel (docs/kvm.md §12 lists the older eras it offers).
`--kernel VERSION` (6.10 to 6.18) shows an older kernel: each behaviour that changed
after it is its older era (docs/kvm.md §12), e.g. `--kernel 6.12` zaps the tables a huge
page can replace when dirty logging stops (`kvm_tdp_mmu_zap_collapsible_sptes`) where
6.13+ recovers the huge pages in place (`kvm_mmu_recover_huge_pages`).
`tdp` is the TDP MMU (tdp_mmu=Y), `direct` the older shadow MMU with direct pages
(tdp_mmu=N), `shadow` shadow paging (EPT off).  `--zap KIND --at K` zaps before access K:
`fast` is kvm_mmu_zap_all_fast, `slow` the old zap of everything under one lock hold,
`roots` (TDP MMU only) invalidates and zaps the roots without the generation flip.
`--race-rate P` (TDP MMU only): another vCPU faults on the same gfn inside the spte's
cmpxchg window that often, so `tdp_mmu_set_spte_atomic` loses (RET_PF_RETRY; a page
table made for a lost link is freed without a tracepoint, as `tdp_mmu_free_sp` does).
`--smi-every N` (TDP MMU only, a guest with SMRAM such as `--layout q35-16g`): the last
vCPU enters SMM every N accesses and leaves half way, on a root of address space 1.
`--workload balloon` (every MMU): a virtio balloon gives pages back to the host; the
MMU notifier's `kvm_unmap_hva_range` lines, the sptes zapped, the racing fault retried
(engine/mmu/mmu_notifier.py, docs/kvm.md §6.7).
`--pml on|off` (tdp, direct; default on, kvm_intel's `enable_pml`): how dirty logging
runs (the `dirty` and `migrate` workloads, engine/mmu/dirty_log.py): with PML the D bits
are cleared and the CPU logs the writes, off (a host without PML, EPT without A/D bits,
or a nested guest's shadow EPT) every logged spte is write-protected and
`fast_page_fault()` fixes the writes.  Shadow paging has no PML: write protection.
`--dirty-log MODE` (tdp, direct; the `dirty` and `migrate` workloads, docs/kvm.md §6.8):
how userspace logs dirty pages: `legacy` (the default; "legacy GET-only":
KVM_MEM_LOG_DIRTY_PAGES protects the whole slot, KVM_GET_DIRTY_LOG protects again what
it reports), `manual` ("manual protect, initially set", QEMU's default since 4.2:
KVM_CAP_MANUAL_DIRTY_LOG_PROTECT2, nothing protected when logging starts, the bitmap all
ones, KVM_CLEAR_DIRTY_LOG protects what it clears) or `ring` (KVM_CAP_DIRTY_LOG_RING:
`kvm_dirty_ring_push` per dirtied page, `kvm_dirty_ring_exit` when a vCPU's ring is
soft full, KVM_RESET_DIRTY_RINGS protects what was collected, `kvm_dirty_ring_reset`);
`--dirty-ring-size N` its entries per vCPU (default 4096, QEMU's example; a power of two
above the 64 reserved entries, and PML's 512).

`--ioeventfd` (tdp, direct): netperf's doorbell gets QEMU's length-0 ioeventfd, so a store
on its cached MMIO spte is `kvm_fast_mmio` (`handle_ept_misconfig()`): skipped, not
emulated, no `kvm_userspace_exit`.  `--enable-apicv` (tdp, direct): the EPT maps the
APIC-access page, so a LAPIC EOI runs without an exit once mapped.  tdp and direct print
the VM exits around each fault (`kvm_exit`, `kvm_entry`, the emulator's lines: docs/kvm.md
§13).

Each line is `engine.trace.lines.format_line(event, "trace-cmd")`, made by the printer
in `tui.report_lines` (`LinePrinter`: the session's names and fields without an `Event`,
through the tracepoints' templates); the model's own events carry a `*` after their name
(`engine.events.is_model_event`).  The first line is trace-cmd's `cpus=N` header.  Bad
options: one line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, NamedTuple, TextIO

from mmuscope.engine.events import Event
from mmuscope.engine.mmu.params import KERNELS, MODEL_KERNEL

from .cliparts import CliError
from .dataset_cli import add_options as add_parquet_options
from .report_lines import LinePrinter

if TYPE_CHECKING:
    from collections.abc import Callable

    from mmuscope.engine.mmu.direct.session import MmuSession
    from mmuscope.engine.mmu.guest.session import GuestSession
    from mmuscope.engine.mmu.shadow.session import ShadowSession
    from mmuscope.engine.mmu.tdp.session import TdpSession

MMUS = ("tdp", "direct", "shadow")
DIRTY_LOGS = ("legacy", "manual", "ring")  # engine/mmu/dirty_log.py DIRTY_LOG_MODES
ZAPS = ("fast", "slow", "roots")
# for --help without importing the sessions (tests/test_simulate_cli.py compares them
# with TdpSession's, MmuSession's and ShadowSession's `workloads`)
HELP_WORKLOADS = {
    "tdp, direct": ("kernbench", "netperf", "churn", "dirty", "migrate", "balloon"),
    "shadow": ("kernbench", "netperf", "fork", "pfault", "churn", "balloon"),
}
HELP_DESCRIPTION = """\
A simulated guest run printed as trace-cmd report text, each event as the 6.18
kernel prints it (the kernel the model follows; older behaviour by era: docs/kvm.md
§12), for `mmuscope replay` or any tool that reads trace text (--jsonl: the objects
of `replay --jsonl`). A seed draws the same guest accesses under tdp and
direct, so the two eras can be compared on one workload. Events no kernel emits (the
model's own, docs/model-events.md) carry a `*` after their name, and "model_only": true
in JSON."""
HELP_EXAMPLES = """examples:
  mmuscope simulate --mmu tdp --workload kernbench --accesses 2000 > tdp.txt
  mmuscope replay tdp.txt                      # the run in the replay screen
  mmuscope simulate --mmu direct --workload kernbench --zap fast --at 500 \\
      | mmuscope replay --summary -            # 2013's fast zap, counted
  mmuscope simulate --mmu tdp --workload kernbench --zap roots --at 500 --jsonl
"""
WRITE_BATCH = 4096
RUN_CHUNK = 512  # accesses run between two looks at the batch


class SimulateOptions(NamedTuple):
    """The options of one `mmuscope simulate` run."""

    mmu: str
    workload: str
    accesses: int = 10_000
    seed: int = 1
    zap: str | None = None
    at: int | None = None
    jsonl: bool = False
    layout: str = "pc-4g"
    race_rate: float = 0.0
    smi_every: int = 0
    pml: bool | None = None  # None: the MMU's default (on under EPT, none for shadow)
    dirty_log: str = "legacy"  # engine/mmu/dirty_log.py DIRTY_LOG_MODES
    dirty_ring_size: int | None = None  # entries per vCPU (None: DIRTY_RING_ENTRIES)
    kernel: str = MODEL_KERNEL  # an older one: its eras of docs/kvm.md §12
    ioeventfd: bool = False  # the NIC's doorbell on the fast MMIO bus (tdp, direct)
    enable_apicv: bool = False  # kvm_intel.enable_apicv: the APIC-access page (tdp, direct)


class SimulateError(ValueError):
    """Options that do not fit together; one line."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from mmuscope.engine.layouts import DEFAULT_LAYOUT, PRESETS

    parser = sub.add_parser(
        "simulate",
        help="a simulated run printed as trace-cmd report text (or --jsonl)",
        description=HELP_DESCRIPTION,
        epilog=HELP_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--mmu", required=True, choices=MMUS,
        help="tdp: the TDP MMU (tdp_mmu=Y, the default under EPT/NPT); direct: the "
        "shadow MMU's direct pages under EPT (tdp_mmu=N); shadow: shadow paging (EPT off)",
    )  # fmt: skip
    workloads = "; ".join(f"{', '.join(w)} ({m})" for m, w in HELP_WORKLOADS.items())
    parser.add_argument(
        "--workload", required=True, metavar="NAME",
        help=f"the access mix: {workloads}. netperf's MMIO stores go to a NIC doorbell "
        "QEMU emulates (--ioeventfd: on the fast MMIO bus) and to the LAPIC's EOI as "
        "emulated MMIO, kvm_apic and kvm_eoi (a host with kvm_intel.flexpriority=0 "
        "enable_apicv=0; --enable-apicv: no exit)",
    )  # fmt: skip
    parser.add_argument(
        "--accesses", type=_count, default=10_000, help="guest accesses (default 10000)"
    )
    parser.add_argument("--seed", type=_count, default=1, help="workload seed (default 1)")
    parser.add_argument(
        "--zap", choices=ZAPS,
        help="zap once, before access --at: fast (kvm_mmu_zap_all_fast), slow (everything "
        "under one lock hold, before 2013), roots (tdp: invalidate and zap the roots)",
    )  # fmt: skip
    parser.add_argument("--at", type=_count, metavar="K", help="the access the zap comes before")
    parser.add_argument(
        "--layout", default=DEFAULT_LAYOUT, metavar="NAME",
        help=f"preset guest: {', '.join(PRESETS)} (default {DEFAULT_LAYOUT})",
    )  # fmt: skip
    parser.add_argument("--jsonl", action="store_true", help="JSON objects, as replay --jsonl")
    parser.add_argument(
        "--race-rate", type=_rate, default=0.0, metavar="P",
        help="tdp: how often another vCPU wins the spte's cmpxchg (0..1)",
    )  # fmt: skip
    parser.add_argument(
        "--smi-every", type=_count, default=0, metavar="N",
        help="tdp: an SMI every N accesses (the last vCPU runs in SMM half of them)",
    )  # fmt: skip
    parser.add_argument(
        "--pml", choices=("on", "off"),
        help="tdp, direct: dirty logging by PML (on, the default: D bits cleared, the CPU "
        "logs writes) or by write protection (off: fast_page_fault fixes the writes)",
    )  # fmt: skip
    parser.add_argument(
        "--dirty-log", choices=DIRTY_LOGS, default="legacy",
        help="tdp, direct: legacy (KVM_GET_DIRTY_LOG protects what it reports, the "
        "default), manual (manual protect, initially set: QEMU's default since 4.2, "
        "KVM_CLEAR_DIRTY_LOG protects what it clears) or ring (the dirty ring)",
    )  # fmt: skip
    parser.add_argument(
        "--dirty-ring-size", type=_count, metavar="N",
        help="with --dirty-log ring: entries per vCPU ring (default 4096)",
    )  # fmt: skip
    parser.add_argument(
        "--kernel", choices=KERNELS, default=MODEL_KERNEL, metavar="VERSION",
        help=f"the kernel whose behaviour to show, {KERNELS[0]} to {MODEL_KERNEL} (default "
        f"{MODEL_KERNEL}): an older one brings back each older era docs/kvm.md §12 lists, "
        "e.g. 6.12 zaps huge pages when dirty logging stops instead of recovering them",
    )  # fmt: skip
    parser.add_argument(
        "--ioeventfd", action="store_true",
        help="tdp, direct: netperf's doorbell has a length-0 ioeventfd (virtio-pci notify, "
        "QEMU's ioeventfd=on): an EPT misconfiguration on it is kvm_fast_mmio, the store "
        "skipped with no emulation and no exit to userspace (default: QEMU emulates it, "
        "kvm_userspace_exit KVM_EXIT_MMIO)",
    )  # fmt: skip
    parser.add_argument(
        "--enable-apicv", action="store_true",
        help="tdp, direct: kvm_intel.enable_apicv, the CPU virtualizes the local APIC: the "
        "EPT maps the APIC-access page (its first access an EPT violation) and a LAPIC EOI "
        "then exits not at all (default: the EOI is emulated MMIO)",
    )  # fmt: skip
    add_parquet_options(parser)  # --parquet DIR, --source NAME, --append (dataset_cli)


def _count(text: str) -> int:
    """--accesses, --seed, --at, --smi-every: 0x... or decimal, not negative."""
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text!r}")
    return value


def _rate(text: str) -> float:
    """--race-rate: a probability."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be from 0 to 1: {text!r}")
    return value


def run_simulate(args: argparse.Namespace) -> int:
    """The command: the run printed on stdout, or its options' one-line error (exit 2)."""
    from mmuscope.engine.layouts import preset

    from .dataset_cli import check_options, write_run
    from .progress import steps, watched

    if args.parquet is not None and args.jsonl:
        raise CliError("--jsonl prints the run and --parquet writes it: give one")
    check_options(args)
    options = SimulateOptions(
        args.mmu, args.workload, args.accesses, args.seed, args.zap, args.at, args.jsonl,
        args.layout, args.race_rate, args.smi_every,
        None if args.pml is None else args.pml == "on", args.dirty_log,
        args.dirty_ring_size, args.kernel, args.ioeventfd, args.enable_apicv,
    )  # fmt: skip
    try:
        session = make_session(options)
    except (SimulateError, ValueError) as err:
        print(f"mmuscope simulate: error: {err}", file=sys.stderr)
        return 2
    title = f"simulate {options.mmu} {options.workload}"
    # on a terminal the trace text scrolling by is the sign of life: no display to mix in
    shown = watched(json_output=options.jsonl) and not sys.stdout.isatty()
    with steps(title, options.accesses, shown=shown) as progress:

        def ran(done: int) -> None:
            progress.reached(done, f"{done:,} accesses")

        if args.parquet is not None:  # the printed run written as a dataset (dataset_cli)
            return write_run(
                args, lambda out: run(session, options, out, ran), simulate_source(options),
                f"simulate --mmu {options.mmu} --workload {options.workload}",
                preset(options.layout),
            )  # fmt: skip
        run(session, options, sys.stdout, ran)
    sys.stdout.flush()
    return 0


def simulate_source(options: SimulateOptions) -> str:
    """The default --source of a run: simulate-MMU-WORKLOAD-SEED."""
    return f"simulate-{options.mmu}-{options.workload}-{options.seed}"


def make_session(options: SimulateOptions) -> GuestSession[object]:
    """The guest of these options, checked first (SimulateError/ValueError on bad ones);
    only the chosen MMU's modules are imported."""
    from mmuscope.engine.layouts import preset

    if (options.zap is None) != (options.at is None):
        raise SimulateError("--zap and --at go together")
    if options.at is not None and options.at > options.accesses:
        raise SimulateError(f"--at {options.at} is past --accesses {options.accesses}")
    if options.zap == "roots" and options.mmu != "tdp":
        raise SimulateError("--zap roots needs --mmu tdp: only the TDP MMU has roots to zap")
    kind = _session_class(options.mmu)
    if options.workload not in kind.workloads:
        raise SimulateError(
            f"--workload {options.workload!r} is not one of --mmu {options.mmu}'s: "
            f"{', '.join(kind.workloads)}"
        )
    if options.race_rate and options.mmu != "tdp":
        raise SimulateError("--race-rate needs --mmu tdp: the races are tdp_mmu_set_spte_atomic's")
    if options.smi_every and options.mmu != "tdp":
        raise SimulateError("--smi-every needs --mmu tdp")
    if options.ioeventfd and options.mmu == "shadow":
        raise SimulateError(
            "--ioeventfd needs --mmu tdp or direct: handle_ept_misconfig() tries the fast MMIO bus"
        )
    if options.enable_apicv and options.mmu == "shadow":
        raise SimulateError(
            "--enable-apicv needs --mmu tdp or direct: the APIC-access page is EPT's"
        )
    if options.pml is not None and options.mmu == "shadow":
        raise SimulateError("--pml is for --mmu tdp or direct: shadow paging has no PML")
    if options.dirty_log != "legacy" and options.mmu == "shadow":
        raise SimulateError(
            "--dirty-log is for --mmu tdp or direct: shadow's workloads log no dirty pages"
        )
    if options.dirty_ring_size is not None and options.dirty_log != "ring":
        raise SimulateError("--dirty-ring-size goes with --dirty-log ring")
    layout = preset(options.layout)
    from mmuscope.engine.mmu.params import TdpMmuParams, kernel_params
    from mmuscope.engine.mmu.spte import SPTE_CONFIGS, kernel_spte_config

    pml = options.pml is not False  # kvm_intel.enable_pml, default Y
    # --kernel: its eras (docs/kvm.md §12)
    cfg = kernel_spte_config(SPTE_CONFIGS["shadow" if options.mmu == "shadow" else "ept"],
                             options.kernel)  # fmt: skip
    if options.mmu == "tdp":
        from mmuscope.engine.mmu.tdp.session import TdpSession

        tdp = TdpSession(
            layout, workload=options.workload, seed=options.seed,
            race_rate=options.race_rate, smi_every=options.smi_every,
            params=kernel_params(options.kernel, TdpMmuParams(enable_pml=pml)),
            spte_config=cfg, dirty_log=options.dirty_log, dirty_ring=options.dirty_ring_size,
        )  # fmt: skip
        if options.ioeventfd:
            tdp.assign_ioeventfd()
        if options.enable_apicv:
            tdp.enable_apicv()
        return tdp
    if options.mmu == "direct":
        from mmuscope.engine.mmu.direct.session import MmuSession

        params = kernel_params(options.kernel, TdpMmuParams(tdp_mmu=False, enable_pml=pml))
        direct = MmuSession(layout, workload=options.workload, seed=options.seed,
                            params=params, spte_config=cfg, dirty_log=options.dirty_log,
                            dirty_ring=options.dirty_ring_size)  # fmt: skip
        if options.ioeventfd:
            direct.assign_ioeventfd()
        if options.enable_apicv:
            direct.enable_apicv()
        return direct
    params = kernel_params(options.kernel, TdpMmuParams(tdp_mmu=False))
    return kind(layout, workload=options.workload, seed=options.seed, params=params,
                spte_config=cfg)  # fmt: skip


def _session_class(mmu: str) -> type[MmuSession | ShadowSession | TdpSession]:
    if mmu == "tdp":
        from mmuscope.engine.mmu.tdp.session import TdpSession

        return TdpSession
    if mmu == "direct":
        from mmuscope.engine.mmu.direct.session import MmuSession

        return MmuSession
    from mmuscope.engine.mmu.shadow.session import ShadowSession

    return ShadowSession


def zap(session: GuestSession[object], kind: str) -> None:
    if session.paging == "tdp":
        session.zap(kind)  # type: ignore[attr-defined]  # TdpSession.zap
    elif kind == "fast":
        session.mmu.zap_all_fast()  # type: ignore[attr-defined]
    else:
        session.mmu.pages.zap_all()


def simulate(options: SimulateOptions, out: TextIO) -> int:
    """Run and print; the number of event lines printed."""
    return run(make_session(options), options, out)


def run(
    session: GuestSession[object],
    options: SimulateOptions,
    out: TextIO,
    ran: Callable[[int], object] | None = None,
) -> int:
    """The accesses run in chunks (`session.run`), the zap between two; the lines are
    written in batches of at least WRITE_BATCH; `ran(n)` after each chunk, n accesses
    run so far."""
    batch: list[str] = []
    printed = 0
    if options.jsonl:
        session.subscribe(lambda event: batch.append(_json_line(event)))
    else:
        out.write(f"cpus={session.nr_vcpus}\n")
        LinePrinter().listen(session, batch.append)
    done, stop = 0, options.accesses
    while True:
        if done == options.at and options.zap is not None:
            zap(session, options.zap)
        if len(batch) >= WRITE_BATCH or (done == stop and batch):
            printed += len(batch)
            batch.append("")  # the last line's newline
            out.write("\n".join(batch))
            batch.clear()
        if done == stop:
            return printed
        until = options.at if options.at is not None and done < options.at else stop
        chunk = min(until - done, RUN_CHUNK)
        session.run(chunk)
        done += chunk
        if ran is not None:
            ran(done)


def _json_line(event: Event) -> str:
    """The object `replay --jsonl` makes of the event's trace line (fields as printed,
    the timestamp in microseconds)."""
    import json

    from mmuscope.engine.trace.lines import TRACE_CMD, format_line, parse_line
    from mmuscope.engine.trace.tracepoints import event_json

    parsed = parse_line(format_line(event, TRACE_CMD))
    assert parsed is not None
    return json.dumps(event_json(parsed))
