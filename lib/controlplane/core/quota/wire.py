"""Parse a mutation event (docs/reference/events.md §3) into a ``MutationRequest``, or say what is
wrong.

A bad event becomes an ``Invalid`` naming the field (``topics[2].partitions``) and the problem;
the runner answers it with an INVALID_REQUEST (42) row whose message also names the input line.
Unknown extra fields are ignored (forward compatible), absent fields are null.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from controlplane.core.quota.requests import (
    MutationRequest,
    MutationType,
    TopicMutation,
    make_request,
    make_topic,
)

LONG_MAX: Final = 2**63 - 1
INT32_MAX: Final = 2**31 - 1
INT32_MIN: Final = -(2**31)
INT16_MAX: Final = 2**15 - 1
_TYPES: Final = {member.value: member for member in MutationType}
_TYPE_NAMES: Final = ", ".join(_TYPES)


@dataclass(frozen=True, slots=True)
class Invalid:
    field: str
    problem: str

    def message(self, line: str | None) -> str:
        where = f" (line {line})" if line else ""
        return f"invalid field '{self.field}': {self.problem}{where}"


class _Bad(Exception):
    def __init__(self, field: str, problem: str) -> None:
        super().__init__(field, problem)
        self.invalid = Invalid(field, problem)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _string(event: Mapping[str, Any], name: str, *, empty_ok: bool) -> str:
    value = event.get(name)
    if value is None:
        raise _Bad(name, "required")
    if not isinstance(value, str):
        raise _Bad(name, f"expected a string, got {_kind(value)}")
    if not value and not empty_ok:
        raise _Bad(name, "must not be empty")
    return value


def _int(value: object, name: str, *, low: int, high: int) -> int:
    if not _is_int(value):
        raise _Bad(name, f"expected an integer, got {_kind(value)}")
    assert isinstance(value, int)
    if not low <= value <= high:
        raise _Bad(name, f"out of range [{low}, {high}]: {value}")
    return value


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f"string {value[:40]!r}"
    if isinstance(value, int | float):
        return f"number {value!r}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def _topic(raw: object, index: int, *, lowest: int) -> TopicMutation:
    where = f"topics[{index}]"
    if type(raw) is not dict and not isinstance(raw, Mapping):
        raise _Bad(where, f"expected an object with name and partitions, got {_kind(raw)}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        problem = "required" if name is None else f"expected a non-empty string, got {_kind(name)}"
        raise _Bad(f"{where}.name", problem)
    partitions = raw.get("partitions")
    if partitions is None:
        raise _Bad(f"{where}.partitions", "required")
    count = _int(partitions, f"{where}.partitions", low=lowest, high=INT32_MAX)
    return make_topic(name=name, partitions=count)


def _topics(event: Mapping[str, Any], kind: MutationType) -> tuple[TopicMutation, ...]:
    """A CreateTopics or CreatePartitions count below 1 is a request Kafka can receive (it
    answers INVALID_PARTITIONS for that topic, §3), so it parses; a DeleteTopics count is a
    topic's current partition count, never negative."""
    raw = event.get("topics")
    if raw is None:
        raise _Bad("topics", "required")
    if not isinstance(raw, list):
        raise _Bad("topics", f"expected an array of {{name, partitions}}, got {_kind(raw)}")
    lowest = 0 if kind is MutationType.DELETE_TOPICS else INT32_MIN
    return tuple(_topic(item, index, lowest=lowest) for index, item in enumerate(raw))


def _parse(event: Mapping[str, Any]) -> MutationRequest:
    event_id = _string(event, "event_id", empty_ok=False)
    if event.get("event_time_ms") is None:
        raise _Bad("event_time_ms", "required")
    event_time_ms = _int(event.get("event_time_ms"), "event_time_ms", low=0, high=LONG_MAX)
    kind_name = _string(event, "type", empty_ok=False)
    kind = _TYPES.get(kind_name)
    if kind is None:
        raise _Bad("type", f"expected one of {_TYPE_NAMES}, got {kind_name[:40]!r}")
    user = _string(event, "user", empty_ok=True)
    client_id = _string(event, "client_id", empty_ok=True)
    version = event.get("request_version")
    if version is not None:
        version = _int(version, "request_version", low=0, high=INT16_MAX)
    validate_only = event.get("validate_only")
    if validate_only is None:
        validate_only = False
    elif not isinstance(validate_only, bool):
        raise _Bad("validate_only", f"expected true or false, got {_kind(validate_only)}")
    if validate_only and kind is MutationType.DELETE_TOPICS:
        raise _Bad("validate_only", "DeleteTopics has no validate_only mode")
    return make_request(
        event_id=event_id,
        event_time_ms=event_time_ms,
        type=kind,
        user=user,
        client_id=client_id,
        request_version=version,
        validate_only=validate_only,
        topics=_topics(event, kind),
    )


def parse_request(event: Mapping[str, Any]) -> MutationRequest | Invalid:
    """The request, or the first problem found (fields in the order of docs/reference/events.md
    §3)."""
    if type(event) is not dict and not isinstance(event, Mapping):
        return Invalid("event", f"expected a JSON object, got {_kind(event)}")
    try:
        return _parse(event)
    except _Bad as bad:
        return bad.invalid
