"""Quick construction of the core's hot frozen values.

A frozen dataclass's ``__init__`` must store each field through ``object.__setattr__`` (its own
``__setattr__`` refuses), about 0.15 µs a field: a 20-field ``Decision`` costs ~3 µs, and a join
phase that completes builds a decision, a member and a timer per member. ``fast_constructor(cls)``
returns a class with the same slots whose ``__init__`` stores the fields directly (several times
quicker) and then makes the instance a ``cls``: CPython allows ``__class__`` assignment between
classes of identical slot layout. What it returns is a genuine ``cls``, frozen, equal, hashed and
printed as the dataclass made it; the constructor takes the dataclass's own arguments (same
names, order and defaults), and mypy checks calls against them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, cast

P = ParamSpec("P")
T = TypeVar("T")


def fast_constructor(cls: Callable[P, T]) -> Callable[P, T]:
    """A quicker ``cls(...)`` for a frozen, slotted dataclass whose defaults are plain values."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"{cls!r} is not a dataclass")
    fields = dataclasses.fields(cls)
    names = tuple(f.name for f in fields)
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    if not params.frozen or getattr(cls, "__slots__", None) != names:
        raise TypeError(f"{cls.__name__}: only frozen dataclasses with slots=True")
    namespace: dict[str, Any] = {"_cls": cls}
    parameters = []
    for field in fields:
        if field.default_factory is not dataclasses.MISSING or not field.init:
            raise TypeError(f"{cls.__name__}.{field.name}: a default factory or init=False")
        if field.default is dataclasses.MISSING:
            parameters.append(field.name)
        else:
            namespace[f"_default_{field.name}"] = field.default
            parameters.append(f"{field.name}=_default_{field.name}")
    stores = "".join(f"    self.{name} = {name}\n" for name in names)
    source = f"def __init__(self, {', '.join(parameters)}):\n{stores}    self.__class__ = _cls\n"
    exec(source, namespace)  # as dataclasses builds its own __init__
    builder = type(
        f"_Fast{cls.__name__}",
        (),
        {"__slots__": names, "__init__": namespace["__init__"], "__module__": cls.__module__},
    )
    return cast(Callable[P, T], builder)
