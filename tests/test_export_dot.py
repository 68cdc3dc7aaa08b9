"""Dot export: the RFC's `print_tree` idea (the memslot-search thread) for every lookup
structure, and files."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from mmuscope.engine.export import render
from mmuscope.engine.export.dot import HIT_FILL, VISIT_FILL, shape_to_dot
from mmuscope.engine.export.render import ExportError, write_export
from mmuscope.engine.lookup.base import (
    EMPTY,
    GO_LEFT,
    GO_RIGHT,
    HIT,
    NEXT,
    CacheProbe,
    LookupTrace,
    Probe,
)
from mmuscope.engine.lookup.views import ArrayView, TreeNodeView, TreeView
from mmuscope.engine.memslots.memslot import MemorySlot

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz dot not installed")


# --- hand-built views -------------------------------------------------------------------


def slot(sid: int, base: int, npages: int, as_id: int = 0) -> MemorySlot:
    return MemorySlot(id=sid, as_id=as_id, base_gfn=base, npages=npages)


S0, S1, S3, S5, S7 = (
    slot(0, 0x0, 0x10),
    slot(1, 0x100, 0x100),
    slot(3, 0x1000, 0x100),
    slot(5, 0x4000, 0x1000),
    slot(7, 0x10000, 0x100),
)


def tree(strategy: str = "wbtree", colors: tuple[str | None, ...] = (None,) * 5) -> TreeView:
    """Three levels: 3 at the root, 1 (left child 0) and 5 (right child 7) below it."""
    spec = [  # slot, weight, left, right, depth
        (S3, 5, 1, 2, 0),
        (S1, 2, 3, None, 1),
        (S5, 2, None, 4, 1),
        (S0, 1, None, None, 2),
        (S7, 1, None, None, 2),
    ]
    nodes = tuple(
        TreeNodeView(slot=s, weight=w, color=c, left=lt, right=rt, depth=d)
        for (s, w, lt, rt, d), c in zip(spec, colors, strict=True)
    )
    return TreeView(strategy=strategy, nodes=nodes)


def tree_trace(gfn: int, probes: list[tuple[MemorySlot, int, str]]) -> LookupTrace:
    found = [s for s, _, outcome in probes if outcome == HIT]
    return LookupTrace(
        gfn=gfn,
        as_id=0,
        strategy="wbtree",
        cache_probes=(),
        probes=tuple(Probe(slot=s, position=d, comparisons=2, outcome=o) for s, d, o in probes),
        slot=found[0] if found else None,
    )


HIT_7 = tree_trace(0x10010, [(S3, 0, GO_RIGHT), (S5, 1, GO_RIGHT), (S7, 2, HIT)])
MISS = tree_trace(0x20, [(S3, 0, GO_LEFT), (S1, 1, GO_LEFT), (S0, 2, GO_RIGHT)])


def chain(n: int) -> TreeView:
    """A degenerate wbtree: every node the right child of the one before (depth n - 1)."""
    nodes = tuple(
        TreeNodeView(
            slot=slot(i, i * 0x100, 0x100),
            weight=n - i,
            color=None,
            left=None,
            right=i + 1 if i + 1 < n else None,
            depth=i,
        )
        for i in range(n)
    )
    return TreeView(strategy="wbtree", nodes=nodes)


HOLEY = ArrayView(
    strategy="array-2011",
    entries=(S0, None, S3, None, S7),
    order="by slot id",
)
HOLEY_TRACE = LookupTrace(
    gfn=0x1010,
    as_id=0,
    strategy="array-2011",
    cache_probes=(CacheProbe(cache="vcpu", slot=S0, hit=False),),
    probes=(
        Probe(slot=S0, position=0, comparisons=1, outcome=NEXT),
        Probe(slot=None, position=1, comparisons=0, outcome=EMPTY),
        Probe(slot=S3, position=2, comparisons=2, outcome=HIT),
    ),
    slot=S3,
)


def big_array(n: int = 300) -> ArrayView:
    entries = tuple(None if i % 7 == 3 else slot(i, i * 0x1000, 0x1000) for i in range(n))
    return ArrayView(strategy="sorted-bsearch", entries=entries, order="base_gfn descending")


def svg_of(dot_text: str) -> str:
    """Run the real `dot -Tsvg`; fails the test on any syntax error."""
    done = subprocess.run(
        ["dot", "-Tsvg"], input=dot_text, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def svg_texts(svg: str) -> list[str]:
    """The text of every `<text>` element, XML entities decoded."""
    return [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", svg)]


# --- trees ------------------------------------------------------------------------------


def test_tree_nodes_edges_and_invisible_siblings() -> None:
    text = shape_to_dot(tree(), title="pc-4g · wbtree · as 0")
    assert text.startswith("digraph memslots {\n") and text.endswith("}\n")
    for sid in (0, 1, 3, 5, 7):
        assert f"  s0_{sid} [" in text
    assert 's0_3 -> s0_1 [label="L"];' in text
    assert 's0_3 -> s0_5 [label="R"];' in text
    # 1 has only a left child, 5 only a right one: the gaps are invisible points.
    assert "s0_1_nilR [shape=point, style=invis];" in text
    assert "s0_1 -> s0_1_nilR [style=invis];" in text
    assert "s0_5_nilL [shape=point, style=invis];" in text
    assert "s0_0_nil" not in text and "s0_7_nil" not in text
    assert r"slot 5\n0x4000-0x4fff\n4096 pages\nweight 2" in text
    assert r'label="pc-4g · wbtree · as 0\l"' in text
    assert "labelloc" in text and "labeljust" in text


@needs_dot
def test_tree_renders_with_labels_and_edges() -> None:
    texts = svg_texts(svg_of(shape_to_dot(tree(), title="pc-4g · wbtree · as 0")))
    for sid in (0, 1, 3, 5, 7):
        assert f"slot {sid}" in texts
    assert "0x10000-0x100ff" in texts and "weight 5" in texts
    assert texts.count("L") == 2 and texts.count("R") == 2
    assert "pc-4g · wbtree · as 0" in texts


def test_tree_path_highlight() -> None:
    text = shape_to_dot(tree(), trace=HIT_7)
    assert r"lookup gfn 0x10010: 3 nodes visited, hit slot 7\l" in text
    assert r"#1 · slot 3\n" in text and r"#2 · slot 5\n" in text and r"#3 · slot 7\n" in text
    assert text.count(f'fillcolor="{VISIT_FILL}"') == 2
    assert text.count(f'fillcolor="{HIT_FILL}"') == 1
    taken = [line for line in text.splitlines() if "->" in line and "penwidth" in line]
    assert [line.split("[")[0].strip() for line in taken] == ["s0_3 -> s0_5", "s0_5 -> s0_7"]
    assert "#" not in text.split("s0_1 [", 1)[1].split("\n", 1)[0]


def test_tree_miss() -> None:
    text = shape_to_dot(tree(), trace=MISS)
    assert r"lookup gfn 0x20: 3 nodes visited, miss\l" in text
    assert f'fillcolor="{HIT_FILL}"' not in text
    assert text.count(f'fillcolor="{VISIT_FILL}"') == 3


@needs_dot
def test_tree_path_renders_visit_numbers() -> None:
    texts = svg_texts(svg_of(shape_to_dot(tree(), trace=HIT_7)))
    assert "#1 · slot 3" in texts and "#2 · slot 5" in texts and "#3 · slot 7" in texts
    assert "lookup gfn 0x10010: 3 nodes visited, hit slot 7" in texts


def test_rbtree_colours_are_borders() -> None:
    colors = ("black", "red", "red", "black", "black")
    text = shape_to_dot(tree("rbtree", colors), trace=HIT_7)
    root = next(line for line in text.splitlines() if line.startswith("  s0_3 ["))
    assert r"\nblack" in root and 'color="#000000"' in root and HIT_FILL not in root
    red = next(line for line in text.splitlines() if line.startswith("  s0_1 ["))
    assert r"\nred" in red and 'color="#cc0000"' in red
    assert "weight" not in text  # the weight belongs to the wbtree only


@needs_dot
def test_rbtree_renders() -> None:
    colors = ("black", "red", "red", "black", "black")
    texts = svg_texts(svg_of(shape_to_dot(tree("rbtree", colors), title="rbtree")))
    assert texts.count("red") == 2 and texts.count("black") == 3


def test_deep_chain_needs_no_recursion() -> None:
    view = chain(2000)
    text = shape_to_dot(view, title="degenerate wbtree")
    assert text.count("_nilL [shape=point") == 1999
    assert 's0_1998 -> s0_1999 [label="R"];' in text
    assert shape_to_dot(view, title="degenerate wbtree") == text


def test_empty_tree_and_array() -> None:
    assert "(no slots)" in shape_to_dot(TreeView(strategy="rbtree", nodes=()))
    assert "(no entries)" in shape_to_dot(ArrayView(strategy="a", entries=(), order="x"))


# --- arrays -----------------------------------------------------------------------------


def test_array_cells_holes_and_order() -> None:
    text = shape_to_dot(HOLEY, title="pc-4g · array-2011 · as 0")
    assert r'label="pc-4g · array-2011 · as 0\lorder: by slot id\l"' in text
    assert "a0 [label=<<TABLE" in text and "a1 [" not in text
    assert text.count("<TD ") == 5
    assert '<TD PORT="e1" BGCOLOR="#eeeeee"><FONT COLOR="#999999">[1]<BR/>-</FONT></TD>' in text
    assert "[4]<BR/>slot 7<BR/>0x10000-0x100ff<BR/>256 pg" in text


def test_array_path_highlight() -> None:
    text = shape_to_dot(HOLEY, trace=HOLEY_TRACE)
    assert r"lookup gfn 0x1010: 3 entries visited, hit slot 3\l" in text
    assert text.count(f'BGCOLOR="{VISIT_FILL}"') == 2
    assert text.count(f'BGCOLOR="{HIT_FILL}"') == 1
    assert "#3<BR/>[2]<BR/>slot 3" in text


@needs_dot
def test_array_renders() -> None:
    texts = svg_texts(svg_of(shape_to_dot(HOLEY, trace=HOLEY_TRACE)))
    assert {"#1", "#2", "#3", "slot 0", "slot 3", "slot 7", "-"} <= set(texts)
    assert "order: by slot id" in texts


def test_large_array_is_split_into_rows() -> None:
    text = shape_to_dot(big_array(300))
    rows = [line for line in text.splitlines() if "[label=<<TABLE" in line]
    assert len(rows) == 5
    assert [row.count("<TD ") for row in rows] == [64, 64, 64, 64, 44]
    assert "a3 -> a4 [style=invis];" in text and "a5 [" not in text and "-> a5" not in text
    one_row = shape_to_dot(big_array(256))
    assert one_row.count("[label=<<TABLE") == 1


@needs_dot
def test_large_array_renders() -> None:
    texts = svg_texts(svg_of(shape_to_dot(big_array(300))))
    assert "[0]" in texts and "[299]" in texts and "slot 298" in texts


# --- determinism and escaping ------------------------------------------------------------


def test_output_is_deterministic() -> None:
    assert shape_to_dot(tree(), trace=HIT_7, title="t") == shape_to_dot(
        tree(), trace=HIT_7, title="t"
    )
    assert shape_to_dot(big_array(), title="t") == shape_to_dot(big_array(), title="t")


TRICKY = 'pc "4g" {a|b} <c> \\N back\\slash'


def test_title_is_escaped() -> None:
    text = shape_to_dot(tree(), title=TRICKY)
    assert r'label="pc \"4g\" {a|b} <c> \\N back\\slash\l"' in text


@needs_dot
@pytest.mark.parametrize("view", [tree(), HOLEY], ids=["tree", "array"])
def test_tricky_title_renders_verbatim(view: TreeView | ArrayView) -> None:
    texts = svg_texts(svg_of(shape_to_dot(view, title=TRICKY)))
    assert TRICKY in texts


# --- writing files ----------------------------------------------------------------------

MAGIC = {"dot": b"digraph memslots", "svg": b"<?xml", "pdf": b"%PDF", "png": b"\x89PNG"}


@pytest.mark.parametrize("fmt", ["dot", "svg", "pdf", "png"])
def test_write_export_creates_only_the_file(tmp_path: Path, fmt: str) -> None:
    if fmt != "dot" and shutil.which("dot") is None:
        pytest.skip("Graphviz dot not installed")
    out = tmp_path / f"tree.{fmt}"
    write_export(shape_to_dot(tree(), trace=HIT_7), out)
    assert out.read_bytes().startswith(MAGIC[fmt])
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


@needs_dot
def test_suffix_is_case_insensitive(tmp_path: Path) -> None:
    out = tmp_path / "TREE.SVG"
    write_export(shape_to_dot(tree()), out)
    assert out.read_bytes().startswith(b"<?xml")


def test_unsupported_suffix(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"unsupported output format '\.xyz': use \.dot"):
        write_export(shape_to_dot(tree()), tmp_path / "tree.xyz")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt", ["pdf", "svg", "png"])
def test_missing_dot_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str) -> None:
    monkeypatch.setattr(render.shutil, "which", lambda name: None)
    assert render.dot_binary() is None
    with pytest.raises(ExportError, match="sudo apt-get install graphviz"):
        write_export(shape_to_dot(tree()), tmp_path / f"tree.{fmt}")
    assert list(tmp_path.iterdir()) == []


def test_dot_export_needs_no_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "dot_binary", lambda: None)
    write_export(shape_to_dot(tree()), tmp_path / "tree.dot")
    assert (tmp_path / "tree.dot").is_file()


@needs_dot
def test_dot_failure_reports_first_stderr_line(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"^dot -Tsvg failed: .*syntax error") as info:
        write_export("digraph { a -> ; }", tmp_path / "bad.svg")
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_missing_parent_directory(tmp_path: Path) -> None:
    out = tmp_path / "nope" / "tree.dot"
    with pytest.raises(ExportError, match=r"cannot write .*tree\.dot"):
        write_export(shape_to_dot(tree()), out)
    assert list(tmp_path.iterdir()) == []


def test_failed_replace_leaves_no_temp_file(tmp_path: Path) -> None:
    (tmp_path / "tree.dot").mkdir()  # os.replace cannot put a file over a directory
    with pytest.raises(ExportError, match="cannot write"):
        write_export(shape_to_dot(tree()), tmp_path / "tree.dot")
    assert [p.name for p in tmp_path.iterdir()] == ["tree.dot"]
    assert list((tmp_path / "tree.dot").iterdir()) == []
