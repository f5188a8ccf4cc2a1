"""A step's working copy of a group.

Every step thaws the frozen ``Group`` into a ``Draft``, applies Kafka's rules to it, and freezes
it again; the draft never escapes the step, so the machine stays a pure function
``(group, request, now) -> (group, decisions, events)``. The draft owns the only mutations:
member add/remove, transitions, keyed timers, and the rows the step emits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from enum import Enum
from operator import attrgetter, is_
from typing import TypeVar

from controlplane.core.config import CoordinatorConfig
from controlplane.core.coordinator import answers
from controlplane.core.coordinator.records import Decision, EventKind, GroupEvent, make_event
from controlplane.core.coordinator.state import (
    Group,
    GroupPhase,
    Member,
    StoredOffset,
    Timer,
    TimerKind,
    make_group,
    make_timer,
    registration_deadline_ms,
)
from controlplane.core.errors import Errors

_SEQ = attrgetter("seq")
_DEADLINE = attrgetter("deadline_ms")
_T = TypeVar("_T")

# CGS:123-129: the states each state may be entered from.
VALID_PREVIOUS: dict[GroupPhase, frozenset[GroupPhase]] = {
    GroupPhase.EMPTY: frozenset({GroupPhase.PREPARING_REBALANCE}),
    GroupPhase.PREPARING_REBALANCE: frozenset(
        {GroupPhase.STABLE, GroupPhase.COMPLETING_REBALANCE, GroupPhase.EMPTY}
    ),
    GroupPhase.COMPLETING_REBALANCE: frozenset({GroupPhase.PREPARING_REBALANCE}),
    GroupPhase.STABLE: frozenset({GroupPhase.COMPLETING_REBALANCE}),
    GroupPhase.DEAD: frozenset(GroupPhase),
}


def _scalars(group: Group | Draft) -> tuple[object, ...]:
    """The fields of a group (or of its draft) that are not tuples."""
    return (
        group.group_id,
        group.phase,
        group.previous_phase,
        group.generation_id,
        group.protocol_type,
        group.protocol_name,
        group.leader_id,
        group.new_member_added,
        group.timer_seq,
        group.empty_since_ms,
        group.last_commit_ms,
    )


def _same_items(items: Collection[_T], before: tuple[_T, ...]) -> tuple[_T, ...]:
    """``before`` if ``items`` holds the very same objects in the same order, else ``items`` as
    a tuple (identity, not equality: a changed member is never compared field by field)."""
    if len(items) == len(before) and (not before or all(map(is_, items, before))):
        return before
    return tuple(items)


class Own(Enum):
    STEP = "the request the step handles (None for a timer)"


class Draft:
    """Mutable within one step only. ``now_ms`` and ``event_id`` describe what is running."""

    __slots__ = (
        "_offsets",
        "_timers",
        "config",
        "decisions",
        "deleted",
        "empty_since_ms",
        "event_id",
        "events",
        "expansion_queue",
        "generation_id",
        "group_id",
        "last_commit_ms",
        "leader_id",
        "members",
        "new_member_added",
        "now_ms",
        "origin",
        "pending_join",
        "pending_sync",
        "phase",
        "previous_phase",
        "protocol_name",
        "protocol_type",
        "timer_seq",
    )

    def __init__(
        self, group: Group, now_ms: int, event_id: str | None, config: CoordinatorConfig
    ) -> None:
        self.origin = group  # the step's input: never mutated; freeze reuses its unchanged parts
        self.group_id = group.group_id
        self.phase = group.phase
        self.previous_phase = group.previous_phase
        self.generation_id = group.generation_id
        self.protocol_type = group.protocol_type
        self.protocol_name = group.protocol_name
        self.leader_id = group.leader_id
        self.members: dict[str, Member] = {m.member_id: m for m in group.members}
        pending_join = group.pending_join_members
        pending_sync = group.pending_sync_members
        self.pending_join: dict[str, None] = dict.fromkeys(pending_join) if pending_join else {}
        self.pending_sync: dict[str, None] = dict.fromkeys(pending_sync) if pending_sync else {}
        self.new_member_added = group.new_member_added
        self._timers: dict[tuple[TimerKind, str], Timer] | None = None
        self.timer_seq = group.timer_seq
        self._offsets: dict[tuple[str, int], StoredOffset] | None = None
        self.empty_since_ms = group.empty_since_ms
        self.last_commit_ms = group.last_commit_ms
        self.expansion_queue: dict[str, Member] = (
            {m.member_id: m for m in group.expansion_queue} if group.expansion_queue else {}
        )
        self.deleted = False
        self.now_ms = now_ms
        self.event_id = event_id
        self.config = config
        self.decisions: list[Decision] = []
        self.events: list[GroupEvent] = []

    def freeze(self) -> Group | None:
        """The step's result: the input group itself when nothing changed, else a new group
        sharing the input's unchanged tuples."""
        if self.deleted:
            return None
        origin = self.origin
        members = _same_items(self.members.values(), origin.members)
        # Most steps leave these empty or untouched: no call, no copy, no sort for them.
        pending_join = origin.pending_join_members
        if self.pending_join or pending_join:
            pending_join = _same_items(self.pending_join.keys(), pending_join)
        pending_sync = origin.pending_sync_members
        if self.pending_sync or pending_sync:
            pending_sync = _same_items(self.pending_sync.keys(), pending_sync)
        timers = origin.timers
        if self._timers is not None:
            # In (deadline, sequence) order: by sequence, then stably by deadline (two sorts
            # on one attribute are quicker than one on a tuple key).
            ordered = sorted(self._timers.values(), key=_SEQ)
            ordered.sort(key=_DEADLINE)
            timers = _same_items(ordered, timers)
        offsets = origin.offsets
        if self._offsets is not None:
            offsets = _same_items(self._offsets.values(), offsets)
        expansion_queue = origin.expansion_queue
        if self.expansion_queue or expansion_queue:
            expansion_queue = _same_items(self.expansion_queue.values(), expansion_queue)
        if (
            members is origin.members
            and pending_join is origin.pending_join_members
            and pending_sync is origin.pending_sync_members
            and timers is origin.timers
            and offsets is origin.offsets
            and expansion_queue is origin.expansion_queue
            and _scalars(self) == _scalars(origin)
        ):
            return origin
        return make_group(
            group_id=self.group_id,
            phase=self.phase,
            previous_phase=self.previous_phase,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id,
            members=members,
            pending_join_members=pending_join,
            pending_sync_members=pending_sync,
            new_member_added=self.new_member_added,
            timers=timers,
            timer_seq=self.timer_seq,
            offsets=offsets,
            empty_since_ms=self.empty_since_ms,
            last_commit_ms=self.last_commit_ms,
            expansion_queue=expansion_queue,
        )

    @property
    def timers(self) -> dict[tuple[TimerKind, str], Timer]:
        """Keyed by (kind, member id); thawed on first use: most join and sync steps never
        touch a timer."""
        if self._timers is None:
            self._timers = {(t.kind, t.member_id): t for t in self.origin.timers}
        return self._timers

    @property
    def offsets(self) -> dict[tuple[str, int], StoredOffset]:
        """Thawed on first use: most requests never touch the offsets."""
        if self._offsets is None:
            self._offsets = {(o.topic, o.partition): o for o in self.origin.offsets}
        return self._offsets

    # -- rows ---------------------------------------------------------------------------------

    def answer(self, decision: Decision) -> None:
        self.decisions.append(decision)

    def emit(
        self,
        kind: EventKind,
        *,
        member_id: str | None = None,
        group_instance_id: str | None = None,
        reason: str | None = None,
        state_from: str | None = None,
        state_to: str | None = None,
        generation_id: int | None = None,
        event_id: str | Own | None = Own.STEP,
    ) -> None:
        """One audit row at the step's clock; ``event_id`` defaults to the step's request."""
        self.events.append(
            make_event(
                group_id=self.group_id,
                at_ms=self.now_ms,
                kind=kind,
                member_id=member_id,
                group_instance_id=group_instance_id,
                reason=reason,
                state_from=state_from,
                state_to=state_to,
                generation_id=generation_id,
                event_id=self.event_id if event_id is Own.STEP else event_id,
            )
        )

    # -- derived facts (§1) -------------------------------------------------------------------

    def member(self, member_id: str) -> Member | None:
        return self.members.get(member_id)

    def update(self, member: Member) -> None:
        self.members[member.member_id] = member

    def static_member_id(self, group_instance_id: str) -> str | None:
        for member in self.members.values():
            if member.group_instance_id == group_instance_id:
                return member.member_id
        return None

    def awaiting_join_count(self) -> int:
        count = 0
        for member in self.members.values():
            if member.awaiting_join is not None:
                count += 1
        return count

    def has_all_members_joined(self) -> bool:
        """Every member awaits its join answer (the awaiting count is the member count)."""
        if self.pending_join:
            return False
        for member in self.members.values():  # noqa: SIM110 (a plain loop: quicker than all())
            if member.awaiting_join is None:
                return False
        return True

    def rebalance_timeout_ms(self) -> int:
        """The members' longest, 0 without members (a plain loop: quicker than ``max``)."""
        longest: int | None = None
        for member in self.members.values():
            if longest is None or member.rebalance_timeout_ms > longest:
                longest = member.rebalance_timeout_ms
        return 0 if longest is None else longest

    def can_rebalance(self) -> bool:
        return self.phase in (GroupPhase.STABLE, GroupPhase.COMPLETING_REBALANCE, GroupPhase.EMPTY)

    # -- timers (§0.2-2: scheduling a key replaces its pending timer) ---------------------------

    def schedule(
        self,
        kind: TimerKind,
        member_id: str,
        delay_ms: int,
        *,
        initial_delay_ms: int | None = None,
        remaining_ms: int | None = None,
    ) -> None:
        timer = make_timer(
            kind=kind,
            member_id=member_id,
            deadline_ms=self.now_ms + delay_ms,
            seq=self.timer_seq,
            delay_ms=initial_delay_ms,
            remaining_ms=remaining_ms,
        )
        self.timer_seq += 1
        timers = self._timers if self._timers is not None else self.timers
        # Replaces the key's pending timer. The dict's order never matters: timers are ordered
        # by (deadline, sequence), and sequences are unique.
        timers[(kind, member_id)] = timer

    def schedule_at(self, kind: TimerKind, member_id: str, deadline_ms: int) -> None:
        self.schedule(kind, member_id, deadline_ms - self.now_ms)

    def cancel(self, kind: TimerKind, member_id: str = "") -> None:
        if self._timers is not None:
            self._timers.pop((kind, member_id), None)
            return
        for timer in self.origin.timers:  # thawed only if there is something to cancel
            if timer.kind is kind and timer.member_id == member_id:
                self.timers.pop((kind, member_id), None)
                return

    def reset_session(self, member: Member) -> None:
        self.schedule(TimerKind.HEARTBEAT, member.member_id, member.session_timeout_ms)

    # -- transitions (§2) ---------------------------------------------------------------------

    def transition(self, target: GroupPhase) -> None:
        if self.phase not in VALID_PREVIOUS[target]:
            raise AssertionError(f"illegal transition {self.phase} -> {target}")
        self.emit(
            EventKind.STATE_CHANGED,
            state_from=self.phase.value,
            state_to=target.value,
            generation_id=self.generation_id,
        )
        self.previous_phase = self.phase
        self.phase = target
        if target is GroupPhase.EMPTY:
            self.empty_since_ms = self.now_ms
            self.schedule_retention()
        elif self.previous_phase is GroupPhase.EMPTY:
            self.cancel(TimerKind.RETENTION)

    def schedule_retention(self) -> None:
        """An Empty group's offsets and the group expire retention after the later of becoming
        Empty and the last commit (Kafka's OffsetConfig, KIP-211)."""
        base_ms = max(self.empty_since_ms or self.now_ms, self.last_commit_ms or 0)
        self.schedule_at(TimerKind.RETENTION, "", base_ms + self.config.offsets_retention_ms)

    # -- membership (CG add/remove) -----------------------------------------------------------

    def add_member(self, member: Member) -> None:
        """CG add: static mapping, protocol type, leader, awaiting count, pending set."""
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.pending_join.pop(member.member_id, None)
        self.emit(
            EventKind.MEMBER_ADDED,
            member_id=member.member_id,
            group_instance_id=member.group_instance_id,
            reason="join",
        )

    def remove_member(self, member_id: str, reason: str, *, cancel_timer: bool = True) -> None:
        """CG remove, answering the member's parked requests with UNKNOWN_MEMBER_ID."""
        member = self.members.pop(member_id)
        if member.awaiting_join is not None:
            self.answer(
                answers.join_error(self, member.awaiting_join, "", Errors.UNKNOWN_MEMBER_ID)
            )
        if member.awaiting_sync is not None:
            self.answer(
                answers.sync_error(self, member.awaiting_sync, member_id, Errors.UNKNOWN_MEMBER_ID)
            )
        if cancel_timer:
            self.cancel(TimerKind.HEARTBEAT, member_id)
        self.pending_join.pop(member_id, None)
        self.pending_sync.pop(member_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        if member.offline_since_ms is not None:
            self.follow_registration_deadline()
        self.emit(
            EventKind.MEMBER_REMOVED,
            member_id=member_id,
            group_instance_id=member.group_instance_id,
            reason=reason,
        )

    # -- §14 extensions: offline static members, members parked by the countdown ----------------

    def set_offline(self, member: Member, since_ms: int | None) -> Member:
        """§14.1: the member is offline since ``since_ms``, or back (None)."""
        changed = dataclasses.replace(member, offline_since_ms=since_ms)
        self.members[member.member_id] = changed
        self.follow_registration_deadline()
        return changed

    def follow_registration_deadline(self) -> None:
        """§14.1: the registration timer is due at the earliest ``offline_since_ms`` among the
        members offline now plus the timeout, and exists only while one is offline. Every change
        to that set (``set_offline``, ``remove_member``: leave, max-size refusal, the timeout
        itself) calls this, so a deadline never outlives its member. An unchanged deadline keeps
        its timer (and its place among equal deadlines)."""
        timeout_ms = self.config.group_static_registration_timeout_ms
        deadline_ms = registration_deadline_ms(self.members.values(), timeout_ms)
        if deadline_ms is None:
            self.cancel(TimerKind.REGISTRATION)
            return
        current = self.timers.get((TimerKind.REGISTRATION, ""))
        if current is None or current.deadline_ms != deadline_ms:
            self.schedule_at(TimerKind.REGISTRATION, "", deadline_ms)

    def park(self, member: Member) -> None:
        """§14.2: hold a new static member's join; the first one parked starts the countdown."""
        self.expansion_queue[member.member_id] = member
        timeout_ms = self.config.group_static_expansion_timeout_ms
        if timeout_ms is not None and (TimerKind.EXPANSION, "") not in self.timers:
            self.schedule(TimerKind.EXPANSION, "", timeout_ms)

    def unpark(self, member_id: str) -> Member:
        """§14.2: take a member out of the queue (taken in, fenced or gone); the countdown ends
        with the last one, so it never runs without a parked member."""
        member = self.expansion_queue.pop(member_id)
        if not self.expansion_queue:
            self.cancel(TimerKind.EXPANSION)
        return member
