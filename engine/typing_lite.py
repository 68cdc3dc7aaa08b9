"""The pieces of `typing` the engine's modules use when they run, without importing typing.

`mmuscope simulate`'s start-up (issue 14 "Speed": the whole command at 200,000 lines per
second) spent about 15M instructions importing typing, and a `typing.NamedTuple` in a
module with postponed annotations (`from __future__ import annotations`) compiles each
field's annotation (typing.ForwardRef), whose first `compile()` builds the node types of
the ast module: about 10M more, of some 130M in all.  So the modules on its path import
these names from here, and what only annotations need from typing under
`if TYPE_CHECKING:`.

Type checkers see typing's own names (the `if TYPE_CHECKING:` branch below: mypy, pyright
and ruff take any `TYPE_CHECKING` as typing's).  When the code runs:
- `TYPE_CHECKING` is False, as typing's is;
- `TypeVar(name, ...)` is the name: what `Generic[...]` is given, and nothing reads it;
- `Generic` and `Protocol` are empty bases (`__slots__ = ()`, as typing's) whose
  subscription (`GuestSession[StepT]`) is a `types.GenericAlias`, so that a class derived
  from `Base[T]` derives from Base;
- `NamedTuple` as a base makes the class `collections.namedtuple` makes of the annotated
  fields' names and defaults, with the methods, properties and docstring of the class
  body, as typing's does, but without evaluating the annotations (kept as text);
- `cast(type, value)` is the value.
tests/test_typing_lite.py checks them against typing's.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Generic as Generic
    from typing import NamedTuple as NamedTuple
    from typing import Protocol as Protocol
    from typing import TypeVar as TypeVar
    from typing import cast as cast
else:
    from collections import namedtuple
    from types import GenericAlias

    def TypeVar(name, *constraints, **options):
        return name

    def cast(typ, value):
        return value

    class Generic:
        __slots__ = ()

        def __class_getitem__(cls, params):
            return GenericAlias(cls, params)

    class Protocol(Generic):
        __slots__ = ()

    # what a NamedTuple's body may not define, and what namedtuple() sets itself (typing's)
    _PROHIBITED = frozenset(
        {"__new__", "__init__", "__slots__", "__getnewargs__", "_fields", "_field_defaults",
         "_make", "_replace", "_asdict", "_source"}
    )  # fmt: skip
    _SPECIAL = frozenset({"__module__", "__name__", "__annotations__"})

    class _NamedTupleMeta(type):
        def __new__(cls, typename, bases, namespace):
            annotations = namespace.get("__annotations__", {})
            fields, defaults = list(annotations), []
            for name in fields:
                if name in namespace:
                    defaults.append(name)
                elif defaults:
                    raise TypeError(
                        f"Non-default namedtuple field {name} cannot follow default field"
                        f"{'s' if len(defaults) > 1 else ''} {', '.join(defaults)}"
                    )
            made = namedtuple(
                typename,
                fields,
                defaults=[namespace[name] for name in defaults],
                module=namespace["__module__"],
            )
            made.__annotations__ = made.__new__.__annotations__ = dict(annotations)
            for key, value in namespace.items():
                if key in _PROHIBITED:
                    raise AttributeError(f"Cannot overwrite NamedTuple attribute {key}")
                if key not in _SPECIAL and key not in annotations:
                    setattr(made, key, value)
            return made

    NamedTuple = type.__new__(_NamedTupleMeta, "NamedTuple", (), {})
