"""Decision rows (docs/reference/events.md §2) in Kafka's response shapes.

An answer is built from the request it answers (``ParkedRequest``: kept in the state while a
join or sync is parked), so a late answer carries the request's own event id and time and
``decided_at_ms`` = the step's clock.
"""

from __future__ import annotations

from typing import Any, Protocol

from controlplane.core.coordinator.records import Decision, JoinMember, make_decision
from controlplane.core.coordinator.requests import Header, RequestType
from controlplane.core.coordinator.state import ParkedRequest, make_parked
from controlplane.core.errors import Errors


class Draft(Protocol):
    """What an answer needs of the step: its group and its clock (the step's Draft has both)."""

    @property
    def group_id(self) -> str: ...

    @property
    def generation_id(self) -> int: ...

    @property
    def protocol_type(self) -> str | None: ...

    @property
    def protocol_name(self) -> str | None: ...

    @property
    def leader_id(self) -> str | None: ...

    @property
    def now_ms(self) -> int: ...


def parked(header: Header) -> ParkedRequest:
    return make_parked(
        event_id=header.event_id,
        event_time_ms=header.event_time_ms,
        request_version=header.request_version,
        group_instance_id=header.group_instance_id,
    )


def _row(
    d: Draft,
    request: ParkedRequest,
    kind: RequestType,
    member_id: str,
    error: Errors,
    **fields: Any,
) -> Decision:
    return make_decision(
        event_id=request.event_id,
        group_id=d.group_id,
        type=kind.value,
        member_id=member_id,
        group_instance_id=request.group_instance_id,
        error=error,
        error_message=fields.pop("error_message", None),
        event_time_ms=request.event_time_ms,
        decided_at_ms=d.now_ms,
        **fields,
    )


def join_ok(
    d: Draft,
    request: ParkedRequest,
    member_id: str,
    members: tuple[JoinMember, ...] = (),
    *,
    leader_id: str | None = None,
    skip_assignment: bool = False,
) -> Decision:
    return make_decision(
        event_id=request.event_id,
        group_id=d.group_id,
        type=RequestType.JOIN.value,
        member_id=member_id,
        group_instance_id=request.group_instance_id,
        error=Errors.NONE,
        error_message=None,
        event_time_ms=request.event_time_ms,
        decided_at_ms=d.now_ms,
        generation_id=d.generation_id,
        protocol_type=d.protocol_type,
        protocol_name=d.protocol_name,
        leader_id=leader_id if leader_id is not None else (d.leader_id or ""),
        skip_assignment=skip_assignment,
        members=members,
    )


def join_error(
    d: Draft, request: ParkedRequest, member_id: str, error: Errors, message: str | None = None
) -> Decision:
    """§3.9: generation -1, leader "", protocol type and name null, no members."""
    return make_decision(
        event_id=request.event_id,
        group_id=d.group_id,
        type=RequestType.JOIN.value,
        member_id=member_id,
        group_instance_id=request.group_instance_id,
        error=error,
        error_message=message,
        event_time_ms=request.event_time_ms,
        decided_at_ms=d.now_ms,
        generation_id=-1,
        leader_id="",
        skip_assignment=False,
        members=(),
    )


def sync_ok(d: Draft, request: ParkedRequest, member_id: str, assignment: str) -> Decision:
    return make_decision(
        event_id=request.event_id,
        group_id=d.group_id,
        type=RequestType.SYNC.value,
        member_id=member_id,
        group_instance_id=request.group_instance_id,
        error=Errors.NONE,
        error_message=None,
        event_time_ms=request.event_time_ms,
        decided_at_ms=d.now_ms,
        protocol_type=d.protocol_type,
        protocol_name=d.protocol_name,
        assignment=assignment,
    )


def sync_error(d: Draft, request: ParkedRequest, member_id: str, error: Errors) -> Decision:
    return make_decision(
        event_id=request.event_id,
        group_id=d.group_id,
        type=RequestType.SYNC.value,
        member_id=member_id,
        group_instance_id=request.group_instance_id,
        error=error,
        error_message=None,
        event_time_ms=request.event_time_ms,
        decided_at_ms=d.now_ms,
        assignment="",
    )


def simple(d: Draft, header: Header, kind: RequestType, error: Errors, **fields: Any) -> Decision:
    """Any other answer: heartbeat, leave, offsets, describe, delete_group."""
    return _row(d, parked(header), kind, header.member_id, error, **fields)


def plain(group_id: str, now_ms: int, header: Header, kind: RequestType, error: Errors) -> Decision:
    """An answer with no payload, built without a step draft (the heartbeat fast path)."""
    return make_decision(
        event_id=header.event_id,
        group_id=group_id,
        type=kind.value,
        member_id=header.member_id,
        group_instance_id=header.group_instance_id,
        error=error,
        error_message=None,
        event_time_ms=header.event_time_ms,
        decided_at_ms=now_ms,
    )
