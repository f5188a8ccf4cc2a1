"""LeaveGroup, single and batch (docs/reference/group-coordinator.md §6, GMM:5688-5995, KIP-345)."""

from __future__ import annotations

from controlplane.core.coordinator import answers, static
from controlplane.core.coordinator.draft import Draft
from controlplane.core.coordinator.membership import validate_member
from controlplane.core.coordinator.rebalance import (
    maybe_complete_join_phase,
    prepare_rebalance,
)
from controlplane.core.coordinator.records import MemberResult
from controlplane.core.coordinator.requests import LeaveGroup, LeaveIdentity, RequestType
from controlplane.core.coordinator.state import GroupPhase, TimerKind
from controlplane.core.errors import Errors

NEWEST_LEAVE_VERSION = 5


def identities(request: LeaveGroup) -> tuple[LeaveIdentity, ...]:
    """A leave without ``members`` names the one member of its header (LeaveGroup v0-2)."""
    if request.members is not None:
        return request.members
    header = request.header
    return (LeaveIdentity(header.member_id, header.group_instance_id, header.reason),)


def leave_answer(d: Draft, request: LeaveGroup, results: tuple[MemberResult, ...]) -> None:
    """v<=2 responses carry the member's error at the top level (LeaveGroupResponse)."""
    version = request.header.request_version
    version = NEWEST_LEAVE_VERSION if version is None else version
    top = Errors.NONE
    if version <= 2:
        top = next((Errors(r.error_code) for r in results if r.error_code), Errors.NONE)
    d.answer(answers.simple(d, request.header, RequestType.LEAVE, top, member_results=results))


def handle_leave(d: Draft, request: LeaveGroup) -> None:
    if d.phase is GroupPhase.DEAD:
        d.answer(
            answers.simple(
                d,
                request.header,
                RequestType.LEAVE,
                Errors.COORDINATOR_NOT_AVAILABLE,
                member_results=(),
            )
        )
        return
    left = False  # a member or pending id left (a parked member leaving starts nothing)
    results: list[MemberResult] = []
    for identity in identities(request):
        error, removed = _remove(d, identity.member_id, identity.group_instance_id)
        results.append(MemberResult(identity.member_id, identity.group_instance_id, error.code))
        left = left or removed
    leave_answer(d, request, tuple(results))
    if left:
        if d.phase in (GroupPhase.STABLE, GroupPhase.COMPLETING_REBALANCE):
            prepare_rebalance(d, "member_left")
        else:
            maybe_complete_join_phase(d)


def _remove(d: Draft, member_id: str, instance_id: str | None) -> tuple[Errors, bool]:
    """The identity's answer, and whether a member or pending id left the group."""
    if member_id == "":
        static_id = d.static_member_id(instance_id) if instance_id is not None else None
        if static_id is not None:
            d.remove_member(static_id, "leave")
            return Errors.NONE, True
        if instance_id is not None and static.leave_parked(d, instance_id):
            return Errors.NONE, False  # §14.2: parked by the countdown, never a member
        return Errors.UNKNOWN_MEMBER_ID, False
    if member_id in d.pending_join:
        del d.pending_join[member_id]
        d.cancel(TimerKind.HEARTBEAT, member_id)
        return Errors.NONE, True
    error = validate_member(d, member_id, instance_id)
    if error is not None:
        return error, False
    d.remove_member(member_id, "leave")
    return Errors.NONE, True
