"""The kernel's events against the model's, one by one (docs/architecture.md §3.1).

Both sequences are cut to the events both sides can emit (`COMPARED`: every kvmmmu
tracepoint, and the emulator's `kvm_emulate_insn`, `vcpu_match_mmio` and `kvm_mmio`;
the kernel's `kvm_fpu`, `kvm_userspace_exit`, … and the model's own events are left
out), split per vCPU (the kernel's by thread, the model's by vCPU id, paired in order of
first appearance), and compared in order, pair after pair.  Two events are equal when
their names are and every field that does not depend on host addresses is: gfns,
levels, roles and quadrants, accesses, guest ptes and the gpas of their A/D updates,
error codes, spte bits other than the pfn, generations, instruction bytes.  Host
addresses are compared as a consistent renaming: a host pfn (`kvm_mmu_spte_requested`'s
`pfn`, the pfn bits of a spte) stands for one model pfn throughout, and the page of a
`sptep` (the shadow page's own host page) for one model page while that shadow page
lives (the kernel's page allocator hands a zapped one's page to the next), its offset
compared as is; a hashed `%p` is one opaque name.

The comparison streams: each side is fed as it comes (`add_kernel`, `add_model`),
only the events not yet paired and a few of context are kept.  The first difference is
kept with `CONTEXT` events before and after it on each side; counts per event kind go
on to the end (kernel, model, and how many were paired equal).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..events import Event, FieldValue
from ..mmu.spte import SPTE_BASE_ADDR_MASK
from ..trace.lines import printk_text
from ..trace.tracepoints import TRACEPOINTS, TracepointError

CONTEXT = 3
EMULATOR_EVENTS = ("kvm_emulate_insn", "vcpu_match_mmio", "kvm_mmio")
COMPARED = frozenset(
    [name for name, tp in TRACEPOINTS.items() if tp.system == "kvmmmu"] + list(EMULATOR_EVENTS)
)
# Fields derived from others in the printk (the spte's letters).
DERIVED = frozenset({"access_str"})
# Fields holding a spte: its pfn bits are a host pfn, the rest is compared.
SPTE_FIELDS = frozenset({"spte", "old_spte", "new_spte"})
# Host pfns, and pointers to sptes: renamed.
PFN_FIELDS = frozenset({"pfn"})
SPTEP_FIELDS = frozenset({"sptep"})
HASHED_SPTEP = frozenset({"mark_mmio_spte", "fast_page_fault"})  # %p: hashed in the text
HOST_FIELDS = SPTE_FIELDS | PFN_FIELDS | SPTEP_FIELDS


class Renaming:
    """A one-to-one map of kernel names to model names, built as they come."""

    def __init__(self) -> None:
        self.forward: dict[int, int] = {}
        self.backward: dict[int, int] = {}

    def agrees(self, kernel: int, model: int) -> bool:
        known = self.forward.get(kernel)
        if known is not None:
            return known == model
        if model in self.backward:
            return False
        self.forward[kernel] = model
        self.backward[model] = kernel
        return True

    def release(self, model: int) -> None:
        """The model's name is free again, and its kernel partner (a page freed)."""
        kernel = self.backward.pop(model, None)
        if kernel is not None:
            del self.forward[kernel]


@dataclass(frozen=True, slots=True)
class Shape:
    """An event as compared: its name, the fields compared as they are, and the host
    values compared by renaming ((namespace, value) pairs)."""

    name: str
    fields: tuple[tuple[str, FieldValue], ...]
    host: tuple[tuple[str, str, int], ...]  # (field, namespace, value)


def shape(event: Event) -> Shape:
    fields: list[tuple[str, FieldValue]] = []
    host: list[tuple[str, str, int]] = []
    for key, value in event.fields.items():
        if key in DERIVED:
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            if key in SPTE_FIELDS:
                fields.append((key, value & ~SPTE_BASE_ADDR_MASK))
                if value & SPTE_BASE_ADDR_MASK:
                    host.append((key, "pfn", (value & SPTE_BASE_ADDR_MASK) >> 12))
                continue
            if key in PFN_FIELDS:
                host.append((key, "pfn", value))
                continue
            if key in SPTEP_FIELDS:
                if event.name in HASHED_SPTEP:
                    host.append((key, "pointer", value))
                else:
                    fields.append((key + " offset", value & 0xFFF))
                    host.append((key, "page", value >> 12))
                continue
        fields.append((key, value))
    fields.sort()
    return Shape(event.name, tuple(fields), tuple(host))


def event_text(event: Event) -> str:
    """`name: printk text` as the kernel prints it."""
    try:
        return f"{event.name}: {printk_text(event)}"
    except TracepointError:
        return f"{event.name}: {event.format_fields()}"


def event_json(event: Event | None) -> dict[str, Any] | None:
    if event is None:
        return None
    return {"event": event.name, "fields": dict(event.fields), "text": event_text(event)}


@dataclass
class Difference:
    """The first pair that differs (a side is None when its sequence had ended)."""

    position: int  # events compared equal before it
    kernel: Event | None
    model: Event | None
    why: str
    kernel_before: list[Event]
    model_before: list[Event]
    kernel_after: list[Event] = field(default_factory=list)
    model_after: list[Event] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """What the pair looks like with the events after it: `missing` (the model lacks
        the kernel's event: the kernel's next one is the model's), `extra` (the model has
        one more), `reordered` (the two swapped), `ended` (one side had no more events),
        else `different` (the same place, different contents)."""
        if self.kernel is None or self.model is None:
            return "ended"
        k, m = _plain(self.kernel), _plain(self.model)
        k_next = _plain(self.kernel_after[0]) if self.kernel_after else None
        m_next = _plain(self.model_after[0]) if self.model_after else None
        if k == m_next and m == k_next:
            return "reordered"
        if m == k_next:
            return "missing"
        if k == m_next:
            return "extra"
        return "different"

    def summary(self) -> str:
        """The kind in words, then why."""
        said = {
            "missing": f"the model lacks the kernel's {_name(self.kernel)}",
            "extra": f"the model has an extra {_name(self.model)}",
            "reordered": f"{_name(self.kernel)} and {_name(self.model)} in the other order",
            "ended": "one side ended",
            "different": "the same place, different events",
        }[self.kind]
        return f"{said} ({self.why})"

    def to_json(self) -> dict[str, Any]:
        return {
            "position": self.position,
            "kind": self.kind,
            "why": self.why,
            "kernel": event_json(self.kernel),
            "model": event_json(self.model),
            "kernel_context": {"before": [event_text(e) for e in self.kernel_before],
                               "after": [event_text(e) for e in self.kernel_after]},
            "model_context": {"before": [event_text(e) for e in self.model_before],
                              "after": [event_text(e) for e in self.model_after]},
        }  # fmt: skip

    def lines(self) -> list[str]:
        """The report: the context and the two events, side by side."""
        out = [f"first difference after {self.position} equal events: {self.summary()}"]
        for side, before, event, after in (
            ("kernel", self.kernel_before, self.kernel, self.kernel_after),
            ("model", self.model_before, self.model, self.model_after),
        ):
            out.append(f"  {side}:")
            out += [f"      {event_text(e)}" for e in before]
            out.append(f"    > {event_text(event) if event is not None else '(no more events)'}")
            out += [f"      {event_text(e)}" for e in after]
        return out


def _plain(event: Event) -> tuple[str, tuple[tuple[str, FieldValue], ...]]:
    """An event's name and compared fields (host values left out): to tell a missing or
    an extra event from a changed one."""
    shaped = shape(event)
    return shaped.name, shaped.fields


def _name(event: Event | None) -> str:
    return "(none)" if event is None else event.name


def differs(kernel: Shape, model: Shape, names: dict[str, Renaming]) -> str | None:
    """Why two events differ (None: they are equal, renamings extended)."""
    if kernel.name != model.name:
        return f"{kernel.name} in the kernel, {model.name} in the model"
    if kernel.fields != model.fields:
        k, m = dict(kernel.fields), dict(model.fields)
        keys = [key for key in sorted(set(k) | set(m)) if k.get(key) != m.get(key)]
        return f"{kernel.name}: " + ", ".join(
            f"{key} {_value(k.get(key))} in the kernel, {_value(m.get(key))} in the model"
            for key in keys
        )
    if [(f, n) for f, n, _ in kernel.host] != [(f, n) for f, n, _ in model.host]:
        return f"{kernel.name}: host fields {kernel.host} against {model.host}"
    for (key, space, k_value), (_, _, m_value) in zip(kernel.host, model.host, strict=True):
        renaming = names.setdefault(space, Renaming())
        if not renaming.agrees(k_value, m_value):
            was = renaming.forward.get(k_value)
            if was is not None:
                said = f"kernel {space} {k_value:#x} was model {was:#x}, here {m_value:#x}"
            else:
                other = renaming.backward[m_value]
                said = f"model {space} {m_value:#x} was kernel {other:#x}, here {k_value:#x}"
            return f"{kernel.name}: {key}: {said}"
    return None


def _value(value: FieldValue | None) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:#x}"
    return str(value)


class _Lane:
    """One vCPU: the kernel's and the model's events waiting to be paired."""

    def __init__(self) -> None:
        self.kernel: deque[Event] = deque()
        self.model: deque[Event] = deque()
        self.kernel_before: deque[Event] = deque(maxlen=CONTEXT)
        self.model_before: deque[Event] = deque(maxlen=CONTEXT)


class Alignment:
    """The two sequences, paired as they come."""

    def __init__(self) -> None:
        self.counts: dict[str, Counter[str]] = {
            "kernel": Counter(), "model": Counter(), "equal": Counter()
        }  # fmt: skip
        self.compared = 0
        self.first: Difference | None = None
        self._lanes: list[_Lane] = []
        self._kernel_lane: dict[int, _Lane] = {}
        self._model_lane: dict[int, _Lane] = {}
        self._names: dict[str, Renaming] = {}
        self._freed: dict[int, int] = {}  # id(model event) -> the model page it frees

    def _lane(self, side: dict[int, _Lane], key: int) -> _Lane:
        lane = side.get(key)
        if lane is None:  # the n-th vCPU of one side goes with the other side's n-th
            if len(side) == len(self._lanes):
                self._lanes.append(_Lane())
            lane = side[key] = self._lanes[len(side)]
        return lane

    def add_kernel(self, events: Iterable[Event]) -> None:
        """Kernel events in their order; a vCPU is a thread (`pid`)."""
        for event in events:
            if event.name in COMPARED:
                self.counts["kernel"][event.name] += 1
                lane = self._lane(self._kernel_lane, event.pid)
                lane.kernel.append(event)
                self._pair(lane)

    def add_model(self, event: Event, vcpu: int = 0, freed: int | None = None) -> None:
        """A model event; `freed`: the model's host page (a `sptep`'s page) the event
        frees, a zapped shadow page's: once the pair is equal, the host page the kernel
        had for it may come back as another shadow page's (the page allocator reuses
        it), so the pair leaves the renaming."""
        if event.name in COMPARED:
            if freed is not None:
                self._freed[id(event)] = freed
            self.counts["model"][event.name] += 1
            lane = self._lane(self._model_lane, vcpu)
            lane.model.append(event)
            self._pair(lane)

    def _pair(self, lane: _Lane) -> None:
        while lane.kernel and lane.model:
            kernel, model = lane.kernel.popleft(), lane.model.popleft()
            if self.first is not None:
                self._after(kernel, model)
                continue
            if (
                kernel.name == model.name
                and kernel.fields == model.fields
                and HOST_FIELDS.isdisjoint(kernel.fields)
            ):  # no host address to rename: equal as they are (most are: walks, ptes read)
                why = None
            else:
                why = differs(shape(kernel), shape(model), self._names)
            freed = self._freed.pop(id(model), None)
            if why is None:
                if freed is not None:
                    self._names.setdefault("page", Renaming()).release(freed)
                self.compared += 1
                self.counts["equal"][kernel.name] += 1
                lane.kernel_before.append(kernel)
                lane.model_before.append(model)
                continue
            self.first = self._difference(lane, kernel, model, why)
        if self.first is not None:  # the context after it, then nothing more is kept
            while lane.kernel:
                self._after(lane.kernel.popleft(), None)
            while lane.model:
                self._after(None, lane.model.popleft())

    def _difference(
        self, lane: _Lane, kernel: Event | None, model: Event | None, why: str
    ) -> Difference:
        before = list(lane.kernel_before), list(lane.model_before)
        return Difference(self.compared, kernel, model, why, *before)

    def _after(self, kernel: Event | None, model: Event | None) -> None:
        assert self.first is not None
        if kernel is not None and len(self.first.kernel_after) < CONTEXT:
            self.first.kernel_after.append(kernel)
        if model is not None and len(self.first.model_after) < CONTEXT:
            self.first.model_after.append(model)

    def finish(self) -> Difference | None:
        """The first difference, an unpaired event at the end of a sequence included."""
        for lane in self._lanes:
            if self.first is None and (lane.kernel or lane.model):
                kernel = lane.kernel.popleft() if lane.kernel else None
                model = lane.model.popleft() if lane.model else None
                side = "kernel" if kernel is not None else "model"
                shown = kernel or model
                assert shown is not None
                why = f"the {side} has {shown.name} where the other side's events ended"
                self.first = self._difference(lane, kernel, model, why)
            while self.first is not None and (lane.kernel or lane.model):
                self._after(lane.kernel.popleft() if lane.kernel else None,
                            lane.model.popleft() if lane.model else None)  # fmt: skip
        return self.first

    def kernel_waiting(self) -> bool:
        """Whether kernel events wait for the model's (before the first difference)."""
        return self.first is None and any(lane.kernel for lane in self._lanes)

    @property
    def equal(self) -> bool:
        return self.first is None and self.counts["kernel"] == self.counts["model"]

    def kinds(self) -> list[dict[str, Any]]:
        """One row per event kind: `event`, `kernel`, `model`, `equal`."""
        names = sorted(set(self.counts["kernel"]) | set(self.counts["model"]))
        return [
            {"event": name, "kernel": self.counts["kernel"][name],
             "model": self.counts["model"][name], "equal": self.counts["equal"][name]}
            for name in names
        ]  # fmt: skip

    def events(self) -> dict[str, int]:
        return {"kernel": sum(self.counts["kernel"].values()),
                "model": sum(self.counts["model"].values()), "compared": self.compared}  # fmt: skip


def kind_table(kinds: list[Mapping[str, Any]]) -> list[str]:
    """The per-kind table as text, with the headers event, kernel, model, equal."""
    width = max([len("event"), *(len(str(k["event"])) for k in kinds)])
    out = [f"{'event':<{width}}  {'kernel':>8}  {'model':>8}  {'equal':>8}"]
    for k in kinds:
        mark = "" if k["kernel"] == k["model"] == k["equal"] else "  ≠"
        out.append(f"{k['event']:<{width}}  {k['kernel']:>8}  {k['model']:>8}  "
                   f"{k['equal']:>8}{mark}")  # fmt: skip
    return out
