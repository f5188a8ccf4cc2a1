"""§14: the KIP-345 draft's registration (scale down) and expansion (scale up) timeouts."""

from __future__ import annotations

from controlplane.core.coordinator.records import EventKind
from controlplane.core.coordinator.state import TimerKind
from controlplane.core.errors import Errors
from support.harness import (
    COMPLETING,
    EMPTY,
    PREPARING,
    RR,
    STABLE,
    CoordinatorHarness,
    assert_join_ok,
    assert_sync,
    dyn1,
    static2,
)

MINUTE_MS = 60_000
SESSION_MS = 10_000


def keep_alive(h: CoordinatorHarness, member_id: str, until_ms: int, gen: int = 1) -> None:
    while h.now_ms + 5000 <= until_ms:
        h.sleep(5000)
        assert h.heartbeat(member_id, gen).error is Errors.NONE


def test_static_members_whose_session_expires_go_offline_without_a_rebalance() -> None:
    h = CoordinatorHarness(group_static_registration_timeout_ms=15 * MINUTE_MS)
    a, b = static2(h, rebalance_ms=SESSION_MS, session_ms=SESSION_MS)
    t0 = h.now_ms  # 6000: both sessions run until t0 + SESSION_MS
    a_offline = t0 + SESSION_MS
    h.advance_to(a_offline)
    offline = h.events_of(EventKind.STATIC_MEMBER_OFFLINE)
    assert {(e.member_id, e.at_ms, e.reason) for e in offline} == {
        (a, a_offline, "session_timeout"),
        (b, a_offline, "session_timeout"),
    }
    h.assert_state(STABLE, 1, members={a, b})  # nobody removed, no rebalance


def test_registration_timeout_example_of_the_draft() -> None:
    """A offline 00:00, B offline 00:10, A back 00:14, 00:25: B removed, one rebalance."""
    h = CoordinatorHarness(
        group_static_registration_timeout_ms=15 * MINUTE_MS,
        group_max_session_timeout_ms=3_600_000,
    )
    a, b = static2(h, rebalance_ms=SESSION_MS, session_ms=SESSION_MS)
    start = h.now_ms
    # B keeps its session until "00:10", A stops at once: A goes offline at "00:00".
    a_offline = start + SESSION_MS
    keep_alive(h, b, a_offline)
    h.advance_to(a_offline)
    assert h.describe().group_members is not None
    assert {m.member_id: m.offline for m in h.describe().group_members or ()} == {
        a: True,
        b: False,
    }
    assert h.timer(TimerKind.REGISTRATION) == a_offline + 15 * MINUTE_MS
    keep_alive(h, b, a_offline + 10 * MINUTE_MS - SESSION_MS)
    b_offline = h.session_deadline(b)
    assert b_offline is not None
    h.advance_to(b_offline)
    assert h.timer(TimerKind.REGISTRATION) == a_offline + 15 * MINUTE_MS  # earliest: still A
    # "00:14": A comes back with a new member id, gets its cached assignment, no rebalance.
    h.advance_to(a_offline + 14 * MINUTE_MS)
    back = h.join(version=9, iid="leader-instance-id", protocols=RR, session_ms=SESSION_MS)
    returned = h.events_of(EventKind.STATIC_MEMBER_RETURNED)
    assert [e.group_instance_id for e in returned] == ["leader-instance-id"]
    assert back.ok().generation_id == 1
    assert_sync(h.sync(back.member_id, 1, iid="leader-instance-id"), Errors.NONE, "AQ==")
    h.assert_state(STABLE, 1, members={back.member_id, b})
    assert h.timer(TimerKind.REGISTRATION) == b_offline + 15 * MINUTE_MS
    # "00:25": B has been away 15 minutes: removed, one rebalance.
    keep_alive(h, back.member_id, b_offline + 15 * MINUTE_MS - 1)
    started = len(h.events_of(EventKind.REBALANCE_STARTED))
    h.advance_to(b_offline + 15 * MINUTE_MS)
    removed = h.events_of(EventKind.MEMBER_REMOVED)
    assert [(e.member_id, e.reason) for e in removed] == [(b, "registration_timeout")]
    rebalances = h.events_of(EventKind.REBALANCE_STARTED)[started:]
    assert [e.reason for e in rebalances] == ["registration_timeout"]
    h.assert_state(PREPARING, 1, members={back.member_id})


def test_registration_timeout_leaves_dynamic_members_to_their_session() -> None:
    h = CoordinatorHarness(group_static_registration_timeout_ms=15 * MINUTE_MS)
    dyn1(h)
    h.advance_to(8000)
    h.assert_state(EMPTY, 2, members=set())


def test_an_offline_member_heartbeating_again_is_back() -> None:
    h = CoordinatorHarness(group_static_registration_timeout_ms=MINUTE_MS)
    a, b = static2(h, rebalance_ms=SESSION_MS, session_ms=SESSION_MS)
    keep_alive(h, b, 16000)
    h.advance_to(16000)
    assert h.member(a).offline_since_ms == 16000
    assert h.heartbeat(a, 1).error is Errors.NONE
    assert h.member(a).offline_since_ms is None
    assert h.timer(TimerKind.REGISTRATION) is None


def test_expansion_timeout_example_of_the_draft() -> None:
    """A joins 00:00, B 00:03, 00:05 one rebalance (A and B in), C 00:06, 00:11 rebalance."""
    h = CoordinatorHarness(
        group_static_expansion_timeout_ms=5 * MINUTE_MS, group_max_session_timeout_ms=3_600_000
    )
    hour = 3_600_000
    x = h.join(iid="x", session_ms=hour, rebalance_ms=SESSION_MS)
    h.advance_to(3000)
    assert_sync(h.sync(x.member_id, 1, iid="x"), Errors.NONE)
    h.advance_to(10_000)  # "00:00"
    a = h.join(iid="a", session_ms=hour, rebalance_ms=SESSION_MS)
    assert a.parked
    assert h.timer(TimerKind.EXPANSION) == 10_000 + 5 * MINUTE_MS
    assert h.session_deadline(a.member_id) is None  # no join timer while the countdown runs
    h.advance_to(10_000 + 3 * MINUTE_MS)
    b = h.join(iid="b", session_ms=hour, rebalance_ms=SESSION_MS)
    assert b.parked
    h.assert_state(STABLE, 1, members={x.member_id})
    assert h.timer(TimerKind.EXPANSION) == 10_000 + 5 * MINUTE_MS
    h.advance_to(10_000 + 5 * MINUTE_MS)  # "00:05"
    h.assert_state(PREPARING, 1, members={x.member_id, a.member_id, b.member_id})
    assert [e.reason for e in h.events_of(EventKind.REBALANCE_STARTED)][-1] == "expansion_timeout"
    rejoin = h.join(x.member_id, iid="x", session_ms=hour, rebalance_ms=SESSION_MS)
    three = {x.member_id, a.member_id, b.member_id}
    assert_join_ok(rejoin, generation=2, leader=x.member_id, members=three)
    assert_join_ok(a, generation=2, leader=x.member_id)
    assert_join_ok(b, generation=2, leader=x.member_id)
    for member, iid in ((x.member_id, "x"), (a.member_id, "a"), (b.member_id, "b")):
        h.sync(member, 2, iid=iid)
    h.assert_state(STABLE, 2)
    h.advance_to(10_000 + 6 * MINUTE_MS)  # "00:06"
    c = h.join(iid="c", session_ms=hour, rebalance_ms=SESSION_MS)
    assert c.parked
    h.advance_to(10_000 + 11 * MINUTE_MS - 1)
    h.assert_state(STABLE, 2)
    h.advance_to(10_000 + 11 * MINUTE_MS)  # "00:11"
    h.assert_state(PREPARING, 2, members=three | {c.member_id})


def test_a_second_join_of_a_queued_instance_fences_the_first() -> None:
    h = CoordinatorHarness(group_static_expansion_timeout_ms=MINUTE_MS)
    x = h.join(iid="x", session_ms=SESSION_MS)
    h.advance_to(3000)
    h.sync(x.member_id, 1, iid="x")
    first = h.join(iid="a")
    second = h.join(iid="a")
    assert first.error is Errors.FENCED_INSTANCE_ID
    assert second.parked


def test_expansion_does_not_delay_a_dynamic_member() -> None:
    h = CoordinatorHarness(group_static_expansion_timeout_ms=MINUTE_MS)
    a = dyn1(h)
    b = h.join()
    h.assert_state(PREPARING, 1)
    assert_join_ok(h.join(a), generation=2, leader=a, members={a, b.member_id})
    h.assert_state(COMPLETING, 2)
