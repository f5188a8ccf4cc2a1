"""The heartbeat thread (KIP-62) when answers are lost or slow, on the real coordinator core with
a virtual clock: a heartbeat goes out every heartbeat.interval.ms whatever became of the previous
one (one awaited at a time), an answer that comes after the next heartbeat was due is still
acted upon if it is about the member's current generation, and the poll timeout is checked on
every pass of the thread.

Auto-commit is off in these tests: an OffsetCommit also keeps the session alive, and here only
the heartbeats may."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from client.application import Runner
from client.latency import (
    HeartbeatsInFlight,
    LatencyTransport,
    LostAnswers,
    LostRequests,
    SlowAnswers,
    first_of,
    sent_between,
)
from controlplane.cli.demo_plan import DEMO_CLIENT_DEFAULTS
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


def test_slow_answers_do_not_slow_the_heartbeats_and_each_answer_is_heard(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    # Every heartbeat answer takes 1.5 intervals: each heartbeat is given up when the next one
    # is due, so the coordinator still gets one heartbeat per interval, but its answer is still
    # listened for (it comes within request.timeout.ms): the member hears every answer, never
    # listening for more than the two heartbeats sent within the last 1.5 intervals.
    slow = SlowAnswers(transport, clock, {"heartbeat"}, delay_ms=1_500)
    tracker = HeartbeatsInFlight(slow)
    app = Runner(clock, _member(tracker, clock, log, _config()))
    clock.sleep(30_000)
    member = app.member
    sent = _heartbeats_ms(transport, member.member_id)
    assert _before(sent, START_MS + 30_000) == list(
        range(JOINED_MS + 1_000, START_MS + 30_000, 1_000)
    )
    assert tracker.delivered == len(_before(sent, START_MS + 30_000 - 1_500))
    assert tracker.most == 2
    assert transport.rows("group_events", kind="member_removed") == []
    assert member.state is MemberState.STABLE
    app.halt(clock)
    member.close()
    slow.close()


def test_a_late_rebalance_in_progress_answer_makes_the_member_rejoin(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    # Every heartbeat answer of c1 takes 1.5 intervals. c2 joins: the coordinator answers c1's
    # next heartbeat REBALANCE_IN_PROGRESS, and that answer comes after c1's following
    # heartbeat was due. c1 acts on it and rejoins at once, well within the rebalance timeout
    # (20 s), and generation 2 holds both members. The answer of the heartbeat sent in
    # between (REBALANCE_IN_PROGRESS too, about generation 1) comes after c1 rejoined: no news.
    slow = SlowAnswers(transport, clock, {"heartbeat"}, delay_ms=1_500)
    c1 = Runner(clock, _member(slow, clock, log, _config()))
    clock.sleep(5_500)
    c1_gen1_id = c1.member.member_id
    c2 = Runner(clock, _member(transport, clock, log, _config(client_id="c2")))
    clock.sleep(15_000)
    c2_join_ms = START_MS + 5_500
    told = [  # heartbeats of generation 1 after c2 joined, before c1 rejoined
        r
        for r in transport.requests(type="heartbeat", member_id=c1_gen1_id, generation_id=1)
        if r["event_time_ms"] > c2_join_ms
    ]
    for heartbeat in told:
        (answer,) = transport.rows("decisions", event_id=heartbeat["event_id"])
        assert answer["error"] == "REBALANCE_IN_PROGRESS"
    first_ms, second_ms = (r["event_time_ms"] for r in told)
    assert second_ms == first_ms + 1_000
    rejoins = transport.requests(type="join", member_id=c1_gen1_id, client_id="c1")
    assert [r["event_time_ms"] for r in rejoins[1:]] == [first_ms + 1_500]  # after second_ms
    assert [e.detail for e in c1.member.events("heartbeat_error")] == ["REBALANCE_IN_PROGRESS"]
    for app in (c1, c2):
        assert app.member.state is MemberState.STABLE
        assert app.member.generation.generation_id == 2
        assert len(app.member.assignment()) == 2
    assert transport.rows("group_events", kind="member_removed") == []
    for app in (c1, c2):
        app.halt(clock)
        app.member.close()
    slow.close()


def _partitioned_member(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> tuple[Runner, LostRequests]:
    """c1's heartbeat answers take 1.5 intervals; its heartbeats sent from +5.5 s to +17.5 s
    never reach the coordinator, which removes it when its session (10 s) expires at +15 s.
    The heartbeats at +18 s and +19 s are answered UNKNOWN_MEMBER_ID at +19.5 s and +20.5 s."""
    slow = SlowAnswers(transport, clock, {"heartbeat"}, delay_ms=1_500)
    partition = LostRequests(slow, sent_between("heartbeat", START_MS + 5_500, START_MS + 17_500))
    return Runner(clock, _member(partition, clock, log, _config())), partition


def test_a_late_unknown_member_id_for_the_current_generation_resets_the_member(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    # The UNKNOWN_MEMBER_ID about its current generation comes after the next heartbeat was
    # due: the member resets (forgets its generation and member id) and rejoins as a new member.
    app, partition = _partitioned_member(clock, log, transport)
    clock.sleep(5_000)
    old_id = app.member.member_id
    clock.sleep(16_000)  # +21 s
    (removed,) = transport.rows("group_events", kind="member_removed", member_id=old_id)
    assert removed["reason"] == "session_timeout"
    told = _heartbeats_ms(transport, old_id)[-2:]
    assert told == [START_MS + 18_000, START_MS + 19_000]
    errors = app.member.events("heartbeat_error")
    assert [(e.at_ms, e.detail) for e in errors] == [(told[0] + 1_500, "UNKNOWN_MEMBER_ID")]
    rejoin = transport.requests(type="join", client_id="c1")[2]  # after the first two
    assert (rejoin["member_id"], rejoin["event_time_ms"]) == ("", told[0] + 1_500)
    clock.sleep(10_000)
    assert app.member.state is MemberState.STABLE
    assert app.member.member_id not in ("", old_id)
    assert app.member.generation.valid
    assert len(app.member.assignment()) == 4
    app.halt(clock)
    app.member.close()
    partition.close()


def test_a_late_error_about_a_generation_the_member_already_left_is_ignored(
    clock: VirtualClock, log: InMemoryLog
) -> None:
    # As above, but a group forms at once (no initial rebalance delay): the member, reset by
    # the first UNKNOWN_MEMBER_ID at +19.5 s, has rejoined as a new member and is Stable when
    # the second, about its old generation and member id, comes at +20.5 s.
    coordinator = replace(SETTINGS.coordinator, group_initial_rebalance_delay_ms=0)
    transport = InMemoryTransport(clock, Settings(coordinator=coordinator))
    app, partition = _partitioned_member(clock, log, transport)
    clock.sleep(5_000)
    old_id = app.member.member_id
    clock.sleep(14_800)  # +19.8 s: rejoined after the first UNKNOWN_MEMBER_ID
    assert [e.detail for e in app.member.events("heartbeat_error")] == ["UNKNOWN_MEMBER_ID"]
    assert app.member.state is MemberState.STABLE
    new_id, new_generation = app.member.member_id, app.member.generation
    assert new_id not in ("", old_id)
    clock.sleep(10_000)  # the second UNKNOWN_MEMBER_ID came at +20.5 s
    stale = transport.rows("decisions", type="heartbeat", error="UNKNOWN_MEMBER_ID")
    assert [(r["member_id"], r["event_time_ms"]) for r in stale] == [
        (old_id, START_MS + 18_000),
        (old_id, START_MS + 19_000),
    ]
    assert [e.detail for e in app.member.events("heartbeat_error")] == ["UNKNOWN_MEMBER_ID"]
    assert (app.member.member_id, app.member.generation) == (new_id, new_generation)
    assert app.member.state is MemberState.STABLE
    assert len(transport.requests(type="join", client_id="c1")) == 4  # two to join, two to rejoin
    app.halt(clock)
    app.member.close()
    partition.close()
    transport.close()


def test_a_late_error_about_a_static_members_former_member_id_is_ignored(
    clock: VirtualClock, log: InMemoryLog, transport: InMemoryTransport
) -> None:
    # A static member's heartbeats take 1.5 s to reach the coordinator. It stops polling: at its
    # poll timeout (5 s) it forgets its generation and member id (a static member sends no
    # LeaveGroup), and its next poll() rejoins with its group.instance.id: the group is Stable,
    # so the coordinator gives it a new member id in the same generation. Its last heartbeat
    # under the old member id reaches the coordinator after that and is answered
    # FENCED_INSTANCE_ID: same generation id, another member id, so no news for the member.
    slow = LatencyTransport(transport, clock, latency_ms=1_500, types={"heartbeat"})
    member = _member(slow, clock, log, _config(group_instance_id="i-1", max_poll_interval_ms=5_000))
    member.poll(10_000)
    old_id, generation_id = member.member_id, member.generation.generation_id
    last_poll_ms = clock.now_ms()
    clock.sleep(5_200)  # poll timeout at +5 s
    assert [e.at_ms for e in member.events("poll_timeout")] == [last_poll_ms + 5_000]
    member.poll(1_000)  # rejoins
    new_id = member.member_id
    assert new_id not in ("", old_id)
    assert member.generation.generation_id == generation_id
    clock.sleep(2_000)
    last_heartbeat = transport.requests(type="heartbeat", member_id=old_id)[-1]
    (answer,) = transport.rows("decisions", event_id=last_heartbeat["event_id"])
    assert answer["error"] == "FENCED_INSTANCE_ID"
    assert answer["decided_at_ms"] > last_poll_ms + 5_200  # after the rejoin
    assert member.events("heartbeat_error") == []
    assert member.state is MemberState.STABLE
    assert (member.member_id, member.generation.generation_id) == (new_id, generation_id)
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
