"""`replay` reads gzip, xz and zstd traces as the text inside them (known by their magic
bytes, whatever their names), and a damaged one is one line and exit 2 (the console
script in a subprocess; the readings through its entry point, `main(argv)`, in the test
process: tests/cli_run.py `here`)."""

from __future__ import annotations

import gzip
import json
import lzma
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.cli_run import MMUSCOPE, assert_user_error, ok_here, run
from tests.datafiles import FIXTURES

SAMPLE = FIXTURES / "trace-kvmmmu-sample.txt"


def _zstd(data: bytes) -> bytes:
    if shutil.which("zstd") is None:
        pytest.skip("no zstd program")
    return subprocess.run(["zstd", "-q", "-c"], input=data, capture_output=True, check=True).stdout


@pytest.mark.parametrize("kind", ["gzip", "xz", "zstd"])
def test_a_compressed_trace_reads_as_its_text(tmp_path: Path, kind: str) -> None:
    text = SAMPLE.read_bytes()
    packed = {"gzip": gzip.compress, "xz": lzma.compress, "zstd": _zstd}[kind](text)
    trace = tmp_path / "trace.bin"  # no telling suffix: the magic says what it is
    trace.write_bytes(packed)
    assert ok_here("replay", trace, "--summary") == ok_here("replay", SAMPLE, "--summary")
    assert ok_here("replay", trace, "--jsonl") == ok_here("replay", SAMPLE, "--jsonl")
    damaged = tmp_path / "damaged.bin"
    damaged.write_bytes(packed[: len(packed) // 2])
    done = run("replay", damaged, "--summary")
    assert kind in assert_user_error(done) or "zstd" in done.stderr


def test_a_compressed_trace_is_one_source_named_without_its_suffixes(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    trace = tmp_path / "host-a.trace.txt.gz"
    trace.write_bytes(gzip.compress(SAMPLE.read_bytes()))
    out = ok_here("replay", trace, "--parquet", tmp_path / "d")
    assert out.startswith(f"{tmp_path}/d/source=host-a.trace/part-00000.parquet: 29 events")
    counts = json.loads(
        ok_here("query", tmp_path / "d", "SELECT count(*) AS n FROM events", "--json")
    )
    assert counts == [{"n": 29}]


def test_a_trace_dat_is_one_source_as_its_report(tmp_path: Path) -> None:
    """trace-cmd record's binary file, read through `trace-cmd report` (here a stand-in
    that prints a report), is a source like its text."""
    pytest.importorskip("pyarrow")
    from tests.test_cli_trace_dat import FAST_PF, MAGIC, fake_trace_cmd

    dat = tmp_path / "host-c.dat"
    dat.write_bytes(MAGIC + b"\x00" * 64)
    env = fake_trace_cmd(tmp_path, "cpus=2\n" + FAST_PF * 3)
    done = subprocess.run(
        [str(MMUSCOPE), "replay", str(dat), "--parquet", str(tmp_path / "d")],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{tmp_path}/d/source=host-c/part-00000.parquet: 3 events")
    rows = json.loads(ok_here("query", tmp_path / "d", "SELECT event, vcpu, old_spte FROM events",
                              "--json"))  # fmt: skip
    assert rows == [{"event": "fast_page_fault", "vcpu": 0, "old_spte": 0x8600000123456867}] * 3
