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
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from controlplane.client import protocol as p
from controlplane.client.assignors import (
    BUILTIN_ASSIGNORS,
    Assignor,
    TopicPartition,
    decode_assignment,
)
from controlplane.client.clock import Clock
from controlplane.client.config import ConsumerConfig
from controlplane.client.records import Fetcher, Record, RecordSource
from controlplane.client.timeouts import (
    ClientError,
    ClientTimeoutError,
    Deadline,
    PendingCall,
    RetriableError,
    with_retries,
)
from controlplane.client.transport import Requester, Stream, Transport

log = logging.getLogger(__name__)


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
        self._source = source
        self._reset = auto_offset_reset
        self._requester = Requester(transport, clock, config.client_id)
        self._fetcher = Fetcher(source, config.max_partition_fetch_records)
        known = {a.name: a for a in assignors or BUILTIN_ASSIGNORS.values()}
        missing = [n for n in config.partition_assignment_strategy if n not in known]
        if missing:
            raise GroupMemberError(f"partition.assignment.strategy: unknown assignor(s) {missing}")
        self._assignors = known
        self._lock = threading.Lock()  # fields shared with the heartbeat thread
        self._state = MemberState.UNJOINED
        self._generation = p.NO_GENERATION
        self._member_id = ""
        self._rejoin_needed = True
        self._version = 0  # bumped on every state change the heartbeat thread waits for
        self._assignment: tuple[TopicPartition, ...] = ()
        now_ms = clock.now_ms()
        self._last_poll_ms = now_ms
        self._polling = False  # the application thread is inside poll()
        self._last_heartbeat_ms = now_ms  # when the last heartbeat was sent
        # heartbeats whose answers are still heard (request.timeout.ms), oldest first
        self._heartbeats: list[tuple[p.Generation, PendingCall]] = []
        self._leaves: list[tuple[str, PendingCall]] = []  # poll-timeout LeaveGroups in flight
        self._last_auto_commit_ms = now_ms
        self._auto_commits: list[tuple[p.Generation, PendingCall]] = []  # in flight
        self._inflight: tuple[str, PendingCall] | None = None
        self._offset_fetch: tuple[frozenset[TopicPartition], PendingCall] | None = None
        self._join_prepared = False
        self._heartbeat_thread: threading.Thread | None = None
        self.history: list[MemberEvent] = []

    # --- what the application sees -------------------------------------------------------

    @property
    def state(self) -> MemberState:
        return self._state

    @property
    def member_id(self) -> str:
        return self._member_id

    @property
    def generation(self) -> p.Generation:
        return self._generation

    def assignment(self) -> tuple[TopicPartition, ...]:
        return self._assignment

    def positions(self) -> dict[TopicPartition, int]:
        return self._fetcher.positions()

    def round_trips_ms(self) -> list[int]:
        """Send-to-answer times of this member's answered requests (the latest 10 000)."""
        return list(self._requester.round_trips_ms)

    def poll(self, timeout_ms: int) -> list[Record]:
        """Records of the assigned partitions, at most ``max.poll.records``; rejoins first if
        needed. Returns [] when the rebalance did not finish within ``timeout_ms``."""
        self._check_usable()
        deadline = Deadline.start(self.clock, timeout_ms, self.config.default_api_timeout_ms)
        with self._lock:
            self._polling = True  # inside poll() the application is polling: no poll timeout
            self._last_poll_ms = deadline.start_ms
        try:
            return self._poll(deadline)
        finally:
            with self._lock:
                self._polling = False  # max.poll.interval.ms counts from here to the next poll
                self._last_poll_ms = self.clock.now_ms()
            self._bump()

    def _poll(self, deadline: Deadline) -> list[Record]:
        self._maybe_auto_commit()
        while True:
            if self._needs_rebalance() and not self._rebalance(deadline):
                return []
            self._refresh_positions(deadline)
            records = self._fetcher.poll(self.config.max_poll_records)
            if records or deadline.expired(self.clock.now_ms()):
                return records
            wait_ms = deadline.remaining_ms(self.clock.now_ms())
            if self._offset_fetch is None and self._unpositioned():
                wait_ms = min(wait_ms, self.config.retry_backoff_ms)  # the fetch failed: retry
            self.clock.wait_for(
                lambda: self._rejoin_needed or self._closed_or_fenced() or self._fetcher.has_data(),
                wait_ms,
            )
            self._check_usable()

    def commit(
        self, offsets: Mapping[TopicPartition, int] | None = None, timeout_ms: int | None = None
    ) -> None:
        """Commit ``offsets`` (default: the positions of the records returned so far)."""
        self._check_usable()
        deadline = Deadline.start(self.clock, timeout_ms, self.config.default_api_timeout_ms)
        generation = self._generation
        if self._state is not MemberState.STABLE or not generation.valid:
            raise RebalanceInProgressError("not a member of a stable generation: poll() first")
        to_commit = dict(self._fetcher.positions() if offsets is None else offsets)
        if not to_commit:
            return

        def attempt(wait_ms: int) -> None:
            body = p.commit_body(self.config, generation, to_commit)
            answer = self._requester.call(Stream.GROUP, body, wait_ms).result()
            self._check_commit_answer(answer, generation)

        with_retries(
            self.clock, deadline, self.config.request_timeout_ms, self.config.retry_backoff_ms,
            attempt, f"commit of {self.config.group_id}",
        )  # fmt: skip

    def close(self, timeout_ms: int | None = None) -> None:
        """Commit (auto-commit), stop heartbeating, leave if dynamic, fail pending calls."""
        if self._state is MemberState.CLOSED:
            return
        deadline = Deadline.start(self.clock, timeout_ms, self.config.default_api_timeout_ms)
        if self.config.enable_auto_commit and self._state is MemberState.STABLE:
            try:
                self.commit(timeout_ms=deadline.remaining_ms(self.clock.now_ms()))
            except ClientError as error:
                self._record("commit_failed", str(error))
        member_id = self._member_id
        self._set_state(MemberState.CLOSED)
        if not self.config.is_static and member_id:
            self._leave(member_id, "the consumer is being closed", deadline)
        self._requester.close()
        self._join_heartbeat_thread(deadline)

    def abandon(self) -> None:
        """Stop as a crashed process would: no commit, no LeaveGroup, no more heartbeats."""
        self._set_state(MemberState.CLOSED)
        self._requester.close()
        self._record("crashed")

    # --- rebalance -------------------------------------------------------------------------

    def _needs_rebalance(self) -> bool:
        return self._rejoin_needed or self._state is not MemberState.STABLE

    def _rebalance(self, deadline: Deadline) -> bool:
        """Drive join and sync until Stable (True) or the deadline (False); tried at least once."""
        first = True
        while first or not deadline.expired(self.clock.now_ms()):
            first = False
            if self._inflight is None:
                self._prepare_join(deadline)
                self._send_join("rebalance")
            assert self._inflight is not None
            kind, call = self._inflight
            self.clock.wait_for(
                self._answered_or_stopped(call),
                deadline.remaining_ms(self.clock.now_ms()),
            )
            self._requester.calls.reap(self.clock.now_ms())
            self._check_usable()
            if not call.done:
                return False
            self._inflight = None
            self._requester.forget(call)
            try:
                answer = call.result()
            except ClientTimeoutError:
                continue
            if (self._on_join if kind == "join" else self._on_sync)(answer, deadline):
                return True
        return False

    def _prepare_join(self, deadline: Deadline) -> None:
        """Once per rebalance: commit what was consumed (auto-commit), give up all partitions."""
        if self._join_prepared:
            return
        self._join_prepared = True
        self._set_state(MemberState.REBALANCING)
        if self.config.enable_auto_commit and self._generation.valid and self._assignment:
            self._commit_async(always=True)  # sent before the JoinGroup, handled before it
        self._offset_fetch = None
        self._assignment = ()
        self._fetcher.assign([])

    def _send_join(self, reason: str) -> None:
        body = p.join_body(self.config, self._member_id, reason)
        call = self._requester.start(Stream.GROUP, body, self.config.join_request_timeout_ms)
        self._inflight = ("join", call)

    def _on_join(self, answer: Mapping[str, Any], deadline: Deadline) -> bool:
        error = p.error_of(answer)
        if error == "MEMBER_ID_REQUIRED":
            self._member_id = str(answer.get("member_id") or "")
            self._send_join("need to re-join with the given member-id")
            return False
        if self._handle_error(error, "join", deadline):
            return False
        generation = p.Generation(
            int(answer["generation_id"]), str(answer["member_id"]), answer.get("protocol_name")
        )
        with self._lock:
            self._member_id = generation.member_id
            self._generation = generation
        self._record("joined", f"generation {generation.generation_id}")
        assignments: list[dict[str, str]] = []
        leader = answer.get("leader_id") == generation.member_id
        if leader and not answer.get("skip_assignment"):
            assignor = self._assignors[str(generation.protocol_name)]
            assignments = p.leader_assignments(answer.get("members") or [], assignor, self._source)
        body = p.sync_body(self.config, generation, assignments)
        self._inflight = ("sync", self._requester.start(Stream.GROUP, body, self._sync_wait_ms()))
        return False

    def _sync_wait_ms(self) -> int:
        # A follower's SyncGroup is parked until the leader syncs: allow the rebalance timeout.
        return self.config.join_request_timeout_ms

    def _on_sync(self, answer: Mapping[str, Any], deadline: Deadline) -> bool:
        error = p.error_of(answer)
        if self._handle_error(error, "sync", deadline):
            return False
        partitions = decode_assignment(answer.get("assignment"))
        self._assignment = partitions
        self._fetcher.assign(partitions)
        with self._lock:
            self._rejoin_needed = False
            self._join_prepared = False
            self._last_heartbeat_ms = self.clock.now_ms()
        self._set_state(MemberState.STABLE)
        names = ",".join(f"{tp.topic}-{tp.partition}" for tp in partitions) or "nothing"
        self._record("assigned", f"generation {self._generation.generation_id}: {names}")
        self._ensure_heartbeat_thread()
        return True

    def _handle_error(self, error: str, where: str, deadline: Deadline) -> bool:
        """Apply an answer's error; True when the step must be redone (a rejoin)."""
        action = p.action_for(error)
        if action is p.Action.OK:
            return False
        if action is p.Action.FENCED:
            self._record("fenced", where)
            self._set_state(MemberState.FENCED)
            raise FencedInstanceIdError(f"{where}: {error}: group.instance.id taken over")
        if action is p.Action.FATAL:
            raise GroupMemberError(f"{where} of {self.config.group_id} failed: {error}")
        with self._lock:
            self._reset_for(action)
        if action is p.Action.RETRY:
            remaining = deadline.remaining_ms(self.clock.now_ms())
            self.clock.sleep(min(self.config.retry_backoff_ms, remaining))
        return True

    def _refresh_positions(self, deadline: Deadline) -> None:
        """Seek partitions without a position to the group's committed offset (or reset).

        The OffsetFetch stays in flight across polls (as Kafka's pending committed-offset
        request): a poll whose timeout is shorter than the answer's latency does not resend."""
        if self._state is not MemberState.STABLE:
            return
        missing = self._unpositioned()
        if not missing:
            return
        if self._offset_fetch is None or self._offset_fetch[0] != missing:
            body = p.fetch_body(self.config, self._member_id, missing)
            call = self._requester.start(Stream.GROUP, body, self.config.request_timeout_ms)
            self._offset_fetch = (missing, call)
        call = self._offset_fetch[1]
        self.clock.wait_for(
            self._answered_or_stopped(call), deadline.remaining_ms(self.clock.now_ms())
        )
        self._requester.calls.reap(self.clock.now_ms())
        if not call.done:
            return  # still in flight: the next poll waits for the same request
        self._offset_fetch = None
        self._requester.forget(call)
        try:
            answer = call.result()
        except ClientError as error:
            self._record("offset_fetch_failed", str(error))
            return
        if p.error_of(answer) != "NONE":
            self._record("offset_fetch_failed", str(answer.get("error")))
            return
        committed = p.committed_offsets(answer)
        for tp in sorted(missing):
            offset = committed.get(tp)
            if offset is None:
                offset = 0 if self._reset == "earliest" else self._source.end_offset(tp)
            self._fetcher.seek(tp, offset)

    def _reset_for(self, action: p.Action) -> None:
        """Under the lock: UNKNOWN_MEMBER_ID-like errors forget the member id and the
        generation, ILLEGAL_GENERATION-like ones the generation only (AbstractCoordinator)."""
        if action is p.Action.RESET_MEMBER:
            self._member_id = ""
        if action in (p.Action.RESET_MEMBER, p.Action.RESET_GENERATION):
            self._generation = p.NO_GENERATION

    def _unpositioned(self) -> frozenset[TopicPartition]:
        positions = self._fetcher.positions()
        return frozenset(tp for tp in self._fetcher.assignment() if tp not in positions)

    # --- commits ---------------------------------------------------------------------------

    def _commit_async(self, *, always: bool = False) -> None:
        """Send a commit of the current positions without waiting (auto-commit). The periodic
        one waits for the previous answer; the one before a rejoin (``always``) does not."""
        self._collect_auto_commits()
        offsets = self._fetcher.positions()
        generation = self._generation
        if offsets and generation.valid and (always or not self._auto_commits):
            body = p.commit_body(self.config, generation, offsets)
            timeout_ms = self.config.request_timeout_ms
            call = self._requester.start(Stream.GROUP, body, timeout_ms)
            self._auto_commits.append((generation, call))
            self._last_auto_commit_ms = self.clock.now_ms()

    def _collect_auto_commits(self) -> None:
        pending = []
        for generation, call in self._auto_commits:
            if not call.done:
                pending.append((generation, call))
                continue
            self._requester.forget(call)
            try:  # judged against the generation it was sent in: a late answer is no news
                self._check_commit_answer(call.result(), generation)
            except ClientError as error:
                self._record("commit_failed", str(error))
        self._auto_commits = pending

    def _check_commit_answer(self, answer: Mapping[str, Any], generation: p.Generation) -> None:
        error = p.error_of(answer)
        action = p.action_for(error)
        if action is p.Action.OK:
            return
        if action is p.Action.RETRY:
            raise RetriableError(error)
        if action is p.Action.REJOIN:
            with self._lock:
                if self._generation == generation:
                    self._rejoin_needed = True
            raise RebalanceInProgressError(f"commit: {error}")
        if action is p.Action.FENCED:
            if self._generation == generation:
                self._set_state(MemberState.FENCED)
            raise FencedInstanceIdError(f"commit: {error}")
        with self._lock:
            if self._generation == generation and action is not p.Action.FATAL:
                # As ConsumerCoordinator: the generation is gone (ILLEGAL_GENERATION keeps the
                # member id, UNKNOWN_MEMBER_ID does not); rejoin. A newer generation is kept.
                self._rejoin_needed = True
                self._reset_for(action)
        raise CommitFailedError(f"commit: {error}")

    def _maybe_auto_commit(self) -> None:
        """Asynchronous auto-commit at most every auto.commit.interval.ms (as Kafka's poll)."""
        self._collect_auto_commits()
        now_ms = self.clock.now_ms()
        due = now_ms - self._last_auto_commit_ms >= self.config.auto_commit_interval_ms
        if self.config.enable_auto_commit and due and self._state is MemberState.STABLE:
            self._commit_async()

    # --- the heartbeat thread (KIP-62) ------------------------------------------------------

    def _ensure_heartbeat_thread(self) -> None:
        if self._heartbeat_thread is None:
            name = f"heartbeat-{self.config.group_id}-{self.config.client_id}"
            self._heartbeat_thread = self.clock.spawn(self._heartbeat_loop, name)

    def _heartbeat_loop(self) -> None:
        """AbstractCoordinator.HeartbeatThread: the thread never blocks on an answer. Each pass
        takes in the answers that came (of any heartbeat still heard), checks the poll timeout,
        sends a heartbeat when one is due, then sleeps until the next heartbeat, the poll
        deadline, an answer or a state change, whichever comes first."""
        interval_ms = self.config.heartbeat_interval_ms
        while not self._closed_or_fenced():
            seen = self._version
            now_ms = self.clock.now_ms()
            self._take_answers(now_ms)
            if not self._heartbeat_enabled():
                self._sleep_until(seen, now_ms + interval_ms)
                continue
            with self._lock:
                polling, last_poll_ms = self._polling, self._last_poll_ms
            poll_start_ms = now_ms if polling else last_poll_ms  # inside poll(): no timeout
            poll_deadline_ms = poll_start_ms + self.config.max_poll_interval_ms
            if now_ms >= poll_deadline_ms:
                self._on_poll_timeout()
                continue
            due_ms = self._last_heartbeat_ms + interval_ms  # whatever became of the last one
            if now_ms >= due_ms:
                self._send_heartbeat(now_ms)
                continue
            self._sleep_until(seen, min(due_ms, poll_deadline_ms))

    def _heartbeat_enabled(self) -> bool:
        """Heartbeat while Stable in a valid generation, also once a rejoin is needed and until
        poll() starts it (AbstractCoordinator: the session must outlive the application's
        processing during a rebalance; the coordinator resets it on REBALANCE_IN_PROGRESS)."""
        return self._state is MemberState.STABLE and self._generation.valid

    def _send_heartbeat(self, now_ms: int) -> None:
        """Send the heartbeat due ``heartbeat.interval.ms`` after the previous one was sent,
        whatever became of that one: one heartbeat is awaited at a time, and an unanswered one
        is given up when the next is due. Its answer is still heard until
        ``request.timeout.ms`` after its send (then the reaper times the call out), and handled
        when it comes, as Kafka's HeartbeatThread handles every answer within the request
        timeout (see ``_on_heartbeat_answer``)."""
        if self._heartbeats and not self._heartbeats[-1][1].done:
            log.debug("%s: heartbeat unanswered after an interval", self.config.client_id)
        generation = self._generation
        self._last_heartbeat_ms = now_ms
        call = self._requester.start(
            Stream.GROUP, p.heartbeat_body(self.config, generation), self.config.request_timeout_ms
        )
        self._heartbeats.append((generation, call))

    def _take_answers(self, now_ms: int) -> None:
        """Reap what expired, then handle the outcomes of the heartbeats (oldest first) and of
        the poll-timeout leaves."""
        self._requester.calls.reap(now_ms)
        heard = []
        for generation, call in self._heartbeats:
            if not call.done:
                heard.append((generation, call))
                continue
            self._requester.forget(call)
            try:
                answer = call.result()
            except ClientError as error:  # no answer within request.timeout.ms, or closed
                log.debug("%s: heartbeat unanswered: %s", self.config.client_id, error)
            else:
                self._on_heartbeat_answer(answer, generation)
        self._heartbeats = heard
        pending = []
        for reason, call in self._leaves:
            if call.done:
                self._record_leave(reason, call)
            else:
                pending.append((reason, call))
        self._leaves = pending

    def _on_heartbeat_answer(self, answer: Mapping[str, Any], generation: p.Generation) -> None:
        """Handle a heartbeat's answer, timely or late, idempotently. NONE (and a retriable
        error) changes nothing: the next heartbeat is due an interval after the last send
        whatever the answers say. An error that demands an action (REBALANCE_IN_PROGRESS: rejoin;
        ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID: reset and rejoin; FENCED_INSTANCE_ID: fenced)
        applies only while the member is still in the generation, with the member id, that the
        heartbeat was sent with (Kafka's ``generationUnchanged``): an answer about a generation
        the member has left, or rejoined since, is no news."""
        error = p.error_of(answer)
        action = p.action_for(error)
        if action is p.Action.OK or action is p.Action.RETRY:
            return
        with self._lock:
            if self._generation != generation:
                return
            already_known = self._rejoin_needed and action is p.Action.REJOIN
            self._rejoin_needed = True
            self._reset_for(action)
        if already_known:
            return  # heartbeating on through the rebalance until poll() rejoins
        self._record("heartbeat_error", error)
        if action is p.Action.FENCED:
            self._set_state(MemberState.FENCED)
        else:
            self._bump()

    def _sleep_until(self, seen: int, until_ms: int) -> None:
        """Wait until ``until_ms``, a state change, or the end of a call the thread waits for."""
        calls = [call for _, call in (*self._leaves, *self._heartbeats)]
        until_ms = min([until_ms, *(call.deadline_ms for call in calls)])
        self.clock.wait_for(
            lambda: (
                self._version != seen
                or self._closed_or_fenced()
                or any(call.done for call in calls)
            ),
            until_ms - self.clock.now_ms(),
        )

    def _on_poll_timeout(self) -> None:
        now_ms = self.clock.now_ms()
        with self._lock:  # checked again with poll()'s entry excluded
            waited_ms = now_ms - self._last_poll_ms
            if self._polling or waited_ms < self.config.max_poll_interval_ms:
                return
            if self._state is not MemberState.STABLE:
                return
            member_id = self._member_id
            self._rejoin_needed = True
            self._generation = p.NO_GENERATION
            self._member_id = ""
            self._state = MemberState.UNJOINED
        self._bump()
        self._record("poll_timeout", f"{waited_ms} ms since the last poll")
        log.warning("%s: consumer poll timeout has expired", self.config.client_id)
        if not self.config.is_static and member_id:
            # sent without waiting for the answer (as Kafka's maybeLeaveGroup): the thread goes
            # on, and heartbeats for the generation poll() may join meanwhile
            reason = "consumer poll timeout has expired"
            body = p.leave_body(self.config, member_id, reason)
            call = self._requester.start(Stream.GROUP, body, self.config.request_timeout_ms)
            self._leaves.append((reason, call))

    # --- helpers ---------------------------------------------------------------------------

    def _leave(self, member_id: str, reason: str, deadline: Deadline) -> None:
        body = p.leave_body(self.config, member_id, reason)
        wait_ms = deadline.attempt_wait_ms(self.clock.now_ms(), self.config.request_timeout_ms)
        self._record_leave(reason, self._requester.call(Stream.GROUP, body, wait_ms))

    def _record_leave(self, reason: str, call: PendingCall) -> None:
        self._requester.forget(call)
        try:
            answer = call.result()
            self._record("left", f"{reason}: {answer.get('error')}")
        except ClientError as error:
            self._record("leave_failed", str(error))

    def _join_heartbeat_thread(self, deadline: Deadline) -> None:
        thread = self._heartbeat_thread
        if thread is not None and thread is not threading.current_thread():
            self.clock.join(thread, deadline.remaining_ms(self.clock.now_ms()))

    def _set_state(self, state: MemberState) -> None:
        with self._lock:
            self._state = state
        self._bump()

    def _bump(self) -> None:
        with self._lock:
            self._version += 1
        self.clock.notify()

    def _answered_or_stopped(self, call: PendingCall) -> Callable[[], bool]:
        return lambda: call.done or self._closed_or_fenced()

    def _closed_or_fenced(self) -> bool:
        return self._state in (MemberState.CLOSED, MemberState.FENCED)

    def _check_usable(self) -> None:
        if self._state is MemberState.FENCED:
            raise FencedInstanceIdError(f"{self.config.group_instance_id}: fenced")
        if self._state is MemberState.CLOSED:
            raise GroupMemberError("the member is closed")

    def _record(self, kind: str, detail: str = "") -> None:
        event = MemberEvent(self.clock.now_ms(), kind, detail)
        self.history.append(event)
        log.info("%s/%s %s %s", self.config.group_id, self.config.client_id, kind, detail)

    def events(self, kind: str) -> list[MemberEvent]:
        return [e for e in self.history if e.kind == kind]
