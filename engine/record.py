"""Frozen value records without the dataclasses module: what the engine's small value types
(`MemorySlot`, `KvmMmuPageRole`, `Event`, `Layout`, ...) used of `@dataclass(frozen=True,
slots=True)`, for a fraction of its cost at import.

A `@dataclass` writes its `__init__`, `__repr__`, `__eq__`, `__hash__`, `__setattr__` and
`__delattr__` as source text and compiles each with `exec` when its module is imported,
and the dataclasses module brings `inspect` (and `ast`, `dis`, `tokenize`) with it: on the
start-up of `mmuscope simulate` that was about a sixth of the interpreter's instructions
(issue 14, "Speed").  A `Record` subclass writes its `__init__` (typed, so mypy checks its
callers), annotates its fields in `__init__`'s order and lists them in `__slots__`; the
rest is shared:
- equality and hash by the tuple of the fields (`hash((a, b, ...))`, the value a
  dataclass's `__hash__` gives, so sets and dicts of records iterate as before);
- `repr` as a dataclass prints it (`Name(a=1, b='x')`; `_repr_fields` can leave some out);
- no assignment after `__init__` (`FrozenRecordError`, an AttributeError, as
  dataclasses.FrozenInstanceError is); `__init__` sets them with `object.__setattr__`;
- `replace(record, **changes)`, as `dataclasses.replace` (which it calls for a dataclass);
- copy, deepcopy and pickle through `__reduce__` (the class called with the init fields).
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from typing import Any, ClassVar

R = TypeVar("R")


class FrozenRecordError(AttributeError):
    """An assignment to a field of a frozen record."""


class Record:
    """The shared part of a frozen record; a subclass annotates its fields (in order) and
    lists them in `__slots__`."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    #: the fields `__init__` takes, in its order (default: all of them)
    _init_fields: ClassVar[tuple[str, ...]] = ()
    _repr_fields: ClassVar[tuple[str, ...]] = ()
    _values: ClassVar[attrgetter[Any]]
    __match_args__: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # the fields in the order the class annotates them (its __slots__ may be sorted)
        slots = set(cls.__dict__.get("__slots__", ()))
        annotated = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 (no inspect here)
        fields = tuple(name for name in annotated if name in slots)
        if set(fields) != slots:
            raise TypeError(f"{cls.__name__}: annotate each of __slots__ {sorted(slots)}")
        cls._fields = fields
        if "_init_fields" not in cls.__dict__:
            cls._init_fields = fields
        cls.__match_args__ = cls._init_fields  # type: ignore[misc]
        if "_repr_fields" not in cls.__dict__:
            cls._repr_fields = fields
        # a tuple even for one field: attrgetter of one name returns the bare value
        cls._values = attrgetter(*fields, *fields) if len(fields) == 1 else attrgetter(*fields)

    def _astuple(self) -> tuple[Any, ...]:
        values = self._values(self)
        return values[:1] if len(self._fields) == 1 else values  # type: ignore[no-any-return]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values(self) == self._values(other)  # type: ignore[no-any-return]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._astuple())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._repr_fields)
        return f"{type(self).__qualname__}({shown})"

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenRecordError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenRecordError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), tuple(getattr(self, name) for name in self._init_fields)


def replace(obj: R, **changes: Any) -> R:
    """A copy of a record (or a dataclass) with some fields changed, as
    `dataclasses.replace`: the class called again with the init fields."""
    fields: tuple[str, ...] | None = getattr(obj, "_init_fields", None)
    if fields is None:
        import dataclasses

        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    values = {name: getattr(obj, name) for name in fields}
    values.update(changes)
    return type(obj)(**values)
