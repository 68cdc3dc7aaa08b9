"""`mmuscope query DIR "SQL" | --report NAME` over a dataset the commands wrote with
`--parquet DIR`, through the entry point (`main(argv)` in the test process for the
dataset and the reports read, tests/cli_run.py `here`; the console script for bad
input, the listing and the help's examples): every report checked against the same numbers
computed from the same events without SQL (the engine's own reader, as `replay --jsonl`
reads them), on a dataset of ten sources.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")

from mmuscope.engine.dataset.columns import TYPED, column_of
from mmuscope.engine.events import Event
from mmuscope.engine.layouts import preset
from mmuscope.engine.trace.reader import iter_events, summarize

from tests.cli_run import MMUSCOPE, assert_user_error, ok, ok_here, run
from tests.datafiles import FIXTURES, REALDATA
from tests.kvm_host import needs_tracing
from tests.test_dataset import random_trace

SIMULATED = {  # source -> simulate's options
    "sim-tdp": ["--mmu", "tdp", "--workload", "kernbench", "--zap", "fast", "--at", "800",
                "--accesses", "2000", "--race-rate", "0.1"],
    "sim-direct": ["--mmu", "direct", "--workload", "churn", "--zap", "fast", "--at", "900",
                   "--accesses", "2000"],
    "sim-shadow": ["--mmu", "shadow", "--workload", "fork", "--zap", "fast", "--at", "900",
                   "--accesses", "2000"],
}  # fmt: skip


def latency_trace() -> str:
    """Faults on four vCPU tasks, each mapped by a kvm_mmu_set_spte some ns later (the
    clock in ns, as `trace-cmd report -t` prints it), except every seventh (MMIO: no
    spte), the four tasks' records interleaved."""
    lines, ts = [], 5_000_000_000
    for i in range(400):
        cpu = i % 4
        pid = 900 + cpu
        head = f"CPU {cpu}/KVM-{pid} [{cpu:03d}]"
        gfn = 0x1000 + i
        lines.append(
            f"{head} {ts // 10**9}.{ts % 10**9:09d}: kvm_page_fault: vcpu {cpu} rip 0x1 "
            f"address 0x{gfn << 12:016x} error_code 0x6"
        )
        if i % 7:
            done = ts + 200 + (i * 37) % 5000
            lines.append(
                f"{head} {done // 10**9}.{done % 10**9:09d}: kvm_mmu_set_spte: gfn {gfn:x} "
                f"spte 600000{gfn:06x}067 (rw-u) level 1 at ffff8881{i:08x}"
            )
        ts += 1000
    return "\n".join(sorted(lines, key=lambda line: line.split(": ")[0].split()[-1])) + "\n"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Ten sources: three simulated runs (simulate --parquet, with their memslots),
    the same traces replayed, gzip- and xz-compressed, the repository's recorded
    traces, and two made here; with each source's text."""
    root = tmp_path_factory.mktemp("fleet")
    data = root / "data"
    texts: dict[str, str] = {}
    for source, options in SIMULATED.items():
        ok_here("simulate", *options, "--parquet", data, "--source", source)
        texts[source] = ok_here("simulate", *options)
    (root / "tdp.txt.gz").write_bytes(__import__("gzip").compress(texts["sim-tdp"].encode()))
    (root / "shadow.txt.xz").write_bytes(__import__("lzma").compress(texts["sim-shadow"].encode()))
    (root / "random.txt").write_text(random_trace())
    (root / "latency.txt").write_text(latency_trace())
    traces = {
        "tdp": root / "tdp.txt.gz",
        "shadow": root / "shadow.txt.xz",
        "trace-kvm-pvm-6.18": FIXTURES / "trace-kvm-pvm-6.18.txt",
        "trace-kvmmmu-sample": FIXTURES / "trace-kvmmmu-sample.txt",
        "trace-wrapped-mail": FIXTURES / "trace-wrapped-mail.txt",
    }
    out = ok_here("replay", *traces.values(), "--parquet", data, "--layout", "pc-4g")
    assert len(out.splitlines()) == len(traces)
    made = {"random": root / "random.txt", "latency": root / "latency.txt"}
    ok_here("replay", *made.values(), "--parquet", data)  # no memslots
    traces.update(made)
    texts.update(tdp=texts["sim-tdp"], shadow=texts["sim-shadow"])
    texts.update({k: p.read_text() for k, p in traces.items() if k not in texts})
    assert len(texts) == 10
    return {"dir": data, "texts": texts}


def query(data: Path, *args: str) -> list[dict[str, Any]]:
    return json.loads(ok_here("query", data, *args, "--json"))  # type: ignore[no-any-return]


def events_of(text: str) -> list[Event]:
    return list(iter_events(io.StringIO(text, newline="")))


def test_kvm_stat_counts_what_replay_summary_counts(fleet: dict[str, Any]) -> None:
    rows = query(fleet["dir"], "--report", "kvm-stat")
    by_source: dict[str, dict[str, int]] = defaultdict(dict)
    for row in rows:
        by_source[row["source"]][row["event"]] = row["total"]
    assert set(by_source) == set(fleet["texts"])
    for source, text in fleet["texts"].items():
        assert by_source[source] == dict(summarize(io.StringIO(text, newline="")).by_event)
        shares = [r["pct_total"] for r in rows if r["source"] == source]
        assert abs(sum(shares) - 100) < 0.1 * len(shares)


def test_faults_per_memslot_places_each_fault_in_its_slot(fleet: dict[str, Any]) -> None:
    rows = query(fleet["dir"], "--report", "faults-per-memslot")
    slots = [r for r in preset("pc-4g").regions if r.as_id == 0]
    for source in ("sim-direct", "sim-shadow", "tdp", "trace-kvmmmu-sample"):
        faults: Counter[int | None] = Counter()
        gfns: dict[int | None, set[int]] = defaultdict(set)
        for event in events_of(fleet["texts"][source]):
            if event.name == "kvm_mmu_spte_requested":
                gfn = int(event.fields["gfn"])
                slot = next(
                    (r.id for r in slots if r.gpa >> 12 <= gfn < (r.gpa + r.size) >> 12), None
                )
                faults[slot] += 1
                gfns[slot].add(gfn)
        got = {r["slot"]: (r["faults"], r["gfns"]) for r in rows if r["source"] == source}
        assert got == {s: (n, len(gfns[s])) for s, n in faults.items()}, source
        assert sum(faults.values()) > 0
    # a source without memslots: one row, slot NULL
    requested = sum(e.name == "kvm_mmu_spte_requested" for e in events_of(fleet["texts"]["random"]))
    assert [(r["slot"], r["faults"]) for r in rows if r["source"] == "random"] == [
        (None, requested)
    ]


def test_zaps_per_generation_counts_obsolete_pages(fleet: dict[str, Any]) -> None:
    """Per zap: the generation kvm_mmu_zap_all_fast retires, and the pages zapped,
    zapped obsolete (of that generation) and created until the next zap, in time order
    (the sample trace mixes kernels: its times go back)."""
    rows = query(fleet["dir"], "--report", "zaps-per-generation")
    checked = 0
    for source, text in fleet["texts"].items():
        zap, retired, table = 0, None, defaultdict(Counter)  # type: ignore[var-annotated]
        used: dict[int, int | None] = {0: None}
        in_file = list(enumerate(events_of(text)))
        for _, event in sorted(in_file, key=lambda pair: (pair[1].ts, pair[0])):
            if event.name == "kvm_mmu_zap_all_fast":
                zap += 1
                retired = int64(event.fields.get("mmu_valid_gen"))  # None: past int64, or
                # a text no era prints
                used[zap] = event.fields.get("mmu_used_pages")  # type: ignore[assignment]
                table[zap]["seen"] += 0
            elif event.name == "kvm_mmu_prepare_zap_page":
                table[zap]["zapped"] += 1
                gen = int64(event.fields.get("gen"))
                table[zap]["obsolete"] += gen is not None and gen == retired
            elif event.name == "kvm_mmu_get_page":
                table[zap]["created"] += bool(event.fields.get("created"))
        got = {
            r["zap"]: (r["used_pages"], r["zapped"], r["obsolete"], r["created"])
            for r in rows
            if r["source"] == source
        }
        want = {z: (used[z], c["zapped"], c["obsolete"], c["created"]) for z, c in table.items()}
        assert got == want, source
        checked += sum(c["obsolete"] for c in table.values())
    assert checked > 0  # the fast zaps above retired pages that were then zapped


def int64(value: object) -> int | None:
    """What the typed column mmu_valid_gen holds of a value: ints of int64 (the rest
    stays in `fields`)."""
    return value if isinstance(value, int) and value < 1 << 63 else None


def _quantile(values: list[int], q: float) -> float:
    """Linear interpolation between the closest ranks."""
    ordered = sorted(values)
    where = (len(ordered) - 1) * q
    low = int(where)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (where - low) * (ordered[high] - ordered[low])


def test_fault_latency_pairs_each_fault_with_its_set_spte(fleet: dict[str, Any]) -> None:
    rows = {r["source"]: r for r in query(fleet["dir"], "--report", "fault-latency")}
    text = fleet["texts"]["latency"]
    pending: dict[tuple[int, int], int | None] = {}
    faults, latencies = 0, []
    for line in text.splitlines():  # the trace's own nanoseconds
        head, name = line.split(": ")[0], line.split(": ")[1]
        stamp = head.split()[-1]
        ns = int(stamp.replace(".", ""))
        task = (int(head.split("-")[1].split()[0]), int(head.split("[")[1][:3]))
        if name == "kvm_page_fault":
            faults += 1
            pending[task] = ns
        elif name == "kvm_mmu_set_spte" and pending.get(task) is not None:
            latencies.append(ns - pending[task])  # type: ignore[operator]
            pending[task] = None
    row = rows["latency"]
    assert (row["faults"], row["mapped"]) == (faults, len(latencies))
    assert faults == 400 and 300 < len(latencies) < 400
    for q, column in ((0.5, "p50_ns"), (0.9, "p90_ns"), (0.99, "p99_ns")):
        assert row[column] == pytest.approx(_quantile(latencies, q))
    assert row["max_ns"] == max(latencies)
    assert rows["sim-tdp"]["mapped"] > 0


def test_rmap_chains_are_the_gfns_with_the_most_sptes(fleet: dict[str, Any]) -> None:
    rows = query(fleet["dir"], "--report", "rmap-chains")
    for source in ("sim-shadow", "sim-direct", "trace-kvmmmu-sample"):
        sptes: dict[tuple[int, int], set[int]] = defaultdict(set)
        for event in events_of(fleet["texts"][source]):
            if event.name == "kvm_mmu_set_spte":
                sptes[int(event.fields["gfn"]), int(event.fields["level"])].add(
                    int(event.fields["sptep"])
                )
        top = sorted(sptes.items(), key=lambda kv: (-len(kv[1]), kv[0]))[:10]
        got = [(r["gfn"], r["level"], r["sptes"]) for r in rows if r["source"] == source]
        assert got == [(g, level, len(s)) for (g, level), s in top], source
    shadow = [r["sptes"] for r in rows if r["source"] == "sim-shadow"]
    assert shadow[0] > 1  # forked processes share pages: chains longer than one


def test_sql_prints_as_a_table_json_or_csv(fleet: dict[str, Any]) -> None:
    sql = (
        "SELECT source, count(*) AS events, count(DISTINCT event) AS kinds, max(spte) AS top "
        "FROM events GROUP BY source ORDER BY source"
    )
    as_json = query(fleet["dir"], sql)
    assert [r["source"] for r in as_json] == sorted(fleet["texts"])
    as_csv = list(csv.DictReader(io.StringIO(ok_here("query", fleet["dir"], sql, "--csv"))))
    assert [{k: str(v) if v is not None else "" for k, v in r.items()} for r in as_json] == as_csv
    table = ok("query", fleet["dir"], sql).splitlines()  # the console script's table
    assert table[0].split() == ["source", "events", "kinds", "top"]
    assert table[-1] == "(10 rows)" and len(table) == 13
    assert any(r["top"] is not None and r["top"] >= 1 << 63 for r in as_json)  # uint64
    empty = ok_here("query", fleet["dir"], "SELECT * FROM events WHERE false", "--json")
    assert json.loads(empty) == []
    fields = query(fleet["dir"], "SELECT fields['created'] AS c FROM events "
                   "WHERE event = 'kvm_mmu_get_page' LIMIT 1")  # fmt: skip
    assert fields[0]["c"] in ("true", "false")


def test_bad_input_is_one_line(fleet: dict[str, Any], tmp_path: Path) -> None:
    done = run("query", fleet["dir"], "SELEC source FROM events")
    assert "Parser Error" in assert_user_error(done)
    done = run("query", fleet["dir"], "SELECT nope FROM events")
    assert "nope" in assert_user_error(done)
    assert "no such directory" in assert_user_error(run("query", tmp_path / "x", "SELECT 1"))
    assert "no events" in assert_user_error(run("query", tmp_path, "SELECT 1"))
    part = next(fleet["dir"].glob("source=*/part-*.parquet")).read_bytes()
    (tmp_path / "source=cut").mkdir()
    (tmp_path / "source=cut" / "part-00000.parquet").write_bytes(part[: len(part) // 2])
    assert "part-00000.parquet" in assert_user_error(run("query", tmp_path, "SELECT 1"))
    assert_user_error(run("query", fleet["dir"]))
    assert_user_error(run("query", fleet["dir"], "SELECT 1", "--report", "kvm-stat"))
    listing = ok("query", "--report")
    names = [line.split()[0] for line in listing.splitlines()[1:] if line.startswith("  ")]
    assert names == ["kvm-stat", "faults-per-memslot", "zaps-per-generation",
                     "fault-latency", "rmap-chains"]  # fmt: skip
    done = run("query", fleet["dir"], "--report", "nope")
    assert done.returncode == 2 and done.stdout == listing
    assert done.stderr.count("\n") == 1 and "unknown report 'nope'" in done.stderr


def test_every_trace_of_realdata_counts_alike(tmp_path: Path) -> None:
    """The recorded traces beside the repository (those with trace lines): the
    dataset's counts are replay --summary's."""
    traces = sorted(p for p in REALDATA.glob("*") if p.is_file()) if REALDATA.is_dir() else []
    written = 0
    for trace in traces:
        summary = run("replay", trace, "--summary")
        if summary.returncode != 0 or json.loads(summary.stdout)["events"] == 0:
            continue
        ok("replay", trace, "--parquet", tmp_path, "--source", f"r{written}")
        got = query(tmp_path, f"SELECT event, count(*) AS n FROM events WHERE source = "
                    f"'r{written}' GROUP BY event")  # fmt: skip
        assert {r["event"]: r["n"] for r in got} == json.loads(summary.stdout)["by_event"]
        written += 1
    if not written:
        pytest.skip(f"no trace with events in {REALDATA}")


@needs_tracing
def test_a_real_kvm_run_counts_alike(tmp_path: Path) -> None:
    done = run("kvm", "fork", "--parquet", tmp_path / "d", "--source", "host",
               "--trace-out", tmp_path / "t.txt")  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(ok("replay", tmp_path / "t.txt", "--summary"))
    rows = query(tmp_path / "d", "--report", "kvm-stat")
    assert {r["event"]: r["total"] for r in rows} == summary["by_event"]
    assert {r["system"] for r in rows} <= {"kvm", "kvmmmu"}
    # the program's memslots came along: every fault is in one (RAM, slot 0)
    slots = query(tmp_path / "d", "--report", "faults-per-memslot")
    assert [(r["slot"], r["name"]) for r in slots] == [(0, "ram")]
    assert slots[0]["faults"] == summary["by_event"]["kvm_mmu_spte_requested"]


def test_help_explains_and_its_examples_run_as_printed(tmp_path: Path) -> None:
    """The examples as `query --help` prints them (tests/test_cli_help.py runs every
    other command's; these are run here, where what they print is looked at too)."""
    from tests.test_cli_help import examples

    shown = ok("query", "--help")
    text = " ".join(shown.split())
    for words in ("DuckDB", "events", "memslots", "--report", "--json", "--csv", "default"):
        assert words in text, words
    commands = examples(shown)
    path = f"{Path(MMUSCOPE).parent}:{os.environ['PATH']}"
    for command in commands:
        done = subprocess.run(
            ["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True,
            cwd=tmp_path, env={**os.environ, "PATH": path}, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, (command, done.stderr)
        assert done.stdout.strip(), command
    assert len(commands) == 4
    assert done.stdout.startswith("source,zap,retired_gen,used_pages,zapped,obsolete,created")


def test_the_readmes_spark_query_is_the_kvm_stat_report(fleet: dict[str, Any]) -> None:
    """The SQL the README hands to Spark counts as `--report kvm-stat` does (run here in
    DuckDB over the same files; tests/test_dataset.py reads them as Spark does)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme[readme.index("spark.read.parquet") :]
    sql = block[block.index('"""') + 3 :]
    sql = sql[: sql.index('"""')]
    spark = query(fleet["dir"], sql)
    report = query(fleet["dir"], "--report", "kvm-stat")
    assert spark == [{k: r[k] for k in spark[0]} for r in report]
    assert list(spark[0]) == ["source", "system", "event", "total", "pct_total"]


def test_a_source_holds_the_events_of_its_trace(fleet: dict[str, Any]) -> None:
    """Trace -> dataset -> the same events: each row, read back through `query --json`
    in the trace's order, is the event the engine's reader makes of that record (name,
    time in ns, cpu, pid, comm; each field in its typed column where the column holds
    it, else in `fields` as text)."""
    for source in ("trace-kvmmmu-sample", "trace-wrapped-mail", "random", "sim-shadow"):
        rows = query(fleet["dir"], f"SELECT * FROM events WHERE source = '{source}' ORDER BY seq")
        events = events_of(fleet["texts"][source])
        assert [r["event"] for r in rows] == [e.name for e in events], source
        for row, event in zip(rows, events, strict=True):
            where = (source, row["seq"])
            assert (row["cpu"], row["pid"], row["comm"]) == (event.cpu, event.pid, event.comm)
            assert row["ts"] is None or abs(row["ts"] - event.ts * 1e9) < 1e3, where
            typed = {c.name: row[c.name] for c in TYPED if row[c.name] is not None}
            want_typed, want_fields = {}, {}
            for key, value in event.fields.items():
                column = column_of(event.name, key)
                if column is not None and column.holds(value) and column.name not in want_typed:
                    want_typed[column.name] = value
                else:
                    want_fields[key] = str(value).lower() if isinstance(value, bool) else str(value)
            assert (typed, row["fields"]) == (want_typed, want_fields), where
