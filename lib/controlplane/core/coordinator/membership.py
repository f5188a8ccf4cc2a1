"""Member records from JoinGroup requests, and member validation (CG:791)."""

from __future__ import annotations

from controlplane.core.coordinator import answers
from controlplane.core.coordinator.draft import Draft
from controlplane.core.coordinator.records import EventKind
from controlplane.core.coordinator.requests import JoinGroup
from controlplane.core.coordinator.state import Member, ParkedRequest
from controlplane.core.errors import Errors

NEWEST_JOIN_VERSION = 9


def join_version(request: JoinGroup) -> int:
    version = request.header.request_version
    return NEWEST_JOIN_VERSION if version is None else version


def rebalance_timeout_ms(request: JoinGroup) -> int:
    """JGR: v0 has no rebalance timeout; it is the session timeout (also when absent)."""
    if join_version(request) == 0 or request.rebalance_timeout_ms is None:
        return request.session_timeout_ms
    return request.rebalance_timeout_ms


def new_member(d: Draft, request: JoinGroup, member_id: str) -> Member:
    header = request.header
    return Member(
        member_id=member_id,
        group_instance_id=header.group_instance_id,
        client_id=request.client_id,
        client_host=request.client_host,
        rebalance_timeout_ms=rebalance_timeout_ms(request),
        session_timeout_ms=request.session_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=request.protocols,
        awaiting_join=answers.parked(header),
        is_new=True,
    )


def validate_member(d: Draft, member_id: str, group_instance_id: str | None) -> Errors | None:
    """CG:791: the instance id first (unknown or fenced), then the member id."""
    if group_instance_id is not None:
        static_id = d.static_member_id(group_instance_id)
        if static_id is None:
            return Errors.UNKNOWN_MEMBER_ID
        if static_id != member_id:
            return Errors.FENCED_INSTANCE_ID
    if member_id not in d.members:
        return Errors.UNKNOWN_MEMBER_ID
    return None


def update_member(d: Draft, member: Member, request: JoinGroup, parked: ParkedRequest) -> Member:
    """Store the new protocols and timeouts and park the join ``parked`` (the request's own,
    replacing a parked one)."""
    if member.awaiting_join is not None:
        d.emit(
            EventKind.REQUEST_REPLACED,
            member_id=member.member_id,
            group_instance_id=member.group_instance_id,
            reason="replaced_by_newer_join",
            event_id=member.awaiting_join.event_id,
        )
    updated = member.rejoined(
        request.protocols,
        rebalance_timeout_ms(request),
        request.session_timeout_ms,
        parked,
    )
    d.update(updated)
    return updated
