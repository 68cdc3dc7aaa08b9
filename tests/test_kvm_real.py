"""`mmuscope kvm`: guest programs on this host's own KVM, recorded through a private
tracefs instance, and the engine's shadow MMU held against them.

Runs for real where /dev/kvm and root are there (the project's machines and CI); skips
with the reason elsewhere.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from mmuscope.engine import KvmError, Vm

from tests.kvm_host import needs_kvm, needs_tracing, our_instances, run_cli


@needs_tracing
def test_summary_counts_every_demand_fault_and_the_kernels_statistics(tmp_path: Path) -> None:
    out_file = tmp_path / "touch.trace"
    done = run_cli("kvm", "touch", "--pages", "40", "--summary", "--trace-out", str(out_file))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["mmu"] in ("shadow", "tdp") and summary["kernel"]
    assert summary["lost_events"] == 0 and "WARNING" not in done.stderr
    if summary["mmu"] == "shadow":
        # 40 data pages and the code page: one spte each, one fault each, +1 doorbell
        assert summary["by_event"]["kvm_mmu_set_spte"] == 41
        assert summary["stats"]["pages_4k"] == 41
        assert summary["stats"]["pf_taken"] == 42
        assert summary["stats"]["mmio_exits"] == summary["mmio_exits"] == 1
        assert summary["emulated"] == {"mov %bl,(%rax)": 1}  # the doorbell store, decoded
    heads = {line.split("-")[0].strip() for line in out_file.read_text().splitlines()}
    assert heads == {"mmuscope"}, heads
    replayed = run_cli("replay", str(out_file), "--summary")
    counts = json.loads(replayed.stdout)
    keys = ("lines", "events", "skipped", "unmatched", "by_event")
    assert counts == {k: summary[k] for k in keys} and counts["unmatched"] == 0
    assert not our_instances()


@needs_tracing
def test_jsonl_prints_the_kernels_events_as_replay_does(tmp_path: Path) -> None:
    """`--jsonl` made from the ring buffers is, byte for byte, `replay --jsonl` of the
    same run's text (`--trace-out`): mmio (emulated loads and stores) and churn
    (shadow pages zapped, the fast zap, a moved slot)."""
    for name in ("mmio", "churn"):
        trace = tmp_path / f"{name}.trace"
        done = run_cli("kvm", name, "--pages", "2", "--jsonl", "--trace-out", str(trace))
        assert done.returncode == 0, done.stderr
        replayed = run_cli("replay", str(trace), "--jsonl")
        assert done.stdout == replayed.stdout and done.stdout.count("\n") > 100
    events = [json.loads(line) for line in done.stdout.splitlines()]
    names = {e["event"] for e in events}
    assert {"kvm_mmu_get_page", "kvm_mmio", "kvm_emulate_insn"} <= names
    assert {"kvm_mmu_prepare_zap_page", "kvm_mmu_zap_all_fast"} <= names
    gets = [e for e in events if e["event"] == "kvm_mmu_get_page" and e["fields"]["created"]]
    assert {e["fields"]["level"] for e in gets} == {1, 2, 3, 4}
    # the vCPU's task by its name, as a global trace shows it, never `<...>`
    assert {e["comm"] for e in events} == {"mmuscope"}


@needs_tracing
def test_parquet_is_the_text_of_the_same_run_replayed(tmp_path: Path) -> None:
    """`kvm --parquet` writes its rows from the records' bytes: they are the rows
    `replay --parquet` makes of the same run's text (`--trace-out`), row for row."""
    pq = pytest.importorskip("pyarrow.parquet")
    trace, data = tmp_path / "churn.trace", tmp_path / "data"
    done = run_cli("kvm", "churn", "--pages", "4", "--parquet", str(data), "--source", "raw",
                   "--trace-out", str(trace))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert run_cli("replay", str(trace), "--parquet", str(data), "--source", "text").returncode == 0
    raw, text = (
        pq.read_table(data / f"source={s}" / "part-00000.parquet") for s in ("raw", "text")
    )
    assert raw.num_rows == len(trace.read_text().splitlines()) > 100
    assert raw.equals(text)
    assert (data / "source=raw" / "_memslots.parquet").exists()


@needs_tracing
def test_parquet_row_groups_from_the_ring_buffers(tmp_path: Path) -> None:
    """`SourceWriter.write_records` given a recording's records as the drains bring them
    writes the row groups `write_lines` writes of their text: mmio (emulated loads,
    MMIO), churn (zaps, the fast zap) and fork (an rmap of 9 sptes), 50 rows a group."""
    pq = pytest.importorskip("pyarrow.parquet")
    import io

    from mmuscope.engine.dataset.writer import SourceWriter
    from mmuscope.engine.kvm.program import build_program
    from mmuscope.engine.kvm.record import record

    for name, pages in (("mmio", 2), ("churn", 4), ("fork", 4)):
        chunks: list[tuple[list[object], object]] = []
        texts: list[str] = []
        record(build_program(name, pages), on_text=texts.append,
               on_records=lambda *given, keep=chunks.append: keep(given))  # fmt: skip
        with SourceWriter(tmp_path, f"{name}-raw", row_group=50) as raw:
            for records, decoder in chunks:
                raw.write_records(records, decoder)  # type: ignore[arg-type]
        with SourceWriter(tmp_path, f"{name}-text", row_group=50) as text:
            text.write_lines(io.StringIO("".join(texts)))
        assert raw.path is not None and text.path is not None
        ours, theirs = pq.ParquetFile(raw.path), pq.ParquetFile(text.path)
        assert ours.num_row_groups == theirs.num_row_groups > 2
        assert ours.read().equals(theirs.read()), name
    assert not our_instances()


def test_bad_options_are_one_line_errors() -> None:
    for args in (["--pages", "0", "--summary"], ["--json"], ["--children", "5000", "--summary"]):
        done = run_cli("kvm", "fork", *args)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


@needs_kvm
def test_memslot_calls_refused_alike_by_the_kernel_and_the_engine() -> None:
    from mmuscope.engine.kvm.vmm import Kvm

    with Kvm() as kvm, kvm.create_vm() as kernel:
        spaces = kvm.check_extension(118)  # KVM_CAP_MULTI_ADDRESS_SPACE
        model = Vm(address_spaces=max(1, spaces))
        memory = kernel.alloc_memory(16 * 4096)
        calls = [
            (0, 0, 0, 8 * 4096, memory.address),
            (1, 0, 4 * 4096, 8 * 4096, memory.address),  # overlaps slot 0
            (1 << 16, 0, 0x100000, 4096, memory.address),  # address space 1
            (2, 0, 0x10000, 0, 0),  # delete what is not there
            (0, 0, 0x20000, 8 * 4096, memory.address),  # move
            (0, 0, 0x20000, 4 * 4096, memory.address),  # resize
        ]
        for call in calls:
            got = []
            for vm in (kernel, model):
                try:
                    vm.set_user_memory_region(*call)
                    got.append(0)
                except KvmError as err:
                    got.append(err.errno)
            assert got[0] == got[1], (call, got)
        assert got[0] == errno.EINVAL


@needs_tracing
def test_ctrl_c_in_the_middle_of_a_run_releases_everything() -> None:
    import signal
    import subprocess
    import time

    from tests.kvm_host import MMUSCOPE

    guest = subprocess.Popen(
        [str(MMUSCOPE), "kvm", "touch", "--pages", "60000", "--summary"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    instances = Path("/sys/kernel/tracing/instances")
    for _ in range(400):  # until its tracefs instance exists: the VM is up
        if any(p.name.startswith(f"mmuscope-{guest.pid}-") for p in instances.iterdir()):
            break
        time.sleep(0.01)
    guest.send_signal(signal.SIGINT)
    _out, err = guest.communicate(timeout=60)
    assert guest.returncode == 130 and err.strip().splitlines() == ["mmuscope: interrupted"]
    assert not any(p.name.startswith(f"mmuscope-{guest.pid}-") for p in instances.iterdir())


@needs_kvm
def test_a_guest_run_is_bounded_in_time_and_closes_every_fd() -> None:
    from mmuscope.engine.kvm.program import build_program
    from mmuscope.engine.kvm.runner import run_on_kernel
    from mmuscope.engine.kvm.vmm import GuestTimeoutError

    fds = len(os.listdir("/proc/self/fd"))
    with pytest.raises(GuestTimeoutError, match="longer than"):
        run_on_kernel(build_program("touch", 60000), timeout=0.001)
    assert len(os.listdir("/proc/self/fd")) == fds
