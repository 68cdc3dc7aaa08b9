"""SIGTERM, SIGHUP and a terminal that goes away end `mmuscope` as Ctrl+C does: the
terminal restored (alternate screen left, canonical mode and echo back), a guest's
tracefs instance removed, one line on stderr, exit 128 + the signal.  Run as users run
it: the console script, in a pseudo-terminal for the app."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from tests.kvm_host import needs_tracing
from tests.terminal import open_and_end

MMUSCOPE = str(Path(sys.executable).with_name("mmuscope"))
INSTANCES = Path("/sys/kernel/tracing/instances")
WAIT = 30.0
pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs a POSIX pseudo-terminal")


def app_env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, TERM="xterm-256color", MMUSCOPE_CONFIG_DIR=str(tmp_path),
                TEXTUAL_ANIMATIONS="none")  # fmt: skip


def signal_it(signum: int):  # type: ignore[no-untyped-def]
    def end(pid: int, fd: int) -> bool:
        os.kill(pid, signum)
        return False

    return end


def close_the_terminal(pid: int, fd: int) -> bool:
    os.close(fd)  # the kernel hangs up the session: SIGHUP
    return True


def instances_of(pid: int) -> list[str]:
    if not INSTANCES.is_dir():
        return []
    return [p.name for p in INSTANCES.iterdir() if f"-{pid}-" in p.name]


def wait_for(check, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def assert_terminal_restored(raw: bytes, lflag: int | None) -> None:
    assert raw.rfind(b"\x1b[?1049l") > raw.rfind(b"\x1b[?1049h") >= 0, raw[-300:]
    assert lflag is not None and lflag & termios.ICANON and lflag & termios.ECHO


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_ends_the_app_with_its_terminal_restored(tmp_path: Path, signum: int) -> None:
    raw, code, lflag = open_and_end(
        [MMUSCOPE, "--paused"], app_env(tmp_path), [b"memslots", b"kvm_stat"], signal_it(signum)
    )
    assert code == 128 + signum, raw[-500:]
    assert_terminal_restored(raw, lflag)
    assert f"ended by {signal.Signals(signum).name}".encode() in raw


def test_a_closed_terminal_ends_the_app(tmp_path: Path) -> None:
    _, code, _ = open_and_end(
        [MMUSCOPE, "--paused"], app_env(tmp_path), [b"memslots", b"kvm_stat"], close_the_terminal
    )
    assert code == 128 + signal.SIGHUP


@needs_tracing
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_a_recording_removes_its_instance(signum: int) -> None:
    proc = subprocess.Popen(
        [MMUSCOPE, "kvm", "touch", "--pages", "65536", "--summary"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for(lambda: instances_of(proc.pid), "the recording's instance")
        time.sleep(0.2)  # the guest running
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signum, err
    assert err == f"mmuscope: ended by {signal.Signals(signum).name}\n" and out == ""
    assert not instances_of(proc.pid)


@needs_tracing
@pytest.mark.parametrize("where", ["RawPipes", "read_formats"])
def test_an_interrupt_while_the_pipes_open_leaves_no_instance(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A signal can end `kvm --summary` while it opens the ring buffers' pipes or reads
    the host's formats (a loaded machine takes long there): no pipe is left open to keep
    the instance busy, and the instance goes."""
    from mmuscope.engine.kvm import record
    from mmuscope.engine.kvm.program import build_program

    real = getattr(record, where)

    def interrupted(*args: object, **kwargs: object) -> object:
        if where == "RawPipes":  # halfway: the first CPU's pipe open, then the signal
            monkeypatch.setattr(record.os, "open", _open_then_interrupt(record.os.open))
        else:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(record, where, interrupted)
    with pytest.raises(KeyboardInterrupt):
        record.record(build_program("touch", pages=4), on_raw=lambda pipes, formats: None)
    assert not instances_of(os.getpid())


def _open_then_interrupt(real_open):  # type: ignore[no-untyped-def]
    opened: list[int] = []

    def open_(path: object, flags: int, *args: object) -> int:
        if str(path).endswith("trace_pipe_raw"):
            if opened:
                raise KeyboardInterrupt
            opened.append(path)
        return int(real_open(path, flags, *args))

    return open_


@needs_tracing
@pytest.mark.parametrize("end", ["SIGTERM", "closed terminal"])
def test_the_live_screen_ended_removes_its_instance(tmp_path: Path, end: str) -> None:
    pids: list[int] = []

    def ended(pid: int, fd: int) -> bool:
        pids.append(pid)
        assert instances_of(pid), "live records into its own instance"
        if end == "SIGTERM":
            return signal_it(signal.SIGTERM)(pid, fd)
        return close_the_terminal(pid, fd)

    raw, code, lflag = open_and_end(
        [MMUSCOPE, "live"], app_env(tmp_path), [b"kvm_stat"], ended
    )  # fmt: skip
    assert code == 128 + (signal.SIGTERM if end == "SIGTERM" else signal.SIGHUP), raw[-500:]
    assert not instances_of(pids[0])
    if end == "SIGTERM":
        assert_terminal_restored(raw, lflag)


@needs_tracing
def test_the_kvm_screen_ended_stops_its_guest_and_removes_the_instance(tmp_path: Path) -> None:
    children: list[int] = []

    def ended(pid: int, fd: int) -> bool:
        def child() -> list[int]:
            found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
            children[:] = [int(p) for p in found.stdout.split()]
            return [c for c in children if instances_of(c)]

        wait_for(child, "the guest's recording")
        os.kill(pid, signal.SIGTERM)
        return False

    raw, code, lflag = open_and_end(
        [MMUSCOPE, "kvm", "touch", "--pages", "65536"], app_env(tmp_path), [b"kvm"], ended
    )
    assert code == 128 + signal.SIGTERM, raw[-500:]
    assert_terminal_restored(raw, lflag)
    assert children and not any(instances_of(c) for c in children)


SETPRIV = shutil.which("setpriv")
NOBODY = [str(SETPRIV), "--reuid=65534", "--regid=65534", "--clear-groups"]


def _nobody_reason() -> str | None:
    """Why these tests cannot run as nobody here: not root, no setpriv, or a checkout
    nobody may not read (a clone in a private directory such as mktemp -d's)."""
    if os.geteuid() != 0 or SETPRIV is None:
        return "needs root and setpriv to drop to nobody"
    probe = subprocess.run([*NOBODY, sys.executable, "-c", f"open({str(MMUSCOPE)!r}).close()"],
                           capture_output=True, timeout=WAIT, check=False)  # fmt: skip
    if probe.returncode != 0:
        return f"nobody cannot read {MMUSCOPE} (the checkout lies in a private directory)"
    return None


NOBODY_REASON = _nobody_reason()
as_nobody = pytest.mark.skipif(NOBODY_REASON is not None, reason=NOBODY_REASON or "")


@as_nobody
@pytest.mark.parametrize("argv", [["kvm", "touch", "--summary"], ["kvm", "fork", "--compare"],
                                  ["live"]])  # fmt: skip
def test_without_root_one_line_names_sudo(argv: list[str]) -> None:
    done = subprocess.run([*NOBODY, MMUSCOPE, *argv], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=WAIT)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "sudo" in done.stderr, done.stderr


@as_nobody
def test_without_root_the_kvm_screen_says_sudo_before_it_opens(tmp_path: Path) -> None:
    raw, code, _ = open_and_end([*NOBODY, MMUSCOPE, "kvm", "touch"], app_env(tmp_path),
                                [b"sudo"], lambda pid, fd: False)  # fmt: skip
    assert code == 2 and b"sudo" in raw and b"Traceback" not in raw, raw
    assert b"\x1b[?1049h" not in raw  # refused before the app took the terminal
