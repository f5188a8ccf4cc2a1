"""Opt-in extensions of the KIP-345 draft (docs/reference/group-coordinator.md §14), off by default.

Registration timeout (§14.1): a static member whose session expires goes offline instead of
being removed; when the earliest member still offline has been away for the timeout, every
offline member is removed and one rebalance starts. The deadline is derived from the members
offline now (``Draft.follow_registration_deadline``).

Expansion timeout (§14.2): a new static member joining a Stable or CompletingRebalance group
is parked in ``expansion_queue``; when the countdown started by the first of them ends, one
rebalance takes in those still parked. A parked member may leave by its instance id; the
countdown ends with the last parked member (``Draft.park``, ``Draft.unpark``).
"""

from __future__ import annotations

from controlplane.core.coordinator import answers
from controlplane.core.coordinator.draft import Draft
from controlplane.core.coordinator.rebalance import complete_join, prepare_rebalance
from controlplane.core.coordinator.records import EventKind
from controlplane.core.coordinator.state import (
    GroupPhase,
    Member,
    TimerKind,
    registration_deadline_ms,
)
from controlplane.core.errors import Errors

_STEADY = (GroupPhase.STABLE, GroupPhase.COMPLETING_REBALANCE)


# -- §14.1 registration timeout ---------------------------------------------------------------


def goes_offline(d: Draft, member: Member) -> bool:
    """On session expiry: True if the member went offline instead of being removed."""
    if d.config.group_static_registration_timeout_ms is None:
        return False
    if not member.is_static or member.is_new:
        return False
    d.set_offline(member, d.now_ms)
    d.pending_sync.pop(member.member_id, None)
    d.emit(
        EventKind.STATIC_MEMBER_OFFLINE,
        member_id=member.member_id,
        group_instance_id=member.group_instance_id,
        reason="session_timeout",
    )
    return True


def mark_returned(d: Draft, member: Member) -> Member:
    """A request from an offline member brings it back (its assignment is still cached) and
    restarts its session."""
    if member.offline_since_ms is None:
        return member
    returned = d.set_offline(member, None)
    d.reset_session(returned)  # alive again: its session runs from now
    d.emit(
        EventKind.STATIC_MEMBER_RETURNED,
        member_id=member.member_id,
        group_instance_id=member.group_instance_id,
    )
    return returned


def on_registration_timeout(d: Draft) -> None:
    """Checks the rule against the members offline now: a timer saved with the deadline of a
    member since gone (by a version that kept it) moves to theirs and removes nobody."""
    timeout_ms = d.config.group_static_registration_timeout_ms
    deadline_ms = registration_deadline_ms(d.members.values(), timeout_ms)
    if deadline_ms is not None and deadline_ms > d.now_ms:
        d.schedule_at(TimerKind.REGISTRATION, "", deadline_ms)
        return
    offline = [m.member_id for m in d.members.values() if m.offline_since_ms is not None]
    if not offline:
        return
    for member_id in offline:
        d.remove_member(member_id, "registration_timeout")
    if d.phase in _STEADY:
        prepare_rebalance(d, "registration_timeout")
    elif d.phase is GroupPhase.PREPARING_REBALANCE and d.has_all_members_joined():
        complete_join(d)


# -- §14.2 expansion timeout ------------------------------------------------------------------


def defers_new_static_member(d: Draft) -> bool:
    return d.config.group_static_expansion_timeout_ms is not None and d.phase in _STEADY


def park_for_expansion(d: Draft, member: Member) -> None:
    """Park a new static member's join until the countdown ends (no join timer meanwhile). An
    earlier parked join of the same instance id is answered FENCED_INSTANCE_ID; the countdown
    keeps running (it is parked before the old one goes)."""
    instance_id = member.group_instance_id
    fenced = [q for q in d.expansion_queue.values() if q.group_instance_id == instance_id]
    d.park(member)
    for queued in fenced:
        d.unpark(queued.member_id)
        if queued.awaiting_join is not None:
            error = Errors.FENCED_INSTANCE_ID
            d.answer(answers.join_error(d, queued.awaiting_join, queued.member_id, error))


def leave_parked(d: Draft, group_instance_id: str) -> bool:
    """LeaveGroup by the instance id of a parked member: True if there was one. Its join is
    answered UNKNOWN_MEMBER_ID with member id "" (as the parked join of a removed member,
    §3.9), it will not be taken in, and without another parked member the countdown is over."""
    parked = [q for q in d.expansion_queue.values() if q.group_instance_id == group_instance_id]
    for queued in parked:
        d.unpark(queued.member_id)
        if queued.awaiting_join is not None:
            error = Errors.UNKNOWN_MEMBER_ID
            d.answer(answers.join_error(d, queued.awaiting_join, "", error))
    return bool(parked)


def on_expansion_timeout(d: Draft) -> None:
    if d.expansion_queue and d.phase in _STEADY:
        prepare_rebalance(d, "expansion_timeout")
