"""SyncGroup (docs/reference/group-coordinator.md §4, GMM:5222-5360)."""

from __future__ import annotations

from controlplane.core.coordinator import answers
from controlplane.core.coordinator.draft import Draft
from controlplane.core.coordinator.membership import validate_member
from controlplane.core.coordinator.records import EventKind
from controlplane.core.coordinator.requests import SyncGroup
from controlplane.core.coordinator.state import GroupPhase, TimerKind
from controlplane.core.errors import Errors


def sync_error(d: Draft, request: SyncGroup) -> Errors | None:
    """Validation order of §4, on an existing group."""
    header = request.header
    if d.phase is GroupPhase.EMPTY:
        return Errors.UNKNOWN_MEMBER_ID
    if d.phase is GroupPhase.DEAD:
        return Errors.COORDINATOR_NOT_AVAILABLE
    error = validate_member(d, header.member_id, header.group_instance_id)
    if error is not None:
        return error
    if request.generation_id != d.generation_id:
        return Errors.ILLEGAL_GENERATION
    if _inconsistent(request.protocol_type, d.protocol_type) or _inconsistent(
        request.protocol_name, d.protocol_name
    ):
        return Errors.INCONSISTENT_GROUP_PROTOCOL
    if d.phase is GroupPhase.PREPARING_REBALANCE:
        return Errors.REBALANCE_IN_PROGRESS
    return None


def _inconsistent(requested: str | None, group: str | None) -> bool:
    """GMM isProtocolInconsistent: only two known values can disagree (§11 D8, Java). The
    group has no protocol name in its initial rebalance nor after it turned Empty."""
    return requested is not None and group is not None and requested != group


def handle_sync(d: Draft, request: SyncGroup) -> None:
    header = request.header
    error = sync_error(d, request)
    if error is not None:
        d.answer(answers.sync_error(d, answers.parked(header), header.member_id, error))
        return
    _sent_sync(d, header.member_id)
    member = d.members[header.member_id]
    if d.phase is GroupPhase.STABLE:  # Java: no session reset here (§11 D2)
        d.answer(answers.sync_ok(d, answers.parked(header), member.member_id, member.assignment))
        return
    if member.awaiting_sync is not None:
        d.emit(
            EventKind.REQUEST_REPLACED,
            member_id=member.member_id,
            group_instance_id=member.group_instance_id,
            reason="replaced_by_newer_sync",
            event_id=member.awaiting_sync.event_id,
        )
    d.update(member.syncing(answers.parked(header)))
    if member.member_id == d.leader_id:
        _propagate_assignment(d, request)


def _sent_sync(d: Draft, member_id: str) -> None:
    d.pending_sync.pop(member_id, None)
    if not d.pending_sync:
        d.cancel(TimerKind.SYNC)


def _propagate_assignment(d: Draft, request: SyncGroup) -> None:
    """The leader's assignment: members it leaves out get an empty one; unknown ids are
    ignored. Every parked sync is answered and the group becomes Stable."""
    given = {a.member_id: a.assignment for a in request.assignments}
    for member in list(d.members.values()):
        assignment = given.get(member.member_id, "")
        if member.awaiting_sync is None:
            if member.assignment != assignment:  # else the member is unchanged: no copy
                d.update(member.assigned(assignment))
            continue
        updated = member.assigned(assignment)
        d.update(updated)
        d.answer(answers.sync_ok(d, member.awaiting_sync, member.member_id, assignment))
        d.reset_session(updated)
    d.transition(GroupPhase.STABLE)
