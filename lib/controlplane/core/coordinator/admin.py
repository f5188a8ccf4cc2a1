"""DescribeGroups, DeleteGroups, the ``groups`` table row, and a coordinator failover."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from controlplane.core.coordinator import answers
from controlplane.core.coordinator.draft import Draft
from controlplane.core.coordinator.rebalance import prepare_rebalance
from controlplane.core.coordinator.records import DescribedMember, EventKind
from controlplane.core.coordinator.requests import Header, RequestType
from controlplane.core.coordinator.state import Group, GroupPhase, Member, Timer, TimerKind
from controlplane.core.errors import Errors

# docs/reference/events.md §2: the protocol name is "" outside these states.
_PROTOCOL_SHOWN = (GroupPhase.STABLE, GroupPhase.COMPLETING_REBALANCE)


def described_members(members: tuple[Member, ...]) -> tuple[DescribedMember, ...]:
    """Each member's stored assignment, in every state, as Kafka's coordinator describes a
    classic group (``describeNoMetadata``, GMM:716): during a rebalance from Stable that is the
    previous generation's assignment, after one from CompletingRebalance empty."""
    return tuple(DescribedMember(*_described(m)) for m in members)


def _described(m: Member) -> tuple[str, str | None, str, str, str, bool]:
    """A member as described: DescribedMember's fields, in its order."""
    return (
        m.member_id,
        m.group_instance_id,
        m.client_id,
        m.client_host,
        m.assignment,
        m.offline_since_ms is not None,
    )


_DESCRIBED_FIELDS: Final = DescribedMember.__slots__


def summary(group: Group | None) -> dict[str, Any]:
    """The describe fields; a group that does not exist is Dead."""
    if group is None:
        return {
            "group_state": GroupPhase.DEAD.value,
            "generation_id": -1,
            "protocol_type": "",
            "protocol_name": "",
            "leader_id": "",
            "group_members": (),
        }
    return {
        "group_state": group.phase.value,
        "generation_id": group.generation_id,
        "protocol_type": group.protocol_type or "",
        "protocol_name": (group.protocol_name or "") if group.phase in _PROTOCOL_SHOWN else "",
        "leader_id": group.leader_id or "",
        "group_members": described_members(group.members),
    }


def describe(d: Draft, header: Header, group: Group | None) -> None:
    d.answer(answers.simple(d, header, RequestType.DESCRIBE, Errors.NONE, **summary(group)))


def delete_group(d: Draft, header: Header) -> None:
    """DeleteGroups: only an Empty group can be deleted (its offsets go with it)."""
    error = Errors.NONE
    if d.phase is GroupPhase.DEAD:
        error = Errors.GROUP_ID_NOT_FOUND
    elif d.phase is not GroupPhase.EMPTY:
        error = Errors.NON_EMPTY_GROUP
    d.answer(answers.simple(d, header, RequestType.DELETE_GROUP, error))
    if error is Errors.NONE:
        d.emit(EventKind.GROUP_DELETED, reason="delete_group", generation_id=d.generation_id)
        d.deleted = True


def group_row(group: Group, now_ms: int) -> dict[str, Any]:
    """The ``groups`` table row of docs/reference/events.md §2: the describe fields (``summary``)
    and the described members, one dict each. Built directly, as it is built per group a batch
    touches (tests/coordinator: it equals the row made from ``summary``)."""
    return table_row(
        group.group_id,
        group.phase,
        group.generation_id,
        group.protocol_type,
        group.protocol_name,
        group.leader_id,
        map(_described, group.members),
        now_ms,
    )


def table_row(
    group_id: str,
    phase: GroupPhase,
    generation_id: int,
    protocol_type: str | None,
    protocol_name: str | None,
    leader_id: str | None,
    described: Iterable[tuple[str, str | None, str, str, str, bool]],
    now_ms: int,
) -> dict[str, Any]:
    """``group_row`` from a group's fields and its members as described (``_described``), for
    a group held as its encoding's lists too (fields.py)."""
    names = _DESCRIBED_FIELDS
    return {
        "group_id": group_id,
        "group_state": phase.value,
        "generation_id": generation_id,
        "protocol_type": protocol_type or "",
        "protocol_name": (protocol_name or "") if phase in _PROTOCOL_SHOWN else "",
        "leader_id": leader_id or "",
        "members": [dict(zip(names, member, strict=True)) for member in described],
        "updated_at_ms": now_ms,
    }


def reset_sessions(d: Draft) -> None:
    """What Kafka does when a coordinator loads a group: every session restarts now. Offline
    static members (§14.1) stay offline. A rebalance the load interrupted gets a whole join or
    sync deadline again (``_restart_rebalance_deadline``), and every other timer already overdue
    fires at the load, not at its old deadline (``_overdue_timers_fire_now``)."""
    touched = _restart_rebalance_deadline(d)
    for member in d.members.values():
        if member.offline_since_ms is None:
            d.reset_session(member)
            touched = True
    _overdue_timers_fire_now(d)
    if touched:
        d.emit(
            EventKind.STATE_CHANGED,
            state_from=d.phase.value,
            state_to=d.phase.value,
            reason="coordinator_failover",
            generation_id=d.generation_id,
        )
    if len(d.members) > d.config.group_max_size and d.can_rebalance():
        # GMM onLoaded: "Freshly-loaded group is over capacity. Rebalancing in order to give a
        # chance for consumers to commit offsets"; rejoins beyond the limit are then refused
        # GROUP_MAX_SIZE_REACHED (acceptJoiningMember).
        prepare_rebalance(d, "group_max_size")


def _restart_rebalance_deadline(d: Draft) -> bool:
    """Kafka loads a group as it last stored it, Stable or Empty, so the members of a rebalance
    interrupted by the failover join (and sync) again, each with a whole rebalance timeout after
    the load. Here the rebalance goes on and its answers wait in the state, so its deadline
    moves instead, to at least a whole rebalance timeout after the load (a later deadline is
    kept): the join deadline (the initial delay's step, which keeps what is left of its
    extension, or the rebalance timeout) or the pending-sync deadline while members owe their
    SyncGroup (in CompletingRebalance, or in Stable after the leader's). A JoinGroup or
    SyncGroup that waited in the backlog then joins the rebalance it was sent to."""
    timer = _rebalance_timer(d)
    if timer is None:
        return False
    step_ms = d.rebalance_timeout_ms() if timer.delay_ms is None else timer.delay_ms
    _reschedule(d, timer, max(step_ms, timer.deadline_ms - d.now_ms))
    return True


def _rebalance_timer(d: Draft) -> Timer | None:
    """The deadline of the rebalance in progress: the join timer while it prepares, the sync
    timer while members owe their SyncGroup."""
    if d.phase is GroupPhase.PREPARING_REBALANCE:
        return d.timers.get((TimerKind.JOIN, ""))
    return d.timers.get((TimerKind.SYNC, "")) if d.pending_sync else None


def _reschedule(d: Draft, timer: Timer, delay_ms: int) -> None:
    """``timer`` again, ``delay_ms`` from now (an initial delay's step keeps its fields)."""
    d.schedule(
        timer.kind,
        timer.member_id,
        delay_ms,
        initial_delay_ms=timer.delay_ms,
        remaining_ms=timer.remaining_ms,
    )


def _overdue_timers_fire_now(d: Draft) -> None:
    """The timers the load did not move that are due at it (a pending member's, §14.1's
    registration, §14.2's expansion, the retention's) are scheduled again at the load, in their
    (deadline, sequence) order, so that they fire there, in that order: fired at their old
    deadlines, they would remove members and start or complete a rebalance at a time before
    the load, whose new deadlines would then be overdue too. A pending member
    (MEMBER_ID_REQUIRED) is then removed at the load: Kafka does not store pending members, and
    the coordinator that loads the group refuses their JoinGroup with the id."""
    now_ms = d.now_ms
    overdue = sorted(
        (t for t in d.timers.values() if t.deadline_ms <= now_ms),
        key=lambda t: (t.deadline_ms, t.seq),
    )
    for timer in overdue:
        _reschedule(d, timer, 0)
