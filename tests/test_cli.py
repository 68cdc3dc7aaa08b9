"""The `mmuscope` command line, run the way a user runs it: the installed console script in
a subprocess, asserting on stdout, stderr and the exit code (CONTRACT.md, "Command line").

Exit codes: 0 success, 2 bad input or a missing tool (one line on stderr, no traceback).
Real QEMU dumps and traces are read from ../shared/realdata beside the checkout
(or $MMUSCOPE_REALDATA); those tests are skipped when the files are absent.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.datafiles import FIXTURES, realdata_path

MMUSCOPE = Path(sys.executable).parent / "mmuscope"
STRATEGIES = ("linear", "size-sorted", "binary", "wbtree", "rbtree", "wbtree-compact")
FORMATS = ("dot", "svg", "pdf", "png")
MAGIC = {"dot": b"digraph", "svg": b"<?xml", "pdf": b"%PDF", "png": b"\x89PNG\r\n\x1a\n"}
HAVE_DOT = shutil.which("dot") is not None
needs_dot = pytest.mark.skipif(not HAVE_DOT, reason="Graphviz 'dot' is not installed")

MTREE_FLAT = FIXTURES / "cli-mtree-flat.txt"
MTREE_TREE = FIXTURES / "cli-mtree-tree.txt"
STRACE = FIXTURES / "cli-strace.txt"
PC_6G = "qemu-info-mtree-x86-pc-kvm-6g.txt"
Q35 = "qemu-info-mtree-x86-q35-kvm-intel-iommu-pt.txt"
TCG_FLAT = "qemu-info-mtree-f-x86-pc-tcg-flatview.txt"
TRACES = (
    "qemu-trace-kvm_set_user_memory-pc-smm-off.txt",
    "qemu-trace-kvm_set_user_memory-pc-smm-on.txt",
)
PROBE_RE = re.compile(r"^\s+#(\d+)\s", re.MULTILINE)
GiB = 1 << 30


def run(
    *args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    assert MMUSCOPE.exists(), f"console script not installed next to {sys.executable}"
    return subprocess.run(
        [str(MMUSCOPE), *map(str, args)],
        cwd=cwd,
        env=dict(os.environ) if env is None else env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ok(*args: str | Path, cwd: Path | None = None) -> str:
    """Run, expect success with nothing on stderr, return stdout."""
    done = run(*args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    return done.stdout


def assert_user_error(done: subprocess.CompletedProcess[str]) -> str:
    """Exit 2, nothing on stdout, exactly one line on stderr that names the program."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert done.stdout == ""
    assert done.stderr.endswith("\n") and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("mmuscope"), done.stderr
    return done.stderr


def realdata(name: str) -> Path:
    return realdata_path(name)


def layout_json(*args: str | Path) -> list[dict[str, Any]]:
    rows = json.loads(ok("layout", *args, "--json"))
    assert isinstance(rows, list)
    return rows


def assert_memslot_shape(rows: list[dict[str, Any]]) -> None:
    """CONTRACT: [{"name": str, "gpa": int, "size": int, "readonly": bool}] sorted by gpa."""
    assert rows, "no RAM ranges found"
    for row in rows:
        assert set(row) == {"name", "gpa", "size", "readonly"}, row
        assert isinstance(row["name"], str) and row["name"]
        assert type(row["gpa"]) is int and type(row["size"]) is int
        assert type(row["readonly"]) is bool
        assert row["gpa"] % 4096 == 0 and row["size"] % 4096 == 0 and row["size"] > 0, row
    gpas = [row["gpa"] for row in rows]
    assert gpas == sorted(gpas)
    for low, high in itertools.pairwise(rows):
        assert low["gpa"] + low["size"] <= high["gpa"], (low, high)


def entry(rows: list[dict[str, Any]], gpa: int) -> dict[str, Any]:
    matches = [row for row in rows if row["gpa"] == gpa]
    assert len(matches) == 1, f"no single range at {gpa:#x}: {rows}"
    return matches[0]


# -- help and the overview --------------------------------------------------------------


def test_help_lists_the_commands() -> None:
    out = ok("--help")
    for command in ("overview", "lookup", "export", "layout"):
        assert re.search(rf"^\s+{command}\s", out, re.MULTILINE), out


@pytest.mark.parametrize("command", ["lookup", "export", "layout"])
def test_subcommand_help(command: str) -> None:
    out = ok(command, "--help")
    assert out.startswith(f"usage: mmuscope {command}")


def test_python_dash_m_tui_is_the_same_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tui", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "lookup" in done.stdout and "export" in done.stdout


def test_overview_shows_slots_and_strategies() -> None:
    env = dict(os.environ, COLUMNS="120")
    done = run("overview", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    out = done.stdout
    for name in ("ram-below-1m", "pc.rom", "isa-bios", "vga.vram", "pc.bios", "ram-above-4g"):
        assert name in out
    for strategy in STRATEGIES:
        assert re.search(rf"\b{re.escape(strategy)}\b", out), strategy
    assert "mmuscope lookup" in out


# -- lookup -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [["0xfee00"], ["--gpa", "0xfee00000"], ["--gpa", str(0xFEE00000)], ["1043968"]],
    ids=["gfn-hex", "gpa-hex", "gpa-decimal", "gfn-decimal"],
)
def test_lookup_wbtree_apic_miss(args: list[str]) -> None:
    out = ok("lookup", *args, "--lookup", "wbtree")
    assert "gfn 0xfee00 " in out
    assert "wbtree" in out
    assert re.search(r"^\s+miss: .* after 4 visited", out, re.MULTILINE), out
    assert [int(n) for n in PROBE_RE.findall(out)] == [1, 2, 3, 4]


def test_lookup_compare_lists_every_strategy() -> None:
    out = ok("lookup", "0xfee00", "--compare")
    _, _, table = out.partition("every strategy")
    costs = dict(re.findall(r"^\s+(\S+)\s+(\d+) visited", table, re.MULTILINE))
    assert set(costs) == set(STRATEGIES), table
    assert costs["wbtree"] == "4"
    assert costs["linear"] == "7"  # a miss scans every entry of pc-4g's 7 slots


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_lookup_hit_in_ram(strategy: str) -> None:
    out = ok("lookup", "--gpa", "0x12345000", "--lookup", strategy)
    assert re.search(r"^\s+hit slot 1 \(ram-1m-to-hole\)", out, re.MULTILINE), out


def test_lookup_long_linear_scan_is_elided() -> None:
    out = ok("lookup", "--layout", "max", "--lookup", "linear", "0x50000")
    assert "hit slot 640" in out
    assert "after 641 visited" in out
    assert re.search(r"^\s+\.\.\. \d+ more probes", out, re.MULTILINE), out
    probes = [int(n) for n in PROBE_RE.findall(out)]
    assert probes[0] == 1 and probes[-1] == 641
    assert len(probes) < 100


def test_lookup_all_prints_every_probe() -> None:
    out = ok("lookup", "--layout", "max", "--lookup", "linear", "0x50000", "--all")
    assert "more probes" not in out
    assert [int(n) for n in PROBE_RE.findall(out)] == list(range(1, 642))
    assert "after 641 visited" in out


def test_lookup_no_cache_skips_last_used_slot() -> None:
    cached = ok("lookup", "0x12345")
    bare = ok("lookup", "0x12345", "--no-cache")
    assert "last_used_slot" in cached
    assert "last_used_slot" not in bare
    for out in (cached, bare):
        assert "hit slot 1 (ram-1m-to-hole)" in out


def test_lookup_smm_address_space() -> None:
    out = ok("lookup", "--layout", "q35-16g", "--as", "1", "0x10")
    assert "address space 1" in out
    assert "hit slot 0 (smram-low)" in out


# -- export -----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_export_every_strategy_and_format(strategy: str, fmt: str, tmp_path: Path) -> None:
    if fmt != "dot" and not HAVE_DOT:
        pytest.skip("Graphviz 'dot' is not installed")
    out = tmp_path / f"{strategy}.{fmt}"
    assert ok("export", "-o", out, "--lookup", strategy).strip() == f"wrote {out}"
    data = out.read_bytes()
    assert data.startswith(MAGIC[fmt])
    if fmt == "svg":
        assert b"<svg" in data and b"slot 6" in data
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]  # no temporary left


@needs_dot
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_exported_dot_renders_with_graphviz(strategy: str, tmp_path: Path) -> None:
    out = tmp_path / "tree.dot"
    ok("export", "-o", out, "--lookup", strategy)
    svg = subprocess.run(
        ["dot", "-Tsvg", str(out)], capture_output=True, text=True, check=False, timeout=30
    )
    assert svg.returncode == 0, svg.stderr
    assert "<svg" in svg.stdout
    for slot in range(7):  # pc-4g has slots 0..6
        assert f"slot {slot}<" in svg.stdout, slot


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_export_path_marks_the_visits(strategy: str, tmp_path: Path) -> None:
    out = tmp_path / "path.dot"
    ok("export", "-o", out, "--lookup", strategy, "--path", "0xfee00")
    text = out.read_text()
    labels = re.findall(r"((?:#\d+,)*#\d+)(?:<BR/>| ·)", text)  # "#3,#4": one entry twice
    marks = [int(n) for label in labels for n in label.replace("#", "").split(",")]
    explained = ok("lookup", "0xfee00", "--lookup", strategy, "--no-cache")
    found = re.search(r"after (\d+) visited", explained)
    assert found, explained
    visited = int(found[1])
    assert sorted(marks) == list(range(1, visited + 1)), (marks, visited)
    assert "miss" in text
    if strategy == "wbtree":
        assert visited == 4


def test_export_overwrites_an_existing_file(tmp_path: Path) -> None:
    out = tmp_path / "tree.dot"
    out.write_text("old")
    ok("export", "-o", out)
    assert out.read_text().startswith("digraph")


def test_export_smm_address_space(tmp_path: Path) -> None:
    out = tmp_path / "smm.dot"
    ok("export", "-o", out, "--layout", "q35-16g", "--as", "1")
    slots = {int(n) for n in re.findall(r"slot (\d+)", out.read_text())}
    assert slots == {0, 1, 2, 3, 5, 6}  # q35-16g's SMRAM address space


# -- export without Graphviz ------------------------------------------------------------


@pytest.fixture
def no_dot(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A working directory and an environment whose PATH holds no `dot` at all.

    The console script is run by absolute path; its shebang names the venv's python."""
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    return work, dict(os.environ, PATH=str(empty_bin))


@pytest.mark.parametrize("fmt", ["pdf", "svg", "png"])
def test_export_without_dot_fails_cleanly(fmt: str, no_dot: tuple[Path, dict[str, str]]) -> None:
    work, env = no_dot
    done = run("export", "-o", f"out.{fmt}", "--path", "0xfee00", cwd=work, env=env)
    message = assert_user_error(done)
    assert "apt-get install graphviz" in message
    assert list(work.iterdir()) == []


def test_export_dot_works_without_graphviz(no_dot: tuple[Path, dict[str, str]]) -> None:
    work, env = no_dot
    done = run("export", "-o", "out.dot", "--lookup", "wbtree", cwd=work, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert [p.name for p in work.iterdir()] == ["out.dot"]
    assert (work / "out.dot").read_text().startswith("digraph")


def test_export_failing_dot_leaves_no_partial_file(tmp_path: Path) -> None:
    """A `dot` that writes half a picture and fails: the old file stays, no temporary."""
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake_dot = fake_bin / "dot"
    fake_dot.write_text("#!/bin/sh\nprintf '%%PDF-1.5 partial'\necho 'Error: syntax' >&2\nexit 1\n")
    fake_dot.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    (work / "out.pdf").write_bytes(b"old picture")
    env = dict(os.environ, PATH=f"{fake_bin}{os.pathsep}{os.environ.get('PATH', '')}")
    message = assert_user_error(run("export", "-o", "out.pdf", cwd=work, env=env))
    assert "Error: syntax" in message
    assert [p.name for p in work.iterdir()] == ["out.pdf"]
    assert (work / "out.pdf").read_bytes() == b"old picture"


# -- bad input --------------------------------------------------------------------------

BAD_INPUT = {
    "unknown-layout-lookup": ["lookup", "1", "--layout", "nope"],
    "unknown-layout-export": ["export", "-o", "out.dot", "--layout", "nope"],
    "unknown-preset": ["layout", "--preset", "nope"],
    "unknown-lookup": ["lookup", "1", "--lookup", "nope"],
    "unknown-lookup-export": ["export", "-o", "out.dot", "--lookup", "nope"],
    "unknown-command": ["nope"],
    "gfn-not-a-number": ["lookup", "zz"],
    "gfn-negative": ["lookup", "-5"],
    "gfn-negative-after-dashes": ["lookup", "--", "-5"],
    "gfn-missing": ["lookup"],
    "output-missing": ["export"],
    "address-space-missing": ["lookup", "1", "--as", "2"],
    "layout-and-mtree": ["lookup", "1", "--layout", "pc-4g", "--mtree", "layout.txt"],
    "output-suffix": ["export", "-o", "out.xyz"],
    "output-no-suffix": ["export", "-o", "out"],
    "output-directory-missing": ["export", "-o", "/nonexistent/dir/out.dot"],
    "mtree-missing": ["lookup", "1", "--mtree", "missing.txt"],
    "mtree-directory": ["lookup", "1", "--mtree", "."],
    "mtree-binary": ["lookup", "1", "--mtree", "garbage.bin"],
    "mtree-text": ["lookup", "1", "--mtree", "garbage.txt"],
    "mtree-empty": ["lookup", "1", "--mtree", "empty.txt"],
    "mtree-export": ["export", "-o", "out.dot", "--mtree", "garbage.bin"],
    "mtree-layout-missing": ["layout", "--mtree", "missing.txt", "--json"],
    "mtree-layout-binary": ["layout", "--mtree", "garbage.bin", "--json"],
    "mtree-layout-empty": ["layout", "--mtree", "empty.txt"],
    "mtree-is-a-trace": ["layout", "--mtree", str(STRACE)],
    "mtree-address-space": ["layout", "--mtree", str(MTREE_FLAT), "--address-space", "nope"],
    "trace-missing": ["layout", "--trace", "missing.txt"],
    "trace-binary": ["layout", "--trace", "garbage.bin"],
    "trace-text": ["layout", "--trace", "garbage.txt", "--json"],
    "trace-empty": ["layout", "--trace", "empty.txt"],
    "trace-is-an-mtree": ["layout", "--trace", str(MTREE_TREE)],
}


@pytest.mark.parametrize("args", BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input(args: list[str], tmp_path: Path) -> None:
    (tmp_path / "garbage.bin").write_bytes(random.Random(2011).randbytes(4096) + b"\0\xff")
    (tmp_path / "garbage.txt").write_text("address: nowhere\n0x1000-0x2000 ram\n(qemu) quit\n")
    (tmp_path / "empty.txt").write_bytes(b"")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert_user_error(run(*args, cwd=tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not Path("/nonexistent").exists()


# -- layout -----------------------------------------------------------------------------


def test_layout_preset_json() -> None:
    rows = layout_json("--preset", "pc-4g")
    assert [row["gpa"] for row in rows] == sorted(row["gpa"] for row in rows)
    names = {row["name"]: row for row in rows}
    assert names["pc.bios"]["readonly"] is True
    assert names["pc.bios"]["gpa"] == 0xFFFC0000
    assert names["ram-1m-to-hole"]["readonly"] is False
    assert len(rows) == 7


def test_layout_default_text() -> None:
    out = ok("layout")
    bios = r"^0x00000000fffc0000-0x00000000ffffffff\s+262144 pc\.bios readonly$"
    assert re.search(bios, out, re.MULTILINE), out


def test_layout_mtree_flat_view_fixture() -> None:
    rows = layout_json("--mtree", MTREE_FLAT)
    assert_memslot_shape(rows)
    assert [(r["name"], r["gpa"], r["size"], r["readonly"]) for r in rows] == [
        ("pc.ram", 0x0, 0xA0000, False),
        ("pc.ram", 0xC0000, 0xA000, True),
        ("pc.ram", 0xCA000, 0x3000, False),
        ("pc.ram", 0xCD000, 0x33000, True),
        ("pc.ram", 0x100000, 0x3FF00000, False),
        ("vga.vram", 0xFD000000, 0x1000000, False),
        ("0000:00:05.0 BAR 0 mmaps[0]", 0xFE000000, 0x1000, False),  # ramd
        ("unaligned.ram", 0xFE003000, 0x1000, False),  # trimmed to whole pages
        ("system.flash0", 0xFFC00000, 0x400000, True),  # romd
        ("pc.ram", 0x100000000, 0x40000000, False),
    ]


def test_layout_mtree_flat_view_other_address_space() -> None:
    rows = layout_json("--mtree", MTREE_FLAT, "--address-space", "cpu-smm-0")
    assert_memslot_shape(rows)
    assert (rows[0]["gpa"], rows[0]["size"]) == (0, 0xC0000)  # SMRAM open: RAM up to 768K


def test_layout_mtree_tree_fixture() -> None:
    rows = layout_json("--mtree", MTREE_TREE)
    assert_memslot_shape(rows)
    assert [(r["name"], r["gpa"], r["size"], r["readonly"]) for r in rows] == [
        ("ram-below-4g", 0x0, 0xA0000, False),
        ("pc.rom", 0xC0000, 0x20000, True),
        ("isa-bios", 0xE0000, 0x20000, True),
        ("ram-below-4g", 0x100000, 0x7FF00000, False),
        ("vga.vram", 0xFD000000, 0x1000000, False),
        ("pc.bios", 0xFFFC0000, 0x40000, True),
        ("ram-above-4g", 0x100000000, 0x40000000, False),
    ]


REALDATA_LAYOUTS = {
    PC_6G: [("ram-below-4g", 0x100000, 0xBFF00000), ("ram-above-4g", 0x100000000, 3 * GiB)],
    Q35: [("ram-below-4g", 0x100000, 0x7FF00000), ("ram-above-4g", 0x100000000, 14 * GiB)],
    TCG_FLAT: [("pc.ram", 0x100000, 0xBFF00000), ("pc.ram", 0x100000000, 3 * GiB)],
}


@pytest.mark.parametrize("name", REALDATA_LAYOUTS)
def test_layout_mtree_realdata(name: str) -> None:
    rows = layout_json("--mtree", realdata(name))
    assert_memslot_shape(rows)
    for ram_name, gpa, size in REALDATA_LAYOUTS[name]:
        ram = entry(rows, gpa)
        assert (ram["name"], ram["size"], ram["readonly"]) == (ram_name, size, False)
    bios = entry(rows, 0xFFFC0000)
    assert (bios["name"], bios["size"], bios["readonly"]) == ("pc.bios", 0x40000, True)
    assert entry(rows, 0)["size"] == 0xA0000  # the VGA window is MMIO
    for row in rows:  # the local APIC is never RAM
        assert not row["gpa"] <= 0xFEE00000 < row["gpa"] + row["size"]


def test_lookup_on_realdata_mtree() -> None:
    path = realdata(PC_6G)
    hit = ok("lookup", "--mtree", path, "--gpa", "0x150000000", "--lookup", "wbtree")
    assert re.search(r"hit slot \d+ \(ram-above-4g\)", hit), hit
    miss = ok("lookup", "--mtree", path, "--gpa", "0xfee00000", "--compare")
    assert "miss: no slot holds gfn 0xfee00" in miss
    assert set(re.findall(r"^\s+(\S+)\s+\d+ visited", miss, re.MULTILINE)) == set(STRATEGIES)


@pytest.mark.parametrize("strategy", ["wbtree", "rbtree"])
def test_export_realdata_mtree(strategy: str, tmp_path: Path) -> None:
    path = realdata(Q35)
    out = tmp_path / "q35.dot"
    ok("export", "--mtree", path, "-o", out, "--lookup", strategy, "--path", "0x150000")
    text = out.read_text()
    assert text.startswith("digraph")
    slots = set(re.findall(r"slot (\d+)\\n", text))
    assert len(slots) == len(layout_json("--mtree", path))
    assert "hit" in text


# -- layout --trace ---------------------------------------------------------------------


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
