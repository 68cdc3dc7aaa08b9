"""The kernel as the oracle: every guest program of `mmuscope kvm`, run once on this
host's KVM, against the engine's shadow MMU event by event (`kvm P --compare`).

Each program is recorded once (a module-scoped fixture: the kernel's text, slice by slice,
and its statistics); `mmuscope kvm P --compare --json` then runs in this process with that
recording played back to it, against the model as it is (exit 0, every event equal,
nothing lost) and against the model with one line changed (exit 1, and the first
difference names the event where the kernel shows it).  A real end-to-end
`--compare` runs once in `test_compare_runs_the_kernel_and_exits_by_its_verdict`.

Runs where /dev/kvm and root are there (the project's machines and CI); skips with the
reason elsewhere.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mmuscope.engine.kvm.program import PROGRAMS, build_program

from tests.kvm_host import TRACE_REASON, needs_tracing, our_instances, run_cli

# its xdist group is the other kvm tests' one (tests/conftest.py): a second mark would
# make its own group, "kvm_kvm-oracle", free to run beside them on the other worker
pytestmark = needs_tracing

# small programs: the whole module records each once, in a few seconds
PAGES = {"touch": 12, "fork": 8, "mmio": 4, "ptwrite": 12, "churn": 10, "dirty": 10, "cr3": 16,
         "flood": 16, "prefetch": 16, "huge": 600, "thp": 1024}  # fmt: skip
CHILDREN = {"fork": 16}  # 16: the kernel reuses zapped shadow pages' host pages


@dataclass
class Played:
    """One recording: what `record()` handed its hooks, in order, and its result."""

    steps: list[tuple[str, Any]] = field(default_factory=list)
    recording: Any = None


def _record(name: str) -> Played:
    from mmuscope.engine.kvm.record import record

    played = Played()
    program = build_program(name, PAGES.get(name), CHILDREN.get(name))
    played.recording = record(
        program,
        on_text=lambda text: played.steps.append(("text", text)),
        on_events=lambda events: played.steps.append(("events", events)),
        on_slice=lambda result: played.steps.append(("slice", result)),
        on_start=lambda run: played.steps.append(("start", run)),
    )
    return played


@pytest.fixture(scope="module")
def recordings() -> Iterator[dict[str, Played]]:
    if TRACE_REASON is not None:
        pytest.skip(TRACE_REASON)
    done = {name: _record(name) for name in PROGRAMS if name in PAGES}
    assert not our_instances()
    yield done


def compare_cli(
    monkeypatch: pytest.MonkeyPatch, played: Played, name: str
) -> tuple[int, dict[str, Any]]:
    """`mmuscope kvm NAME --compare --json` with the recording played back to it."""
    from mmuscope.tui import kvm_cli
    from mmuscope.tui.cli import main

    def replay(program: Any, on_text: Callable[[str], None], **hooks: Any) -> Any:
        assert program.name == name
        for kind, value in played.steps:
            hook = on_text if kind == "text" else hooks.get(f"on_{kind}")
            if hook is not None:
                hook(value)
        return played.recording

    monkeypatch.setattr(kvm_cli, "record_or_fail", replay)
    argv = ["kvm", name, "--compare", "--json", "--pages", str(PAGES[name])]
    if name in CHILDREN:
        argv += ["--children", str(CHILDREN[name])]
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(argv)
    return code, json.loads(out.getvalue())


@pytest.mark.parametrize("name", sorted(PAGES))
def test_the_model_equals_the_kernel_event_by_event(
    recordings: dict[str, Played], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    code, result = compare_cli(monkeypatch, recordings[name], name)
    assert result["mmu"] == "shadow", "the comparison models shadow paging"
    assert result["first_difference"] is None, result["first_difference"]
    assert result["equal"] is True and result["lost"] == 0 and code == 0
    events = result["events"]
    assert events["kernel"] == events["model"] == events["compared"] > 0
    assert all(k["kernel"] == k["model"] == k["equal"] for k in result["kinds"])
    assert all(r["explained"] is None for r in result["rows"])


Mutation = tuple[Callable[[pytest.MonkeyPatch], None], str, str]


def _mutations() -> dict[str, Mutation]:
    """One line of the model changed per program: the kernel's event at the first
    difference, and what the report says of it."""
    from mmuscope.engine.kvm import model
    from mmuscope.engine.mmu import dirty_log
    from mmuscope.engine.mmu.guest import page_tables
    from mmuscope.engine.mmu.rmap import head
    from mmuscope.engine.mmu.shadow import mmu

    return {
        # the fetch walks' error code without PFERR_FETCH_MASK (pferr 4 U, not 14 U|F)
        "touch": (lambda m: m.setattr(page_tables, "PFERR_FETCH_MASK", 0),
                  "kvm_mmu_pagetable_walk: addr 400000 pferr 14 U|F",
                  "pferr 0x14 in the kernel, 0x4 in the model"),
        # __rmap_add recycling an rmap of more than 2 sptes: the code page's too, so the
        # third process refetches its code where the kernel reads its data
        "fork": (lambda m: m.setattr(head, "RMAP_RECYCLE_THRESHOLD", 2),
                 "kvm_mmu_pagetable_walk: addr 1000000 pferr 4 U",
                 "addr 0x1000000 in the kernel, 0x400000 in the model"),
        # userspace's answer to a read never completed (no KVM_TRACE_MMIO_READ)
        "mmio": (lambda m: m.setattr(mmu.ShadowMmu, "complete_emulated_mmio",
                                     lambda self, vcpu, val=0: None),
                 "kvm_mmio: mmio read len 1 gpa 0xd0000000",
                 "kvm_mmio in the kernel, kvm_mmu_pagetable_walk in the model"),
        # no unsync pages: every shadowed table write-tracked (before 2.6.27), so the
        # store into its own table is emulated where the kernel unsyncs the table
        "ptwrite": (lambda m: m.setattr(mmu.ShadowMmu, "write_tracked",
                                        lambda self, gfn, as_id=None: bool(
                                            self.shadow_pages_of(gfn, as_id))),
                    "kvm_mmu_spte_requested: gfn",
                    "kvm_mmu_spte_requested in the kernel, kvm_mmu_pagetable_walk in the model"),
        # FNAME(pte_prefetch) over 4 ptes, not PTE_PREFETCH_NUM = 8
        "churn": (lambda m: m.setattr(mmu, "PTE_PREFETCH_NUM", 4),
                  "kvm_mmu_set_spte: gfn 10004",
                  "kvm_mmu_set_spte in the kernel, kvm_mmu_pagetable_walk in the model"),
        # KVM_GET_DIRTY_LOG that does not write-protect what it reported: the kernel's
        # next write faults (P|W|U), the model's goes on to the doorbell
        "dirty": (lambda m: m.setattr(dirty_log.DirtyLogging, "_write_protect",
                                      lambda self, key, offsets: None),
                  "kvm_mmu_pagetable_walk: addr 1000000 pferr 7 P|W|U",
                  "addr 0x1000000 in the kernel, 0x5ff000 in the model"),
        # no prev_roots (before 4.19: one root per vCPU): the guest's switch back to
        # process 1 loads its root again where the kernel takes it from prev_roots
        "cr3": (lambda m: m.setattr(mmu, "KVM_MMU_NUM_PREV_ROOTS", 0),
                "kvm_mmu_pagetable_walk: addr 40005d pferr 10 F",
                "kvm_mmu_pagetable_walk in the kernel, kvm_mmu_get_page in the model"),
        # detect_write_flooding() at the fourth emulated write, not the third
        "flood": (lambda m: m.setattr(mmu, "WRITE_FLOODING_THRESHOLD", 4),
                  "kvm_mmu_prepare_zap_page: sp gen 0 gfn 4 l2",
                  "kvm_mmu_prepare_zap_page in the kernel, kvm_mmu_pagetable_walk in the model"),
        # FNAME(pte_prefetch) over 4 ptes, not PTE_PREFETCH_NUM = 8
        "prefetch": (lambda m: m.setattr(mmu, "PTE_PREFETCH_NUM", 4),
                     "kvm_mmu_set_spte: gfn a spte",
                     "kvm_mmu_set_spte in the kernel, kvm_mmu_pagetable_walk in the model"),
        # a host that backs guest memory with 2M pages (host_pfn_mapping_level()): the
        # model maps the guest's 2M page whole where the kernel maps 4K
        "huge": (lambda m: m.setattr(model, "PG_LEVEL_4K", 2),
                 "kvm_mmu_spte_requested: gfn 10000 pfn",
                 "kvm_mmu_spte_requested: level 0x1 in the kernel, 0x2 in the model"),
        # a host that backs guest memory with 4K pages only: the model shadows the
        # guest's 2M page with 4K sptes where the kernel, on THP, maps it whole
        "thp": (lambda m: m.setattr(model, "PG_LEVEL_2M", 1),
                "kvm_mmu_spte_requested: gfn 10000 pfn",
                "kvm_mmu_spte_requested: level 0x2 in the kernel, 0x1 in the model"),
    }  # fmt: skip


@pytest.mark.parametrize("name", sorted(PAGES))
def test_a_one_line_model_change_fails_the_comparison(
    recordings: dict[str, Played], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    change, kernel_line, why = _mutations()[name]
    change(monkeypatch)
    code, result = compare_cli(monkeypatch, recordings[name], name)
    assert code == 1 and result["equal"] is False
    first = result["first_difference"]
    assert first is not None and why in first["why"], first
    assert first["kernel"]["text"].startswith(kernel_line), first["kernel"]
    position = first["position"]
    assert result["events"]["compared"] == position < result["events"]["kernel"]
    before = min(3, position)  # three events of context on each side, if there are
    assert len(first["kernel_context"]["before"]) == before == len(first["model_context"]["before"])
    assert len(first["kernel_context"]["after"]) == 3 == len(first["model_context"]["after"])


@pytest.mark.parametrize("name", sorted(PAGES))
def test_every_recording_replays_complete(
    recordings: dict[str, Played], tmp_path: Path, name: str
) -> None:
    """The kernel's text as `--trace-out` keeps it: `replay --summary` places every
    zap (churn's roots zapped in use, then again when put, included)."""
    from mmuscope.tui.cli import main

    trace = tmp_path / f"{name}.trace"
    trace.write_text("".join(value for kind, value in recordings[name].steps if kind == "text"))
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["replay", str(trace), "--summary"]) == 0
    summary = json.loads(out.getvalue())
    assert summary["unmatched"] == 0 and summary["skipped"] == 0
    assert summary["events"] > 0


def test_compare_runs_the_kernel_and_exits_by_its_verdict() -> None:
    """The real thing, end to end: the human report, its table, exit 0."""
    done = run_cli("kvm", "mmio", "--pages", "2", "--compare")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].endswith("against the model: equal"), lines[0]
    header = next(line for line in lines if line.startswith("event "))
    assert header.split() == ["event", "kernel", "model", "equal"]
    kvm_mmio = next(line for line in lines if line.startswith("kvm_mmio "))
    assert kvm_mmio.split() == ["kvm_mmio", "7", "7", "7"]  # 2 reads twice, 2 writes, 1 doorbell
    assert not our_instances()


def test_every_program_is_held_against_the_kernel() -> None:
    assert sorted(PAGES) == sorted(PROGRAMS)
