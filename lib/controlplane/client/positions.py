"""Where a group member's consumption resumes: each newly assigned partition is sought to the
group's committed offset (OffsetFetch), or to ``auto.offset.reset`` without one."""

from __future__ import annotations

from controlplane.client import protocol as p
from controlplane.client.assignors import TopicPartition
from controlplane.client.membership import Membership, MemberState
from controlplane.client.records import Fetcher, RecordSource
from controlplane.client.timeouts import ClientError, Deadline, PendingCall
from controlplane.client.transport import Stream


class Positions:
    def __init__(
        self, membership: Membership, fetcher: Fetcher, source: RecordSource, reset: str
    ) -> None:
        self._member = membership
        self._fetcher = fetcher
        self._source = source
        self._reset = reset  # auto.offset.reset: earliest or latest
        self._offset_fetch: tuple[frozenset[TopicPartition], PendingCall] | None = None

    @property
    def fetching(self) -> bool:
        """An OffsetFetch is in flight."""
        return self._offset_fetch is not None

    def forget_fetch(self) -> None:
        """A rejoin gives every partition up: an OffsetFetch in flight is for none of them."""
        self._offset_fetch = None

    def refresh(self, deadline: Deadline) -> None:
        """Seek partitions without a position to the group's committed offset (or reset).

        The OffsetFetch stays in flight across polls (as Kafka's pending committed-offset
        request): a poll whose timeout is shorter than the answer's latency does not resend."""
        member = self._member
        if member.state is not MemberState.STABLE:
            return
        missing = self.unpositioned()
        if not missing:
            return
        requester, clock = member.requester, member.clock
        if self._offset_fetch is None or self._offset_fetch[0] != missing:
            body = p.fetch_body(member.config, member.member_id, missing)
            call = requester.start(Stream.GROUP, body, member.config.request_timeout_ms)
            self._offset_fetch = (missing, call)
        call = self._offset_fetch[1]
        clock.wait_for(member.answered_or_stopped(call), deadline.remaining_ms(clock.now_ms()))
        requester.calls.reap(clock.now_ms())
        if not call.done:
            return  # still in flight: the next poll waits for the same request
        self._offset_fetch = None
        requester.forget(call)
        try:
            answer = call.result()
        except ClientError as error:
            member.record("offset_fetch_failed", str(error))
            return
        if p.error_of(answer) != "NONE":
            member.record("offset_fetch_failed", str(answer.get("error")))
            return
        committed = p.committed_offsets(answer)
        for tp in sorted(missing):
            offset = committed.get(tp)
            if offset is None:
                offset = 0 if self._reset == "earliest" else self._source.end_offset(tp)
            self._fetcher.seek(tp, offset)

    def unpositioned(self) -> frozenset[TopicPartition]:
        positions = self._fetcher.positions()
        return frozenset(tp for tp in self._fetcher.assignment() if tp not in positions)
