"""A group member's rebalance (eager, classic protocol): JoinGroup (MEMBER_ID_REQUIRED answered
by rejoining with the given id), the leader's assignment with the assignor the group chose,
SyncGroup, and the errors that send the member back to JoinGroup.

Before rejoining, offsets are committed (auto-commit) and every partition is given up; after
sync, positions come from the committed offsets (positions.py). A rebalance that does not finish
within a poll's timeout continues at the next poll with the same in-flight request.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.client import protocol as p
from controlplane.client.assignors import Assignor, TopicPartition, decode_assignment
from controlplane.client.commits import Commits
from controlplane.client.heartbeat import HeartbeatThread
from controlplane.client.membership import (
    FencedInstanceIdError,
    GroupMemberError,
    Membership,
    MemberState,
)
from controlplane.client.positions import Positions
from controlplane.client.records import Fetcher, RecordSource
from controlplane.client.timeouts import ClientTimeoutError, Deadline, PendingCall
from controlplane.client.transport import Stream


class Rebalance:
    def __init__(
        self,
        membership: Membership,
        fetcher: Fetcher,
        source: RecordSource,
        assignors: Mapping[str, Assignor],
        *,
        commits: Commits,
        positions: Positions,
        heartbeat: HeartbeatThread,
    ) -> None:
        self._member = membership
        self._fetcher = fetcher
        self._source = source
        self._assignors = assignors
        self._commits = commits
        self._positions = positions
        self._heartbeat = heartbeat
        self.assignment: tuple[TopicPartition, ...] = ()
        self._inflight: tuple[str, PendingCall] | None = None
        self._join_prepared = False

    def needed(self) -> bool:
        return self._member.rejoin_needed or self._member.state is not MemberState.STABLE

    def run(self, deadline: Deadline) -> bool:
        """Drive join and sync until Stable (True) or the deadline (False); tried at least once."""
        member = self._member
        clock, requester = member.clock, member.requester
        first = True
        while first or not deadline.expired(clock.now_ms()):
            first = False
            if self._inflight is None:
                self._prepare_join()
                self._send_join("rebalance")
            assert self._inflight is not None
            kind, call = self._inflight
            clock.wait_for(member.answered_or_stopped(call), deadline.remaining_ms(clock.now_ms()))
            requester.calls.reap(clock.now_ms())
            member.check_usable()
            if not call.done:
                return False
            self._inflight = None
            requester.forget(call)
            try:
                answer = call.result()
            except ClientTimeoutError:
                continue
            if (self._on_join if kind == "join" else self._on_sync)(answer, deadline):
                return True
        return False

    def _prepare_join(self) -> None:
        """Once per rebalance: commit what was consumed (auto-commit), give up all partitions."""
        if self._join_prepared:
            return
        self._join_prepared = True
        member = self._member
        member.set_state(MemberState.REBALANCING)
        if member.config.enable_auto_commit and member.generation.valid and self.assignment:
            self._commits.commit_async(always=True)  # sent before the JoinGroup, handled before it
        self._positions.forget_fetch()
        self.assignment = ()
        self._fetcher.assign([])

    def _send_join(self, reason: str) -> None:
        member = self._member
        body = p.join_body(member.config, member.member_id, reason)
        call = member.requester.start(Stream.GROUP, body, member.config.join_request_timeout_ms)
        self._inflight = ("join", call)

    def _on_join(self, answer: Mapping[str, Any], deadline: Deadline) -> bool:
        member = self._member
        error = p.error_of(answer)
        if error == "MEMBER_ID_REQUIRED":
            member.member_id = str(answer.get("member_id") or "")
            self._send_join("need to re-join with the given member-id")
            return False
        if self._handle_error(error, "join", deadline):
            return False
        generation = p.Generation(
            int(answer["generation_id"]), str(answer["member_id"]), answer.get("protocol_name")
        )
        with member.lock:
            member.member_id = generation.member_id
            member.generation = generation
        member.record("joined", f"generation {generation.generation_id}")
        assignments: list[dict[str, str]] = []
        leader = answer.get("leader_id") == generation.member_id
        if leader and not answer.get("skip_assignment"):
            assignor = self._assignors[str(generation.protocol_name)]
            assignments = p.leader_assignments(answer.get("members") or [], assignor, self._source)
        body = p.sync_body(member.config, generation, assignments)
        self._inflight = ("sync", member.requester.start(Stream.GROUP, body, self._sync_wait_ms()))
        return False

    def _sync_wait_ms(self) -> int:
        # A follower's SyncGroup is parked until the leader syncs: allow the rebalance timeout.
        return self._member.config.join_request_timeout_ms

    def _on_sync(self, answer: Mapping[str, Any], deadline: Deadline) -> bool:
        member = self._member
        error = p.error_of(answer)
        if self._handle_error(error, "sync", deadline):
            return False
        partitions = decode_assignment(answer.get("assignment"))
        self.assignment = partitions
        self._fetcher.assign(partitions)
        with member.lock:
            member.rejoin_needed = False
            self._join_prepared = False
            self._heartbeat.restart_interval(member.clock.now_ms())
        member.set_state(MemberState.STABLE)
        names = ",".join(f"{tp.topic}-{tp.partition}" for tp in partitions) or "nothing"
        member.record("assigned", f"generation {member.generation.generation_id}: {names}")
        self._heartbeat.ensure_started()
        return True

    def _handle_error(self, error: str, where: str, deadline: Deadline) -> bool:
        """Apply an answer's error; True when the step must be redone (a rejoin)."""
        member = self._member
        action = p.action_for(error)
        if action is p.Action.OK:
            return False
        if action is p.Action.FENCED:
            member.record("fenced", where)
            member.set_state(MemberState.FENCED)
            raise FencedInstanceIdError(f"{where}: {error}: group.instance.id taken over")
        if action is p.Action.FATAL:
            raise GroupMemberError(f"{where} of {member.config.group_id} failed: {error}")
        with member.lock:
            member.reset_for(action)
        if action is p.Action.RETRY:
            remaining = deadline.remaining_ms(member.clock.now_ms())
            member.clock.sleep(min(member.config.retry_backoff_ms, remaining))
        return True
