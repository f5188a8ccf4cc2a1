"""Quick constructors: the core's one performance idiom.

The core's values (requests, groups, members, timers, buckets, decisions, events, steps) are
frozen, slotted dataclasses built with keyword arguments. A frozen dataclass's generated
``__init__`` stores each field through ``object.__setattr__`` (its own ``__setattr__``
refuses), about 0.15 µs a field: a 16-field ``Decision`` costs 3.5 µs, and a join phase that
completes builds a decision, a member and a timer per member.

``make_x = fast_constructor(X)``, defined next to ``X``, is a constructor with ``X``'s own
parameters (names, order, defaults; mypy checks calls against them) that builds the same value
about six times quicker: a function, generated from source with ``exec`` as ``dataclasses``
generates its own ``__init__``, that stores the fields into a new instance of a twin class with
the same slots and no ``__setattr__`` guard, then makes it an ``X`` (CPython allows
``__class__`` assignment between classes of identical slot layout). Being a function, not a
class, it binds keyword arguments nearly as quickly as positions (a class call packs keywords
into a dict for ``__init__``). What it returns is a genuine ``X``: frozen, equal, hashed,
printed and pickled as the dataclass made it (tests/test_frozen.py).

The rules of the idiom:

* a value the core builds per event, or per group it decodes, is built through its
  ``make_x``; anything built once or rarely is built by the class itself;
* always with keyword arguments, like any constructor;
* nothing else: no ``tuple.__new__``, no positional argument lists, no module aliases for enum
  members (in Python 3.11 ``Errors.NONE`` costs ~0.1 µs more than a global; Python 3.12, the
  Databricks runtime's, removed that cost with ``EnumType.__getattr__``).

Measured for issue 15 (docs/benchmarks.md, "The core's performance layer"): a 16-field
``Decision`` takes 3.6 µs through the dataclass, 0.6 µs through ``make_decision`` with keywords
(0.45 µs by position); without quick constructors the replay path (the shard's ``feed``) loses
13-25 % (heartbeats, the rebalance storm, quota requests) and the group codec decodes a
10-member group in 60 µs instead of 22-35. On the engine path the difference stays within the
noise of the shared machine: a micro-batch's Python cost is mostly elsewhere (Arrow and pandas
frames, the state envelope, the output rows).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, cast

P = ParamSpec("P")
T = TypeVar("T")


def fast_constructor(cls: Callable[P, T]) -> Callable[P, T]:
    """A quicker ``cls(...)`` for a frozen, slotted dataclass whose defaults are plain values
    (no default factory, no ``init=False`` field); refuses any other class."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"{cls!r} is not a dataclass")
    fields = dataclasses.fields(cls)
    names = tuple(f.name for f in fields)
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    if not params.frozen or getattr(cls, "__slots__", None) != names:
        raise TypeError(f"{cls.__name__}: only frozen dataclasses with slots=True")
    # A twin with the same slots and no ``__setattr__`` guard: its fields are plain slot stores.
    twin = type(f"_Quick{cls.__name__}", (), {"__slots__": names, "__module__": cls.__module__})
    namespace: dict[str, Any] = {"_cls": cls, "_twin": twin, "_new": object.__new__}
    parameters = []
    for field in fields:
        if field.default_factory is not dataclasses.MISSING or not field.init:
            raise TypeError(f"{cls.__name__}.{field.name}: a default factory or init=False")
        if field.default is dataclasses.MISSING:
            parameters.append(field.name)
        else:
            namespace[f"_default_{field.name}"] = field.default
            parameters.append(f"{field.name}=_default_{field.name}")
    stores = "".join(f"    value.{name} = {name}\n" for name in names)
    source = (
        f"def make_{cls.__name__}({', '.join(parameters)}):\n"
        f"    value = _new(_twin)\n{stores}    value.__class__ = _cls\n    return value\n"
    )
    exec(source, namespace)  # as dataclasses generates its own __init__
    make = namespace[f"make_{cls.__name__}"]
    make.__module__ = cls.__module__
    make.__qualname__ = f"make_{cls.__name__}"
    return cast(Callable[P, T], make)
