"""Coordinator requests (docs/reference/events.md §1) as frozen values. The wire parser builds them;
the state machine consumes them. Byte payloads stay base64 text: the coordinator never looks
inside."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from controlplane.core.frozen import fast_constructor


class RequestType(StrEnum):
    JOIN = "join"
    SYNC = "sync"
    HEARTBEAT = "heartbeat"
    LEAVE = "leave"
    OFFSET_COMMIT = "offset_commit"
    OFFSET_FETCH = "offset_fetch"
    DESCRIBE = "describe"
    DELETE_GROUP = "delete_group"
    TICK = "tick"


@dataclass(frozen=True, slots=True)
class Protocol:
    name: str
    metadata: str  # base64


@dataclass(frozen=True, slots=True)
class Assignment:
    member_id: str
    assignment: str  # base64


@dataclass(frozen=True, slots=True)
class LeaveIdentity:
    member_id: str
    group_instance_id: str | None
    reason: str | None


@dataclass(frozen=True, slots=True)
class OffsetEntry:
    topic: str
    partition: int
    offset: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class TopicPartitions:
    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Header:
    """Fields every request carries."""

    event_id: str
    event_time_ms: int
    group_id: str | None
    member_id: str  # "" when absent
    group_instance_id: str | None
    request_version: int | None  # None = newest
    reason: str | None
    timeout_ms: int | None
    arrival_time_ms: int | None


@dataclass(frozen=True, slots=True)
class JoinGroup:
    header: Header
    session_timeout_ms: int
    rebalance_timeout_ms: int | None  # None = session_timeout_ms (JoinGroup v0 rule)
    protocol_type: str
    protocols: tuple[Protocol, ...]
    client_id: str
    client_host: str


@dataclass(frozen=True, slots=True)
class SyncGroup:
    header: Header
    generation_id: int
    protocol_type: str | None
    protocol_name: str | None
    assignments: tuple[Assignment, ...]


@dataclass(frozen=True, slots=True)
class Heartbeat:
    header: Header
    generation_id: int


@dataclass(frozen=True, slots=True)
class LeaveGroup:
    header: Header
    members: tuple[LeaveIdentity, ...] | None  # None = the one member named by the header


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    header: Header
    generation_id: int
    offsets: tuple[OffsetEntry, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetch:
    header: Header
    topics: tuple[TopicPartitions, ...] | None  # None = every committed offset


@dataclass(frozen=True, slots=True)
class DescribeGroup:
    header: Header


@dataclass(frozen=True, slots=True)
class DeleteGroup:
    header: Header


@dataclass(frozen=True, slots=True)
class Tick:
    """Advances the clock only; ``header.group_id`` None = every group the run knows."""

    header: Header


Request = (
    JoinGroup
    | SyncGroup
    | Heartbeat
    | LeaveGroup
    | OffsetCommit
    | OffsetFetch
    | DescribeGroup
    | DeleteGroup
    | Tick
)

REQUEST_TYPE: dict[type, RequestType] = {
    JoinGroup: RequestType.JOIN,
    SyncGroup: RequestType.SYNC,
    Heartbeat: RequestType.HEARTBEAT,
    LeaveGroup: RequestType.LEAVE,
    OffsetCommit: RequestType.OFFSET_COMMIT,
    OffsetFetch: RequestType.OFFSET_FETCH,
    DescribeGroup: RequestType.DESCRIBE,
    DeleteGroup: RequestType.DELETE_GROUP,
    Tick: RequestType.TICK,
}


# Quick constructors (``frozen.py``): what the wire parser builds per event, and decoding.
make_protocol = fast_constructor(Protocol)
make_assignment = fast_constructor(Assignment)
make_header = fast_constructor(Header)
make_join = fast_constructor(JoinGroup)
make_sync = fast_constructor(SyncGroup)
make_heartbeat = fast_constructor(Heartbeat)
