"""The Parquet dataset against `replay --summary`, in one run, on the same 1M-line traces:
`sample`, benchmarks/replay_speed.py's (the repository's kvmmmu sample repeated with rising
timestamps: every kvmmmu shape, about half the lines stack traces and headers), and
`tdp`, a simulated TDP MMU run (`simulate --mmu tdp`, repeated likewise: every line an
event).

    .venv/bin/python benchmarks/parquet_speed.py [--lines N] [--sources 10] [--json]

For each trace, best of REPEAT, each the installed `mmuscope` end to end (start-up
included), wall time and CPU time (user + system of the child; steadier than wall time
on a loaded machine):
- summary: `replay TRACE --summary` (the baseline);
- parquet: `replay TRACE --parquet DIR` (budget: at most 1.5x summary), and its peak
  resident memory (the child's ru_maxrss; budget: at most 200 MB);
- query: `query DIR "SELECT event, count(*) ..."` over SOURCES copies of that source,
  against SOURCES times summary (what `replay --summary` takes over SOURCES such
  traces; budget: at most 1/20);
- report: `query DIR --report kvm-stat` over the same dataset;
- in process, CPU time: the writer (`SourceWriter.write_lines`) against the counting loop
  it runs (`summarize`, without `--summary`'s replay model or start-up): the writer's
  own cost, whatever `--summary` does besides counting.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mmuscope.engine.dataset.writer import SourceWriter
from mmuscope.engine.trace.reader import summarize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_speed import TS, make_trace

MMUSCOPE = Path(sys.executable).parent / "mmuscope"
REPEAT = 3
COUNT_SQL = "SELECT event, count(*) AS n FROM events GROUP BY event ORDER BY n DESC"


def timed(*args: str | Path) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds and peak RSS (KiB) of one `mmuscope` run."""
    start = time.perf_counter()
    proc = subprocess.Popen([str(MMUSCOPE), *map(str, args)], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"mmuscope {' '.join(map(str, args))}: exit status {status}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def make_tdp_trace(path: Path, lines: int) -> None:
    """A simulated TDP MMU run's lines, repeated with rising timestamps up to `lines`."""
    body = subprocess.run(
        [str(MMUSCOPE), "simulate", "--mmu", "tdp", "--workload", "kernbench",
         "--accesses", "100000", "--zap", "fast", "--at", "50000"],
        capture_output=True, text=True, check=True,
    ).stdout.splitlines()[1:]  # fmt: skip
    with path.open("w") as out:
        out.write("cpus=2\n")
        written, rnd = 1, 0
        while written < lines:
            for line in body[: lines - written]:
                shift = lambda m, rnd=rnd: f"{int(m[1]) + 10 * rnd}.{m[2]}:"  # noqa: E731
                out.write(TS.sub(shift, line, count=1) + "\n")
            written += min(len(body), lines - written)
            rnd += 1


def in_process(trace: Path, tmp: Path) -> tuple[float, float]:
    """CPU seconds of the counting loop alone and of the writer, best of REPEAT each."""
    loop, write = [], []
    for _ in range(REPEAT):
        start = time.process_time()
        with trace.open() as lines:
            summarize(lines)
        loop.append(time.process_time() - start)
        start = time.process_time()
        with trace.open() as lines, SourceWriter(tmp / "inproc", "s0") as writer:
            writer.write_lines(lines)
        write.append(time.process_time() - start)
        shutil.rmtree(tmp / "inproc")
    return min(loop), min(write)


def measure(trace: Path, tmp: Path, sources: int) -> dict[str, float]:
    summary, parquet = [], []
    for i in range(REPEAT):  # alternated, so that load on the machine hits both alike
        summary.append(timed("replay", trace, "--summary"))
        parquet.append(timed("replay", trace, "--parquet", tmp / f"d{i}", "--source", "s0"))
    fleet = tmp / "d0"
    part = fleet / "source=s0" / "part-00000.parquet"
    for n in range(1, sources):
        (fleet / f"source=s{n}").mkdir()
        shutil.copy(part, fleet / f"source=s{n}" / part.name)
    query = min(timed("query", fleet, COUNT_SQL)[0] for _ in range(REPEAT))
    report = min(timed("query", fleet, "--report", "kvm-stat")[0] for _ in range(REPEAT))
    loop, write = in_process(trace, tmp)
    wall, cpu = min(s[0] for s in summary), min(s[1] for s in summary)
    pwall, pcpu = min(p[0] for p in parquet), min(p[1] for p in parquet)
    result = {
        "trace_mb": round(trace.stat().st_size / 1e6, 1),
        "summary_s": round(wall, 2),
        "summary_cpu_s": round(cpu, 2),
        "parquet_s": round(pwall, 2),
        "parquet_cpu_s": round(pcpu, 2),
        "parquet_vs_summary": round(pwall / wall, 2),
        "parquet_vs_summary_cpu": round(pcpu / cpu, 2),
        "parquet_peak_rss_mb": round(max(p[2] for p in parquet) / 1024, 1),
        "parquet_file_mb": round(part.stat().st_size / 1e6, 2),
        "query_s": round(query, 2),
        "query_vs_summaries": round(query / (sources * wall), 4),
        "report_kvm_stat_s": round(report, 2),
        "loop_cpu_s": round(loop, 2),
        "write_cpu_s": round(write, 2),
        "write_vs_loop_cpu": round(write / loop, 2),
    }
    for i in range(REPEAT):
        shutil.rmtree(tmp / f"d{i}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--sources", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for kind, make in (("sample", make_trace), ("tdp", make_tdp_trace)):
            trace = tmp / f"{kind}.txt"
            make(trace, args.lines)
            results[kind] = measure(trace, tmp, args.sources)
            trace.unlink()
    if args.json:
        print(json.dumps({"lines": args.lines, "sources": args.sources, **results}))
        return
    print(f"{args.lines} lines a trace; best of {REPEAT}, the same run")
    for kind, r in results.items():
        print(f"{kind} ({r['trace_mb']} MB)")
        print(f"  replay --summary         {r['summary_s']:6.2f} s  (CPU {r['summary_cpu_s']} s)")
        print(f"  replay --parquet         {r['parquet_s']:6.2f} s  (CPU {r['parquet_cpu_s']} s)"
              f"  {r['parquet_vs_summary']}x summary, CPU {r['parquet_vs_summary_cpu']}x "
              f"(budget 1.5x); peak RSS {r['parquet_peak_rss_mb']} MB (budget 200); "
              f"file {r['parquet_file_mb']} MB")  # fmt: skip
        print(
            f"  query count, {args.sources} sources  {r['query_s']:6.2f} s  "
            f"{r['query_vs_summaries']} of {args.sources} summaries (budget 0.05)"
        )
        print(f"  query --report kvm-stat  {r['report_kvm_stat_s']:6.2f} s")
        print(f"  in process: summarize (the counting loop) CPU {r['loop_cpu_s']} s, "
              f"the writer CPU {r['write_cpu_s']} s, {r['write_vs_loop_cpu']}x")  # fmt: skip


if __name__ == "__main__":
    main()
