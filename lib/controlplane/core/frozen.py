"""Quick constructors: the core's one performance idiom.

The core's values (requests, groups, members, timers, buckets, decisions, events, steps) are
frozen, slotted dataclasses built with keyword arguments. A frozen dataclass's generated
``__init__`` stores each field through ``object.__setattr__`` (its own ``__setattr__``
refuses), about 0.15 µs a field: a 20-field ``Decision`` costs 3-4 µs, and a join phase that
completes builds a decision, a member and a timer per member. ``make_x = fast_constructor(X)``,
defined next to ``X``, returns a constructor with ``X``'s own parameters (names, order,
defaults; mypy checks calls against them) whose ``__init__`` stores the fields into an instance
of a twin class with the same slots and then makes it an ``X`` (CPython allows ``__class__``
assignment between classes of identical slot layout); the ``__init__`` is generated from source
with ``exec``, as ``dataclasses`` generates its own. What it returns is a genuine ``X``: frozen,
equal, hashed, printed and pickled as the dataclass made it (tests/test_frozen.py).

The rules of the idiom:

* a value the core builds per event, or per group it decodes, is built through its
  ``make_x``; anything built once or rarely is built by the class itself;
* with keyword arguments, like any constructor: passing a 16-field value by position is about
  0.5 µs quicker, which the idiom gives up for call sites that say what each value is;
* nothing else: no ``tuple.__new__``, no positional argument lists, no module aliases for enum
  members (in Python 3.11 ``Errors.NONE`` costs ~0.1 µs more than a global; Python 3.12, the
  Databricks runtime's, removed the cost with ``EnumType.__getattr__``).

What it is worth, measured for issue 15 by taking the tricks away one at a time
(docs/benchmarks.md, "The core's performance layer"): quick constructors build values 3-4 times
quicker (``Decision`` 3.3 -> 0.9-1.2 µs, ``Group`` 2.8 -> 0.8 µs, with keywords), and without
them the replay path (the shard's ``feed``) loses 13-25 % (heartbeats, the rebalance storm,
quota requests) and the group codec decodes 10-member groups in 60 µs instead of 35. On the engine
path the difference stays within the noise of the shared machine: a micro-batch's Python cost
is elsewhere (Arrow and pandas frames, the state envelope, the output rows).
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
