"""QEMU's recorded memslot calls replayed as live churn: the boot guest, each call's
answer against the recording, refusals with their errno, the memslots screen's `j` and
playing, and the CLI's one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mmuscope.engine.layouts.qemu_trace import TraceFormatError
from mmuscope.engine.memslots.churn import describe_call, recorded_churn
from mmuscope.engine.memslots.explorer import MemslotExplorer

from tests.datafiles import REALDATA, fixture_text
from tests.tui_pilot import build, memslots, toasts, until

MMUSCOPE = Path(sys.executable).parent / "mmuscope"
FORMATS = "qemu-trace-kvm_set_user_memory-formats.txt"


def replay_all(name: str, text: str, lookups: int = 10) -> tuple[MemslotExplorer, object]:
    churn = recorded_churn(text, name)
    explorer = MemslotExplorer(churn.boot, workload="mixed")
    while not churn.done:
        explorer.run(lookups)
        call = churn.next_call()
        assert call is not None
        churn.record(explorer.replay_call(call))
        explorer.audit()
    return explorer, churn


def test_the_guest_opens_at_the_first_ram_slot_and_every_answer_matches() -> None:
    churn = recorded_churn(fixture_text(FORMATS), "formats")
    assert [r.name for r in churn.boot.regions] == ["slot0"] and churn.next_index == 1
    explorer, churn = replay_all("formats", fixture_text(FORMATS))
    results = churn.results  # type: ignore[attr-defined]
    refused = [r for r in results if r.ret]
    assert [r.errno_name for r in refused] == ["EEXIST", "EINVAL", "EEXIST"]  # as recorded
    assert all(r.matches_recorded is not False for r in results)
    assert {s.id for s in explorer.slots()} >= {0, 1, 4}


def test_describe_call_prints_it_as_qemu_does() -> None:
    churn = recorded_churn(fixture_text(FORMATS))
    text = describe_call(churn.calls[2])
    assert text.startswith("AddrSpace#1 Slot#0 flags=0x0 gpa=0x0 size=0x80000000")


def test_strace_recordings_replay_too() -> None:
    _, churn = replay_all("strace", fixture_text("qemu-strace-kvm_set_user_memory_region.txt"))
    assert churn.done  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "path", sorted(REALDATA.glob("qemu-trace-kvm_set_user_memory*")) if REALDATA.is_dir() else []
)
def test_real_recordings_replay_as_qemu_saw_them(path: Path) -> None:
    explorer, churn = replay_all(path.stem, path.read_text())
    results = churn.results  # type: ignore[attr-defined]
    boot = recorded_churn(path.read_text()).next_index  # calls that built the first guest
    assert boot + len(results) == len(churn.calls)  # type: ignore[attr-defined]
    assert all(r.matches_recorded is not False for r in results)
    assert explorer.generation > 100


def test_no_call_in_the_text_is_one_error() -> None:
    with pytest.raises(TraceFormatError, match="no kvm_set_user_memory"):
        recorded_churn("hello\n")


async def test_j_replays_the_next_call_and_playing_interleaves(tmp_path: Path) -> None:
    churn = recorded_churn(fixture_text(FORMATS), "formats")
    app = build(tmp_path, churn=churn)
    async with app.run_test() as pilot:
        screen = memslots(app)
        gen = screen.explorer.generation
        await pilot.press("j")
        assert churn.next_index == 2 and screen.explorer.generation > gen
        assert "ioctl 2/" in str(screen.sub_title)
        while not churn.done:
            await pilot.press("j")
        assert [r.errno_name for r in churn.results if r.ret] == ["EEXIST", "EINVAL", "EEXIST"]
        await pilot.press("j")  # nothing left: a note, no change
        assert churn.next_index == len(churn.calls)
    churn = recorded_churn(fixture_text(FORMATS), "formats")
    app = build(tmp_path, churn=churn, playing=True, speed=1000)
    async with app.run_test() as pilot:
        await until(pilot, lambda: churn.next_index > 1)
        assert churn.next_index > 1  # recorded updates between lookups
        memslots(app).explorer.audit()


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("nothing here\n")
    for args, words in (
        (["--qemu-trace", str(tmp_path / "nope")], "No such file"),
        (["--qemu-trace", str(empty)], "no kvm_set_user_memory"),
        (["--qemu-trace", str(empty), "--layout", "pc-4g"], "drop --layout"),
    ):
        out = subprocess.run([MMUSCOPE, *args], capture_output=True, text=True)
        assert out.returncode == 2 and words in out.stderr, out.stderr
        assert out.stderr.count("\n") == 1


async def test_j_says_the_generation_of_the_calls_address_space_in_one_note(
    tmp_path: Path,
) -> None:
    churn = recorded_churn(fixture_text(FORMATS), "formats")
    app = build(tmp_path, churn=churn)
    async with app.run_test(notifications=True) as pilot:
        vm = memslots(app).explorer.vm
        await pilot.press("j", "j")  # Slot#1, then AddrSpace#1 Slot#0
        await pilot.pause()
        assert churn.calls[churn.next_index - 1].as_id == 1
        assert vm.generation(0) != vm.generation(1)
        shown = toasts(app)
        assert len(shown) == 1, shown  # the latest call, not a stack
        assert f"address space 1 generation {vm.generation(1)}" in shown[0], shown
        await pilot.press("j")
        await pilot.pause()
        shown = toasts(app)
        assert len(shown) == 1 and f"generation {vm.generation(0)}" in shown[0], shown
