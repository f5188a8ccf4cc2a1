"""GroupMember on the real coordinator core (InMemoryTransport) with a virtual clock."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from client.application import Runner
from client.latency import LatencyTransport, SlowAnswers
from controlplane.client.assignors import TopicPartition
from controlplane.client.clock import VirtualClock
from controlplane.client.config import ConsumerConfig
from controlplane.client.member import (
    CommitFailedError,
    FencedInstanceIdError,
    GroupMember,
    GroupMemberError,
    MemberState,
)
from controlplane.client.records import InMemoryLog, Record
from controlplane.client.transport import AnswerCallback, Stream
from controlplane.client.transport_memory import InMemoryTransport
from controlplane.core.config import CoordinatorConfig, Settings

START_MS = 1_700_000_000_000
SETTINGS = Settings(coordinator=CoordinatorConfig(group_min_session_timeout_ms=1_000))


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(START_MS)


@pytest.fixture
def log(clock: VirtualClock) -> InMemoryLog:
    log = InMemoryLog(clock)
    log.create_topic("orders", 4)
    for partition in range(4):
        log.append("orders", partition, [f"o{partition}-{i}" for i in range(50)])
    return log


@pytest.fixture
def transport(clock: VirtualClock) -> Iterator[InMemoryTransport]:
    transport = InMemoryTransport(clock, SETTINGS)
    yield transport
    transport.close()


def _config(client_id: str, **overrides: object) -> ConsumerConfig:
    base: dict[str, object] = {
        "group_id": "g",
        "topics": ("orders",),
        "client_id": client_id,
        "session_timeout_ms": 10_000,
        "heartbeat_interval_ms": 1_000,
        "max_poll_interval_ms": 20_000,
        "max_poll_records": 10,
    }
    base.update(overrides)
    return ConsumerConfig(**base)  # type: ignore[arg-type]


def _member(
    transport: InMemoryTransport,
    clock: VirtualClock,
    log: InMemoryLog,
    client_id: str,
    **kw: object,
) -> GroupMember:
    return GroupMember(
        _config(client_id, **kw), transport, clock, log, auto_offset_reset="earliest"
    )


def _stable(member: GroupMember) -> bool:
    return member.state is MemberState.STABLE


def test_single_member_joins_after_the_initial_delay_and_gets_every_partition(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    member = _member(transport, clock, log, "c1")
    records = member.poll(10_000)
    assert member.generation.generation_id == 1
    assert member.member_id.startswith("c1-")
    assert member.assignment() == tuple(TopicPartition("orders", p) for p in range(4))
    assert len(records) == 10
    assert clock.now_ms() - START_MS == 3_000  # group.initial.rebalance.delay.ms
    joins = transport.rows("decisions", type="join")
    assert [r["error"] for r in joins] == ["MEMBER_ID_REQUIRED", "NONE"]
    join = transport.requests(type="join")[0]
    assert join["rebalance_timeout_ms"] == 20_000  # KIP-62: max.poll.interval.ms
    assert join["session_timeout_ms"] == 10_000
    member.close()


def test_next_owner_resumes_from_the_committed_offsets(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    log.create_topic("payments", 1)
    log.append("payments", 0, [f"p{i}" for i in range(100)])
    first = _member(transport, clock, log, "c1", topics=("payments",))
    offsets = [r.offset for _ in range(3) for r in first.poll(5_000)]
    assert offsets == list(range(30))
    first.commit()
    commits = transport.rows("decisions", type="offset_commit")
    assert commits[-1]["offsets"][0]["offset"] == 30
    assert len(first.poll(5_000)) + len(first.poll(5_000)) == 20
    first.close()  # auto-commit on close: 50
    second = _member(transport, clock, log, "c2", topics=("payments",))
    records = second.poll(10_000)
    assert records[0].offset == 50
    assert [r.offset for r in records] == list(range(50, 60))
    second.close()


def test_heartbeat_thread_keeps_the_session_while_the_application_is_busy(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    member = _member(transport, clock, log, "c1")
    member.poll(10_000)
    clock.sleep(15_000)  # busy for longer than the session timeout, within max.poll.interval
    assert member.state is MemberState.STABLE
    heartbeats = transport.rows("decisions", type="heartbeat", member_id=member.member_id)
    assert len(heartbeats) >= 14
    assert {r["error"] for r in heartbeats} == {"NONE"}
    assert transport.rows("group_events", kind="member_removed") == []
    member.close()


def test_heartbeats_go_on_during_a_rebalance_until_the_application_polls(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    # KIP-62 / AbstractCoordinator: after REBALANCE_IN_PROGRESS the heartbeat thread keeps
    # heartbeating until poll() rejoins, so a member busy for longer than its session (within
    # max.poll.interval.ms) is not expired in the middle of the rebalance.
    busy = _member(transport, clock, log, "c1")
    busy.poll(10_000)
    old_id = busy.member_id
    newcomer = Runner(clock, _member(transport, clock, log, "c2"))
    clock.sleep(15_000)  # processing: longer than the session (10 s), within max poll (20 s)
    assert transport.rows("group_events", kind="member_removed", member_id=old_id) == []
    rebalancing = transport.rows("decisions", type="heartbeat", error="REBALANCE_IN_PROGRESS")
    assert len(rebalancing) >= 10
    busy.poll(10_000)
    assert busy.state is MemberState.STABLE
    assert busy.member_id == old_id
    assert busy.generation.generation_id == 2
    assert clock.wait_for(lambda: len(newcomer.member.assignment()) == 2, 10_000)
    assert len(busy.assignment()) == 2
    newcomer.halt(clock)
    newcomer.member.close()
    busy.close()


def test_dynamic_member_exceeding_max_poll_interval_leaves_then_rejoins_on_poll(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    member = _member(transport, clock, log, "c1")
    member.poll(10_000)
    old_id, old_generation = member.member_id, member.generation.generation_id
    clock.sleep(25_000)  # no poll for longer than max.poll.interval.ms (20 s)
    assert [e.kind for e in member.history].count("poll_timeout") == 1
    timeout_at = member.events("poll_timeout")[0].at_ms
    # the last poll() returned at +3 s, after the initial rebalance delay (Kafka also restarts
    # the poll timer when the join completes)
    assert timeout_at - START_MS == 3_000 + 20_000
    leaves = transport.rows("decisions", type="leave", member_id=old_id)
    assert len(leaves) == 1
    assert leaves[0]["decided_at_ms"] == timeout_at
    removed = transport.rows("group_events", kind="member_removed", member_id=old_id)
    assert [r["reason"] for r in removed] == ["leave"]
    member.poll(10_000)  # rejoins as a new member
    assert member.state is MemberState.STABLE
    assert member.member_id != old_id
    assert member.generation.generation_id > old_generation
    member.close()


def test_a_long_poll_waiting_for_records_is_no_poll_timeout(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    # max.poll.interval.ms bounds the time between poll() calls; an application blocked in
    # poll() waiting for records is polling (Kafka refreshes the poll timer while it waits).
    log.create_topic("quiet", 1)
    member = _member(transport, clock, log, "c1", topics=("quiet",))
    assert member.poll(60_000) == []  # nothing to read: waits the whole minute
    assert clock.now_ms() - START_MS == 60_000
    assert member.events("poll_timeout") == []
    assert transport.rows("decisions", type="leave") == []
    assert [r["error"] for r in transport.rows("decisions", type="join")] == [
        "MEMBER_ID_REQUIRED",
        "NONE",
    ]
    assert member.state is MemberState.STABLE
    clock.sleep(15_000)  # the next 20 s count from the return of that poll
    assert member.events("poll_timeout") == []
    member.close()


def test_static_member_exceeding_max_poll_interval_never_sends_leave(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    member = _member(
        transport, clock, log, "s1", group_instance_id="s-1", session_timeout_ms=30_000
    )
    member.poll(10_000)
    old_id, generation, assignment = member.member_id, member.generation, member.assignment()
    clock.sleep(25_000)
    assert len(member.events("poll_timeout")) == 1
    assert transport.rows("decisions", type="leave") == []
    member.poll(10_000)  # rejoins with its instance id before the session expires
    assert member.member_id != old_id
    assert member.generation.generation_id == generation.generation_id  # no rebalance
    assert member.assignment() == assignment
    assert transport.rows("group_events", kind="rebalance_started")[1:] == []
    member.close()
    assert transport.rows("decisions", type="leave") == []  # not on close either


def test_crashed_member_is_removed_after_its_session_and_the_group_rebalances(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    survivor = Runner(clock, _member(transport, clock, log, "c1"))
    victim = Runner(clock, _member(transport, clock, log, "c2"))

    def split() -> bool:
        sizes = [len(r.member.assignment()) for r in (survivor, victim)]
        return sizes == [2, 2] and _stable(survivor.member) and _stable(victim.member)

    assert clock.wait_for(split, 30_000)
    victim.halt(clock)
    victim.member.abandon()
    crashed_at = clock.now_ms()
    assert clock.wait_for(lambda: len(survivor.member.assignment()) == 4, 60_000)
    removed = transport.rows(
        "group_events", kind="member_removed", member_id=victim.member.member_id
    )
    assert [r["reason"] for r in removed] == ["session_timeout"]
    assert 0 < removed[0]["at_ms"] - crashed_at <= 10_000
    assert transport.rows("decisions", type="leave") == []
    survivor.halt(clock)
    survivor.member.close()


def test_requests_in_flight_survive_polls_shorter_than_the_answer_latency(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    slow = LatencyTransport(transport, clock, latency_ms=1_500)  # a micro-batch away
    member = GroupMember(_config("c1"), slow, clock, log, auto_offset_reset="earliest")
    records: list[Record] = []
    polls = 0
    while not records:
        records = member.poll(500)
        polls += 1
    assert polls > 10
    assert [r["error"] for r in transport.rows("decisions", type="join")] == [
        "MEMBER_ID_REQUIRED",
        "NONE",
    ]
    assert len(transport.requests(type="sync")) == 1
    assert len(transport.requests(type="offset_fetch")) == 1  # not resent by every short poll
    member.close()
    slow.close()


def test_a_second_instance_with_the_same_instance_id_fences_the_first(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    first = _member(transport, clock, log, "s1", group_instance_id="shared")
    first.poll(10_000)
    second = _member(transport, clock, log, "s2", group_instance_id="shared")
    second.poll(10_000)
    assert second.assignment() == first.assignment()  # the replacement takes the cached one
    clock.sleep(2_000)  # the first one's next heartbeat is answered FENCED_INSTANCE_ID
    assert first.state is MemberState.FENCED
    with pytest.raises(FencedInstanceIdError):
        first.poll(1_000)
    fenced = transport.rows("decisions", type="heartbeat", error="FENCED_INSTANCE_ID")
    assert len(fenced) == 1
    second.close()


def test_commit_answered_unknown_member_resets_the_member_before_rejoining(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    # ConsumerCoordinator: UNKNOWN_MEMBER_ID on OffsetCommit (generation unchanged) resets the
    # generation and the member id, so the rejoin goes out as a new member.
    member = _member(transport, clock, log, "c1")
    member.poll(10_000)
    old_id = member.member_id
    removal = {
        "event_id": "admin-1",
        "event_time_ms": clock.now_ms(),
        "type": "leave",
        "group_id": "g",
        "members": [{"member_id": old_id, "group_instance_id": None, "reason": "admin"}],
    }
    transport.send(Stream.GROUP, removal, lambda answer: None)
    with pytest.raises(CommitFailedError):
        member.commit()
    assert member.member_id == ""
    assert not member.generation.valid
    joins_before = len(transport.requests(type="join"))
    member.poll(10_000)
    assert member.state is MemberState.STABLE
    rejoin = transport.requests(type="join")[joins_before]
    assert rejoin["member_id"] == ""
    member.close()


def test_the_commit_before_a_rejoin_goes_out_even_with_an_auto_commit_in_flight(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    # Eager rebalance: what was consumed is committed before the JoinGroup (Kafka commits
    # synchronously in onJoinPrepare), also when a periodic auto-commit is still unanswered;
    # otherwise the partitions' next owner reads those records again.
    slow = SlowAnswers(transport, clock, {"offset_commit"}, delay_ms=5_000)
    first = GroupMember(
        _config("c1", auto_commit_interval_ms=1_000), slow, clock, log, auto_offset_reset="earliest"
    )
    assert [r.offset for r in first.poll(10_000)] == list(range(10))  # orders-0
    clock.sleep(1_000)
    assert [r.offset for r in first.poll(10_000)] == list(range(10, 20))  # auto-commit of 10 sent
    second = Runner(clock, _member(transport, clock, log, "c2"))
    assert clock.wait_for(lambda: bool(first.events("heartbeat_error")), 5_000)
    records = first.poll(10_000)  # rejoins while the auto-commit's answer is still on its way
    assert first.generation.generation_id == 2
    assert TopicPartition("orders", 0) in first.assignment()
    assert min(r.offset for r in records if r.partition == 0) == 20
    second.halt(clock)
    second.member.close()
    first.close()
    slow.close()


class FirstOffsetFetchFails:
    """Answers the first OffsetFetch with a retriable error (the coordinator loading)."""

    def __init__(self, inner: InMemoryTransport) -> None:
        self.inner = inner
        self.failed = False

    def send(self, stream: Stream, request: Mapping[str, Any], on_answer: AnswerCallback) -> None:
        if request.get("type") == "offset_fetch" and not self.failed:
            self.failed = True
            error = {"error": "COORDINATOR_LOAD_IN_PROGRESS", "error_code": 14, "offsets": []}
            self.inner.send(stream, request, lambda answer: on_answer({**answer, **error}))
            return
        self.inner.send(stream, request, on_answer)

    def forget(self, event_id: str) -> None:
        self.inner.forget(event_id)

    def close(self) -> None:
        pass


def test_a_failed_offset_fetch_is_retried_within_the_same_poll(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    flaky = FirstOffsetFetchFails(transport)
    member = GroupMember(_config("c1"), flaky, clock, log, auto_offset_reset="earliest")
    records = member.poll(60_000)
    assert len(records) == 10
    assert len(transport.requests(type="offset_fetch")) == 2
    # after retry.backoff.ms, not at the end of the poll's minute
    assert clock.now_ms() - START_MS == 3_000 + member.config.retry_backoff_ms
    member.close()


def test_close_completes_a_call_still_in_flight(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    slow = LatencyTransport(transport, clock, latency_ms=60_000)
    member = GroupMember(_config("c1"), slow, clock, log)
    assert member.poll(100) == []  # the JoinGroup is still on its way
    started = clock.now_ms()
    member.close(timeout_ms=0)
    assert member.state is MemberState.CLOSED
    assert clock.now_ms() == started  # nothing waited
    assert member._requester.calls.pending() == []
    with pytest.raises(GroupMemberError):
        member.poll(100)
    slow.close()
