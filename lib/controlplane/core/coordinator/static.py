"""Opt-in extensions of the KIP-345 draft (docs/reference/group-coordinator.md §14), off by default.

Registration timeout (§14.1): a static member whose session expires goes offline instead of
being removed; when the earliest member still offline has been away for the timeout, every
offline member is removed and one rebalance starts.

Expansion timeout (§14.2): a new static member joining a Stable or CompletingRebalance group
is parked in ``expansion_queue``; when the countdown started by the first of them ends, one
rebalance takes them all in.
"""

from __future__ import annotations

import dataclasses

from controlplane.core.coordinator import answers
from controlplane.core.coordinator.draft import Draft
from controlplane.core.coordinator.rebalance import complete_join, prepare_rebalance
from controlplane.core.coordinator.records import EventKind
from controlplane.core.coordinator.state import GroupPhase, Member, TimerKind
from controlplane.core.errors import Errors

_STEADY = (GroupPhase.STABLE, GroupPhase.COMPLETING_REBALANCE)


# -- §14.1 registration timeout ---------------------------------------------------------------


def goes_offline(d: Draft, member: Member) -> bool:
    """On session expiry: True if the member went offline instead of being removed."""
    if d.config.group_static_registration_timeout_ms is None:
        return False
    if not member.is_static or member.is_new:
        return False
    d.update(dataclasses.replace(member, offline_since_ms=d.now_ms))
    d.pending_sync.pop(member.member_id, None)
    d.emit(
        EventKind.STATIC_MEMBER_OFFLINE,
        member_id=member.member_id,
        group_instance_id=member.group_instance_id,
        reason="session_timeout",
    )
    _schedule_registration(d)
    return True


def mark_returned(d: Draft, member: Member) -> Member:
    """A request from an offline member brings it back (its assignment is still cached) and
    restarts its session."""
    if member.offline_since_ms is None:
        return member
    returned = dataclasses.replace(member, offline_since_ms=None)
    d.update(returned)
    d.reset_session(returned)  # alive again: its session runs from now
    d.emit(
        EventKind.STATIC_MEMBER_RETURNED,
        member_id=member.member_id,
        group_instance_id=member.group_instance_id,
    )
    _schedule_registration(d)
    return returned


def _schedule_registration(d: Draft) -> None:
    timeout_ms = d.config.group_static_registration_timeout_ms
    offline = [m.offline_since_ms for m in d.members.values() if m.offline_since_ms is not None]
    if timeout_ms is None or not offline:
        d.cancel(TimerKind.REGISTRATION)
    else:
        d.schedule_at(TimerKind.REGISTRATION, "", min(offline) + timeout_ms)


def on_registration_timeout(d: Draft) -> None:
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
    """Park a new static member's join until the countdown ends (no join timer meanwhile)."""
    for queued in list(d.expansion_queue.values()):
        if queued.group_instance_id == member.group_instance_id and queued.awaiting_join:
            del d.expansion_queue[queued.member_id]
            fenced = answers.join_error(
                d, queued.awaiting_join, queued.member_id, Errors.FENCED_INSTANCE_ID
            )
            d.answer(fenced)
    d.expansion_queue[member.member_id] = member
    timeout_ms = d.config.group_static_expansion_timeout_ms
    if timeout_ms is not None and (TimerKind.EXPANSION, "") not in d.timers:
        d.schedule(TimerKind.EXPANSION, "", timeout_ms)


def on_expansion_timeout(d: Draft) -> None:
    if d.expansion_queue and d.phase in _STEADY:
        prepare_rebalance(d, "expansion_timeout")
