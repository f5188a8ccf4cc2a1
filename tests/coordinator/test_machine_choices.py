"""The project's choices where Kafka's behaviour leaves a gap (docs/coordinator.md)."""

from __future__ import annotations

from controlplane.core.coordinator.records import EventKind
from controlplane.core.coordinator.state import TimerKind
from controlplane.core.errors import Errors
from support.harness import (
    COMPLETING,
    RB,
    RR,
    STABLE,
    CoordinatorHarness,
    R,
    assert_join_error,
    assert_sync,
    dyn1,
    dyn1j,
)


def _completing_pair(h: CoordinatorHarness) -> tuple[str, str]:
    a = dyn1j(h, 5000, 10000)
    b = h.join(session_ms=5000, rebalance_ms=10000)
    h.join(a, session_ms=5000, rebalance_ms=10000)
    h.assert_state(COMPLETING, 2)
    return a, b.member_id


def test_a_second_sync_replaces_the_parked_one_and_leaves_a_trace() -> None:
    h = CoordinatorHarness()
    a, b = _completing_pair(h)
    first = h.sync(b, 2)
    second = h.sync(b, 2)
    assert first.parked
    assert second.parked
    replaced = h.events_of(EventKind.REQUEST_REPLACED)
    assert [(e.event_id, e.member_id, e.reason) for e in replaced] == [
        (first.event_id, b, "replaced_by_newer_sync")
    ]
    h.sync(a, 2, assignments={a: "AA==", b: "AQ=="})
    assert_sync(second, Errors.NONE, "AQ==")
    assert first.parked  # never answered, like a replaced join


def test_a_member_leaving_with_a_parked_sync_gets_it_answered() -> None:
    h = CoordinatorHarness()
    _, b = _completing_pair(h)
    parked = h.sync(b, 2)
    assert h.leave([(b, None)]).ok().member_results is not None
    assert_sync(parked, Errors.UNKNOWN_MEMBER_ID)


def test_a_replaced_static_member_hands_its_pending_sync_to_the_new_id() -> None:
    h = CoordinatorHarness()
    a = h.join(iid="a", protocols=RR, session_ms=5000, rebalance_ms=10000)
    b = h.join(iid="b", protocols=RR, session_ms=5000, rebalance_ms=10000)
    h.advance_to(3000)
    h.advance_to(6000)
    h.assert_state(COMPLETING, 1)
    assert_sync(h.sync(a.member_id, 1, iid="a", assignments={b.member_id: "Yg=="}), Errors.NONE)
    h.assert_state(STABLE, 1)
    assert h.pending_sync() == {b.member_id}
    new = h.join(version=9, iid="b", protocols=RR, session_ms=5000, rebalance_ms=10000)
    assert new.ok().generation_id == 1
    assert h.pending_sync() == {new.member_id}
    assert_sync(h.sync(new.member_id, 1, iid="b"), Errors.NONE, "Yg==")
    assert h.timer(TimerKind.SYNC) is None


def test_a_pending_member_id_joining_with_an_instance_id_is_an_invalid_request() -> None:
    h = CoordinatorHarness()
    p = h.join(version=4).member_id
    call = h.join(p, version=4, iid="pod")
    assert_join_error(call, Errors.INVALID_REQUEST, member_id=p)
    answer = call.answer
    assert answer is not None
    assert answer.error_message is not None
    assert "group_instance_id" in answer.error_message
    assert h.pending() == {p}


def test_any_rebalance_takes_in_the_members_parked_by_the_expansion_countdown() -> None:
    h = CoordinatorHarness(group_static_expansion_timeout_ms=60_000)
    a = dyn1(h)
    queued = h.join(iid="pod-1", session_ms=5000)
    assert queued.parked
    assert h.timer(TimerKind.EXPANSION) == 63_000
    # the leader's join rebalances, takes pod-1 in, and everyone is awaiting: done at once
    rejoin = h.join(a, protocols=RR)
    assert h.timer(TimerKind.EXPANSION) is None
    assert rejoin.ok().generation_id == 2
    assert queued.ok().generation_id == 2
    h.assert_state(COMPLETING, 2, members={a, queued.member_id})


def test_protocol_vote_ties_follow_the_leaders_preference() -> None:
    h = CoordinatorHarness()
    leader = h.join(protocols=(*RB, *R))  # prefers roundrobin, lists range too
    follower = h.join(protocols=RR)  # prefers range
    h.advance_to(3000)
    assert leader.ok().protocol_name == "roundrobin"  # 1 vote each: the leader's order wins
    assert follower.ok().protocol_name == "roundrobin"
