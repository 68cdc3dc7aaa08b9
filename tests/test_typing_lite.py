"""engine.typing_lite, the pieces of typing the engine's modules use when they run (so
that `mmuscope simulate` starts without importing typing): each behaves as typing's does
where the engine uses it."""

from __future__ import annotations

import pickle
import types
import typing

import pytest
from mmuscope.engine import typing_lite as lite


class LiteAccess(lite.NamedTuple):
    """An access (docstring kept)."""

    vcpu: int
    gpa: int
    write: bool = False

    @property
    def label(self) -> str:
        return f"gpa {self.gpa:#x}"

    def moved(self, by: int) -> LiteAccess:
        return self._replace(gpa=self.gpa + by)


class TypingAccess(typing.NamedTuple):
    """An access (docstring kept)."""

    vcpu: int
    gpa: int
    write: bool = False

    @property
    def label(self) -> str:
        return f"gpa {self.gpa:#x}"

    def moved(self, by: int) -> TypingAccess:
        return self._replace(gpa=self.gpa + by)


def test_named_tuple_is_typings() -> None:
    for cls in (LiteAccess, TypingAccess):
        access = cls(1, 0x1000)
        assert access == (1, 0x1000, False) and access.write is False
        assert access.label == "gpa 0x1000" and access.moved(16).gpa == 0x1010
        assert cls._fields == ("vcpu", "gpa", "write") and cls._field_defaults == {"write": False}
        assert cls.__doc__ == "An access (docstring kept)." and cls.__module__ == __name__
        assert pickle.loads(pickle.dumps(access)) == access and isinstance(access, tuple)
        assert cls.__new__.__defaults__ == (False,)
    assert repr(LiteAccess(1, 2, True)) == repr(TypingAccess(1, 2, True)).replace("Typing", "Lite")
    assert LiteAccess.__annotations__ == {"vcpu": "int", "gpa": "int", "write": "bool"}


def _class(base: object, body: dict[str, object]) -> type:
    def fill(namespace: dict[str, object]) -> None:
        namespace.update(body, __module__=__name__)

    return types.new_class("Bad", (base,), exec_body=fill)


@pytest.mark.parametrize("base", [lite.NamedTuple, typing.NamedTuple])
def test_named_tuple_refuses_what_typings_refuses(base: type) -> None:
    with pytest.raises(TypeError, match=r"field b cannot follow default field a$"):
        _class(base, {"__annotations__": {"a": "int", "b": "int"}, "a": 1})
    with pytest.raises(AttributeError, match="Cannot overwrite NamedTuple attribute _make"):
        _class(base, {"__annotations__": {"a": "int"}, "_make": 1})


def test_generic_protocol_typevar_cast() -> None:
    T = lite.TypeVar("T", bound=int)
    assert T == "T" and lite.cast("list[int]", [1]) == [1] and lite.TYPE_CHECKING is False

    class Node(lite.Protocol):
        __slots__ = ()
        key: int

    class Base(lite.Generic[T]):
        __slots__ = ("value",)

        def __init__(self, value: int) -> None:
            self.value = value

    class Derived(Base[int], Node):
        __slots__ = ()

    assert Derived.__mro__[1] is Base and issubclass(Derived, lite.Generic)
    assert issubclass(Derived, Node)
    assert Base[int].__origin__ is Base and Derived(3).value == 3
    assert not hasattr(Derived(3), "__dict__")  # the bases' empty __slots__, as typing's
