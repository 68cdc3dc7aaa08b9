"""`mmuscope layout --trace`: a recorded QEMU trace of KVM_SET_USER_MEMORY_REGION (trace
events or strace) replayed on the model, each ioctl's result against the recorded one
(tests/cli_run.py).
"""

from __future__ import annotations

import json

import pytest

from tests.cli_run import STRACE, ok, realdata

TRACES = (
    "qemu-trace-kvm_set_user_memory-pc-smm-off.txt",
    "qemu-trace-kvm_set_user_memory-pc-smm-on.txt",
)


@pytest.mark.parametrize("name", TRACES)
def test_trace_replay_realdata(name: str) -> None:
    path = realdata(name)
    recorded = sum("kvm_set_user_memory " in line for line in path.read_text().splitlines())
    out = ok("layout", "--trace", path)
    lines = out.splitlines()
    assert len(lines) == recorded
    assert all(": ok, gen " in line for line in lines), out
    assert "differs" not in out


@pytest.mark.parametrize("name", TRACES)
def test_trace_replay_realdata_json(name: str) -> None:
    results = json.loads(ok("layout", "--trace", realdata(name), "--json"))
    assert isinstance(results, list) and results
    for result in results:
        assert result["ret"] == 0, result
        assert result["matches_recorded"] is True, result
    generations = [r["generation"] for r in results if r["slot"] < 1 << 16]
    assert generations == sorted(generations)
    if name.endswith("smm-on.txt"):
        assert any(r["slot"] >> 16 == 1 for r in results)  # SMM address space


def test_trace_replay_strace_fixture() -> None:
    results = json.loads(ok("layout", "--trace", STRACE, "--json"))
    assert [r["ret"] for r in results] == [0, 0, 0, -17, 0, 0, 0, -22, 0]
    assert all(r["matches_recorded"] is True for r in results), results
    eexist = results[3]
    assert (eexist["errno"], eexist["recorded_ret"]) == ("EEXIST", -17)
    assert (eexist["slot"], eexist["gpa"], eexist["size"]) == (3, 0xC0000, 0x20000)
    assert results[7]["errno"] == "EINVAL"
    resumed = results[8]  # split by <unfinished ...> / <... ioctl resumed>
    assert (resumed["slot"], resumed["flags"], resumed["gpa"]) == (4, 1, 0xFD000000)
    assert results[2]["flags"] == 2  # flags=KVM_MEM_READONLY


def test_trace_replay_strace_fixture_text() -> None:
    out = ok("layout", "--trace", STRACE)
    lines = out.splitlines()
    assert len(lines) == 9
    assert "EEXIST" in lines[3] and "gpa 0xc0000" in lines[3]
    assert "EINVAL" in lines[7]
    assert sum(": ok, gen " in line for line in lines) == 7
    assert "differs" not in out
