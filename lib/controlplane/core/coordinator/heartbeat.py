"""Heartbeat (docs/reference/group-coordinator.md §5, GMM:5501-5616)."""

from __future__ import annotations

from controlplane.core.coordinator import answers, static
from controlplane.core.coordinator.draft import Draft
from controlplane.core.coordinator.membership import validate_member
from controlplane.core.coordinator.requests import Heartbeat, RequestType
from controlplane.core.coordinator.state import Group, GroupPhase, TimerKind
from controlplane.core.coordinator.step import Step, make_step
from controlplane.core.errors import Errors


def handle_heartbeat(d: Draft, request: Heartbeat) -> None:
    header = request.header
    error = _heartbeat_error(d, request)
    if error is None or error is Errors.REBALANCE_IN_PROGRESS:
        member = static.mark_returned(d, d.members[header.member_id])
        d.reset_session(member)
    result = Errors.NONE if error is None else error
    d.answer(answers.simple(d, header, RequestType.HEARTBEAT, result))


def _heartbeat_error(d: Draft, request: Heartbeat) -> Errors | None:
    header = request.header
    if d.phase is GroupPhase.DEAD:
        return Errors.COORDINATOR_NOT_AVAILABLE
    error = validate_member(d, header.member_id, header.group_instance_id)
    if error is not None:
        return error
    if request.generation_id != d.generation_id:
        return Errors.ILLEGAL_GENERATION
    if d.phase is GroupPhase.EMPTY:
        return Errors.UNKNOWN_MEMBER_ID
    if d.phase is GroupPhase.PREPARING_REBALANCE:
        return Errors.REBALANCE_IN_PROGRESS
    return None


LIVE_PHASES = (GroupPhase.STABLE, GroupPhase.COMPLETING_REBALANCE, GroupPhase.PREPARING_REBALANCE)


def fast_heartbeat(group: Group, request: Heartbeat, now_ms: int) -> Step | None:
    """The common case without thawing the group: a member of the current generation that is
    not offline. Returns None for anything else (the general path decides). The result equals
    the general path's (the stateful test compares both)."""
    header = request.header
    if group.phase not in LIVE_PHASES or request.generation_id != group.generation_id:
        return None
    member = group.member(header.member_id)
    if member is None or member.offline_since_ms is not None:
        return None
    if header.group_instance_id not in (None, member.group_instance_id):
        return None
    updated = group.rescheduled(
        TimerKind.HEARTBEAT, member.member_id, now_ms + member.session_timeout_ms
    )
    error = Errors.NONE
    if group.phase is GroupPhase.PREPARING_REBALANCE:
        error = Errors.REBALANCE_IN_PROGRESS
    decision = answers.plain(group.group_id, now_ms, header, RequestType.HEARTBEAT, error)
    return make_step(group=updated, decisions=(decision,), events=())
