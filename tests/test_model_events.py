"""The model's own events are marked wherever they are shown, and `--jsonl` carries the
kernel's field names (docs/model-events.md, docs/architecture.md §2.2 and §6.3).

One registry (`engine.events`: `MODEL_EVENTS`, `KERNEL_SHAPES`, `is_model_event`) says which
events no kernel emits; the event log, the kvm_stat table, trace text, `--jsonl` and the
dataset's `system` all ask it.  Where this host has tracefs, the registry is checked
against its ``events/*/*/format`` files (read only; skipped, with the reason, where they
are absent).
"""

from __future__ import annotations

import io
import json
import re
import subprocess
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from mmuscope.engine.events import (
    KERNEL_SHAPES,
    MODEL_EVENTS,
    MODEL_MARK,
    Event,
    is_model_event,
)
from mmuscope.engine.layouts import preset
from mmuscope.engine.trace import TRACEPOINTS, json_fields, parse_line
from mmuscope.engine.trace.kernel_fields import EMUL_FLAGS, KVM_TRACE_MMIO
from mmuscope.engine.trace.kernel_format import KernelFormat, read_format
from mmuscope.engine.trace.lines import TRACE_CMD, format_line
from mmuscope.engine.trace.reader import summarize

from tests.test_kernel_formats import samples
from tests.test_replay import MMUSCOPE

TRACEFS = Path("/sys/kernel/tracing")
DOC = Path(__file__).parents[1] / "docs" / "model-events.md"


def host_events() -> dict[str, Path]:
    """This host's tracepoints by name (their directories), or a skip with the reason."""
    events = TRACEFS / "events"
    try:
        found = {p.name: p for p in events.glob("*/*") if (p / "format").is_file()}
    except OSError as err:
        pytest.skip(f"{events} cannot be read: {err}")
    if not found:
        pytest.skip(f"no tracefs event formats at {events} (mount tracefs, as root)")
    if "kvm_exit" not in found:
        pytest.skip("this host's kernel has no kvm events (kvm module not loaded)")
    return found


def host_format(tp_system: str, name: str) -> KernelFormat:
    host_events()
    found = read_format(TRACEFS, tp_system, name)
    if found is None:
        pytest.skip(f"this host's kernel has no {tp_system}:{name} tracepoint")
    return found


# -- every event the engine emits ----------------------------------------------------------


def emitted() -> Iterator[tuple[str, Event]]:
    """(source, event) for a short run of every engine that emits events: the three MMUs
    on each of their workloads, the memslots explorer with slot changes, the TLB-flush
    simulation under each protocol, and POWER's hash MMU."""
    from mmuscope.engine.memslots.explorer import MemslotExplorer
    from mmuscope.engine.mmu.direct.session import MmuSession
    from mmuscope.engine.mmu.shadow.session import ShadowSession
    from mmuscope.engine.mmu.tdp.session import TdpSession
    from mmuscope.engine.ppc.pfault import DEMO, PfaultRun
    from mmuscope.engine.tlbflush import PROTOCOLS, TlbConfig, TlbSim

    for kind in (TdpSession, MmuSession, ShadowSession):
        for workload in kind.workloads:
            events: list[Event] = []
            session = kind(preset("pc-4g"), workload=workload, seed=1)
            session.subscribe(events.append)
            session.run(1500 if workload == "fork" else 400)  # fork: unprotects at ~1200
            yield from ((f"{kind.__name__} {workload}", e) for e in events)
    events = []
    explorer = MemslotExplorer(preset("pc-4g"))
    explorer.subscribe(events.append)
    explorer.run(50)
    explorer.add_slot(20, 0x2_0000_0000, 2 << 20)
    explorer.move_slot(20, 0x3_0000_0000)
    explorer.delete_slot(20)
    explorer.lookup_gfn(0xFEE00)
    yield from (("memslots", e) for e in events)
    for name in PROTOCOLS:
        events = []
        sim = TlbSim(TlbConfig(protocol=name), emit=events.append, trace_vm=0)
        sim.run_until(60_000_000)
        yield from ((f"tlb {name}", e) for e in events)
    events = []
    program = DEMO.scaled(pages=400, iterations=3)  # an HPT this small evicts (H_REMOVE)
    PfaultRun("today", program, seed=1, order=10, emit=events.append, trace=True).run()
    yield from (("power", e) for e in events)


@pytest.fixture(scope="module")
def every_event() -> dict[tuple[str, frozenset[str]], tuple[str, Event]]:
    """One event of each (name, field names) the engine emits, and where it came from."""
    out: dict[tuple[str, frozenset[str]], tuple[str, Event]] = {}
    for source, event in emitted():
        out.setdefault((event.name, frozenset(event.fields)), (source, event))
    return out


def test_every_event_the_engine_emits_is_a_template_or_the_models_own(
    every_event: dict[tuple[str, frozenset[str]], tuple[str, Event]],
) -> None:
    """An event the kernel's printk does not print is marked: no key=value line goes
    out unmarked."""
    names = {name for name, _ in every_event}
    assert {"account_shadowed", "kvm_set_user_memory_region", "smp_invalidate_interrupt"} <= names
    assert {"kvmppc_hpte_hv_fault", "kvm_apic_accept_irq", "sched_switch"} <= names
    for (name, _), (source, event) in every_event.items():
        assert name in TRACEPOINTS or is_model_event(name, event.fields), (source, event)
    unused = set(MODEL_EVENTS) - names
    assert not unused, f"registered as the model's but never emitted: {unused}"


def test_the_registry_is_the_hosts_truth(
    every_event: dict[tuple[str, frozenset[str]], tuple[str, Event]],
) -> None:
    """No model event is a tracepoint of this host; each `KERNEL_SHAPES` entry is its
    tracepoint's fields; every event left unmarked is one of the host's tracepoints."""
    host = host_events()
    assert not set(MODEL_EVENTS) & set(host), set(MODEL_EVENTS) & set(host)
    for name, fields in KERNEL_SHAPES.items():
        kernel = host_format(host[name].parent.name, name)
        assert set(kernel.field_names) == fields, name
    for (name, _), (source, event) in every_event.items():
        if not is_model_event(name, event.fields):
            assert name in host, (source, name)


def test_the_tlb_screens_host_events_in_the_models_shape_are_marked() -> None:
    """`kvm_apic_accept_irq ... running=True` and `sched_switch` without pids are the
    model's; the same names parsed from a real trace (no template: `text`) are not."""
    accept = Event("kvm_apic_accept_irq", {"vm": 0, "apicid": 1, "sender": 2, "running": True})
    assert is_model_event(accept.name, accept.fields)
    assert " kvm_apic_accept_irq*: " in format_line(accept, TRACE_CMD)
    real = parse_line(
        "        CPU 1/KVM-4243  [002]  1.000000: kvm_apic_accept_irq:  apicid 1 vec 251 "
        "(Fixed|edge)"
    )
    assert real is not None and not is_model_event(real.name, real.fields)
    assert MODEL_MARK not in format_line(real, TRACE_CMD)
    assert "model_only" not in real.to_json()


def test_tlb_sim_never_switches_a_pcpu_to_the_vcpu_it_runs() -> None:
    """`__schedule()` traces sched_switch only when prev != next (pv_flush rescheduled a
    preempted vCPU on its own pCPU: 14 such lines in 200 ms before)."""
    from mmuscope.engine.tlbflush import TlbConfig, TlbSim

    events: list[Event] = []
    sim = TlbSim(TlbConfig(protocol="pv_flush"), emit=events.append, trace_vm=0)
    sim.run_until(200_000_000)
    switches = [e for e in events if e.name == "sched_switch"]
    assert len(switches) > 100
    assert all(e.fields["prev_comm"] != e.fields["next_comm"] for e in switches)


# -- trace text, --jsonl, the dataset ------------------------------------------------------


def simulate(*args: str) -> str:
    done = subprocess.run(
        [MMUSCOPE, "simulate", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_simulate_marks_the_shadow_mmus_own_events_in_text_and_jsonl() -> None:
    """`simulate --mmu shadow --workload fork --accesses 3000`: hundreds of
    account_shadowed and kvm_mmu_unprotect_page lines, each with its `*`, the same in
    --jsonl (`model_only`); replay reads them back."""
    args = ("--mmu", "shadow", "--workload", "fork", "--accesses", "3000")
    text = simulate(*args)
    marked = Counter(re.findall(r" (\w+)\*: ", text))
    assert set(marked) == {"account_shadowed", "kvm_mmu_unprotect_page"}
    assert min(marked.values()) > 100, marked
    assert " account_shadowed: " not in text and " kvm_mmu_unprotect_page: " not in text
    counts = summarize(io.StringIO(text)).by_event
    assert {name: counts[name] for name in marked} == marked
    objects = [json.loads(line) for line in simulate(*args, "--jsonl").splitlines()]
    own = Counter(o["event"] for o in objects if o.get("model_only") is True)
    assert own == marked
    assert all("model_only" not in o for o in objects if o["event"] in TRACEPOINTS)


def test_the_datasets_system_is_the_registrys() -> None:
    from mmuscope.engine.dataset.columns import system_of

    for name in MODEL_EVENTS:
        assert system_of(name) == "mmuscope", name
    assert system_of("kvm_set_user_memory_region") == "mmuscope"
    assert system_of("smp_invalidate_interrupt") == "mmuscope"
    assert system_of("kvm_mmu_get_page") == "kvmmmu"


def test_the_doc_lists_every_model_event_with_why() -> None:
    """docs/model-events.md names each registered event once, in a table row with the
    reason, and each kernel tracepoint the model emits in a shape of its own."""
    doc = DOC.read_text()
    rows = dict(re.findall(r"^\| `(\w+)\*?` \| (.+?) \|$", doc, re.M))
    assert set(rows) == set(MODEL_EVENTS) | set(KERNEL_SHAPES)
    assert all(len(why) > 20 for why in rows.values())
    assert "docs/model-events.md" in (DOC.parents[1] / "README.md").read_text()


# -- --jsonl: the kernel's field names ------------------------------------------------------


def jsonl_fields(name: str, fields: dict[str, object]) -> dict[str, object]:
    tp = TRACEPOINTS[name]
    return json_fields(name, tp.parse(tp.format(fields)))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(TRACEPOINTS))
def test_jsonl_fields_are_the_host_formats(name: str) -> None:
    """Every field of the tracepoint's format file is a `--jsonl` field of each line our
    printer makes, a number where the kernel's field is one (but `insn`, the bytes as
    `__print_hex` prints them; and kvm_exit's `isa`, which a reason printed as a number
    does not tell)."""
    tp = TRACEPOINTS[name]
    kernel = host_format(tp.system, name)
    types = {f.name: f.type for f in kernel.fields}
    for fields in samples(tp):
        if "quadrant" in fields:  # a role's bitfields: level:4, quadrant:2
            fields |= {"level": int(fields["level"]) % 16, "quadrant": int(fields["quadrant"]) % 4}
        out = json_fields(name, tp.parse(tp.format(fields)))
        untold = {"isa"} if str(out.get("exit_reason_name")).startswith("0x") else set()
        missing = set(kernel.field_names) - set(out) - untold
        assert not missing, f"{name}: --jsonl lacks the kernel's {sorted(missing)}"
        for field in set(kernel.field_names) - untold - {"insn"}:
            if "char" not in types[field]:
                assert isinstance(out[field], int), (name, field, out[field])
        printed = kernel.values(tp.format(fields))
        assert printed is not None
        for field, value in printed.items():
            assert out[field] == value, (name, field)


def test_jsonl_symbols_and_return_codes_are_the_hosts_numbers() -> None:
    """kvm_mmio's type, kvm_emulate_insn's flags and fast_page_fault's ret compare with
    the numbers of the host's print fmt."""
    mmio = host_format("kvm", "kvm_mmio")
    assert dict(_symbols(mmio.args[0])) == {v: k for k, v in KVM_TRACE_MMIO.items()}
    emulate = host_format("kvm", "kvm_emulate_insn")
    assert dict(_symbols(emulate.args[3])) == {v: k for k, v in EMUL_FLAGS.items()}
    fast = host_format("kvmmmu", "fast_page_fault")
    spurious, fixed = (int(re.search(r"== (\d+)", a)[1]) for a in fast.args[-2:])  # type: ignore[index]
    base = {"vcpu_id": 0, "cr2_or_gpa": 0, "error_code": 3, "sptep": 0, "old_spte": 0}
    base |= {"new_spte": 0}
    assert jsonl_fields("fast_page_fault", base | {"spurious": 1, "fixed": 0})["ret"] == spurious
    assert jsonl_fields("fast_page_fault", base | {"spurious": 0, "fixed": 1})["ret"] == fixed


def test_jsonl_exit_reasons_are_the_hosts_tables() -> None:
    """kvm_exit's `exit_reason` is the u32 of the host's VMX and SVM tables, with `isa`;
    FAILED_VMENTRY is bit 31."""
    from mmuscope.engine.trace.exit_reasons import SVM_EXIT_REASONS, VMX_EXIT_REASONS

    kernel = host_format("kvm", "kvm_exit")
    vmx, svm = kernel.args[1].split(" : ", 1)
    assert dict(_symbols(vmx)) == VMX_EXIT_REASONS
    assert dict(_symbols(svm)) == SVM_EXIT_REASONS
    base = {"vcpu_id": 0, "guest_rip": 0x401000}
    out = jsonl_fields("kvm_exit", base | {"exit_reason": "EPT_VIOLATION"})
    assert (out["exit_reason"], out["isa"], out["exit_reason_name"]) == (48, 1, "EPT_VIOLATION")
    failed = jsonl_fields("kvm_exit", base | {"exit_reason": "INVALID_STATE", "failed_vmentry": 1})
    assert failed["exit_reason"] == 0x80000021 and failed["isa"] == 1
    assert jsonl_fields("kvm_exit", base | {"exit_reason": "npf"})["exit_reason"] == 0x400
    assert jsonl_fields("kvm_exit", base | {"exit_reason": "npf"})["isa"] == 2


def _symbols(expr: str) -> Iterator[tuple[int, str]]:
    for value, symbol in re.findall(r'\{ ([^,]+), "([^"]*)" \}', expr):
        yield eval(value, {"__builtins__": {}}), symbol  # the kernel's constant expressions


def test_jsonl_shadow_page_role_set_spte_letters_and_mmio_type() -> None:
    """Without a host: the shadow-page events carry `mmu_valid_gen` and the raw `role`
    (the bits the text prints, `engine.mmu.role`'s layout) beside the decoded role;
    kvm_mmu_set_spte `r, x, u`; kvm_mmio's `type` is the number."""
    from mmuscope.engine.mmu.role import KvmMmuPageRole

    page = {"gen": 3, "gfn": 0x1234, "level": 1, "gpte_bytes": 4, "quadrant": 2}
    page |= {"direct": False, "access": 6, "invalid": True, "nxe": False, "ad": False}
    page |= {"root_count": 1, "unsync": True, "created": True}
    out = jsonl_fields("kvm_mmu_get_page", page)
    role = KvmMmuPageRole(level=1, has_4_byte_gpte=1, quadrant=2, access=6, invalid=1)
    role = replace(role, efer_nx=0, ad_disabled=1, cr0_wp=0)  # cr0_wp: not printed
    assert list(out)[:6] == ["mmu_valid_gen", "gfn", "role", "root_count", "unsync", "created"]
    assert out["mmu_valid_gen"] == 3 and out["role"] == role.word and out["gen"] == 3
    assert out["level"] == 1 and out["access"] == 6  # the decoded role stays
    zap = jsonl_fields("kvm_mmu_prepare_zap_page", page)
    assert zap["role"] == role.word and "created" not in zap
    spte = {"gfn": 1, "spte": 0x86000001234567, "sptep": 0xFFFF8881, "level": 1}
    letters = jsonl_fields("kvm_mmu_set_spte", spte | {"access_str": "rw-u"})
    assert (letters["r"], letters["x"], letters["u"]) == (True, False, 1)
    assert jsonl_fields("kvm_mmu_set_spte", spte | {"access_str": "-wx"})["u"] == -1
    mmio = jsonl_fields("kvm_mmio", {"type": "write", "len": 4, "gpa": 0xFEE000B0, "val": 0})
    assert mmio["type"] == 2 and mmio["type_name"] == "write"
