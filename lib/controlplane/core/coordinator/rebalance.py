"""The three entry points of a rebalance (docs/reference/group-coordinator.md §2) and join
completion.

``prepare_rebalance`` (GMM:4787), ``maybe_complete_join_phase`` (GMM:4107),
``maybe_prepare_rebalance_or_complete_join`` (GMM:4766) and ``complete_join`` (GMM:4466).
"""

from __future__ import annotations

from controlplane.core.coordinator import answers
from controlplane.core.coordinator.draft import Draft
from controlplane.core.coordinator.protocol import select_protocol
from controlplane.core.coordinator.records import EventKind, JoinMember, make_join_member
from controlplane.core.coordinator.state import (
    GroupPhase,
    TimerKind,
)
from controlplane.core.errors import Errors


def maybe_prepare_rebalance_or_complete_join(d: Draft, reason: str) -> None:
    if d.can_rebalance():
        prepare_rebalance(d, reason)
    else:
        maybe_complete_join_phase(d)


def prepare_rebalance(d: Draft, reason: str) -> None:
    if d.phase is GroupPhase.COMPLETING_REBALANCE:
        _reset_assignments_and_parked_syncs(d)
    d.cancel(TimerKind.SYNC)
    d.pending_sync.clear()
    initial = d.phase is GroupPhase.EMPTY
    d.emit(EventKind.REBALANCE_STARTED, reason=reason, generation_id=d.generation_id)
    if initial:
        delay_ms = d.config.group_initial_rebalance_delay_ms
        remaining_ms = max(d.rebalance_timeout_ms() - delay_ms, 0)
        d.schedule(
            TimerKind.JOIN, "", delay_ms, initial_delay_ms=delay_ms, remaining_ms=remaining_ms
        )
    d.transition(GroupPhase.PREPARING_REBALANCE)
    _take_in_expansion_queue(d)
    if not initial:
        if d.has_all_members_joined():
            complete_join(d)
        else:
            d.schedule(TimerKind.JOIN, "", d.rebalance_timeout_ms())


def _reset_assignments_and_parked_syncs(d: Draft) -> None:
    """GMM:4896: assignments become empty; parked syncs get REBALANCE_IN_PROGRESS."""
    for member in list(d.members.values()):
        if member.awaiting_sync is not None:
            d.answer(
                answers.sync_error(
                    d, member.awaiting_sync, member.member_id, Errors.REBALANCE_IN_PROGRESS
                )
            )
        updated = member.assigned("")
        d.update(updated)
        if member.awaiting_sync is not None:
            d.reset_session(updated)


def _take_in_expansion_queue(d: Draft) -> None:
    """§14.2: a rebalance takes in every new static member parked by the countdown (the
    countdown ends with the last one)."""
    for member_id in list(d.expansion_queue):
        member = d.unpark(member_id)
        d.add_member(member)
        d.schedule(TimerKind.HEARTBEAT, member.member_id, d.config.group_new_member_join_timeout_ms)


def maybe_complete_join_phase(d: Draft) -> None:
    if (
        d.phase is GroupPhase.PREPARING_REBALANCE
        and d.previous_phase is not GroupPhase.EMPTY
        and d.has_all_members_joined()
    ):
        complete_join(d)


def complete_join(d: Draft) -> None:
    d.cancel(TimerKind.JOIN)
    for member in list(d.members.values()):
        if member.awaiting_join is None and not member.is_static:
            d.remove_member(member.member_id, "rebalance_timeout")
    if d.phase is GroupPhase.DEAD:
        return
    if not _elect_joined_leader(d) and d.members:
        d.schedule(TimerKind.JOIN, "", d.rebalance_timeout_ms())  # nobody rejoined: "stuck"
        return
    _init_next_generation(d)
    if d.phase is GroupPhase.COMPLETING_REBALANCE:
        _answer_joins_and_await_syncs(d)
        d.schedule(TimerKind.SYNC, "", d.rebalance_timeout_ms())


def _elect_joined_leader(d: Draft) -> bool:
    """CG:503: keep a leader that rejoined, else the first member that rejoined."""
    leader = d.member(d.leader_id) if d.leader_id is not None else None
    if leader is not None and leader.awaiting_join is not None:
        return True
    joined = next((m for m in d.members.values() if m.awaiting_join is not None), None)
    if joined is None:
        return False
    d.leader_id = joined.member_id
    return True


def _init_next_generation(d: Draft) -> None:
    d.generation_id += 1
    d.pending_sync.clear()
    if d.members:
        d.protocol_name = select_protocol(list(d.members.values()), d.leader_id)
        d.transition(GroupPhase.COMPLETING_REBALANCE)
    else:
        d.protocol_name = None
        d.transition(GroupPhase.EMPTY)
    d.emit(EventKind.GENERATION_COMPLETED, generation_id=d.generation_id)


def leader_member_list(d: Draft) -> tuple[JoinMember, ...]:
    protocol_name = d.protocol_name
    return tuple(
        [
            make_join_member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                metadata=m.metadata_for(protocol_name),
            )
            for m in d.members.values()
        ]
    )


def _answer_joins_and_await_syncs(d: Draft) -> None:
    """§2 completeClassicGroupJoin step 6, for every member (rejoined or not)."""
    listing = leader_member_list(d)
    leader_id = d.leader_id
    for member in list(d.members.values()):
        member_id = member.member_id
        if member.awaiting_join is not None:
            given = listing if member_id == leader_id else ()
            d.answer(answers.join_ok(d, member.awaiting_join, member_id, given))
        updated = member.joined()
        d.update(updated)
        if member.offline_since_ms is None:  # §14.1: an offline static member owes no sync
            d.reset_session(updated)
            d.pending_sync[member_id] = None
