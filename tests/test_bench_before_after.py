"""benchmarks/bench_before_after.py: docs/bench.md §7's before/after table from two
`mmuscope bench --json` runs, the older one from before rows had roles."""

from __future__ import annotations

import copy
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.test_bench_bands import _docs_rows
from tests.test_bench_claims import tables  # noqa: F401  (the shared quick run)

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_before_after.py"
RUNS = ROOT / "docs" / "bench-runs"
OLD_ONLY = ("role", "noise", "error_pct", "sources")  # columns the older bench lacked


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_before_after", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def older(run: dict[str, Any]) -> dict[str, Any]:
    """The run as the bench printed it before roles: no role, noise, error or sources; a
    verdict `in band`; the thread's "before" numbers outside the rows' bands; rmap_ext's
    265.20 labelled era 14."""
    out = copy.deepcopy(run)
    for data in out.values():
        columns = data.get("columns", [])
        if "role" not in columns or "verdict" not in columns:
            continue
        keep = [i for i, c in enumerate(columns) if c not in OLD_ONLY]
        role, verdict = columns.index("role"), columns.index("verdict")
        rows = []
        for row in data["rows"]:
            if row[role] == "input":
                row = [
                    None if columns[i] in ("low", "central", "high") else v
                    for i, v in enumerate(row)
                ]
            elif row[verdict] is not None:
                row = [*row[:verdict], "in band", *row[verdict + 1 :]]
            if "era" in columns and row[columns.index("era")] == "14-v2":
                row[columns.index("era")] = "14"
            rows.append([row[i] for i in keep])
        data["columns"] = [columns[i] for i in keep]
        data["rows"] = rows
        data["wide_bands"] = 2
        data.pop("fitted", None)
    return out


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_the_table_has_every_thread_number_of_docs_section_7(tables: dict[str, Any]) -> None:  # noqa: F811
    text = script().render(older(tables), tables)
    header = next(line for line in text.splitlines() if line.startswith("| table | row |"))
    names = cells(header)
    rows = [
        dict(zip(names, cells(line), strict=True))
        for line in text.splitlines()
        if line.startswith("| `") and line.count("|") == header.count("|")
    ]
    documented = {(r["table"], r["row"]) for r in _docs_rows()}
    assert {(r["table"], r["row"]) for r in rows} == documented
    for row in rows:
        assert row["before: role"] == "—"  # the older bench said nothing
        if row["role"] == "input":
            assert row["model [band] ×width"] == "—" and row["verdict"] == "—"
            assert row["before: verdict"] == "—"
        else:
            assert row["before: verdict"] == "in band", row  # found, relabelled or not
            assert row["before: model [band]"] != "—"
            assert row["error"].endswith(" %")
    relabelled = next(r for r in rows if r["row"] == "PTE_LIST_EXT 14-v2")
    assert relabelled["thread"] == "265.20"
    headlines = [
        line for line in text.splitlines() if line.startswith("| `") and "thread (" in line
    ]
    assert len(headlines) == 5
    assert all("2 band(s) wider than 3×" in line for line in headlines)


def test_a_quick_run_marks_the_verdicts_it_gives_otherwise(tables: dict[str, Any]) -> None:  # noqa: F811
    quick = copy.deepcopy(tables)
    data = quick["tlb_flush"]
    at = data["columns"].index("verdict")
    row = next(r for r in data["rows"] if r[at] is not None)
    row[at] = "not reproduced" if row[at] != "not reproduced" else "within noise"
    text = script().render(tables, tables, quick)
    assert text.count("(--quick: ") == 1
    assert f"(--quick: {row[at]})" in text


def test_docs_section_7_is_the_scripts_output_of_the_stored_runs() -> None:
    """docs/bench.md §7 quotes benchmarks/bench_before_after.py on the runs stored in
    docs/bench-runs/ as it printed them."""
    before, after, quick = (RUNS / f"{n}.json" for n in ("before", "after", "after-quick"))
    runs = [json.loads(p.read_text()) for p in (before, after, quick)]
    text = script().render(*runs) + "\n" + script().render_unbanded(*runs[:2])
    section = (ROOT / "docs" / "bench.md").read_text().split("## 7.")[1].split("\n## ")[0]
    assert text.strip() in section


def test_a_file_that_is_not_a_bench_run_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"engine": {"columns": ["name", "value", "unit"], "rows": []}}')
    for args in ([str(bad), str(bad)], [str(tmp_path / "missing.json"), str(bad)]):
        done = subprocess.run(
            [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False
        )
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.count("\n") == 1 and done.stderr.startswith("bench_before_after: ")
