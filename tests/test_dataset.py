"""The Parquet dataset `--parquet DIR` writes (engine/dataset/): every record of a trace,
its fields parsed as `replay --jsonl` parses them, in the columns the schema promises,
readable by `pyarrow.dataset` (the schema Spark sees), and never half-written.
"""

from __future__ import annotations

import io
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
ds = pytest.importorskip("pyarrow.dataset")

from mmuscope.engine.dataset.columns import (  # noqa: E402
    FIELDS,
    HEAD,
    MODEL_EVENTS,
    TYPED,
    column_of,
    system_of,
)
from mmuscope.engine.dataset.rows import Records, fields_of  # noqa: E402
from mmuscope.engine.dataset.writer import SourceWriter  # noqa: E402
from mmuscope.engine.events import Event  # noqa: E402
from mmuscope.engine.trace.lines import TRACE_CMD, format_line  # noqa: E402
from mmuscope.engine.trace.reader import (  # noqa: E402
    CONTINUED,
    iter_events,
    summarize,
)
from mmuscope.engine.trace.tracepoints import TRACEPOINTS  # noqa: E402
from mmuscope.tui.simulate_cli import SimulateOptions, simulate  # noqa: E402

from tests.cli_run import MMUSCOPE, assert_user_error, run  # noqa: E402
from tests.datafiles import FIXTURES  # noqa: E402

TRACES = sorted(FIXTURES.glob("trace-*.txt"))


def simulated(mmu: str, workload: str, accesses: int = 1500, **kw: object) -> str:
    out = io.StringIO()
    simulate(SimulateOptions(mmu, workload, accesses, **kw), out)  # type: ignore[arg-type]
    return out.getvalue()


def records_of(text: str) -> Records:
    """The records `SourceWriter.write_lines` would buffer, all in one."""
    records = Records()

    def found(where, m):  # type: ignore[no-untyped-def]
        if where == CONTINUED:
            records.continue_last(m)
        else:
            records.add(m)

    summarize(io.StringIO(text, newline=""), found)
    return records


def _random_value(slot_kind: str, rnd: random.Random) -> object:
    """A value of one template slot's kind, across its whole range."""
    wide = rnd.choice([0, 1, rnd.getrandbits(12), rnd.getrandbits(40), rnd.getrandbits(64)])
    return {
        "u": rnd.getrandbits(rnd.choice([3, 16, 32])),
        "d": rnd.randint(-(1 << 31), 1 << 31),
        "x": wide,
        "016x": wide,
        "08x": rnd.getrandbits(32),
        "#x": wide,
        "#016x": wide,
        "p": rnd.choice([0, rnd.getrandbits(64)]),
        "01": rnd.random() < 0.5,
        "s": rnd.choice(["read", "write", "EPT_VIOLATION", "x"]),
        "exit": rnd.choice(["EPT_VIOLATION", "npf", "0x7b", "DB excp"]),
        "rwxu": rnd.choice(["rwxu", "r-x-", "---", "rw-"]),
        "hexbytes": rnd.choice(["", "88 18", "0f 01 d9"]),
        "pferr": rnd.choice([0, 1, 3, 0x10019, 0x25]),
        "pferr_old": rnd.choice([0, 1, 3, 0x1F]),
        "access": rnd.randrange(8),
        "bool": rnd.random() < 0.5,
    }[slot_kind]


def random_trace(seed: int = 1, per_variant: int = 12) -> str:
    """Lines of every tracepoint in every variant, with random fields, and lines of the
    kinds only the row-by-row path takes (non-ASCII, CRLF, long hex, wrapped)."""
    rnd = random.Random(seed)
    lines = ["cpus=4"]
    for name, tracepoint in TRACEPOINTS.items():
        for variant, template in tracepoint.templates.items():
            for i in range(per_variant):
                fields = {s.name: _random_value(s.kind, rnd) for s in template.slots}
                event = Event(name, fields, ts=1000 + i / 7, cpu=rnd.randrange(4), pid=42)
                lines.append(format_line(event, TRACE_CMD, variant=variant))
    lines += [
        "  qemu-1 [000] 1.000001: kvm_mmu_set_spte: gfn 1 spte 1 (r---) level 1 at 2",
        " qemu-ä-1 [000] 1.000002: kvm_mmu_spte_requested: gfn 12 pfn 34 level 1",
        "  qemu-1 [000] 1.000003: kvm_mmu_spte_requested: gfn ١٢ pfn 34 level 1",  # RTL digits
        "  qemu-1 [000] 1.000004: kvm_mmu_spte_requested: gfn 12 pfn 34 level 1\r",
        "  qemu-1 [000] 1.000005: kvm_mmu_spte_requested: gfn 00000000000000012 pfn 3 level 1",
        "  qemu-1 [000] 1.000006: kvm_mmu_spte_requested: gfn ffffffffffffffff pfn 3 level 1",
        "  qemu-1 [000] 1.000007: kvm_mmu_set_spte: gfn 5 spte 8000000000000a67 (r-x-) level 1 at fffffe0001234568",  # noqa: E501
        "  qemu-1 [000] 1.000008: kvm_page_fault: vcpu 99999999999 rip 0x1 address 0x0000000000001000 error_code 0x2",  # noqa: E501
        "  qemu-1 [000] 1.000009: some_other_event: a=1 b=2 ",
        "  qemu-1 [000] 1.000010: kvm_mmu_walker_error: pferr 3 P|W|0x4000",
        "  qemu-1 [001] 1.000011: kvm_mmu_zap_all_fast: kvm-mmu-valid-gen 1 used_pages",
        "  1c",
        "  qemu-1 [000] 99999999999999.123456789: kvm_fpu: load",
    ]
    return "\n".join(lines) + "\n"


def _traces() -> dict[str, str]:
    texts = {p.name: p.read_text(encoding="utf-8") for p in TRACES}
    texts["random"] = random_trace()
    texts["tdp"] = simulated("tdp", "kernbench", zap="fast", at=700, race_rate=0.2)
    texts["shadow"] = simulated("shadow", "fork", zap="fast", at=700)
    texts["direct"] = simulated("direct", "churn", zap="slow", at=700)
    return texts


@pytest.fixture(scope="module")
def traces() -> dict[str, str]:
    return _traces()


def test_columns_parse_every_text_as_the_engine_does(traces: dict[str, str]) -> None:
    """A row group parsed a column at a time (RE2 over the templates' regexes) gives
    each record the fields `printk_fields` gives it, row by row: every tracepoint in
    every era, random values over each kind's range, and the texts only the row-by-row
    path takes."""
    for name, text in traces.items():
        records = records_of(text)
        fast, slow = records.table(), records.table(vectorized=False)
        assert fast.equals(slow), name
        assert fields_of(fast) == fields_of(slow), name
        assert len(fast) == summarize(io.StringIO(text)).events > 0, name


def _as_engine(event: Event) -> dict[str, object]:
    """An engine event's fields as a row holds them (typed columns renamed)."""
    out: dict[str, object] = {}
    for key, value in event.fields.items():
        column = column_of(event.name, key)
        if column is not None and column.holds(value) and column.name not in out:
            out[column.name] = value
        else:
            out[key] = "true" if value is True else "false" if value is False else str(value)
    return out


def test_a_row_holds_the_event_replay_jsonl_prints(traces: dict[str, str]) -> None:
    """Row for row, the dataset holds `iter_events`' events (the loop of replay
    --jsonl): name, time in ns, cpu, pid, comm, fields; typed where the column holds
    the value, in `fields` (as text) where not."""
    for name, text in traces.items():
        table = records_of(text).table()
        events = list(iter_events(io.StringIO(text, newline="")))
        rows = table.to_pylist()
        assert [r["event"] for r in rows] == [e.name for e in events], name
        for row, event, parsed in zip(rows, events, fields_of(table), strict=True):
            assert parsed == _as_engine(event), (name, row["seq"])
            assert (row["cpu"], row["pid"], row["comm"]) == (event.cpu, event.pid, event.comm)
            assert row["ts"] is None or abs(row["ts"] / 1e9 - event.ts) < 1e-6
            assert row["system"] == system_of(event.name)


def test_typed_columns_and_the_fields_map() -> None:
    text = (
        "  CPU 0/KVM-4242 [003] 12.345678: fast_page_fault: vcpu 3 gva 7f3c2000 "
        "error_code P|W sptep 00000000fd98c937 old 0x8600000012345867 new 8600000012345a67 "
        "spurious 0 fixed 1\n"
        "  qemu-7 [001] 12.345679: kvm_mmu_get_page: sp gen 1 gfn 1234 l4 8-byte q0 wux nxe "
        "ad root 0 sync new\n"
        "  qemu-7 [001] 12.345680: mark_mmio_spte: sptep:0xffff888101234560 gfn 100 access 6 gen 1f\n"  # noqa: E501
        "  qemu-7 [001] 12.345681: kvm_memslot_lookup: slot=1 visited=3\n"
    )
    rows = records_of(text).table().to_pylist()
    fast, sp, mmio, own = rows
    assert fast["ts"] == 12_345_678_000 and fast["comm"] == "CPU 0/KVM"
    assert (fast["vcpu"], fast["error_code"], fast["sptep"]) == (3, 3, 0xFD98C937)
    assert fast["old_spte"] == 0x8600000012345867  # past 2**63: uint64
    assert dict(fast[FIELDS]) == {"cr2_or_gpa": str(0x7F3C2000), "spurious": "false",
                                  "fixed": "true"}  # fmt: skip
    assert (sp["mmu_valid_gen"], sp["gfn"], sp["level"]) == (1, 0x1234, 4)
    assert dict(sp[FIELDS])["created"] == "true" and "gen" not in dict(sp[FIELDS])
    assert mmio["mmu_valid_gen"] is None  # the MMIO generation is not the MMU's
    assert dict(mmio[FIELDS]) == {"access": "6", "gen": "31"}
    assert (mmio["sptep"], mmio["gfn"]) == (0xFFFF888101234560, 0x100)
    assert own["system"] == "mmuscope" and dict(own[FIELDS]) == {"text": "slot=1 visited=3"}
    assert [r["seq"] for r in rows] == [0, 1, 2, 3]


def test_ts_is_nanoseconds_whatever_the_clock_prints() -> None:
    """Microseconds (ftrace), nanoseconds (trace-cmd -t), a short fraction, a bare
    counter (trace_clock=counter) and one past int64 (NULL, the row kept)."""
    stamps = ["12.345678", "12.123456789", "7.5", "123456", "99999999999999999999", "0.000001"]
    text = "".join(f"  qemu-7 [001] {ts}: kvm_fpu: load\n" for ts in stamps)
    rows = records_of(text).table().to_pylist()
    ns = [12_345_678_000, 12_123_456_789, 7_500_000_000, 123456, None, 1000]
    assert [r["ts"] for r in rows] == ns


def test_every_event_the_model_emits_has_its_system() -> None:
    """kvm or kvmmmu for the kernel's tracepoints, mmuscope for the model's own; the
    kernel's lists match this host's tracefs where it has one."""
    for mmu, workload, kw in (
        ("tdp", "dirty", {"race_rate": 0.3, "smi_every": 40, "layout": "q35-16g"}),
        ("direct", "churn", {"zap": "slow", "at": 300}),
        ("shadow", "fork", {"zap": "fast", "at": 300}),
        ("shadow", "pfault", {}),
    ):
        names = summarize(io.StringIO(simulated(mmu, workload, 900, **kw))).by_event
        missing = [n for n in names if system_of(n) is None]
        assert not missing, (mmu, workload, missing)
    assert {system_of(n) for n in MODEL_EVENTS} == {"mmuscope"}
    assert system_of("kvm_mmu_zap_all_fast") == "kvmmmu" and system_of("kvm_exit") == "kvm"
    assert system_of("sched_switch") is None
    for system in ("kvm", "kvmmmu"):
        events = Path("/sys/kernel/tracing/events") / system
        if events.is_dir():  # only listed, never touched
            host = {p.name for p in events.iterdir() if p.is_dir()}
            assert {n for n in host if system_of(n) != system} == set(), system


def write(root: Path, source: str, text: str, **kw: object) -> SourceWriter:
    with SourceWriter(root, source, **kw) as writer:  # type: ignore[arg-type]
        writer.write_lines(io.StringIO(text, newline=""))
    return writer


def test_pyarrow_dataset_reads_the_schema_spark_sees(
    tmp_path: Path, traces: dict[str, str]
) -> None:
    """Hive partitioning (`source` from the directory name, a string), the columns'
    types, several row groups per file, and the counts of replay --summary."""
    write(tmp_path, "host-a", traces["tdp"], row_group=1000)
    write(tmp_path, "2024-05-01", traces["shadow"])
    write(tmp_path, "7", traces["random"])
    dataset = ds.dataset(
        tmp_path, format="parquet",
        partitioning=ds.partitioning(pa.schema([("source", pa.string())]), flavor="hive"),
    )  # fmt: skip
    schema = dataset.schema
    assert schema.field("source").type == pa.string()
    expected = {c.name: pa.type_for_alias(c.type) for c in (*HEAD, *TYPED)}
    for name, type_ in expected.items():
        assert schema.field(name).type == type_, name
    assert schema.field(FIELDS).type == pa.map_(pa.string(), pa.string())
    assert schema.names == [*expected, FIELDS, "source"]
    part = tmp_path / "source=host-a" / "part-00000.parquet"
    assert pa.parquet.ParquetFile(part).num_row_groups > 5
    table = dataset.to_table()
    for source, name in (("host-a", "tdp"), ("2024-05-01", "shadow"), ("7", "random")):
        rows = table.filter(pa.compute.equal(table["source"], source))
        got = dict(zip(*pa.compute.value_counts(rows["event"]).flatten(), strict=True))
        want = summarize(io.StringIO(traces[name], newline="")).by_event
        assert {k.as_py(): v.as_py() for k, v in got.items()} == dict(want), source


def test_an_existing_source_is_refused_unless_appended(tmp_path: Path) -> None:
    trace = FIXTURES / "trace-kvmmmu-sample.txt"
    assert run("replay", trace, "--parquet", tmp_path).returncode == 0
    done = run("replay", trace, "--parquet", tmp_path)
    assert "exists" in assert_user_error(done) and "--append" in done.stderr
    assert sorted(p.name for p in (tmp_path / "source=trace-kvmmmu-sample").iterdir()) == [
        "part-00000.parquet"
    ]
    done = run("replay", trace, "--parquet", tmp_path, "--append")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{tmp_path}/source=trace-kvmmmu-sample/part-00001.parquet")
    assert ds.dataset(tmp_path, format="parquet", partitioning="hive").count_rows() == 2 * 29


def test_a_failed_write_leaves_nothing_visible(tmp_path: Path) -> None:
    """An error while reading the trace: no source, no hidden directory; and when a
    source exists, --append's failure leaves it as it was."""

    def broken():  # type: ignore[no-untyped-def]
        yield from random_trace().splitlines(keepends=True)[:200]
        raise OSError("the disk went away")

    with pytest.raises(OSError), SourceWriter(tmp_path, "s", row_group=50) as writer:
        writer.write_lines(broken())
    assert list(tmp_path.iterdir()) == []
    write(tmp_path, "s", random_trace())
    with pytest.raises(OSError), SourceWriter(tmp_path, "s", append=True, row_group=50) as w:
        w.write_lines(broken())
    assert [p.name for p in (tmp_path / "source=s").iterdir()] == ["part-00000.parquet"]


def test_a_bad_trace_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    """Garbage, a truncated gzip trace, a --source name no directory may have: exit 2,
    one line, and no directory at all where the dataset would have been."""
    import gzip

    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(random.Random(3).randbytes(4000))
    packed = gzip.compress((FIXTURES / "trace-kvmmmu-sample.txt").read_bytes())
    truncated = tmp_path / "cut.txt.gz"
    truncated.write_bytes(packed[: len(packed) // 2])
    out = tmp_path / "d"
    assert "no trace line" in assert_user_error(run("replay", garbage, "--parquet", out))
    assert "damaged" in assert_user_error(run("replay", truncated, "--parquet", out))
    bad_name = run("replay", FIXTURES / "trace-kvmmmu-sample.txt", "--parquet", out,
                   "--source", "../x")  # fmt: skip
    assert "source name" in assert_user_error(bad_name)
    assert not out.exists()


def test_a_killed_writer_leaves_only_a_hidden_name_the_next_one_removes(tmp_path: Path) -> None:
    """SIGKILL in the middle of a trace on stdin: readers see no source; the next
    write of that source succeeds and removes what the dead one left."""
    proc = subprocess.Popen(
        [str(MMUSCOPE), "replay", "-", "--parquet", str(tmp_path), "--source", "s"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdin is not None
    proc.stdin.write(random_trace())
    proc.stdin.flush()
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".source=s.*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".source=s.") and left[0].endswith(".tmp")
    assert ds.dataset(tmp_path, format="parquet", partitioning="hive").count_rows() == 0
    done = run("replay", FIXTURES / "trace-kvmmmu-sample.txt", "--parquet", tmp_path,
               "--source", "s")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["source=s"]


def test_the_engine_and_the_other_commands_do_not_import_the_extra(tmp_path: Path) -> None:
    """pyarrow, numpy and duckdb are imported by --parquet and query only: replay
    --summary and --jsonl, simulate and the engine's core run without them."""
    trace = FIXTURES / "trace-kvmmmu-sample.txt"
    code = (
        "import sys; from mmuscope.tui.cli import main\n"
        f"main(['replay', {str(trace)!r}, '--summary'])\n"
        f"main(['replay', {str(trace)!r}, '--jsonl'])\n"
        "main(['simulate', '--mmu', 'shadow', '--workload', 'fork', '--accesses', '200'])\n"
        "import mmuscope.engine, mmuscope.engine.trace.reader, mmuscope.engine.dataset.columns\n"
        "bad = [m for m in ('pyarrow', 'numpy', 'duckdb') if m in sys.modules]\n"
        "print(bad, file=sys.stderr); sys.exit(1 if bad else 0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


BLOCK = (
    "import sys, importlib.abc\n"
    "class Block(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path, target=None):\n"
    "        if name.split('.')[0] in {hidden!r}:\n"
    "            raise ModuleNotFoundError(f'No module named {{name!r}}', name=name)\n"
    "sys.meta_path.insert(0, Block())\n"
    "from mmuscope.tui.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.parametrize("hidden", [("pyarrow",), ("numpy",), ("duckdb",)])
def test_without_the_extra_one_line_says_what_to_install(
    tmp_path: Path, hidden: tuple[str]
) -> None:
    trace = FIXTURES / "trace-kvmmmu-sample.txt"
    write(tmp_path / "ds", "s", trace.read_text())
    commands = {
        "pyarrow": [
            ["replay", str(trace), "--parquet", str(tmp_path / "out")],
            ["simulate", "--mmu", "tdp", "--workload", "kernbench", "--parquet", str(tmp_path)],
        ],
        "numpy": [["replay", str(trace), "--parquet", str(tmp_path / "out")]],
        "duckdb": [["query", str(tmp_path / "ds"), "SELECT 1"]],
    }[hidden[0]]
    for argv in commands:
        done = subprocess.run(
            [sys.executable, "-c", BLOCK.format(hidden=hidden), *argv],
            capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode == 2, (argv, done.stderr)
        assert done.stdout == "" and done.stderr.count("\n") == 1, done.stderr
        assert f"{hidden[0]} is not installed" in done.stderr
        assert "pip install 'mmuscope[data]'" in done.stderr
    assert not (tmp_path / "out").exists()
