"""Import QEMU's HMP ``info mtree`` / ``info mtree -f`` as the RAM memslots KVM would get.

QEMU prints a machine's memory map two ways (softmmu/memory.c):

* ``info mtree -f`` (``mtree_print_flatview``): each FlatView, the already rendered and
  simplified list of sections that memory listeners such as KVM's see;
* ``info mtree`` (``mtree_print_mr``): each address space's tree of MemoryRegions, which
  this module renders into a flat view itself, as ``render_memory_region`` and
  ``flatview_simplify`` do in ``generate_memory_topology``.

Either way the RAM-like sections (``ram``, ``rom``, ``ramd``, ``romd``, also ``nv-``) are
trimmed to whole pages, as ``kvm_align_section`` does before ``kvm_set_phys_mem`` turns
each section into one memslot.

Newer QEMU (``mtree_print_flatview`` since 5.1) prints the accelerator's name after each
flat range the accelerator holds: `` KVM`` when ``kvm_accel_has_memory`` finds a memslot
that starts at the range and has its size.  Where a flat view has those markers, its
memslots are exactly the marked ranges (`RULE_MARKED`); a range without one (a BAR
piece that does not start on a page) is no slot.  A flat view pasted from its ``Root
memory region: system`` line on, without the ``FlatView``/``AS`` header lines, is the
system address space (``memory``).
"""

from __future__ import annotations

import re
from bisect import bisect_left, insort
from dataclasses import dataclass, field
from typing import NamedTuple

from ..memslots.constants import PAGE_SIZE


@dataclass(frozen=True, slots=True)
class RamRegion:
    """One memslot-to-be: a page-aligned RAM-like section of the flat view."""

    name: str  # the alias name for an alias (``ram-below-4g``), else the region's name
    gpa: int
    size: int
    readonly: bool  # a ROM or ROMD region: KVM_MEM_READONLY (``kvm_mem_flags``)


class MtreeError(ValueError):
    """The text is not usable ``info mtree`` output; the message is one user-facing line."""


_RANGE_RE = re.compile(
    r"^(?P<indent> *)(?P<start>[0-9a-fA-F]{1,16})-(?P<end>[0-9a-fA-F]{1,16})"
    r" \(prio (?P<prio>-?\d{1,10}), (?P<kind>[^)]{1,16})\):(?P<rest>.*)$"
)
_ALIAS_RE = re.compile(
    r"^alias (?P<name>.*?) @(?P<target>.*) (?P<off>[0-9a-fA-F]{1,16})-[0-9a-fA-F]{1,16}$"
)
_FLAT_NAME_RE = re.compile(
    r"^(?P<name>.*?)(?: @[0-9a-fA-F]{1,16})?(?: (?i:kvm|hvf|whpx|nvmm|xen|tcg)){0,4}$"
)
_OWNER_RE = re.compile(r"\s+(?:owner|parent):\{.*$")
_AS_HEADER_RE = re.compile(r"^address-space(?P<flat> \(flat view\))?:\s*(?P<name>.*?)\s*$")
_REGION_HEADER_RE = re.compile(r"^memory-region:\s*(?P<name>.*?)\s*$")
_FLATVIEW_RE = re.compile(r"^FlatView #\d+\s*$")
_FLAT_AS_RE = re.compile(r'^\s+AS "(?P<name>.*)", root: ')
_ROOT_RE = re.compile(r"^\s*Root memory region: (?P<root>.*?)\s*$")
_KVM_MARK = " KVM"  # AccelClass name of accel/kvm (kvm_accel_class_init: ac->name)
_OLD_FLAGS_RE = re.compile(r"^[R-][W-]$")
_RAM_KINDS = frozenset({"ram", "rom", "ramd", "romd"})
_READONLY_KINDS = frozenset({"rom", "romd"})
_MAX_TREE_DEPTH = 64  # QEMU trees are ~10 deep; this also bounds recursion
_MAX_ALIAS_DEPTH = 32  # tree levels plus alias hops before an alias stops resolving
_MAX_RENDER_STEPS = 200_000
_SPACE_END = 1 << 64

# Block forms.
_TREE, _FLAT, _REGION, _IGNORED = "tree", "flat", "region", "ignored"

# The address space whose root a header-less flat view names: address_space_memory's
# root is "system" (memory_map_init), KVM's SMRAM space's "mem-container-smram"
# (target/i386/kvm/kvm.c register_smram_listener).
ROOT_ADDRESS_SPACES = {"system": "memory", "mem-container-smram": "KVM-SMRAM"}

RULE_MARKED = "the flat ranges QEMU marks KVM (its memslots)"
RULE_FLAT = "the RAM-like flat ranges, trimmed to whole pages (kvm_align_section)"
RULE_TREE = "the region tree rendered to a flat view, RAM-like ranges trimmed to whole pages"


def _ram_base(kind: str) -> str | None:
    """The region type without QEMU's ``nv-`` (non-volatile) prefix, if it is RAM-like."""
    base = kind[3:] if kind.startswith("nv-") else kind
    return base if base in _RAM_KINDS else None


# --- splitting the text into blocks -------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Line:
    """One printed range: ``START-END (prio P, TYPE): REST`` (END made exclusive)."""

    indent: int
    start: int
    end: int
    prio: int
    kind: str
    rest: str


@dataclass(slots=True)
class _Block:
    """An ``address-space:``, ``FlatView``, ``memory-region:`` or ignored section."""

    form: str
    names: list[str]
    shares: str = ""  # header style whose body-less headers share the next body
    headerless: bool = False  # a flat view pasted from its "Root memory region:" line
    lines: list[_Line] = field(default_factory=list)


def _parse_range(line: str) -> _Line | None:
    m = _RANGE_RE.match(line)
    if m is None:
        return None
    start, end = int(m["start"], 16), int(m["end"], 16) + 1
    return _Line(len(m["indent"]), start, end, int(m["prio"]), m["kind"].strip(), m["rest"].strip())


class _Splitter:
    """Cuts ``info mtree`` text into blocks, as ``mtree_info`` prints them.

    Several ``address-space:`` headers with no body share the next body (QEMU prints the
    address spaces of one root together).  QEMU 1.x/2.0 printed the bare name instead of
    ``address-space: NAME``, and after a bare ``aliases`` line the alias targets.
    """

    def __init__(self) -> None:
        self.blocks: list[_Block] = []
        self.after_aliases = False

    def feed(self, raw: str) -> None:
        line = raw.rstrip().expandtabs()
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "(qemu)")):
            return
        root = _ROOT_RE.match(line)
        if root is not None:
            self._root(root["root"])
            return
        rng = _parse_range(line)
        if rng is not None:
            if self.blocks:
                self.blocks[-1].lines.append(rng)
        elif line[0] == " ":
            self._indented(line)
        else:
            self._header(stripped)

    def _indented(self, line: str) -> None:
        m = _FLAT_AS_RE.match(line)
        if m is not None and self.blocks and self.blocks[-1].form == _FLAT:
            self.blocks[-1].names.append(m["name"])

    def _root(self, root: str) -> None:
        """``Root memory region: NAME``: inside a FlatView block under its headers, else
        the start of a flat view pasted without them (named by its root)."""
        last = self.blocks[-1] if self.blocks else None
        if last is not None and last.form == _FLAT and last.names and not last.lines:
            return
        name = ROOT_ADDRESS_SPACES.get(root, root)
        self.blocks.append(_Block(_FLAT, [name], headerless=True))

    def _header(self, text: str) -> None:
        m = _AS_HEADER_RE.match(text)
        if m is not None:
            if m["flat"]:
                self.blocks.append(_Block(_FLAT, [m["name"]]))
            else:
                self._address_space(m["name"], "address-space")
            return
        m = _REGION_HEADER_RE.match(text)
        if m is not None:
            self.blocks.append(_Block(_REGION, [m["name"]]))
        elif _FLATVIEW_RE.match(text):
            self.blocks.append(_Block(_FLAT, []))
        elif text == "aliases":
            self.after_aliases = True
            self.blocks.append(_Block(_IGNORED, []))
        elif text.endswith(":") or (not self.after_aliases and re.search(r"\s", text)):
            self.blocks.append(_Block(_IGNORED, []))  # "Memory:", monitor banners, ...
        elif self.after_aliases:
            self.blocks.append(_Block(_REGION, [text]))
        else:
            self._address_space(text, "bare")

    def _address_space(self, name: str, style: str) -> None:
        last = self.blocks[-1] if self.blocks else None
        if last is not None and last.shares == style and not last.lines:
            last.names.append(name)
        else:
            self.blocks.append(_Block(_TREE, [name], shares=style))


def _split_blocks(text: str) -> list[_Block]:
    splitter = _Splitter()
    for raw in text.splitlines():
        splitter.feed(raw)
    return splitter.blocks


# --- the region tree ----------------------------------------------------------------


@dataclass(slots=True)
class _Node:
    """One MemoryRegion line of ``mtree_print_mr``; addresses absolute, end exclusive."""

    uid: int
    start: int
    end: int
    prio: int
    kind: str
    name: str
    alias_target: str | None
    alias_offset: int
    disabled: bool
    children: list[_Node] = field(default_factory=list)


def _make_node(uid: int, line: _Line) -> _Node:
    """Split ``NAME`` or ``alias NAME @TARGET OFF-END``, ``[disabled]`` and ``owner:{..}``."""
    rest = _OWNER_RE.sub("", line.rest).strip()
    disabled = "[disabled]" in rest
    rest = rest.replace("[disabled]", "").strip()
    node = _Node(uid, line.start, line.end, line.prio, line.kind, rest, None, 0, disabled)
    alias = _ALIAS_RE.match(rest)
    if alias is not None:
        node.name, node.alias_target = alias["name"], alias["target"]
        node.alias_offset = int(alias["off"], 16)
    return node


def _build_forest(lines: list[_Line], first_uid: int) -> list[_Node]:
    """Rebuild the nesting from the indentation (``MTREE_INDENT`` per level)."""
    roots: list[_Node] = []
    stack: list[tuple[int, _Node]] = []
    for uid, line in enumerate(lines, start=first_uid):
        node = _make_node(uid, line)
        while stack and stack[-1][0] >= line.indent:
            stack.pop()
        (stack[-1][1].children if stack else roots).append(node)
        stack.append((line.indent, node))
        if len(stack) > _MAX_TREE_DEPTH:
            raise MtreeError(f"region tree nested deeper than {_MAX_TREE_DEPTH} levels")
    return roots


def _alias_targets(blocks: list[_Block]) -> dict[str, _Node]:
    """The ``memory-region:`` blocks QEMU prints for alias targets, by unique name."""
    found: dict[str, list[_Node]] = {}
    uid = 1_000_000
    for block in blocks:
        if block.form != _REGION or not block.lines:
            continue
        roots = _build_forest(block.lines, uid)
        uid += len(block.lines)
        found.setdefault(block.names[0], []).extend(roots[:1])
    return {name: nodes[0] for name, nodes in found.items() if len(nodes) == 1}


# --- rendering ------------------------------------------------------------------------


class _Piece(NamedTuple):
    """A FlatRange: ``[start, end)`` of region ``mr`` at ``offset`` into it."""

    start: int
    end: int
    kind: str
    name: str
    mr: str
    offset: int


def _by_priority(node: _Node) -> int:
    return -node.prio


class _Renderer:
    """``render_memory_region``: fill a flat view, highest-priority sibling first.

    A region only takes the parts of its range that no earlier (higher-priority) region
    took.  A container renders its children; only a RAM-like container also fills the
    rest with itself (a pure container does not terminate).  A leaf ``i/o`` region
    claims its range, hiding RAM beneath it.  An alias whose target is printed in a
    ``memory-region:`` block with children is rendered through that target, as QEMU
    does; otherwise it claims its range with the (target's) type it was printed with.
    """

    def __init__(self, targets: dict[str, _Node]) -> None:
        self.pieces: list[_Piece] = []
        self.targets = targets
        self.steps = 0

    def render(self, node: _Node, shift: int, lo: int, hi: int, depth: int) -> None:
        self.steps += 1
        if self.steps > _MAX_RENDER_STEPS:
            raise MtreeError("region tree too large to render (alias loop?)")
        lo, hi = max(lo, node.start + shift), min(hi, node.end + shift)
        if node.disabled or lo >= hi:
            return
        if node.alias_target is not None:
            self._render_alias(node, shift, lo, hi, depth)
            return
        if node.children:
            for child in sorted(node.children, key=_by_priority):
                self.render(child, shift, lo, hi, depth + 1)
            if _ram_base(node.kind) is None:
                return
        self._fill(lo, hi, node, f"#{node.uid}", lo - (node.start + shift))

    def _render_alias(self, node: _Node, shift: int, lo: int, hi: int, depth: int) -> None:
        assert node.alias_target is not None
        base = node.start + shift
        target = self.targets.get(node.alias_target)
        if target is not None and target.children and depth < _MAX_ALIAS_DEPTH:
            self.render(target, base - node.alias_offset - target.start, lo, hi, depth + 1)
            return
        self._fill(lo, hi, node, "@" + node.alias_target, node.alias_offset + lo - base)

    def _fill(self, lo: int, hi: int, node: _Node, mr: str, offset: int) -> None:
        for start, end in self._gaps(lo, hi):
            piece = _Piece(start, end, node.kind, node.name, mr, offset + start - lo)
            insort(self.pieces, piece, key=_piece_start)

    def _gaps(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The parts of ``[lo, hi)`` no piece covers yet."""
        i = bisect_left(self.pieces, lo, key=_piece_start)
        cursor = lo
        if i > 0:
            cursor = max(cursor, self.pieces[i - 1].end)
        gaps: list[tuple[int, int]] = []
        while cursor < hi and i < len(self.pieces) and self.pieces[i].start < hi:
            if self.pieces[i].start > cursor:
                gaps.append((cursor, self.pieces[i].start))
            cursor = max(cursor, self.pieces[i].end)
            i += 1
        if cursor < hi:
            gaps.append((cursor, hi))
        return gaps


def _piece_start(piece: _Piece) -> int:
    return piece.start


def _simplify(pieces: list[_Piece]) -> list[_Piece]:
    """``flatview_simplify``: merge neighbours that continue the same region.

    QEMU merges FlatRanges of one MemoryRegion at contiguous offsets with equal flags.
    The tree does not print an alias's own flags (``pam-rom`` is read-only, ``pam-ram``
    is not, both alias ``pc.ram``), so only pieces of the same alias name merge.  Either
    way the memslot is writable: ``kvm_mem_flags()`` reads pc.ram's own flags only.
    """
    merged: list[_Piece] = []
    for piece in pieces:
        prev = merged[-1] if merged else None
        if (
            prev is not None
            and prev.end == piece.start
            and (prev.mr, prev.name, prev.kind) == (piece.mr, piece.name, piece.kind)
            and prev.offset + (prev.end - prev.start) == piece.offset
        ):
            merged[-1] = prev._replace(end=piece.end)
        else:
            merged.append(piece)
    return merged


def _render_tree(block: _Block, targets: dict[str, _Node]) -> list[_Piece]:
    """``generate_memory_topology`` for one address space's printed tree."""
    renderer = _Renderer(targets)
    for root in sorted(_build_forest(block.lines, 0), key=_by_priority):
        renderer.render(root, 0, 0, _SPACE_END, 0)
    return _simplify(renderer.pieces)


def _flat_pieces(block: _Block) -> tuple[list[_Piece], bool]:
    """The sections of a printed FlatView, one per line (QEMU already merged them), and
    whether QEMU marked memslots: then only the marked sections."""
    pieces: list[_Piece] = []
    marked: list[_Piece] = []
    for line in block.lines:
        rest = _OWNER_RE.sub("", line.rest).strip()
        m = _FLAT_NAME_RE.match(rest)
        name = m["name"] if m is not None else rest
        piece = _Piece(line.start, line.end, line.kind, name, name, 0)
        pieces.append(piece)
        if rest.endswith(_KVM_MARK):
            marked.append(piece)
    ram_mrs = {piece.mr for piece in pieces if piece.kind == "ram"}
    return sorted(_kvm_flags(p, ram_mrs) for p in marked or pieces), bool(marked)


def _kvm_flags(piece: _Piece, ram_mrs: set[str]) -> _Piece:
    """The kind KVM sees: a flat range prints ``rom`` when it or an alias on its way is
    read-only (``fr->readonly``), but ``kvm_mem_flags()`` (QEMU's accel/kvm/kvm-all.c)
    reads only the MemoryRegion's own ``readonly`` and ROMD mode.  A range of a RAM
    region printed ``rom`` is such an alias (PAM's ``pam-rom``, hw/pci-host/pam.c): the
    memslot is writable (a recorded run registers 0xc0000-0xcafff with flags 0)."""
    if piece.kind == "rom" and piece.mr in ram_mrs:
        return piece._replace(kind="ram")
    return piece


# --- public API -------------------------------------------------------------------------


def _page_trim(piece: _Piece) -> RamRegion | None:
    """``kvm_align_section``: round the start up and the end down to whole pages."""
    base = _ram_base(piece.kind)
    start = -(-piece.start // PAGE_SIZE) * PAGE_SIZE
    end = piece.end // PAGE_SIZE * PAGE_SIZE
    if base is None or end <= start:
        return None
    return RamRegion(piece.name, start, end - start, base in _READONLY_KINDS)


def _address_space_names(blocks: list[_Block]) -> list[str]:
    names: list[str] = []
    for block in blocks:
        if block.form == _FLAT or (block.form == _TREE and block.lines):
            names.extend(n for n in block.names if n not in names)
    return names


def _select_block(blocks: list[_Block], address_space: str, source: str) -> _Block:
    """The first block of ``address_space`` that has ranges."""
    candidates = [b for b in blocks if b.form in (_TREE, _FLAT) and address_space in b.names]
    known = _address_space_names(blocks)
    if not known:
        raise MtreeError(f"{source} is not QEMU 'info mtree' output (no address spaces found)")
    if not candidates:
        listed = ", ".join(repr(n) for n in known[:8]) + (", ..." if len(known) > 8 else "")
        raise MtreeError(f"no address space {address_space!r} in {source} (found {listed})")
    for block in candidates:
        if block.lines:
            return block
    raise MtreeError(f"address space {address_space!r} in {source} has no rendered ranges")


def list_address_spaces(text: str) -> list[str]:
    """The address space names in ``text``, in order, for ``parse_mtree(address_space=)``."""
    names = _address_space_names(_split_blocks(text))
    if not names:
        raise MtreeError("not QEMU 'info mtree' output (no address spaces found)")
    return names


@dataclass(frozen=True, slots=True)
class MtreeSlots:
    """The memslots of one address space, and how they were read from the text."""

    address_space: str
    regions: list[RamRegion]
    rule: str  # RULE_MARKED, RULE_FLAT or RULE_TREE
    headerless: bool = False  # a flat view without its FlatView/AS lines

    def describe(self) -> str:
        """One line for `layout`: which rule gave these slots."""
        pasted = " (pasted without its FlatView/AS header: the system address space)"
        return f"{self.address_space}: {self.rule}{pasted if self.headerless else ''}"


def read_mtree(
    text: str, address_space: str = "memory", *, source: str = "the input"
) -> MtreeSlots:
    """The RAM memslots QEMU/KVM would register for ``address_space``, sorted by gpa,
    with the rule that gave them.

    ``text`` is ``info mtree`` (tree) or ``info mtree -f`` (flat) output; ``source``
    names it in error messages.  Raises `MtreeError` with a one-line message.
    """
    blocks = _split_blocks(text)
    block = _select_block(blocks, address_space, source)
    if all(_OLD_FLAGS_RE.match(line.kind) for line in block.lines):  # QEMU 1.x: "(prio 0, RW)"
        raise MtreeError(f"{source} prints access flags, not region types: RAM looks like I/O")
    if block.form == _FLAT:
        pieces, marked = _flat_pieces(block)
        rule = RULE_MARKED if marked else RULE_FLAT
    else:
        pieces, rule = _render_tree(block, _alias_targets(blocks)), RULE_TREE
    regions = sorted((r for r in map(_page_trim, pieces) if r is not None), key=_region_gpa)
    return MtreeSlots(address_space, regions, rule, block.headerless)


def _region_gpa(region: RamRegion) -> int:
    return region.gpa


def parse_mtree(
    text: str, address_space: str = "memory", *, source: str = "the input"
) -> list[RamRegion]:
    """`read_mtree`'s slots alone (``layout --mtree --json``, docs/architecture.md
    §6.3)."""
    return read_mtree(text, address_space, source=source).regions
