"""One remote flush as a Graphviz graph: the sender, an edge to every target, and how each
target answered — an IPI acknowledged while running, an IPI acknowledged late at its
next VM entry (it was preempted or halted: the sender's stall of the PV-flush thread
(lkml, 2012)), a KVM_VCPU_FLUSH_TLB flag instead of an IPI (flush_on_enter), or still
owed."""

from __future__ import annotations

from ..export.dot import FONT, HIT_LINE, VISIT_FILL, VISIT_LINE, format_attrs, graph_label, quote
from .config import NS_PER_US
from .vcpu import Flush

HOW = {
    "ipi": ("IPI, acked running", HIT_LINE, "solid"),
    "late": ("IPI, acked at entry", "#cc0000", "bold"),
    "flag": ("flag: flush on entry", "#7a4fc2", "dashed"),
    "owed": ("IPI, not acked yet", "#999999", "dotted"),
}


def flush_to_dot(flush: Flush, vcpus_per_vm: int, now: int, protocol: str) -> str:
    """dot text for `flush` as it stands at `now` (ns)."""
    sender = flush.sender % vcpus_per_vm
    state = "in progress" if flush.in_progress else "returned"
    if flush.early:
        state = "returned before every ack (halt() woke early)"
    title = [
        f"vm{flush.vm}: flush {flush.fid} from vcpu{sender} ({protocol}), {state}",
        f"started at {flush.start / 1e6:.3f} ms, {(now - flush.start) / NS_PER_US:,.1f} µs ago",
    ]
    lines = [
        "digraph tlb_flush {",
        f"  graph [rankdir=LR, fontname={quote(FONT)}, label={graph_label(title)}];",
        f"  node [shape=box, style=rounded, fontname={quote(FONT)}];",
        f"  edge [fontname={quote(FONT)}, fontsize=9];",  # labels as the nodes
        f"  v{sender} {format_attrs(_sender_attrs(sender))};",
    ]
    for gid in flush.targets:
        target = gid % vcpus_per_vm
        how, at = _answer(flush, gid)
        text, colour, style = HOW[how]
        when = f"\n{(at - flush.start) / NS_PER_US:,.1f} µs" if at is not None else ""
        lines.append(f"  v{target} {format_attrs({'label': f'vcpu{target}'})};")
        edge = {"label": text + when, "color": colour, "fontcolor": colour, "style": style}
        lines.append(f"  v{sender} -> v{target} {format_attrs(edge)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _sender_attrs(sender: int) -> dict[str, str]:
    return {
        "label": f"vcpu{sender}\nsender",
        "style": "rounded,filled",
        "fillcolor": VISIT_FILL,
        "color": VISIT_LINE,
    }


def _answer(flush: Flush, gid: int) -> tuple[str, int | None]:
    if gid in flush.acks:
        at, how = flush.acks[gid]
        return how, at
    if gid in flush.mask or flush.superseded or flush.early:
        return "owed", None
    return "ipi", None  # acknowledged before the VM was traced
