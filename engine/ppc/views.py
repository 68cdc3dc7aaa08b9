"""The groups a fault's hash search read, as Graphviz dot (the POWER screen's `e`).

One node for the HDSI, one table node per HPTE group (the primary, then the secondary
group `hash ^ mask`), a cell per slot coloured by what it held when the fault happened
(a traced record keeps that; otherwise the table as it is now); the slots the search
examined carry their order (1-16) and the slot it found is outlined.  A fault the keys
forwarded without a search shows both groups with no marks.
"""

from __future__ import annotations

from ..export.dot import FONT, escape_html, format_attrs, graph_label, quote
from .faults import OUTCOME_WORDS, FaultRecord
from .hpt import HashPageTable
from .hpte import ABSENT, EMPTY, HPTES_PER_GROUP, MMIO, SWAPPED, VALID

KIND_FILL = {
    EMPTY: "#eeeeee",
    VALID: "#cde8ff",
    ABSENT: "#ffe0a3",
    MMIO: "#e3c6ff",
    SWAPPED: "#ffc2c2",
}
KIND_LETTER = {EMPTY: "·", VALID: "V", ABSENT: "A", MMIO: "M31", SWAPPED: "S30"}
PROBE_LINE = "#c86400"
FOUND_LINE = "#1b7a1b"


def fault_title(record: FaultRecord) -> str:
    access = "store" if record.store else "load"
    why = f"DSISR_KEYFAULT (key {record.hw_key})" if record.keyfault else "DSISR_NOHPTE"
    return (
        f"fault {record.seq}, era {record.era}: {access} at ea {record.ea:#x}, {why}; "
        f"{record.examined} HPTEs examined; {OUTCOME_WORDS[record.outcome]}"
    )


def searched_groups_dot(hpt: HashPageTable, record: FaultRecord) -> tuple[str, int]:
    """dot text for the fault's primary and secondary groups, and its node count."""
    primary, secondary = hpt.groups_of(record.vpn)
    probes = record.search.probes if record.search is not None else ()
    order = {slot: n for n, slot in enumerate(probes, 1)}
    title = graph_label([fault_title(record)])
    lines = [
        "digraph hpt_search {",
        f"  graph [rankdir=LR, fontname={quote(FONT)}, label={title}];",
        f"  node [shape=plaintext, fontname={quote(FONT)}, fontsize=10];",
        f"  edge [fontname={quote(FONT)}, fontsize=9];",  # labels as the nodes
        f"  fault {format_attrs({'shape': 'box', 'label': _fault_label(record)})};",
    ]
    for number, (name, group) in enumerate((("primary", primary), ("secondary", secondary))):
        kinds = record.groups[number] if record.groups else tuple(hpt.kinds_of(group))
        label = _group_label(hpt, name, group, kinds, order, record.slot)
        lines.append(f"  g{group} {format_attrs({'label': label})};")
    lines.append(f'  fault -> g{primary} [label="hash"];')
    lines.append(f'  g{primary} -> g{secondary} [label="hash ^ mask"];')
    lines.append("}")
    return "\n".join(lines) + "\n", 3


def _fault_label(record: FaultRecord) -> str:
    access = "store" if record.store else "load"
    search = {"": "no search", "mmio-cache": "MMIO cache hit"}.get(
        record.purpose, f"{record.purpose} search"
    )
    return f"HDSI #{record.seq}\n{access} ea {record.ea:#x}\nvpn {record.vpn:#x}\n{search}"


def _group_label(
    hpt: HashPageTable,
    name: str,
    group: int,
    kinds: tuple[str, ...],
    order: dict[int, int],
    found: int,
) -> str:
    cells = []
    for slot, kind in zip(hpt.group_slots(group), kinds, strict=True):
        text = KIND_LETTER[kind]
        attrs = f'BGCOLOR="{KIND_FILL[kind]}"'
        if slot in order:
            text = f"{order[slot]}: {text}"
            line = FOUND_LINE if slot == found else PROBE_LINE
            attrs += f' COLOR="{line}" BORDER="{3 if slot == found else 2}"'
        cells.append(f"<TD {attrs}>{escape_html(text)}</TD>")
    return (
        f'<<TABLE BORDER="0" CELLBORDER="1" CELLSPACING="0" CELLPADDING="4">'
        f'<TR><TD COLSPAN="{HPTES_PER_GROUP}">{name} group {group:#x}</TD></TR>'
        f"<TR>{''.join(cells)}</TR></TABLE>>"
    )
