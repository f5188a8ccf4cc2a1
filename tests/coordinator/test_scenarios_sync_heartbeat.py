"""docs/reference/group-coordinator.md §12.6-12.7: SyncGroup, Heartbeat and session."""

from __future__ import annotations

import pytest

from controlplane.core.coordinator.state import TimerKind
from controlplane.core.errors import Errors
from support.harness import (
    COMPLETING,
    EMPTY,
    PREPARING,
    RR,
    STABLE,
    CoordinatorHarness,
    assert_join_error,
    assert_join_ok,
    assert_sync,
    dyn1,
    dyn1j,
    joinn,
    pending,
)

# -- §12.6 SyncGroup ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("protocol_type", "protocol_name", "error"),
    [
        ("protocolType", None, Errors.INCONSISTENT_GROUP_PROTOCOL),
        (None, "protocolName", Errors.INCONSISTENT_GROUP_PROTOCOL),
        (None, None, Errors.NONE),
        ("consumer", "range", Errors.NONE),
    ],
)
def test_s59_sync_group_protocol_type_and_name_checks(
    protocol_type: str | None, protocol_name: str | None, error: Errors
) -> None:
    h = CoordinatorHarness()
    ld = h.join(iid="leader-instance-id", protocols=RR)
    fo = h.join(iid="follower-instance-id", protocols=RR)
    h.advance_to(3000)
    assert_join_ok(ld, generation=1, leader=ld.member_id, members={ld.member_id, fo.member_id})
    leader_sync = h.sync(
        ld.member_id,
        1,
        iid="leader-instance-id",
        assignments={ld.member_id: ""},
        protocol_type=protocol_type,
        protocol_name=protocol_name,
    )
    follower_sync = h.sync(
        fo.member_id,
        1,
        iid="follower-instance-id",
        protocol_type=protocol_type,
        protocol_name=protocol_name,
    )
    assert_sync(leader_sync, error)
    assert_sync(follower_sync, error)
    if error is Errors.NONE:
        assert leader_sync.ok().protocol_type == "consumer"
        assert leader_sync.ok().protocol_name == "range"
        h.assert_state(STABLE, 1)
    else:
        h.assert_state(COMPLETING, 1)


def _s61_stable_static_leader() -> tuple[CoordinatorHarness, str]:
    h = CoordinatorHarness()
    a = h.join(version=9, iid="leader-instance-id")
    h.advance_to(3000)
    assert a.ok().generation_id == 1
    return h, a.member_id


def test_s61_sync_group_from_unknown_member() -> None:
    h, a = _s61_stable_static_leader()
    assert_sync(h.sync(a, 1, assignments={a: ""}), Errors.NONE)
    h.assert_state(STABLE, 1)
    assert_sync(h.sync("unknown-member-id", 1), Errors.UNKNOWN_MEMBER_ID)


def test_s62_sync_group_from_illegal_generation() -> None:
    h, a = _s61_stable_static_leader()
    assert_sync(h.sync(a, 2), Errors.ILLEGAL_GENERATION)


def _s64_completing_g2() -> tuple[CoordinatorHarness, str, str]:
    h = CoordinatorHarness()
    a = dyn1(h)
    f = h.join(session_ms=5000, rebalance_ms=10000)
    assert f.parked
    lead = h.join(a, session_ms=5000, rebalance_ms=10000)
    assert_join_ok(lead, generation=2, leader=a, members={a, f.member_id})
    assert_join_ok(f, generation=2, leader=a)
    h.assert_state(COMPLETING, 2)
    return h, a, f.member_id


def test_s64_sync_group_follower_after_leader() -> None:
    h, a, f = _s64_completing_g2()
    assert_sync(h.sync(a, 2, assignments={a: "AA==", f: "AQ=="}), Errors.NONE, "AA==")
    h.assert_state(STABLE, 2)
    assert_sync(h.sync(f, 2), Errors.NONE, "AQ==")


def test_s65_sync_group_leader_after_follower() -> None:
    h, a, f = _s64_completing_g2()
    follower_sync = h.sync(f, 2)
    assert follower_sync.parked
    released = len(h.decisions)
    leader_sync = h.sync(a, 2, assignments={a: "AA==", f: "AQ=="})
    assert_sync(leader_sync, Errors.NONE, "AA==")
    assert_sync(follower_sync, Errors.NONE, "AQ==")
    step_answers = [d.event_id for d in h.decisions[released:]]
    assert step_answers == [leader_sync.event_id, follower_sync.event_id]  # own answer first
    h.assert_state(STABLE, 2)


def test_s67_rebalance_times_out_when_sync_request_is_not_received() -> None:
    h = CoordinatorHarness()
    ids, _ = joinn(h, 3, 5000, 5000)
    assert h.timer(TimerKind.SYNC) == 10000
    h.advance_to(7500)
    for m in ids:
        assert h.heartbeat(m, 1).error is Errors.NONE
    h.advance_to(10000)
    h.assert_state(EMPTY, 2, members=set())
    for m in ids:
        assert h.heartbeat(m, 1).error is Errors.UNKNOWN_MEMBER_ID


def test_s68_rebalance_times_out_when_sync_request_is_not_received_from_followers() -> None:
    h = CoordinatorHarness()
    ids, _ = joinn(h, 3, 5000, 5000)
    m1, m2, m3 = ids
    h.advance_to(7500)
    for m in ids:
        assert h.heartbeat(m, 1).error is Errors.NONE
    assert_sync(h.sync(m1, 1), Errors.NONE)
    h.assert_state(STABLE, 1)
    assert h.pending_sync() == {m2, m3}
    assert h.heartbeat(m1, 1).error is Errors.NONE
    h.advance_to(10000)
    h.assert_state(PREPARING, 1, members={m1})
    assert h.timer(TimerKind.JOIN) == 15000
    assert h.heartbeat(m1, 1).error is Errors.REBALANCE_IN_PROGRESS
    assert h.heartbeat(m2, 1).error is Errors.UNKNOWN_MEMBER_ID
    assert h.heartbeat(m3, 1).error is Errors.UNKNOWN_MEMBER_ID


def test_s70_rebalance_does_not_time_out_when_all_sync_are_received() -> None:
    h = CoordinatorHarness()
    ids, _ = joinn(h, 3, 5000, 5000)
    h.advance_to(7500)
    for m in ids:
        assert h.heartbeat(m, 1).error is Errors.NONE
    for m in ids:
        assert_sync(h.sync(m, 1), Errors.NONE)
    assert h.timer(TimerKind.SYNC) is None
    for at_ms in (10000, 12500):
        h.advance_to(at_ms)
        for m in ids:
            assert h.heartbeat(m, 1).error is Errors.NONE
    h.assert_state(STABLE, 1, members=set(ids))


# -- §12.7 Heartbeat and session ------------------------------------------------------------------


def test_s71_heartbeat_unknown_group() -> None:
    h = CoordinatorHarness()
    assert h.heartbeat("member-id", -1).error is Errors.UNKNOWN_MEMBER_ID
    assert h.group is None


def test_s73_heartbeat_during_preparing_rebalance() -> None:
    h = CoordinatorHarness()
    first = h.join(version=4)
    assert_join_error(first, Errors.MEMBER_ID_REQUIRED)
    assert h.join(first.member_id).parked
    h.assert_state(PREPARING, 0)
    assert h.heartbeat(first.member_id, 0).error is Errors.REBALANCE_IN_PROGRESS


def test_s74_heartbeat_during_completing_rebalance() -> None:
    h = CoordinatorHarness()
    a = dyn1j(h, 500, 500)
    assert h.heartbeat(a, 1).error is Errors.NONE


def test_s76_valid_heartbeat() -> None:
    h = CoordinatorHarness()
    a = dyn1(h)
    assert h.heartbeat(a, 1).error is Errors.NONE


def test_s77_classic_group_member_session_timeout() -> None:
    h = CoordinatorHarness()
    a = dyn1(h)
    h.advance_to(8000)
    h.assert_state(EMPTY, 2, members=set())
    assert h.heartbeat(a, 1).error is Errors.UNKNOWN_MEMBER_ID


def test_s79_classic_group_member_session_timeout_during_rebalance() -> None:
    h = CoordinatorHarness()
    a = dyn1(h)
    assert h.session_deadline(a) == 8000
    b = h.join(rebalance_ms=10000, session_ms=5000)
    assert b.parked
    h.assert_state(PREPARING, 1)
    assert h.timer(TimerKind.JOIN) == 13000
    assert h.session_deadline(b.member_id) == 303000
    h.advance_to(5500)
    assert h.heartbeat(a, 1).error is Errors.REBALANCE_IN_PROGRESS
    assert h.session_deadline(a) == 10500
    h.advance_to(10499)
    assert b.parked  # A is still a member that has not rejoined
    h.advance_to(10500)
    assert_join_ok(b, generation=2, leader=b.member_id, members={b.member_id})
    h.assert_state(COMPLETING, 2, members={b.member_id})
    assert h.heartbeat(a, 1).error is Errors.UNKNOWN_MEMBER_ID
    h.advance_to(13000)
    h.assert_state(COMPLETING, 2, members={b.member_id})


def test_s80_rebalance_completes_before_member_joins() -> None:
    h = CoordinatorHarness()
    a = h.join(version=9, iid="leader-instance-id", rebalance_ms=10000, session_ms=5000)
    h.advance_to(3000)
    assert a.ok().generation_id == 1
    assert_sync(h.sync(a.member_id, 1), Errors.NONE)
    h.assert_state(STABLE, 1)
    assert h.session_deadline(a.member_id) == 8000
    b = h.join(rebalance_ms=10000, session_ms=2500)
    assert b.parked
    assert h.timer(TimerKind.JOIN) == 13000
    h.advance_to(5500)
    assert h.heartbeat(a.member_id, 1).error is Errors.REBALANCE_IN_PROGRESS
    h.advance_to(8000)
    assert h.heartbeat(a.member_id, 1).error is Errors.REBALANCE_IN_PROGRESS
    assert h.session_deadline(a.member_id) == 13000  # ties with the join timer; FIFO
    h.advance_to(13000)
    both = {a.member_id, b.member_id}
    assert_join_ok(b, generation=2, leader=b.member_id, members=both)
    h.assert_state(COMPLETING, 2, members=both)
    assert h.session_deadline(a.member_id) == 18000
    assert h.session_deadline(b.member_id) == 15500
    assert h.timer(TimerKind.SYNC) == 23000
    assert_sync(h.sync(b.member_id, 2), Errors.NONE)
    h.assert_state(STABLE, 2)
    assert h.pending_sync() == {a.member_id}
    assert h.heartbeat(a.member_id, 1).error is Errors.ILLEGAL_GENERATION
    for at_ms in (15000, 17000):
        h.advance_to(at_ms)
        assert h.heartbeat(b.member_id, 2).error is Errors.NONE
    h.advance_to(19000)
    assert h.heartbeat(b.member_id, 2).error is Errors.REBALANCE_IN_PROGRESS
    h.assert_state(PREPARING, 2, members={b.member_id})
    rejoin = h.join(b.member_id, session_ms=2500, rebalance_ms=10000)
    assert_join_ok(rejoin, generation=3, leader=b.member_id, members={b.member_id})
    assert_sync(h.sync(b.member_id, 3), Errors.NONE)
    for _ in range(20):
        h.sleep(2000)
        assert h.heartbeat(b.member_id, 3).error is Errors.NONE
    h.assert_state(STABLE, 3)


def test_s82_second_member_partially_join_and_timeout() -> None:
    h = CoordinatorHarness()
    a = h.join(version=9, iid="leader-instance-id", rebalance_ms=10000, session_ms=5000)
    h.advance_to(3000)
    assert_sync(h.sync(a.member_id, 1), Errors.NONE)
    p = h.join(version=9, session_ms=5000, rebalance_ms=10000)
    assert_join_error(p, Errors.MEMBER_ID_REQUIRED)
    h.assert_state(STABLE, 1)
    assert h.pending() == {p.member_id}
    assert h.session_deadline(p.member_id) == 8000
    h.advance_to(5500)
    assert h.heartbeat(a.member_id, 1).error is Errors.NONE
    h.advance_to(8000)
    assert h.pending() == set()
    assert h.heartbeat(a.member_id, 1).error is Errors.NONE
    h.assert_state(STABLE, 1, members={a.member_id})


def test_s83_join_group_completion_when_pending_member_joins() -> None:
    h = CoordinatorHarness()
    leader, follower, p, lj, fj = pending(h)
    pj = h.join(p, session_ms=5000, rebalance_ms=10000)
    everyone = {leader, follower, p}
    assert_join_ok(lj, generation=3, leader=leader, members=everyone)
    assert_join_ok(fj, generation=3, leader=leader)
    assert_join_ok(pj, generation=3, leader=leader)
    h.assert_state(COMPLETING, 3, members=everyone)
    assert h.pending() == set()
