"""The state of one consumer group (docs/reference/group-coordinator.md §1) as immutable values.

A ``Group`` is a frozen dataclass of tuples, comparable with ``==`` and encoded by ``codec``.
Members keep insertion (join) order, which is the model's iteration order (§0.2-6). Timers are
named deadlines kept in the state (§0.2-2); ``timers.py`` reads them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from operator import attrgetter
from typing import Final

from controlplane.core.coordinator.requests import Protocol
from controlplane.core.frozen import fast_constructor


class GroupPhase(StrEnum):
    """Kafka's ClassicGroupState; the value is Kafka's state name (describe, groups table)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class TimerKind(IntEnum):
    """Timer names. A timer's key is (kind, member_id); member_id is "" for group timers."""

    HEARTBEAT = 1  # session, new-member join, pending member (§7.1)
    JOIN = 2  # rebalance timeout or initial delay (§7.2, §3.7)
    SYNC = 3  # pending sync (§7.3)
    RETENTION = 4  # offsets and Empty group expiry (offsets.retention.minutes)
    REGISTRATION = 5  # §14.1 static registration timeout
    EXPANSION = 6  # §14.2 static expansion countdown


@dataclass(frozen=True, slots=True)
class Timer:
    kind: TimerKind
    member_id: str
    deadline_ms: int
    seq: int  # scheduling sequence: FIFO among equal deadlines
    delay_ms: int | None = None  # initial-rebalance join timer only (§3.7)
    remaining_ms: int | None = None


@dataclass(frozen=True, slots=True)
class ParkedRequest:
    """A JoinGroup or SyncGroup waiting for its answer: what the answer row needs."""

    event_id: str
    event_time_ms: int
    request_version: int | None
    group_instance_id: str | None


@dataclass(frozen=True, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[Protocol, ...]
    assignment: str = ""  # base64; "" = empty
    awaiting_join: ParkedRequest | None = None
    awaiting_sync: ParkedRequest | None = None
    is_new: bool = False
    offline_since_ms: int | None = None  # §14.1: a static member whose session expired

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def has_satisfied_heartbeat(self) -> bool:
        """CGM:208: not new, and awaiting a join or sync answer."""
        return not self.is_new and (
            self.awaiting_join is not None or self.awaiting_sync is not None
        )

    # The copies a step makes, through the quick constructor (``dataclasses.replace`` costs
    # several times more).

    def rejoined(
        self,
        protocols: tuple[Protocol, ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        request: ParkedRequest,
    ) -> Member:
        """New protocols and timeouts, with the join parked."""
        return self._copy(
            protocols,
            rebalance_timeout_ms,
            session_timeout_ms,
            self.assignment,
            request,
            self.awaiting_sync,
            self.is_new,
        )

    def joined(self) -> Member:
        """The join answered at completion: no longer new, nothing parked."""
        return self._copy(
            self.protocols,
            self.rebalance_timeout_ms,
            self.session_timeout_ms,
            self.assignment,
            None,
            self.awaiting_sync,
            False,
        )

    def syncing(self, request: ParkedRequest) -> Member:
        return self._copy(
            self.protocols,
            self.rebalance_timeout_ms,
            self.session_timeout_ms,
            self.assignment,
            self.awaiting_join,
            request,
            self.is_new,
        )

    def assigned(self, assignment: str) -> Member:
        """A new assignment; a parked sync is answered with it."""
        return self._copy(
            self.protocols,
            self.rebalance_timeout_ms,
            self.session_timeout_ms,
            assignment,
            self.awaiting_join,
            None,
            self.is_new,
        )

    def _copy(
        self,
        protocols: tuple[Protocol, ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        assignment: str,
        awaiting_join: ParkedRequest | None,
        awaiting_sync: ParkedRequest | None,
        is_new: bool,
    ) -> Member:
        return make_member(
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=self.protocol_type,
            protocols=protocols,
            assignment=assignment,
            awaiting_join=awaiting_join,
            awaiting_sync=awaiting_sync,
            is_new=is_new,
            offline_since_ms=self.offline_since_ms,
        )

    def metadata_for(self, protocol_name: str | None) -> str:
        for protocol in self.protocols:
            if protocol.name == protocol_name:
                return protocol.metadata
        return ""


@dataclass(frozen=True, slots=True)
class StoredOffset:
    topic: str
    partition: int
    offset: int
    metadata: str | None
    commit_time_ms: int


@dataclass(frozen=True, slots=True)
class Group:
    group_id: str
    phase: GroupPhase = GroupPhase.EMPTY
    previous_phase: GroupPhase = GroupPhase.DEAD
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: tuple[Member, ...] = ()
    pending_join_members: tuple[str, ...] = ()
    pending_sync_members: tuple[str, ...] = ()
    new_member_added: bool = False
    timers: tuple[Timer, ...] = ()  # kept sorted by (deadline_ms, seq): timers[0] is next
    timer_seq: int = 0
    offsets: tuple[StoredOffset, ...] = ()
    empty_since_ms: int | None = None  # when the group last became Empty (retention base)
    last_commit_ms: int | None = None
    expansion_queue: tuple[Member, ...] = ()  # §14.2: new static members parked by the countdown

    def member(self, member_id: str) -> Member | None:
        for member in self.members:
            if member.member_id == member_id:
                return member
        return None

    def static_member_id(self, group_instance_id: str) -> str | None:
        for member in self.members:
            if member.group_instance_id == group_instance_id:
                return member.member_id
        return None

    @property
    def next_deadline_ms(self) -> int | None:
        """When the group's next timer is due (its timers are in order: the head)."""
        timers = self.timers
        return timers[0].deadline_ms if timers else None

    def rescheduled(self, kind: TimerKind, member_id: str, deadline_ms: int) -> Group:
        """``Draft.schedule`` on a frozen group, for the heartbeat fast path (no thaw): the
        key's pending timer replaced by one due at ``deadline_ms`` with the group's next
        sequence, the timers kept in (deadline, sequence) order."""
        timer = make_timer(
            kind=kind, member_id=member_id, deadline_ms=deadline_ms, seq=self.timer_seq
        )
        timers = [t for t in self.timers if t.member_id != member_id or t.kind is not kind]
        bisect.insort(timers, timer, key=_TIMER_ORDER)
        return make_group(
            group_id=self.group_id,
            phase=self.phase,
            previous_phase=self.previous_phase,
            generation_id=self.generation_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id,
            members=self.members,
            pending_join_members=self.pending_join_members,
            pending_sync_members=self.pending_sync_members,
            new_member_added=self.new_member_added,
            timers=tuple(timers),
            timer_seq=self.timer_seq + 1,
            offsets=self.offsets,
            empty_since_ms=self.empty_since_ms,
            last_commit_ms=self.last_commit_ms,
            expansion_queue=self.expansion_queue,
        )


_TIMER_ORDER: Final = attrgetter("deadline_ms", "seq")


def registration_deadline_ms(members: Iterable[Member], timeout_ms: int | None) -> int | None:
    """§14.1: when the member offline longest, among those offline **now**, has been away for
    ``timeout_ms``; None if no member is offline or the timeout is off."""
    if timeout_ms is None:
        return None
    earliest: int | None = None
    for member in members:
        since_ms = member.offline_since_ms
        if since_ms is not None and (earliest is None or since_ms < earliest):
            earliest = since_ms
    return None if earliest is None else earliest + timeout_ms


# Quick constructors (``frozen.py``): same arguments, same values, several times quicker.
make_parked = fast_constructor(ParkedRequest)
make_member = fast_constructor(Member)
make_timer = fast_constructor(Timer)
make_offset = fast_constructor(StoredOffset)
make_group = fast_constructor(Group)
