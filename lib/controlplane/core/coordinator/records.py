"""What the coordinator emits (docs/reference/events.md §2): ``Decision`` rows (one per answered
request) and ``GroupEvent`` rows (the audit). Both are frozen values; ``to_row`` gives the wire's
JSON object."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from controlplane.core.errors import Errors
from controlplane.core.frozen import fast_constructor


class EventKind(StrEnum):
    MEMBER_ADDED = "member_added"
    MEMBER_REMOVED = "member_removed"
    MEMBER_FENCED = "member_fenced"
    STATE_CHANGED = "state_changed"
    REBALANCE_STARTED = "rebalance_started"
    GENERATION_COMPLETED = "generation_completed"
    STATIC_MEMBER_OFFLINE = "static_member_offline"
    STATIC_MEMBER_RETURNED = "static_member_returned"
    REQUEST_REPLACED = "request_replaced"
    DUPLICATE_REQUEST = "duplicate_request"
    GROUP_DELETED = "group_deleted"
    OFFSETS_EXPIRED = "offsets_expired"


@dataclass(frozen=True, slots=True)
class JoinMember:
    """An entry of the leader's JoinGroup member list."""

    member_id: str
    group_instance_id: str | None
    metadata: str  # base64


@dataclass(frozen=True, slots=True)
class MemberResult:
    """A LeaveGroup per-member result."""

    member_id: str
    group_instance_id: str | None
    error_code: int


@dataclass(frozen=True, slots=True)
class OffsetResult:
    topic: str
    partition: int
    offset: int | None
    metadata: str | None
    error_code: int


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: str  # base64, the stored assignment ("" = none), in every state
    offline: bool


@dataclass(frozen=True, slots=True)
class Decision:
    """One answered request. Error rows follow Kafka: generation -1, leader "", pt/pn null."""

    event_id: str | None
    group_id: str | None
    type: str | None
    member_id: str
    group_instance_id: str | None
    error: Errors
    error_message: str | None
    event_time_ms: int | None
    decided_at_ms: int
    generation_id: int | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    skip_assignment: bool | None = None
    members: tuple[JoinMember, ...] | None = None
    assignment: str | None = None
    member_results: tuple[MemberResult, ...] | None = None
    offsets: tuple[OffsetResult, ...] | None = None
    group_state: str | None = None
    group_members: tuple[DescribedMember, ...] | None = None

    def to_row(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "group_id": self.group_id,
            "type": self.type,
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "error_code": self.error.code,
            "error": self.error.name,
            "error_message": self.error_message,
            "generation_id": self.generation_id,
            "protocol_type": self.protocol_type,
            "protocol_name": self.protocol_name,
            "leader_id": self.leader_id,
            "skip_assignment": self.skip_assignment,
            "members": _rows(self.members),
            "assignment": self.assignment,
            "member_results": _rows(self.member_results),
            "offsets": _rows(self.offsets),
            "group_state": self.group_state,
            "group_members": _rows(self.group_members),
            "event_time_ms": self.event_time_ms,
            "decided_at_ms": self.decided_at_ms,
        }


@dataclass(frozen=True, slots=True)
class GroupEvent:
    """One fact in a group's audit trail."""

    group_id: str
    at_ms: int
    kind: EventKind
    member_id: str | None = None
    group_instance_id: str | None = None
    reason: str | None = None
    state_from: str | None = None
    state_to: str | None = None
    generation_id: int | None = None
    event_id: str | None = None

    def to_row(self) -> dict[str, Any]:
        return {
            "group_id": self.group_id,
            "at_ms": self.at_ms,
            "kind": self.kind.value,
            "member_id": self.member_id,
            "group_instance_id": self.group_instance_id,
            "reason": self.reason,
            "state_from": self.state_from,
            "state_to": self.state_to,
            "generation_id": self.generation_id,
            "event_id": self.event_id,
        }


def _rows(items: tuple[Any, ...] | None) -> list[dict[str, Any]] | None:
    if items is None:
        return None
    return [{name: getattr(item, name) for name in item.__slots__} for item in items]


# Quick constructors (``frozen.py``): same arguments, same values, several times quicker.
make_decision = fast_constructor(Decision)
make_event = fast_constructor(GroupEvent)
make_join_member = fast_constructor(JoinMember)
