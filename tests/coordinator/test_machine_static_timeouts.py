"""§14: the KIP-345 draft's registration (scale down) and expansion (scale up) timeouts."""

from __future__ import annotations

import dataclasses

import pytest

from controlplane.core.coordinator.records import EventKind, MemberResult
from controlplane.core.coordinator.state import Timer, TimerKind
from controlplane.core.errors import Errors
from support.harness import (
    COMPLETING,
    EMPTY,
    LEADER_IID,
    PREPARING,
    RR,
    STABLE,
    CoordinatorHarness,
    assert_join_error,
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


# -- §14.1: the registration deadline belongs to a member offline now --------------------------

SECOND_MS = 1000


def _static_leader_c_and_followers_a_b(h: CoordinatorHarness) -> tuple[str, str, str]:
    """Static C (the leader), A and B join at 0; g1 forms at 3 s (initial delay 3 s, rebalance
    timeout 3 s: no extension) and everyone syncs: ⟨St g1 ld=C⟩, sessions of 10 s."""
    calls = {
        iid: h.join(iid=iid, protocols=RR, session_ms=SESSION_MS, rebalance_ms=3 * SECOND_MS)
        for iid in ("c", "a", "b")
    }
    c, a, b = (calls[iid].member_id for iid in ("c", "a", "b"))
    h.advance_to(3 * SECOND_MS)
    assert_join_ok(calls["c"], generation=1, leader=c, members={c, a, b})
    assignments = {c: "Yw==", a: "YQ==", b: "Yg=="}
    assert_sync(h.sync(c, 1, iid="c", assignments=assignments), Errors.NONE, "Yw==")
    assert_sync(h.sync(a, 1, iid="a"), Errors.NONE, "YQ==")
    assert_sync(h.sync(b, 1, iid="b"), Errors.NONE, "Yg==")
    h.assert_state(STABLE, 1, members={c, a, b}, leader=c)
    return c, a, b


def _a_offline_at_15_s_and_b_at_33_s(h: CoordinatorHarness) -> tuple[str, str, str]:
    """The issue's timeline up to 40 s: A's last heartbeat at 5 s, B's at 23 s, C's at 38 s."""
    c, a, b = _static_leader_c_and_followers_a_b(h)
    for at_s, members in ((5, (a, b, c)), (14, (b, c)), (23, (b, c)), (32, (c,)), (38, (c,))):
        h.advance_to(at_s * SECOND_MS)
        for member_id in members:
            assert h.heartbeat(member_id, 1).error is Errors.NONE
    offline = h.events_of(EventKind.STATIC_MEMBER_OFFLINE)
    assert [(e.member_id, e.at_ms) for e in offline] == [(a, 15 * SECOND_MS), (b, 33 * SECOND_MS)]
    assert h.timer(TimerKind.REGISTRATION) == 75 * SECOND_MS  # A's: the earliest
    h.advance_to(40 * SECOND_MS)
    return c, a, b


def _registration_removals(h: CoordinatorHarness) -> list[tuple[str | None, int]]:
    removed = h.events_of(EventKind.MEMBER_REMOVED)
    return [(e.member_id, e.at_ms) for e in removed if e.reason == "registration_timeout"]


def _a_leaves_at_40_s(h: CoordinatorHarness, *, by_instance_id: bool) -> tuple[str, str]:
    """A leaves; the leave rebalances (§6), C rejoins, g2 forms at 43 s with B in it, offline."""
    c, a, b = _a_offline_at_15_s_and_b_at_33_s(h)
    left = h.leave([("", "a")] if by_instance_id else [(a, "a")])
    assert [r.error_code for r in left.ok().member_results or ()] == [Errors.NONE.code]
    rejoin = h.join(c, iid="c", protocols=RR, session_ms=SESSION_MS, rebalance_ms=3 * SECOND_MS)
    h.advance_to(43 * SECOND_MS)
    assert_join_ok(rejoin, generation=2, leader=c, members={c, b})
    assert_sync(h.sync(c, 2, iid="c", assignments={c: "Yw==", b: "Yg=="}), Errors.NONE, "Yw==")
    h.assert_state(STABLE, 2, members={c, b})
    assert h.member(b).offline_since_ms == 33 * SECOND_MS
    return c, b


@pytest.mark.parametrize("by_instance_id", [True, False])
def test_an_offline_member_that_leaves_takes_its_registration_deadline_with_it(
    by_instance_id: bool,
) -> None:
    """Timeout 60 s; A offline at 15 s, B at 33 s, A leaves at 40 s: B is removed at 93 s
    (60 s after B went offline), not at 75 s (A's deadline)."""
    h = CoordinatorHarness(group_static_registration_timeout_ms=MINUTE_MS)
    c, b = _a_leaves_at_40_s(h, by_instance_id=by_instance_id)
    assert h.timer(TimerKind.REGISTRATION) == 93 * SECOND_MS  # B's now
    keep_alive(h, c, 75 * SECOND_MS, gen=2)
    h.advance_to(75 * SECOND_MS)
    assert _registration_removals(h) == []
    h.assert_state(STABLE, 2, members={c, b})
    assert h.member(b).offline_since_ms == 33 * SECOND_MS
    keep_alive(h, c, 93 * SECOND_MS - 1, gen=2)
    started = len(h.events_of(EventKind.REBALANCE_STARTED))
    h.advance_to(93 * SECOND_MS - 1)
    assert _registration_removals(h) == []
    h.advance_to(93 * SECOND_MS)
    assert _registration_removals(h) == [(b, 93 * SECOND_MS)]
    rebalances = h.events_of(EventKind.REBALANCE_STARTED)[started:]
    assert [e.reason for e in rebalances] == ["registration_timeout"]
    h.assert_state(PREPARING, 2, members={c})
    assert h.timer(TimerKind.REGISTRATION) is None


def test_an_offline_member_replaced_by_a_new_member_id_takes_its_deadline_with_it() -> None:
    """The same timeline, but at 40 s A's instance id rejoins with a new member id: A is back
    (cached assignment, no rebalance) and B's own deadline, 93 s, is the one that counts."""
    h = CoordinatorHarness(group_static_registration_timeout_ms=MINUTE_MS)
    c, a, b = _a_offline_at_15_s_and_b_at_33_s(h)
    started = len(h.events_of(EventKind.REBALANCE_STARTED))
    back = h.join(version=9, iid="a", protocols=RR, session_ms=SESSION_MS, rebalance_ms=3000)
    assert_join_ok(back, generation=1, leader=c)
    assert_sync(h.sync(back.member_id, 1, iid="a"), Errors.NONE, "YQ==")
    h.assert_state(STABLE, 1, members={c, back.member_id, b})
    assert a not in h.member_ids()  # replaced
    assert h.member(back.member_id).offline_since_ms is None
    assert h.timer(TimerKind.REGISTRATION) == 93 * SECOND_MS
    while h.now_ms + 5 * SECOND_MS < 93 * SECOND_MS:
        h.sleep(5 * SECOND_MS)
        for member_id in (c, back.member_id):
            assert h.heartbeat(member_id, 1).error is Errors.NONE
        if h.now_ms == 75 * SECOND_MS:
            assert _registration_removals(h) == []
    assert h.events_of(EventKind.REBALANCE_STARTED)[started:] == []
    h.advance_to(93 * SECOND_MS)
    assert _registration_removals(h) == [(b, 93 * SECOND_MS)]
    h.assert_state(PREPARING, 1, members={c, back.member_id})


def test_a_registration_timer_older_than_the_members_offline_now_removes_nobody() -> None:
    """A state saved with a deadline of a member since gone (the timer of an older version):
    when it fires, the rule is checked against the members offline now, and the deadline moves
    to theirs."""
    h = CoordinatorHarness(group_static_registration_timeout_ms=MINUTE_MS)
    c, b = _a_leaves_at_40_s(h, by_instance_id=True)
    stale = [
        dataclasses.replace(t, deadline_ms=75 * SECOND_MS)
        if t.kind is TimerKind.REGISTRATION
        else t
        for t in h.state.timers
    ]
    h.group = dataclasses.replace(h.state, timers=tuple(sorted(stale, key=_timer_order)))
    assert h.timer(TimerKind.REGISTRATION) == 75 * SECOND_MS
    keep_alive(h, c, 75 * SECOND_MS, gen=2)
    h.advance_to(75 * SECOND_MS)
    assert _registration_removals(h) == []
    h.assert_state(STABLE, 2, members={c, b})
    assert h.timer(TimerKind.REGISTRATION) == 93 * SECOND_MS
    keep_alive(h, c, 93 * SECOND_MS - 1, gen=2)
    h.advance_to(93 * SECOND_MS)
    assert _registration_removals(h) == [(b, 93 * SECOND_MS)]


def _timer_order(timer: Timer) -> tuple[int, int]:
    return (timer.deadline_ms, timer.seq)


# -- §14.1: an offline leader's return ---------------------------------------------------------


def _offline_static_leader(h: CoordinatorHarness) -> tuple[str, str]:
    """STATIC2 with 10 s sessions; the follower keeps heartbeating, the leader goes offline."""
    leader, follower = static2(h, rebalance_ms=SESSION_MS, session_ms=SESSION_MS)
    offline_at = h.session_deadline(leader)
    assert offline_at is not None
    keep_alive(h, follower, offline_at)
    h.advance_to(offline_at)
    assert h.member(leader).offline_since_ms == offline_at
    h.assert_state(STABLE, 1, members={leader, follower}, leader=leader)
    return leader, follower


def test_an_offline_leader_returning_with_its_member_id_rebalances() -> None:
    """§14.1 after §3.4: a known leader's JoinGroup in Stable always rebalances."""
    h = CoordinatorHarness(group_static_registration_timeout_ms=MINUTE_MS)
    leader, follower = _offline_static_leader(h)
    started = len(h.events_of(EventKind.REBALANCE_STARTED))
    back = h.join(leader, version=9, iid=LEADER_IID, protocols=RR, rebalance_ms=SESSION_MS)
    assert back.parked
    returned = h.events_of(EventKind.STATIC_MEMBER_RETURNED)
    assert [e.member_id for e in returned] == [leader]
    assert h.member(leader).offline_since_ms is None
    assert h.timer(TimerKind.REGISTRATION) is None
    rebalances = h.events_of(EventKind.REBALANCE_STARTED)[started:]
    assert [e.reason for e in rebalances] == ["leader_rejoined"]
    h.assert_state(PREPARING, 1, members={leader, follower})


def test_an_offline_leader_returning_with_a_new_member_id_gets_its_cached_assignment() -> None:
    """§14.1 after §3.6: replacement in Stable with the protocol unchanged, no rebalance."""
    h = CoordinatorHarness(group_static_registration_timeout_ms=MINUTE_MS)
    leader, follower = _offline_static_leader(h)
    started = len(h.events_of(EventKind.REBALANCE_STARTED))
    back = h.join(version=9, iid=LEADER_IID, protocols=RR, rebalance_ms=SESSION_MS)
    n = back.member_id
    assert_join_ok(back, generation=1, leader=n, members={n, follower}, skip=True)
    assert [e.group_instance_id for e in h.events_of(EventKind.STATIC_MEMBER_RETURNED)] == [
        LEADER_IID
    ]
    assert h.timer(TimerKind.REGISTRATION) is None
    assert_sync(h.sync(n, 1, iid=LEADER_IID), Errors.NONE, "AQ==")
    assert h.events_of(EventKind.REBALANCE_STARTED)[started:] == []
    h.assert_state(STABLE, 1, members={n, follower}, leader=n)
    assert leader not in h.member_ids()  # replaced


# -- §14.2: a member parked by the countdown may leave -----------------------------------------


def _stable_with_expansion(h: CoordinatorHarness) -> str:
    """Static X alone, Stable g1 at 3 s, with a session of an hour."""
    x = h.join(iid="x", session_ms=3_600_000, rebalance_ms=SESSION_MS)
    h.advance_to(3000)
    assert_sync(h.sync(x.member_id, 1, iid="x"), Errors.NONE)
    h.assert_state(STABLE, 1, members={x.member_id})
    return x.member_id


def test_the_only_parked_member_leaving_cancels_the_countdown() -> None:
    h = CoordinatorHarness(
        group_static_expansion_timeout_ms=MINUTE_MS, group_max_session_timeout_ms=3_600_000
    )
    x = _stable_with_expansion(h)
    h.advance_to(10_000)
    parked = h.join(iid="a", session_ms=SESSION_MS)
    assert parked.parked
    assert h.timer(TimerKind.EXPANSION) == 10_000 + MINUTE_MS
    h.advance_to(20_000)
    started = len(h.events_of(EventKind.REBALANCE_STARTED))
    assert h.leave([("", "a")]).ok().member_results == _left_none("a")
    assert_join_error(parked, Errors.UNKNOWN_MEMBER_ID, member_id="")
    assert h.timer(TimerKind.EXPANSION) is None
    h.assert_state(STABLE, 1, members={x})
    h.advance_to(10_000 + MINUTE_MS)  # when the countdown would have ended
    assert h.events_of(EventKind.REBALANCE_STARTED)[started:] == []
    h.assert_state(STABLE, 1, members={x})
    # A new static member after that starts a countdown of its own.
    later = h.join(iid="b", session_ms=SESSION_MS)
    assert later.parked
    assert h.timer(TimerKind.EXPANSION) == 10_000 + 2 * MINUTE_MS


def test_a_parked_member_leaving_is_not_taken_in_the_others_are() -> None:
    h = CoordinatorHarness(
        group_static_expansion_timeout_ms=MINUTE_MS, group_max_session_timeout_ms=3_600_000
    )
    x = _stable_with_expansion(h)
    h.advance_to(10_000)
    a = h.join(iid="a", session_ms=SESSION_MS, rebalance_ms=SESSION_MS)
    h.advance_to(20_000)
    b = h.join(iid="b", session_ms=SESSION_MS, rebalance_ms=SESSION_MS)
    h.advance_to(30_000)
    assert h.leave([("", "a")]).ok().member_results == _left_none("a")
    assert_join_error(a, Errors.UNKNOWN_MEMBER_ID, member_id="")
    assert b.parked
    h.assert_state(STABLE, 1, members={x})
    assert h.timer(TimerKind.EXPANSION) == 10_000 + MINUTE_MS  # still the first join's
    h.advance_to(10_000 + MINUTE_MS)
    rebalances = h.events_of(EventKind.REBALANCE_STARTED)
    assert [e.reason for e in rebalances][-1] == "expansion_timeout"
    h.assert_state(PREPARING, 1, members={x, b.member_id})
    added = h.events_of(EventKind.MEMBER_ADDED)
    assert a.member_id not in {e.member_id for e in added}
    rejoin = h.join(x, iid="x", session_ms=3_600_000, rebalance_ms=SESSION_MS)
    assert_join_ok(rejoin, generation=2, leader=x, members={x, b.member_id})
    assert_join_ok(b, generation=2, leader=x)


def _left_none(iid: str) -> tuple[MemberResult, ...]:
    return (MemberResult("", iid, Errors.NONE.code),)
