"""GroupMember: a consumer-group member with Kafka's classic-protocol client semantics.

* Join (dynamic, or static with ``group.instance.id``), MEMBER_ID_REQUIRED, the leader assigns
  with the assignor the group chose, sync; on a new assignment the group's committed offsets are
  fetched so work resumes where the last owner stopped (``auto.offset.reset`` otherwise).
* KIP-62: a background heartbeat thread keeps the session while the application works. It
  never blocks on an answer: a heartbeat goes out every ``heartbeat.interval.ms`` after the
  previous send, one awaited at a time (an unanswered one is given up when the next is due), and
  the answer of any heartbeat that comes within ``request.timeout.ms`` of its send is handled,
  if it is about the member's current generation (as Kafka's HeartbeatThread).
  ``max.poll.interval.ms`` is the JoinGroup rebalance timeout and the
  poll timeout, checked on every pass; when ``poll()`` is not called within it the thread
  stops heartbeating and, for a dynamic member only, sends LeaveGroup (not waiting for the
  answer); the next ``poll()`` rejoins. Static members never send LeaveGroup (poll timeout or
  close).
* KIP-41: ``poll()`` returns at most ``max.poll.records`` records (records.Fetcher).
* Eager rebalance: before rejoining, offsets are committed (auto-commit) and every partition is
  given up; after sync, positions come from the committed offsets.
* Every blocking call takes a timeout (else ``default.api.timeout.ms``) fixed at its start;
  a rebalance that does not finish within a poll's timeout continues at the next poll with the
  same in-flight request.

``GroupMember`` is the application's face; the work is done by its parts, which share one
``Membership`` (membership.py: state, generation, member id, lock, history): ``Rebalance``
(rebalance.py: join and sync), ``HeartbeatThread`` (heartbeat.py: KIP-62 and the poll timer),
``Commits`` (commits.py: commit, auto-commit) and ``Positions`` (positions.py: OffsetFetch).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controlplane.client.assignors import BUILTIN_ASSIGNORS, Assignor, TopicPartition
from controlplane.client.clock import Clock
from controlplane.client.commits import Commits
from controlplane.client.config import ConsumerConfig
from controlplane.client.heartbeat import HeartbeatThread
from controlplane.client.membership import (
    CommitFailedError,
    FencedInstanceIdError,
    GroupMemberError,
    MemberEvent,
    Membership,
    MemberState,
    RebalanceInProgressError,
)
from controlplane.client.positions import Positions
from controlplane.client.protocol import Generation, leave_body
from controlplane.client.rebalance import Rebalance
from controlplane.client.records import Fetcher, Record, RecordSource
from controlplane.client.timeouts import ClientError, Deadline
from controlplane.client.transport import Requester, Stream, Transport

__all__ = [
    "CommitFailedError",
    "FencedInstanceIdError",
    "GroupMember",
    "GroupMemberError",
    "MemberEvent",
    "MemberState",
    "RebalanceInProgressError",
]


class GroupMember:
    def __init__(
        self,
        config: ConsumerConfig,
        transport: Transport,
        clock: Clock,
        source: RecordSource,
        *,
        assignors: Sequence[Assignor] | None = None,
        auto_offset_reset: str = "latest",
    ) -> None:
        if auto_offset_reset not in ("earliest", "latest"):
            raise GroupMemberError("auto.offset.reset: expected earliest or latest")
        self.config = config
        self.clock = clock
        self._requester = Requester(transport, clock, config.client_id)
        self._fetcher = Fetcher(source, config.max_partition_fetch_records)
        known = {a.name: a for a in assignors or BUILTIN_ASSIGNORS.values()}
        missing = [n for n in config.partition_assignment_strategy if n not in known]
        if missing:
            raise GroupMemberError(f"partition.assignment.strategy: unknown assignor(s) {missing}")
        self._member = Membership(config, clock, self._requester)
        now_ms = clock.now_ms()
        self._heartbeat = HeartbeatThread(self._member, now_ms)
        self._commits = Commits(self._member, self._fetcher, now_ms)
        self._positions = Positions(self._member, self._fetcher, source, auto_offset_reset)
        self._rebalance = Rebalance(
            self._member,
            self._fetcher,
            source,
            known,
            commits=self._commits,
            positions=self._positions,
            heartbeat=self._heartbeat,
        )
        self.history: list[MemberEvent] = self._member.history

    # --- what the application sees -------------------------------------------------------

    @property
    def state(self) -> MemberState:
        return self._member.state

    @property
    def member_id(self) -> str:
        return self._member.member_id

    @property
    def generation(self) -> Generation:
        return self._member.generation

    def assignment(self) -> tuple[TopicPartition, ...]:
        return self._rebalance.assignment

    def positions(self) -> dict[TopicPartition, int]:
        return self._fetcher.positions()

    def round_trips_ms(self) -> list[int]:
        """Send-to-answer times of this member's answered requests (the latest 10 000)."""
        return list(self._requester.round_trips_ms)

    def poll(self, timeout_ms: int) -> list[Record]:
        """Records of the assigned partitions, at most ``max.poll.records``; rejoins first if
        needed. Returns [] when the rebalance did not finish within ``timeout_ms``."""
        self._member.check_usable()
        deadline = Deadline.start(self.clock, timeout_ms, self.config.default_api_timeout_ms)
        self._heartbeat.poll_started(deadline.start_ms)
        try:
            return self._poll(deadline)
        finally:
            self._heartbeat.poll_ended()
            self._member.bump()

    def _poll(self, deadline: Deadline) -> list[Record]:
        member, fetcher = self._member, self._fetcher
        self._commits.maybe_auto_commit()
        while True:
            if self._rebalance.needed() and not self._rebalance.run(deadline):
                return []
            self._positions.refresh(deadline)
            records = fetcher.poll(self.config.max_poll_records)
            if records or deadline.expired(self.clock.now_ms()):
                return records
            wait_ms = deadline.remaining_ms(self.clock.now_ms())
            if not self._positions.fetching and self._positions.unpositioned():
                wait_ms = min(wait_ms, self.config.retry_backoff_ms)  # the fetch failed: retry
            self.clock.wait_for(
                lambda: member.rejoin_needed or member.closed_or_fenced() or fetcher.has_data(),
                wait_ms,
            )
            member.check_usable()

    def commit(
        self, offsets: Mapping[TopicPartition, int] | None = None, timeout_ms: int | None = None
    ) -> None:
        """Commit ``offsets`` (default: the positions of the records returned so far)."""
        self._member.check_usable()
        self._commits.commit(offsets, timeout_ms)

    def close(self, timeout_ms: int | None = None) -> None:
        """Commit (auto-commit), stop heartbeating, leave if dynamic, fail pending calls."""
        member = self._member
        if member.state is MemberState.CLOSED:
            return
        deadline = Deadline.start(self.clock, timeout_ms, self.config.default_api_timeout_ms)
        if self.config.enable_auto_commit and member.state is MemberState.STABLE:
            try:
                self.commit(timeout_ms=deadline.remaining_ms(self.clock.now_ms()))
            except ClientError as error:
                member.record("commit_failed", str(error))
        member_id = member.member_id
        member.set_state(MemberState.CLOSED)
        if not self.config.is_static and member_id:
            self._leave(member_id, "the consumer is being closed", deadline)
        self._requester.close()
        self._heartbeat.join(deadline)

    def abandon(self) -> None:
        """Stop as a crashed process would: no commit, no LeaveGroup, no more heartbeats."""
        self._member.set_state(MemberState.CLOSED)
        self._requester.close()
        self._member.record("crashed")

    def events(self, kind: str) -> list[MemberEvent]:
        return [e for e in self.history if e.kind == kind]

    def _leave(self, member_id: str, reason: str, deadline: Deadline) -> None:
        body = leave_body(self.config, member_id, reason)
        wait_ms = deadline.attempt_wait_ms(self.clock.now_ms(), self.config.request_timeout_ms)
        self._member.record_leave(reason, self._requester.call(Stream.GROUP, body, wait_ms))
