"""The coordinator's wire parser: one JSON object (docs/reference/events.md §1) into a ``Request``.

A field that is missing, of the wrong JSON type, out of range, or not valid base64 makes the
whole event an :class:`InvalidEvent`, which the runner answers with an INVALID_REQUEST (42)
decision whose ``error_message`` names the field (``protocols[1].metadata``) and, when the
event came from a file, the line (``events.jsonl:12: ...``). Rules:

* JSON types are strict: a boolean is not an integer, ``1.0`` and ``"1"`` are not integers.
  ``int`` fields hold a signed 32-bit value, ``long`` fields a signed 64-bit value.
* ``null`` and an absent field are the same; ``member_id`` defaults to ``""``.
* A field that §1 does not name is refused (``unknown field``), so a typo such as
  ``group_instance`` cannot silently turn a static member into a dynamic one. Fields whose
  name starts with ``_`` are annotations and are ignored. A known field that the event's type
  does not use is type-checked and otherwise ignored.
* Values the coordinator itself judges are passed through, as Kafka does: an empty
  ``group_id`` (INVALID_GROUP_ID for join, sync, heartbeat and leave; an ordinary group for
  the offset APIs, describe and delete_group), an out-of-range ``session_timeout_ms``, negative ones
  included (INVALID_SESSION_TIMEOUT), an empty ``protocols`` list (INCONSISTENT_GROUP_PROTOCOL).
  Values no Kafka client can send are refused: a negative ``event_time_ms``,
  ``rebalance_timeout_ms`` or ``timeout_ms``; an empty ``event_id`` or ``group_instance_id``
  (Kafka refuses an empty instance id); a ``request_version`` outside the API's versions; an
  empty ``members`` list on a leave (Kafka's client refuses to build one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from controlplane.core.coordinator.records import Decision
from controlplane.core.coordinator.requests import (
    Assignment,
    DeleteGroup,
    DescribeGroup,
    Header,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    LeaveIdentity,
    OffsetCommit,
    OffsetEntry,
    OffsetFetch,
    Protocol,
    Request,
    RequestType,
    SyncGroup,
    Tick,
    TopicPartitions,
    make_assignment,
    make_header,
    make_heartbeat,
    make_join,
    make_protocol,
    make_sync,
)
from controlplane.core.errors import Errors
from controlplane.core.jsonwire import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    WireError,
    array,
    base64_text,
    int_field,
    integer,
    is_int,
    json_object,
    kind,
    long_or_none,
    need,
    string,
    text,
)
from controlplane.core.runtime import TimedEvent

T = TypeVar("T")

# Fields every request may carry; the type-specific ones are the keys of _OPTIONAL_CHECKS.
_HEADER_FIELDS: Final = frozenset(
    {"event_id", "event_time_ms", "type", "group_id", "member_id"}
) | {"group_instance_id", "request_version", "reason", "timeout_ms", "arrival_time_ms"}

# The newest version of each Kafka API this coordinator speaks (Kafka 4.0); 0 is the oldest.
MAX_VERSION: Final[Mapping[RequestType, int]] = {
    RequestType.JOIN: 9,
    RequestType.SYNC: 5,
    RequestType.HEARTBEAT: 4,
    RequestType.LEAVE: 5,
    RequestType.OFFSET_COMMIT: 9,
    RequestType.OFFSET_FETCH: 9,
    RequestType.DESCRIBE: 6,
    RequestType.DELETE_GROUP: 2,
    RequestType.TICK: INT32_MAX,
}


@dataclass(frozen=True, slots=True)
class InvalidEvent:
    """An event that is not a valid request, with what could be read of it for the answer."""

    event_id: str | None
    group_id: str | None
    type: str | None
    member_id: str
    group_instance_id: str | None
    event_time_ms: int | None
    message: str

    def decision(self, decided_at_ms: int) -> Decision:
        """The INVALID_REQUEST row that answers this event."""
        return Decision(
            event_id=self.event_id,
            group_id=self.group_id,
            type=self.type,
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            error=Errors.INVALID_REQUEST,
            error_message=self.message,
            event_time_ms=self.event_time_ms,
            decided_at_ms=decided_at_ms,
            generation_id=-1,
        )


def parse_event(timed: TimedEvent) -> Request | InvalidEvent:
    """Parse one wire event; never raises."""
    prefix = f"{timed.line}: " if timed.line else ""
    if timed.error is not None:
        return _invalid({}, f"{prefix}{timed.error}")
    try:
        return parse_request(timed.event)
    except WireError as exc:
        return _invalid(timed.event, f"{prefix}{exc}")


def parse_request(raw: Mapping[str, Any]) -> Request:
    """Parse one wire object; raises WireError naming the first bad field."""
    if not isinstance(raw, Mapping):
        raise WireError("event", "not a JSON object")
    if not raw.keys() <= KNOWN_FIELDS:  # one set operation for the common case
        for name in raw:
            if name not in KNOWN_FIELDS and not (isinstance(name, str) and name.startswith("_")):
                raise WireError(str(name), "unknown field")
    request_type = _request_type(raw)
    header = _header(raw, request_type)
    _check_unused_fields(raw, request_type)
    return _BUILDERS[request_type](raw, header)


def _invalid(raw: object, message: str) -> InvalidEvent:
    if not isinstance(raw, Mapping):
        raw = {}

    def text(name: str) -> str | None:
        value = raw.get(name)
        return value if isinstance(value, str) else None

    time_ms = raw.get("event_time_ms")
    return InvalidEvent(
        event_id=text("event_id"),
        group_id=text("group_id"),
        type=text("type"),
        member_id=text("member_id") or "",
        group_instance_id=text("group_instance_id"),
        event_time_ms=long_or_none(time_ms),
        message=message,
    )


# --- nested entries --------------------------------------------------------------------------

_PROTOCOL_FIELDS: Final = frozenset({"name", "metadata"})
_ASSIGNMENT_FIELDS: Final = frozenset({"member_id", "assignment"})
_LEAVE_FIELDS: Final = frozenset({"member_id", "group_instance_id", "reason"})
_OFFSET_FIELDS: Final = frozenset({"topic", "partition", "offset", "metadata"})
_TOPIC_FIELDS: Final = frozenset({"topic", "partitions"})


def _protocol(value: Any, path: str) -> Protocol:
    entry = json_object(value, path, _PROTOCOL_FIELDS)
    name = text(entry, "name", f"{path}.name")
    return make_protocol(name=name, metadata=base64_text(entry, "metadata", f"{path}.metadata"))


def _assignment(value: Any, path: str) -> Assignment:
    entry = json_object(value, path, _ASSIGNMENT_FIELDS)
    member_id = text(entry, "member_id", f"{path}.member_id")
    return make_assignment(
        member_id=member_id, assignment=base64_text(entry, "assignment", f"{path}.assignment")
    )


def _leave_identity(value: Any, path: str) -> LeaveIdentity:
    entry = json_object(value, path, _LEAVE_FIELDS)
    return LeaveIdentity(
        member_id=string(entry, "member_id", f"{path}.member_id") or "",
        group_instance_id=_instance_id(entry, f"{path}.group_instance_id"),
        reason=string(entry, "reason", f"{path}.reason"),
    )


def _offset(value: Any, path: str) -> OffsetEntry:
    entry = json_object(value, path, _OFFSET_FIELDS)
    topic = text(entry, "topic", f"{path}.topic")
    partition = int_field(entry, "partition", f"{path}.partition")
    offset = int_field(entry, "offset", f"{path}.offset", bits=64)
    return OffsetEntry(topic, partition, offset, string(entry, "metadata", f"{path}.metadata"))


def _partition(value: Any, path: str) -> int:
    if not is_int(value):
        raise WireError(path, f"expected an int, got {kind(value)}")
    if not INT32_MIN <= value <= INT32_MAX:
        raise WireError(path, f"out of range for an int: {value}")
    return int(value)


def _topic(value: Any, path: str) -> TopicPartitions:
    entry = json_object(value, path, _TOPIC_FIELDS)
    topic = text(entry, "topic", f"{path}.topic")
    partitions_path = f"{path}.partitions"
    partitions = need(array(entry, "partitions", partitions_path, _partition), partitions_path)
    return TopicPartitions(topic, partitions)


def _instance_id(obj: Mapping[str, Any], path: str) -> str | None:
    value = string(obj, path.rsplit(".", 1)[-1], path)
    if value == "":
        raise WireError(path, "must not be empty (null means a dynamic member)")
    return value


# --- the header and the requests -------------------------------------------------------------


_TYPES: Final = {member.value: member for member in RequestType}


def _request_type(raw: Mapping[str, Any]) -> RequestType:
    name = text(raw, "type", "type")
    request_type = _TYPES.get(name)
    if request_type is None:
        known = ", ".join(member.value for member in RequestType)
        raise WireError("type", f"unknown request type {name!r} (expected one of {known})")
    return request_type


def _header(raw: Mapping[str, Any], request_type: RequestType) -> Header:
    """The fields every request carries. The common shape (ids and times only, all of the right
    type) is built at once; anything else goes through the checks that name the bad field."""
    get = raw.get
    event_id, time_ms = get("event_id"), get("event_time_ms")
    group_id, member_id = get("group_id"), get("member_id")
    instance_id, version = get("group_instance_id"), get("request_version")
    if (
        type(event_id) is str
        and event_id
        and type(time_ms) is int
        and 0 <= time_ms <= INT64_MAX
        and type(group_id) is str
        and type(member_id) is str
        and (instance_id is None or (type(instance_id) is str and instance_id))
        and (
            version is None or (type(version) is int and 0 <= version <= MAX_VERSION[request_type])
        )
        and get("reason") is None
        and get("timeout_ms") is None
        and get("arrival_time_ms") is None
    ):
        return make_header(
            event_id=event_id,
            event_time_ms=time_ms,
            group_id=group_id,
            member_id=member_id,
            group_instance_id=instance_id,
            request_version=version,
            reason=None,
            timeout_ms=None,
            arrival_time_ms=None,
        )
    return _checked_header(raw, request_type)


def _checked_header(raw: Mapping[str, Any], request_type: RequestType) -> Header:
    event_id = text(raw, "event_id", "event_id")
    if event_id == "":
        raise WireError("event_id", "must not be empty")
    event_time_ms = int_field(raw, "event_time_ms", "event_time_ms", bits=64)
    if event_time_ms < 0:
        raise WireError("event_time_ms", f"must be >= 0, got {event_time_ms}")
    group_id = string(raw, "group_id", "group_id")
    if group_id is None and request_type != RequestType.TICK:
        raise WireError("group_id", "required")
    member_id = string(raw, "member_id", "member_id")
    if member_id is None and request_type in (RequestType.SYNC, RequestType.HEARTBEAT):
        raise WireError("member_id", "required")
    version = integer(raw, "request_version", "request_version", minimum=0)
    newest = MAX_VERSION[request_type]
    if version is not None and version > newest:
        raise WireError(
            "request_version", f"{request_type.value} supports 0..{newest}, got {version}"
        )
    return Header(
        event_id=event_id,
        event_time_ms=event_time_ms,
        group_id=group_id,
        member_id=member_id or "",
        group_instance_id=_instance_id(raw, "group_instance_id"),
        request_version=version,
        reason=string(raw, "reason", "reason"),
        timeout_ms=integer(raw, "timeout_ms", "timeout_ms", minimum=0),
        arrival_time_ms=integer(raw, "arrival_time_ms", "arrival_time_ms", bits=64, minimum=0),
    )


_OPTIONAL_CHECKS: Final[Mapping[str, Callable[[Mapping[str, Any]], object]]] = {
    "client_id": lambda raw: string(raw, "client_id", "client_id"),
    "client_host": lambda raw: string(raw, "client_host", "client_host"),
    "protocol_type": lambda raw: string(raw, "protocol_type", "protocol_type"),
    "protocol_name": lambda raw: string(raw, "protocol_name", "protocol_name"),
    "session_timeout_ms": lambda raw: integer(raw, "session_timeout_ms", "session_timeout_ms"),
    "rebalance_timeout_ms": lambda raw: _rebalance_timeout(raw),
    "generation_id": lambda raw: integer(raw, "generation_id", "generation_id"),
    "protocols": lambda raw: array(raw, "protocols", "protocols", _protocol),
    "assignments": lambda raw: array(raw, "assignments", "assignments", _assignment),
    "members": lambda raw: array(raw, "members", "members", _leave_identity),
    "offsets": lambda raw: array(raw, "offsets", "offsets", _offset),
    "topics": lambda raw: array(raw, "topics", "topics", _topic),
}

# The fields each type's builder reads itself; every other present field is only type-checked.
_USED: Final[Mapping[RequestType, frozenset[str]]] = {
    RequestType.JOIN: frozenset({"session_timeout_ms", "rebalance_timeout_ms", "protocol_type"})
    | {"protocols", "client_id", "client_host"},
    RequestType.SYNC: frozenset({"generation_id", "protocol_type", "protocol_name", "assignments"}),
    RequestType.HEARTBEAT: frozenset({"generation_id"}),
    RequestType.LEAVE: frozenset({"members"}),
    RequestType.OFFSET_COMMIT: frozenset({"generation_id", "offsets"}),
    RequestType.OFFSET_FETCH: frozenset({"topics"}),
}


KNOWN_FIELDS: Final = _HEADER_FIELDS | _OPTIONAL_CHECKS.keys()


# Per type, the fields that need no separate check: the header and what the builder reads.
_READ: Final = {kind: _HEADER_FIELDS | _USED.get(kind, frozenset()) for kind in RequestType}


def _check_unused_fields(raw: Mapping[str, Any], request_type: RequestType) -> None:
    """Type-check the present fields this type does not read, so no bad value passes unseen."""
    read = _READ[request_type]
    for name, value in raw.items():
        if value is not None and name not in read:
            check = _OPTIONAL_CHECKS.get(name)
            if check is not None:
                check(raw)


def _rebalance_timeout(raw: Mapping[str, Any]) -> int | None:
    return integer(raw, "rebalance_timeout_ms", "rebalance_timeout_ms", minimum=0)


def _generation(raw: Mapping[str, Any]) -> int:
    return int_field(raw, "generation_id", "generation_id")


def _join(raw: Mapping[str, Any], header: Header) -> JoinGroup:
    session = int_field(raw, "session_timeout_ms", "session_timeout_ms")
    protocol_type = text(raw, "protocol_type", "protocol_type")
    protocols = need(array(raw, "protocols", "protocols", _protocol), "protocols")
    return make_join(
        header=header,
        session_timeout_ms=session,
        rebalance_timeout_ms=_rebalance_timeout(raw),
        protocol_type=protocol_type,
        protocols=protocols,
        client_id=string(raw, "client_id", "client_id") or "",
        client_host=string(raw, "client_host", "client_host") or "",
    )


def _sync(raw: Mapping[str, Any], header: Header) -> SyncGroup:
    return make_sync(
        header=header,
        generation_id=_generation(raw),
        protocol_type=string(raw, "protocol_type", "protocol_type"),
        protocol_name=string(raw, "protocol_name", "protocol_name"),
        assignments=array(raw, "assignments", "assignments", _assignment) or (),
    )


def _heartbeat(raw: Mapping[str, Any], header: Header) -> Heartbeat:
    return make_heartbeat(header=header, generation_id=_generation(raw))


def _leave(raw: Mapping[str, Any], header: Header) -> LeaveGroup:
    members = array(raw, "members", "members", _leave_identity)
    if members == ():
        raise WireError("members", "must name at least one member (or be left out)")
    return LeaveGroup(header=header, members=members)


def _offset_commit(raw: Mapping[str, Any], header: Header) -> OffsetCommit:
    offsets = need(array(raw, "offsets", "offsets", _offset), "offsets")
    return OffsetCommit(header=header, generation_id=_generation(raw), offsets=offsets)


def _offset_fetch(raw: Mapping[str, Any], header: Header) -> OffsetFetch:
    return OffsetFetch(header=header, topics=array(raw, "topics", "topics", _topic))


def _describe(raw: Mapping[str, Any], header: Header) -> DescribeGroup:
    return DescribeGroup(header=header)


def _delete(raw: Mapping[str, Any], header: Header) -> DeleteGroup:
    return DeleteGroup(header=header)


def _tick(raw: Mapping[str, Any], header: Header) -> Tick:
    return Tick(header=header)


_BUILDERS: Final[Mapping[RequestType, Callable[[Mapping[str, Any], Header], Request]]] = {
    RequestType.JOIN: _join,
    RequestType.SYNC: _sync,
    RequestType.HEARTBEAT: _heartbeat,
    RequestType.LEAVE: _leave,
    RequestType.OFFSET_COMMIT: _offset_commit,
    RequestType.OFFSET_FETCH: _offset_fetch,
    RequestType.DESCRIBE: _describe,
    RequestType.DELETE_GROUP: _delete,
    RequestType.TICK: _tick,
}
