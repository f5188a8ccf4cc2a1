"""core/frozen.py, the core's one performance idiom: a quick constructor builds exactly the value
the dataclass's own constructor builds (type, fields, defaults, equality, hash, immutability),
and refuses the classes it cannot build that way."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest

from controlplane.core.coordinator.records import Decision, make_decision
from controlplane.core.coordinator.state import Group, Timer, TimerKind, make_group, make_timer
from controlplane.core.errors import Errors
from controlplane.core.frozen import fast_constructor


@dataclasses.dataclass(frozen=True, slots=True)
class Point:
    x: int
    y: int = 7
    label: str | None = None


make_point = fast_constructor(Point)


def test_a_quick_value_is_the_dataclass_value() -> None:
    quick = make_point(x=1, label="a")
    plain = Point(x=1, label="a")
    assert type(quick) is Point
    assert isinstance(quick, Point)
    assert quick == plain
    assert hash(quick) == hash(plain)
    assert repr(quick) == repr(plain) == "Point(x=1, y=7, label='a')"
    assert dataclasses.astuple(quick) == (1, 7, "a")
    assert pickle.loads(pickle.dumps(quick)) == plain


def test_the_constructor_takes_the_dataclass_arguments() -> None:
    assert make_point(1, 2, "b") == Point(1, 2, "b")  # positions, in field order
    assert make_point(y=3, x=2) == Point(2, 3)  # keywords, defaults for the rest
    with pytest.raises(TypeError):
        make_point()  # type: ignore[call-arg]  # x has no default
    with pytest.raises(TypeError):
        make_point(x=1, z=2)  # type: ignore[call-arg]  # no such field


def test_a_quick_value_is_frozen() -> None:
    quick = make_point(x=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        quick.x = 2  # type: ignore[misc]
    assert dataclasses.replace(quick, y=0) == Point(1, 0)


def test_the_core_values_built_quickly_equal_their_plain_construction() -> None:
    fields: dict[str, Any] = {
        "event_id": "e1",
        "group_id": "g",
        "type": "join",
        "member_id": "m",
        "group_instance_id": None,
        "error": Errors.NONE,
        "error_message": None,
        "event_time_ms": 1,
        "decided_at_ms": 2,
        "generation_id": 3,
        "members": (),
    }
    assert make_decision(**fields) == Decision(**fields)
    timer = make_timer(kind=TimerKind.JOIN, member_id="", deadline_ms=5, seq=0, delay_ms=3)
    assert timer == Timer(TimerKind.JOIN, "", 5, 0, 3)
    assert make_group(group_id="g", timers=(timer,)) == Group("g", timers=(timer,))


def test_classes_it_cannot_build_are_refused() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        x: int

    @dataclasses.dataclass(slots=True)
    class NotFrozen:
        x: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        x: list[int] = dataclasses.field(default_factory=list)

    for cls in (NoSlots, NotFrozen):
        with pytest.raises(TypeError, match="only frozen dataclasses with slots"):
            fast_constructor(cls)
    with pytest.raises(TypeError, match="default factory"):
        fast_constructor(Factory)
    with pytest.raises(TypeError, match="not a dataclass"):
        fast_constructor(int)
