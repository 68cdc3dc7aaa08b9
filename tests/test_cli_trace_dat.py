"""`mmuscope replay` on a binary trace.dat (what `trace-cmd record` writes), and `--hex64`,
run through the installed console script.

A trace.dat is recognised by trace-cmd's magic and read through `trace-cmd report`; without
trace-cmd the command to run is printed (exit 2).  One test makes a real trace.dat with
trace-cmd from a private tracefs instance (skipped without trace-cmd or tracefs), leaving the
global tracing switches as they were.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mmuscope.engine.trace.widths import HEX64_FIELDS

from tests.datafiles import FIXTURES

MMUSCOPE = Path(sys.executable).parent / "mmuscope"
MAGIC = b"\x17\x08Dtracing6\x00"  # trace-cmd's file header: magic, "tracing", version
FAST_PF = (
    "CPU 0/KVM-1234  [001]  5.000001: fast_page_fault: vcpu 0 gva 7f0000001000 "
    "error_code P|W sptep 0xffff888100001008 old 0x8600000123456867 new 8600000123456a67 "
    "spurious 0 fixed 1\n"
)
TRACEFS = Path("/sys/kernel/tracing")


def run(*args: str | Path, env: dict[str, str] | None = None, stdin: bytes | None = None):
    return subprocess.run(
        [str(MMUSCOPE), *map(str, args)],
        env=env,
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


def without_trace_cmd(tmp_path: Path) -> dict[str, str]:
    """PATH with only the directories that hold no trace-cmd (and the test's python)."""
    dirs = [d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "trace-cmd").exists()]
    return dict(os.environ, PATH=os.pathsep.join([str(MMUSCOPE.parent), *dirs]))


def fake_trace_cmd(tmp_path: Path, report: str) -> dict[str, str]:
    """PATH whose `trace-cmd report -i FILE` prints `report` (and checks its arguments)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (tmp_path / "report.txt").write_text(report)
    script = bin_dir / "trace-cmd"
    script.write_text(
        '#!/bin/sh\n[ "$1 $2" = "report -i" ] && [ -f "$3" ] || exit 9\n'
        f'cat "{tmp_path / "report.txt"}"\n'
    )
    script.chmod(0o755)
    return dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_a_trace_dat_without_trace_cmd_is_exit_2_with_the_command(tmp_path: Path) -> None:
    dat = tmp_path / "trace.dat"
    dat.write_bytes(MAGIC + bytes(range(256)) * 16)
    for mode in ("--summary", "--jsonl"):
        done = run("replay", dat, mode, env=without_trace_cmd(tmp_path))
        err = done.stderr.decode()
        assert done.returncode == 2 and done.stdout == b"", (done, err)
        assert err.count("\n") == 1 and "Traceback" not in err
        assert f"trace-cmd report -i {dat}" in err and "trace.dat" in err, err


def test_a_trace_dat_on_stdin_is_refused_in_one_line(tmp_path: Path) -> None:
    done = run("replay", "-", "--summary", stdin=MAGIC + b"\xff\xfe\x00binary\n" * 50)
    err = done.stderr.decode()
    assert done.returncode == 2 and err.count("\n") == 1, err
    assert "trace.dat" in err and "trace-cmd report" in err


def test_a_trace_dat_is_read_through_trace_cmd_report(tmp_path: Path) -> None:
    dat = tmp_path / "trace.dat"
    dat.write_bytes(MAGIC + b"\x00" * 64)
    env = fake_trace_cmd(tmp_path, "cpus=2\n" + FAST_PF * 3)
    done = run("replay", dat, "--summary", env=env)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["events"] == 3 and summary["by_event"] == {"fast_page_fault": 3}
    done = run("replay", dat, "--jsonl", env=env)
    assert [json.loads(line)["event"] for line in done.stdout.splitlines()] == [
        "fast_page_fault"
    ] * 3


def test_a_failing_trace_cmd_report_is_exit_2(tmp_path: Path) -> None:
    dat = tmp_path / "broken.dat"
    dat.write_bytes(MAGIC)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "trace-cmd").write_text("#!/bin/sh\necho 'trace-cmd: bad file' >&2\nexit 1\n")
    (bin_dir / "trace-cmd").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    done = run("replay", dat, "--summary", env=env)
    err = done.stderr.decode()
    assert done.returncode == 2 and err.count("\n") == 1, err
    assert "trace-cmd report -i" in err and "bad file" in err


def _global_switches() -> tuple[str, ...]:
    return tuple((TRACEFS / name).read_text() for name in ("tracing_on", "events/enable"))


def _raw_pages(instance: Path, out_dir: Path) -> list[Path]:
    """Each CPU's ring-buffer pages of `instance`, read from its `trace_pipe_raw` without
    blocking: what `trace-cmd extract` reads, but without its stop and restart of tracing,
    which also writes the top instance's `tracing_on` (trace-cmd 3.1)."""
    files = []
    for cpu_dir in sorted((instance / "per_cpu").iterdir(), key=lambda p: int(p.name[3:])):
        fd = os.open(cpu_dir / "trace_pipe_raw", os.O_RDONLY | os.O_NONBLOCK)
        chunks = []
        try:
            while chunk := os.read(fd, 4096):
                chunks.append(chunk)
        except BlockingIOError:
            pass  # drained
        finally:
            os.close(fd)
        files.append(out_dir / cpu_dir.name)
        files[-1].write_bytes(b"".join(chunks))
    return files


def _trace_cmd(*args: str | Path) -> None:
    subprocess.run(["trace-cmd", *map(str, args)], capture_output=True, timeout=60, check=True)


@pytest.fixture
def real_trace_dat(tmp_path: Path) -> Path:
    """A trace.dat written by trace-cmd from a private tracefs instance holding one marker:
    `trace-cmd restore -c` writes the header from this machine's event formats, and
    `trace-cmd restore -i` adds the instance's raw per-CPU pages."""
    if shutil.which("trace-cmd") is None:
        pytest.skip("trace-cmd is not installed (make trace-cmd)")
    if not (TRACEFS / "instances").is_dir() or os.geteuid() != 0:
        pytest.skip(f"needs root and tracefs at {TRACEFS}")
    before = _global_switches()
    instance = TRACEFS / "instances" / f"mmuscope-tracedat-{os.getpid()}-0"
    instance.mkdir()
    try:
        (instance / "trace_marker").write_text("mmuscope trace.dat test\n")
        cpus = _raw_pages(instance, tmp_path)
    finally:
        instance.rmdir()
    out = tmp_path / "trace.dat"
    _trace_cmd("restore", "-c", "-o", tmp_path / "head.dat")
    _trace_cmd("restore", "-i", tmp_path / "head.dat", "-o", out, *cpus)
    assert _global_switches() == before
    return out


def test_a_real_trace_dat_replays_as_its_report(real_trace_dat: Path) -> None:
    report = subprocess.run(
        ["trace-cmd", "report", "-i", str(real_trace_dat)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "mmuscope trace.dat test" in report
    done = run("replay", real_trace_dat, "--summary")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["lines"] == len(report.splitlines()) > 0  # the report, not the bytes


def test_hex64_writes_64_bit_fields_as_hex_strings() -> None:
    plain = run("replay", "-", "--jsonl", stdin=FAST_PF.encode())
    hexed = run("replay", "-", "--jsonl", "--hex64", stdin=FAST_PF.encode())
    assert plain.returncode == hexed.returncode == 0, (plain.stderr, hexed.stderr)
    ints, strings = json.loads(plain.stdout)["fields"], json.loads(hexed.stdout)["fields"]
    assert ints["old"] == 0x8600000123456867 and strings["old"] == "0x8600000123456867"
    assert strings["new"] == "0x8600000123456a67" != strings["old"]
    assert strings["vcpu"] == 0 and strings["fixed"] is True  # narrow fields stay ints
    for name, value in strings.items():
        if name in HEX64_FIELDS["fast_page_fault"]:
            assert isinstance(value, str) and int(value, 16) == ints[name], name


def test_hex64_over_a_whole_trace_leaves_no_wide_int() -> None:
    trace = FIXTURES / "trace-kvmmmu-sample.txt"
    done = run("replay", trace, "--jsonl", "--hex64")
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events
    for event in json.loads(
        "[" + ",".join(run("replay", trace, "--jsonl").stdout.decode().splitlines()) + "]"
    ):
        for name, value in event["fields"].items():
            if isinstance(value, int) and value >= 1 << 53:  # what jq 1.6 would round
                assert name in HEX64_FIELDS.get(event["event"], ()), (event["event"], name)
    for event in events:
        for name in HEX64_FIELDS.get(event["event"], ()):
            value = event["fields"].get(name)
            assert value is None or isinstance(value, str), (event["event"], name, value)


def test_hex64_needs_jsonl() -> None:
    done = run("replay", "-", "--summary", "--hex64", stdin=b"")
    assert done.returncode == 2 and b"--jsonl" in done.stderr
