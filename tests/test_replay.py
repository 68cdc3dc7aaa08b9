"""`mmuscope replay TRACE --jsonl | --summary`: the shapes of docs/architecture.md §6.3,
every line shape, mail-wrapped records rejoined, garbage never an error, bounded
memory."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mmuscope.engine.trace.reader import TraceCounts, iter_events, rejoin, summarize

from tests.datafiles import REALDATA

FIXTURES = Path(__file__).parent / "fixtures"
SAMPLE = FIXTURES / "trace-kvmmmu-sample.txt"
WRAPPED = FIXTURES / "trace-wrapped-mail.txt"
MMUSCOPE = Path(sys.executable).parent / "mmuscope"
SP_FIELDS = {
    *("gen", "gfn", "level", "gpte_bytes", "quadrant", "direct", "access", "invalid"),
    *("nxe", "ad", "root_count", "unsync"),
}


def replay(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MMUSCOPE), "replay", *args], capture_output=True, text=True, input=stdin
    )


def counts_of(lines: list[str]) -> TraceCounts:
    counts = TraceCounts()
    for _ in iter_events(lines, counts):
        pass
    return counts


def test_summary_of_the_sample_has_exactly_the_contract_keys() -> None:
    out = replay(str(SAMPLE), "--summary")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert list(summary) == ["lines", "events", "skipped", "unmatched", "by_event"]
    assert summary["lines"] == 55 == summary["events"] + summary["skipped"]
    assert summary["by_event"]["kvm_mmu_get_page"] >= 1
    assert sum(summary["by_event"].values()) == summary["events"]


def test_jsonl_objects_have_the_contract_shape_and_field_names() -> None:
    out = replay(str(SAMPLE), "--jsonl")
    assert out.returncode == 0, out.stderr
    objects = [json.loads(line) for line in out.stdout.splitlines()]
    assert objects and all(
        list(o) == ["event", "ts", "cpu", "pid", "comm", "fields"] for o in objects
    )
    get_page = next(o for o in objects if o["event"] == "kvm_mmu_get_page")
    kernel = {"mmu_valid_gen", "role"}  # the kernel's names of `gen` and the role word
    assert set(get_page["fields"]) == SP_FIELDS | kernel | {"created"}
    assert get_page["comm"] == "CPU 0/KVM" and get_page["pid"] == 4242
    zap = next(o for o in objects if o["event"] == "kvm_mmu_prepare_zap_page")
    assert set(zap["fields"]) == SP_FIELDS | kernel and zap["fields"]["invalid"] is True
    changed = next(o for o in objects if o["event"] == "kvm_tdp_mmu_spte_changed")
    assert set(changed["fields"]) == {"as_id", "gfn", "level", "old_spte", "new_spte"}
    assert changed["fields"]["new_spte"] == 0x6000001A2B3CB77
    summary = json.loads(replay(str(SAMPLE), "--summary").stdout)
    assert len(objects) == summary["events"]


def test_mail_wrapped_records_are_rejoined_only_when_unambiguous() -> None:
    lines = WRAPPED.read_text().splitlines(keepends=True)
    counts = TraceCounts()
    events = list(iter_events(lines, counts))
    names = [e.name for e in events]
    assert names == [
        *("kvm_mmu_get_page", "kvm_tdp_mmu_spte_changed", "mark_mmio_spte", "kvm_mmio"),
        *("kvm_vcpu_wakeup", "kvm_mmu_zap_all_fast", "kvm_exit", "kvm_entry"),
    ]
    assert events[0].fields["created"] is True  # "... sync new" came from the next line
    assert events[1].fields["new_spte"] == 0x6000001A2B3CB77  # a hard wrap: no space
    assert events[2].fields["gfn"] == 0xFEE01  # the line head was split from the event
    assert events[4].fields == {"text": "wait time 12000 ns,"}  # no format: not glued
    assert events[6].fields["exit_reason"] == "EPT_VIOLATION"
    assert events[7].fields == {"vcpu_id": 0, "rip": 0xFFFFFFFF81234567}
    assert (counts.lines, counts.events, counts.rejoined, counts.skipped) == (14, 8, 3, 3)
    assert summarize(lines) == counts


def test_rejoin_refuses_headers_stack_traces_and_complete_records() -> None:
    complete = "  a-1 [000] .....  1.000000: kvm_mmu_set_accessed_bit: gpa 1000\n"
    assert rejoin(complete, "extra words\n") is None
    assert rejoin("# tracer: nop\n", "kvm_mmio: mmio write len 4 gpa 0x0 val 0x0") is None
    assert rejoin(complete, " => kvm_mmu_page_fault\n") is None


def test_every_line_shape_parses() -> None:
    shapes = [
        "  qemu-1 [001] d..1.  10.000001: kvm_mmu_paging_element: pte 1003 level 4",
        "  qemu-1 [001] ...1  10.000002: kvm_mmu_paging_element: pte 1003 level 3",
        "  qemu-1 [001]  10.000003: kvm_mmu_paging_element: pte 1003 level 2",
        "  qemu-1 (   1) [001] .....  10.000004: kvm_mmu_paging_element: pte 1003 level 1",
        "  qemu-1 [001] 10.000005: kvm_mmu_paging_element:      pte 1003 level 1",
    ]
    events = list(iter_events(shapes))
    assert [e.fields["level"] for e in events] == [4, 3, 2, 1, 1]


@pytest.mark.parametrize("path", sorted(REALDATA.glob("*.txt")) if REALDATA.is_dir() else [])
def test_realdata_files_never_fail(path: Path) -> None:
    lines = path.read_text(errors="replace").splitlines(keepends=True)
    counts = counts_of(lines)
    assert summarize(lines) == counts
    assert counts.lines == counts.events + counts.skipped + counts.rejoined
    if path.name.startswith("ftrace-kvmmmu"):
        assert counts.by_event == {"kvm_mmu_get_page": 1}


def test_bad_files_are_one_line_errors(tmp_path: Path) -> None:
    for target, words in ((tmp_path / "nope.txt", "No such file"), (tmp_path, "directory")):
        out = replay(str(target), "--summary")
        assert out.returncode == 2 and words in out.stderr
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def _not_a_trace(out: subprocess.CompletedProcess[str], what: str) -> None:
    assert out.returncode == 2 and out.stdout == "", (out.returncode, out.stdout[:200])
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert f" {what}" in out.stderr, out.stderr
    assert out.stderr.endswith(": no ftrace record and no trace header in it\n"), out.stderr


@pytest.mark.parametrize("mode", ["--summary", "--jsonl"])
def test_a_file_with_no_trace_line_is_named_not_counted(mode: str, tmp_path: Path) -> None:
    """Garbage was an empty trace ("events": 0, exit 0): now one line naming what the
    file looks like, exit 2, nothing on stdout."""
    binary = tmp_path / "garbage.bin"
    binary.write_bytes(bytes(range(256)) * 40)
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "out.jsonl").write_text('{"event": "kvm_mmu_get_page"}\n')
    cases = {
        str(binary): "is binary data",
        sys.executable: "is an ELF executable",
        str(FIXTURES / "qemu-mtree-pc-tree.txt"): "is a QEMU 'info mtree' dump",
        str(FIXTURES / "qemu-strace-kvm_set_user_memory_region.txt"): "holds QEMU's memslot",
        str(tmp_path / "empty.txt"): "is empty",
        str(tmp_path / "out.jsonl"): "is JSON, not trace text",
    }
    for path, what in cases.items():
        _not_a_trace(replay(path, mode), what)
    _not_a_trace(replay("-", mode, stdin="hello\nworld\n"), "is text with no trace line")


def test_a_trace_of_no_events_is_still_a_trace(tmp_path: Path) -> None:
    """A quiet recording has a header: zero events, exit 0; a compressed trace is read
    as the text inside."""
    out = replay("-", "--summary", stdin="# tracer: nop\n#\n")
    assert out.returncode == 0 and json.loads(out.stdout)["events"] == 0
    out = replay("-", "--summary", stdin="cpus=2\n")
    assert out.returncode == 0 and json.loads(out.stdout)["events"] == 0
    packed = tmp_path / "trace.txt.gz"
    packed.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    assert json.loads(replay(str(packed), "--summary").stdout)["events"] == 29


def test_the_replay_screen_refuses_what_is_not_a_trace_before_needing_a_terminal() -> None:
    _not_a_trace(replay(str(FIXTURES / "qemu-mtree-pc-tree.txt")), "is a QEMU 'info mtree' dump")


def test_stdin_and_a_closed_pipe() -> None:
    text = SAMPLE.read_text()
    out = replay("-", "--summary", stdin=text)
    assert json.loads(out.stdout)["lines"] == 55
    pipe = subprocess.run(
        f"'{MMUSCOPE}' replay '{SAMPLE}' --jsonl | head -n 1",
        shell=True,
        capture_output=True,
        text=True,
    )
    assert pipe.stdout.count("\n") == 1 and pipe.stderr == ""


def _many_lines(n: int) -> Iterator[str]:
    line = "  CPU 0/KVM-4242 [003] ...1.  5123.%06d: kvm_mmu_set_accessed_bit: gpa %x\n"
    for i in range(n):
        yield line % (i % 1_000_000, i)


def test_memory_stays_bounded_whatever_the_length() -> None:
    tracemalloc.start()
    counts = TraceCounts()
    for _ in iter_events(_many_lines(50_000), counts):
        pass
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert counts.events == 50_000
    assert peak < 2_000_000  # bytes: nothing grows with the file


LINE = st.text(alphabet=st.sampled_from(list("abc[]().:-=>#| 0123456789\t_kvmx\x00é")), max_size=60)
SAMPLE_LINES = SAMPLE.read_text().splitlines(keepends=True)


@settings(max_examples=80, deadline=None)
@given(
    picks=st.lists(st.integers(0, len(SAMPLE_LINES) - 1), max_size=20),
    cuts=st.lists(st.integers(0, 120), max_size=20),
    noise=st.lists(LINE, max_size=6),
)
def test_fuzzed_and_truncated_traces_never_raise(
    picks: list[int], cuts: list[int], noise: list[str]
) -> None:
    lines = [SAMPLE_LINES[i][: cuts[n]] if n < len(cuts) else SAMPLE_LINES[i] for n, i in
             enumerate(picks)]  # fmt: skip
    lines += [f"{t}\n" for t in noise]
    counts = counts_of(lines)
    assert summarize(lines) == counts
    assert counts.lines == len(lines)
    assert counts.lines == counts.events + counts.skipped + counts.rejoined
    for event in iter_events(lines):
        json.dumps(event.to_json())


def test_write_jsonl_batches_and_counts() -> None:
    from mmuscope.tui.replay_cli import write_jsonl

    out = io.StringIO()
    counts = write_jsonl(io.StringIO("".join(_many_lines(1500))), out)
    rows: list[Any] = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(rows) == counts.events == 1500


@pytest.mark.parametrize("shadow", [False, True])
def test_the_engines_own_events_replay_into_the_same_pages(shadow: bool) -> None:
    """Round trip: a session's events printed as a trace, parsed back and replayed, leave
    the replay model with the pages the MMU has (EPT and shadow paging, a fast zap)."""
    from mmuscope.engine.layouts import preset
    from mmuscope.engine.mmu.direct.session import MmuSession
    from mmuscope.engine.mmu.shadow.session import ShadowSession
    from mmuscope.engine.replay.model import ReplayModel
    from mmuscope.engine.trace import format_line

    session: MmuSession | ShadowSession
    if shadow:
        session = ShadowSession(preset("pc-4g"), workload="fork", seed=3)
    else:
        session = MmuSession(preset("pc-4g"), workload="kernbench", seed=3, huge_pages=False)
    events: list[Any] = []
    session.subscribe(events.append)
    session.run(300)
    session.mmu.zap_all_fast()
    session.run(100)
    text = [format_line(e) + "\n" for e in events if e.name in TRACED]
    model = ReplayModel()
    for event in iter_events(text):
        model.apply(event)
    model.audit()
    live = [p for p in model.pages.values() if not model.is_obsolete(p)]
    # zapped roots a vCPU still holds stay accounted but are not live
    pages = session.mmu.pages
    assert len(live) == pages.n_used_mmu_pages - len(pages.invalid_roots)


TRACED = {
    *("kvm_page_fault", "kvm_mmu_get_page", "kvm_mmu_prepare_zap_page", "kvm_mmu_set_spte"),
    *("mark_mmio_spte", "handle_mmio_page_fault", "kvm_mmio", "kvm_mmu_zap_all_fast"),
}
