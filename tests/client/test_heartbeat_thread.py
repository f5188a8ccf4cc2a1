"""The heartbeat thread (KIP-62) when answers are lost or slow, on the real coordinator core with
a virtual clock: a heartbeat goes out every heartbeat.interval.ms whatever became of the previous
one, at most one is in flight, and the poll timeout is checked on every pass of the thread.

Auto-commit is off in these tests: an OffsetCommit also keeps the session alive, and here only
the heartbeats may."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from client.application import Runner
from client.latency import HeartbeatsInFlight, LostAnswers, SlowAnswers, first_of
from controlplane.cli.demo import DEMO_CLIENT_DEFAULTS
from controlplane.client.clock import VirtualClock
from controlplane.client.config import ConsumerConfig, consumer_config
from controlplane.client.member import GroupMember, MemberState
from controlplane.client.records import InMemoryLog
from controlplane.client.transport import Transport
from controlplane.client.transport_memory import InMemoryTransport
from controlplane.core.config import CoordinatorConfig, Settings
from controlplane.settings import load_settings

START_MS = 1_700_000_000_000
ROOT = Path(__file__).resolve().parents[2]
SETTINGS = Settings(coordinator=CoordinatorConfig(group_min_session_timeout_ms=1_000))
JOINED_MS = START_MS + 3_000  # a new group forms after group.initial.rebalance.delay.ms


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


def _config(**overrides: object) -> ConsumerConfig:
    base: dict[str, object] = {
        "group_id": "g",
        "topics": ("orders",),
        "client_id": "c1",
        "session_timeout_ms": 10_000,
        "heartbeat_interval_ms": 1_000,
        "max_poll_interval_ms": 20_000,
        "request_timeout_ms": 30_000,
        "max_poll_records": 10,
        "enable_auto_commit": False,
    }
    base.update(overrides)
    return ConsumerConfig(**base)  # type: ignore[arg-type]


def _member(
    transport: Transport, clock: VirtualClock, log: InMemoryLog, config: ConsumerConfig
) -> GroupMember:
    return GroupMember(config, transport, clock, log, auto_offset_reset="earliest")


def _heartbeats_ms(transport: InMemoryTransport, member_id: str) -> list[int]:
    """When each heartbeat of ``member_id`` was sent."""
    return [r["event_time_ms"] for r in transport.requests(type="heartbeat", member_id=member_id)]


def _before(times_ms: list[int], end_ms: int) -> list[int]:
    """The times before ``end_ms`` (a send at the very end may come after the test looks)."""
    return [t for t in times_ms if t < end_ms]


def _gaps(times_ms: list[int]) -> set[int]:
    return {later - earlier for earlier, later in itertools.pairwise(times_ms)}


def test_a_lost_heartbeat_answer_costs_one_interval_not_a_request_timeout(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    # session 10 s, request timeout 30 s: waiting for the lost answer would leave the member
    # without a heartbeat for 30 s, and the coordinator would remove it after 10 s.
    lossy = LostAnswers(transport, first_of("heartbeat", JOINED_MS + 2_000))
    app = Runner(clock, _member(lossy, clock, log, _config()))
    clock.sleep(45_000)
    member = app.member
    (lost,) = lossy.lost
    sent = _heartbeats_ms(transport, member.member_id)
    assert lost["event_time_ms"] + 1_000 in sent  # the next one, one interval after the lost one
    assert _before(sent, START_MS + 45_000) == list(
        range(JOINED_MS + 1_000, START_MS + 45_000, 1_000)
    )
    assert transport.rows("group_events", kind="member_removed") == []
    assert member.state is MemberState.STABLE
    assert member.generation.generation_id == 1
    app.halt(clock)
    member.close()


def test_with_the_demo_timeouts_a_lost_heartbeat_answer_costs_one_interval(
    clock: VirtualClock, log: InMemoryLog
) -> None:
    # conf/demo.yaml: heartbeat 3 s, session 15 s, request timeout 15 s. Waiting for the lost
    # answer, the next heartbeat would reach the coordinator just as the session expires.
    settings = load_settings(ROOT / "conf" / "demo.yaml")
    client = consumer_config("g", {**DEMO_CLIENT_DEFAULTS, **settings.sections["client"]})
    config = replace(client, topics=("orders",), client_id="c1", enable_auto_commit=False)
    assert config.request_timeout_ms >= config.session_timeout_ms
    transport = InMemoryTransport(clock, Settings(coordinator=settings.coordinator))
    interval_ms = config.heartbeat_interval_ms
    lossy = LostAnswers(transport, first_of("heartbeat", JOINED_MS + 2 * interval_ms))
    app = Runner(clock, _member(lossy, clock, log, config))
    clock.sleep(60_000)
    member = app.member
    (lost,) = lossy.lost
    sent = _heartbeats_ms(transport, member.member_id)
    assert lost["event_time_ms"] + interval_ms in sent
    assert _gaps(sent) == {interval_ms}
    assert transport.rows("group_events", kind="member_removed") == []
    assert member.state is MemberState.STABLE
    assert member.generation.generation_id == 1
    app.halt(clock)
    member.close()
    transport.close()


def test_the_poll_timeout_leaves_on_time_while_a_heartbeat_answer_is_lost(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    # max.poll.interval.ms 20 s; the application stops polling and the answer of the first
    # heartbeat after its last poll is lost. The thread checks the poll timeout on every pass
    # and wakes at the poll deadline itself: the LeaveGroup goes out at +20 s, not after the
    # lost answer's request timeout (+31 s), and the heartbeats go on until then.
    lossy = LostAnswers(transport, first_of("heartbeat", START_MS))
    member = _member(lossy, clock, log, _config())
    member.poll(10_000)
    last_poll_ms, member_id = clock.now_ms(), member.member_id
    clock.sleep(40_000)  # no poll
    assert [r["event_time_ms"] for r in lossy.lost] == [last_poll_ms + 1_000]
    (leave,) = transport.requests(type="leave")
    assert leave["event_time_ms"] == last_poll_ms + 20_000
    assert [e.at_ms for e in member.events("poll_timeout")] == [last_poll_ms + 20_000]
    expected = [last_poll_ms + k * 1_000 for k in range(1, 20)]
    assert _heartbeats_ms(transport, member_id) == expected
    removed = transport.rows("group_events", kind="member_removed", member_id=member_id)
    assert [r["reason"] for r in removed] == ["leave"]
    assert [e.kind for e in member.history].count("left") == 1
    member.close()


def test_the_poll_timeout_is_max_poll_interval_even_below_the_session_timeout(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    # Shipped Kafka's poll timer is max.poll.interval.ms alone, not max(session, max poll).
    member = _member(transport, clock, log, _config(max_poll_interval_ms=5_000))
    member.poll(10_000)
    last_poll_ms = clock.now_ms()
    clock.sleep(12_000)
    assert [e.at_ms for e in member.events("poll_timeout")] == [last_poll_ms + 5_000]
    (leave,) = transport.requests(type="leave")
    assert leave["event_time_ms"] == last_poll_ms + 5_000
    member.close()


def test_at_most_one_heartbeat_is_in_flight_and_slow_answers_do_not_slow_the_heartbeats(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    # Every heartbeat answer takes 1.5 intervals: each heartbeat is given up when the next one
    # is due (its late answer is ignored), so the member never waits for two at once, and the
    # coordinator still gets one heartbeat per interval.
    slow = SlowAnswers(transport, clock, {"heartbeat"}, delay_ms=1_500)
    tracker = HeartbeatsInFlight(slow)
    app = Runner(clock, _member(tracker, clock, log, _config()))
    clock.sleep(30_000)
    member = app.member
    sent = _heartbeats_ms(transport, member.member_id)
    assert _before(sent, START_MS + 30_000) == list(
        range(JOINED_MS + 1_000, START_MS + 30_000, 1_000)
    )
    assert tracker.most == 1
    assert transport.rows("group_events", kind="member_removed") == []
    assert member.state is MemberState.STABLE
    app.halt(clock)
    member.close()
    slow.close()


def test_a_lost_leave_group_answer_does_not_stop_the_heartbeats_of_the_rejoined_member(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    # The poll-timeout LeaveGroup is sent without waiting for its answer (as Kafka's
    # maybeLeaveGroup): an application that polls again right away rejoins, and the heartbeat
    # thread keeps the new session instead of waiting a request timeout for the lost answer.
    lossy = LostAnswers(transport, first_of("leave", START_MS))
    member = _member(lossy, clock, log, _config())
    member.poll(10_000)
    clock.sleep(21_000)  # poll timeout at +20 s: LeaveGroup sent, its answer lost
    assert len(lossy.lost) == 1
    member.poll(10_000)  # rejoins as a new member
    new_id = member.member_id
    rejoined_ms = clock.now_ms()
    clock.sleep(15_000)  # busy: beyond the session, within max.poll.interval.ms
    assert transport.rows("group_events", kind="member_removed", member_id=new_id) == []
    assert member.state is MemberState.STABLE
    end_ms = clock.now_ms()
    sent = _heartbeats_ms(transport, new_id)
    assert _before(sent, end_ms) == list(range(rejoined_ms + 1_000, end_ms, 1_000))
    member.close()
