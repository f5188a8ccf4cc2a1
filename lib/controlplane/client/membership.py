"""What the parts of a group member share (client/member.py): its standing in the group, the
lock, its way to the coordinator and its event history.

``GroupMember`` is composed of a ``Rebalance`` (join and sync), a ``HeartbeatThread`` (KIP-62),
``Commits`` (OffsetCommit, auto-commit) and ``Positions`` (OffsetFetch, where consumption
resumes); each acts on the one ``Membership`` they are given.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from controlplane.client import protocol as p
from controlplane.client.clock import Clock
from controlplane.client.config import ConsumerConfig
from controlplane.client.timeouts import ClientError, PendingCall
from controlplane.client.transport import Requester

log = logging.getLogger("controlplane.client.member")


class GroupMemberError(ClientError):
    """A fatal group error (bad configuration, protocol refused, closed)."""


class FencedInstanceIdError(GroupMemberError):
    """Another instance with the same group.instance.id replaced this member."""


class CommitFailedError(ClientError):
    """The commit cannot succeed: the member left the generation (rejoin first)."""


class RebalanceInProgressError(CommitFailedError):
    """The group is rebalancing; the next poll() rejoins, then commit again."""


class MemberState(Enum):
    UNJOINED = "unjoined"
    REBALANCING = "rebalancing"
    STABLE = "stable"
    FENCED = "fenced"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class MemberEvent:
    at_ms: int
    kind: str  # joined, assigned, poll_timeout, left, heartbeat_error, commit_failed, fenced, ...
    detail: str = ""


class Membership:
    """The member's standing in the group: its state, generation and member id, whether it must
    rejoin, and ``version``, bumped on every state change the heartbeat thread waits for. The
    application thread and the heartbeat thread both change them: under ``lock``."""

    def __init__(self, config: ConsumerConfig, clock: Clock, requester: Requester) -> None:
        self.config = config
        self.clock = clock
        self.requester = requester
        self.lock = threading.Lock()  # fields shared with the heartbeat thread
        self.state = MemberState.UNJOINED
        self.generation = p.NO_GENERATION
        self.member_id = ""
        self.rejoin_needed = True
        self.version = 0  # bumped on every state change the heartbeat thread waits for
        self.history: list[MemberEvent] = []

    def set_state(self, state: MemberState) -> None:
        with self.lock:
            self.state = state
        self.bump()

    def bump(self) -> None:
        with self.lock:
            self.version += 1
        self.clock.notify()

    def reset_for(self, action: p.Action) -> None:
        """Under the lock: UNKNOWN_MEMBER_ID-like errors forget the member id and the
        generation, ILLEGAL_GENERATION-like ones the generation only (AbstractCoordinator)."""
        if action is p.Action.RESET_MEMBER:
            self.member_id = ""
        if action in (p.Action.RESET_MEMBER, p.Action.RESET_GENERATION):
            self.generation = p.NO_GENERATION

    def closed_or_fenced(self) -> bool:
        return self.state in (MemberState.CLOSED, MemberState.FENCED)

    def check_usable(self) -> None:
        if self.state is MemberState.FENCED:
            raise FencedInstanceIdError(f"{self.config.group_instance_id}: fenced")
        if self.state is MemberState.CLOSED:
            raise GroupMemberError("the member is closed")

    def answered_or_stopped(self, call: PendingCall) -> Callable[[], bool]:
        return lambda: call.done or self.closed_or_fenced()

    def record(self, kind: str, detail: str = "") -> None:
        event = MemberEvent(self.clock.now_ms(), kind, detail)
        self.history.append(event)
        log.info("%s/%s %s %s", self.config.group_id, self.config.client_id, kind, detail)

    def record_leave(self, reason: str, call: PendingCall) -> None:
        """The outcome of a LeaveGroup (on close, or after a poll timeout)."""
        self.requester.forget(call)
        try:
            answer = call.result()
            self.record("left", f"{reason}: {answer.get('error')}")
        except ClientError as error:
            self.record("leave_failed", str(error))
