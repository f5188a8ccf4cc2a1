"""docs/reference/group-coordinator.md §12.1-12.4: JoinGroup admission and errors, the initial
delay, expiry, rejoins."""

from __future__ import annotations

from controlplane.core.coordinator.records import EventKind
from controlplane.core.coordinator.state import TimerKind
from controlplane.core.errors import Errors
from support.harness import (
    COMPLETING,
    EMPTY,
    PREPARING,
    RB,
    RR,
    STABLE,
    CoordinatorHarness,
    assert_join_error,
    assert_join_ok,
    assert_sync,
    dyn1,
    dyn1j,
)

# -- §12.1 admission and errors -----------------------------------------------------------------


def test_s01_join_group_should_receive_error_if_group_over_max_size() -> None:
    h = CoordinatorHarness(group_max_size=10)
    calls = [h.join() for _ in range(10)]
    assert all(c.parked for c in calls)
    assert h.phase is PREPARING
    refused = h.join()
    assert_join_error(refused, Errors.GROUP_MAX_SIZE_REACHED, member_id="")
    assert len(h.member_ids()) == 10


def test_s02_dynamic_members_join_group_with_max_size_and_required_known_member() -> None:
    h = CoordinatorHarness(group_max_size=10, group_initial_rebalance_delay_ms=50)
    firsts = [h.join(version=4) for _ in range(11)]
    for call in firsts:
        assert_join_error(call, Errors.MEMBER_ID_REQUIRED, member_id=call.member_id)
    ids = [c.member_id for c in firsts]
    h.assert_state(EMPTY, 0, members=set())
    assert h.pending() == set(ids)
    joins = [h.join(m, version=4) for m in ids[:10]]
    assert all(c.parked for c in joins)
    h.assert_state(PREPARING, 0, members=set(ids[:10]))
    assert h.timer(TimerKind.JOIN) == 50
    assert_join_error(h.join(ids[10], version=4), Errors.GROUP_MAX_SIZE_REACHED, member_id="")
    assert ids[10] not in h.pending()
    h.advance_to(50)
    assert h.timer(TimerKind.JOIN) == 100  # extended: a member was added during the delay
    h.advance_to(100)
    assert_join_ok(joins[0], generation=1, leader=ids[0], members=set(ids[:10]))
    for call in joins[1:]:
        assert_join_ok(call, generation=1, leader=ids[0])
    h.assert_state(COMPLETING, 1)
    assert h.pending() == set()
    again = [h.join(m, version=4) for m in ids[:10]]
    assert_join_ok(again[0], generation=1, leader=ids[0], members=set(ids[:10]))
    for call in again[1:]:
        assert_join_ok(call, generation=1, leader=ids[0])
    assert_join_error(h.join(ids[10], version=4), Errors.GROUP_MAX_SIZE_REACHED)


def test_s04_static_members_join_group_with_max_size() -> None:
    h = CoordinatorHarness(group_max_size=10, group_initial_rebalance_delay_ms=50)
    calls = [h.join(iid=f"instance-id-{i}") for i in range(11)]
    assert all(c.parked for c in calls[:10])
    assert_join_error(calls[10], Errors.GROUP_MAX_SIZE_REACHED, member_id="")
    h.advance_to(50)
    h.advance_to(100)
    ids = [c.member_id for c in calls[:10]]
    for call in calls[:10]:
        assert call.ok().generation_id == 1
    h.assert_state(COMPLETING, 1, members=set(ids))
    for i, member_id in enumerate(ids):
        assert h.join(member_id, iid=f"instance-id-{i}").ok().generation_id == 1
    assert_join_error(h.join(iid="instance-id-10"), Errors.GROUP_MAX_SIZE_REACHED)


def test_s05_dynamic_members_can_rejoin_group_with_max_size_while_rebalancing() -> None:
    h = CoordinatorHarness(group_max_size=10, group_initial_rebalance_delay_ms=50)
    ids = [h.join(version=4).member_id for _ in range(11)]
    round2 = [h.join(m, version=4) for m in ids]
    assert all(c.parked for c in round2[:10])
    assert_join_error(round2[10], Errors.GROUP_MAX_SIZE_REACHED)
    round3 = [h.join(m, version=4) for m in ids]
    assert all(c.parked for c in round3[:10])
    assert_join_error(round3[10], Errors.GROUP_MAX_SIZE_REACHED)
    h.advance_to(50)
    h.advance_to(100)
    for call in round3[:10]:
        assert call.ok().generation_id == 1
    assert all(c.parked for c in round2[:10])  # replaced, never answered
    replaced = {e.event_id for e in h.events_of(EventKind.REQUEST_REPLACED)}
    assert replaced == {c.event_id for c in round2[:10]}
    h.assert_state(COMPLETING, 1, members=set(ids[:10]))
    assert h.awaiting_join() == set()


def test_s07_join_group_session_timeout_too_small_or_too_large() -> None:
    h = CoordinatorHarness()
    assert_join_error(h.join(session_ms=9), Errors.INVALID_SESSION_TIMEOUT)
    assert h.group is None
    assert_join_error(h.join(session_ms=600001), Errors.INVALID_SESSION_TIMEOUT)
    assert h.group is None


def test_s08_invalid_group_id() -> None:
    h = CoordinatorHarness()
    assert_join_error(h.join(group_id=""), Errors.INVALID_GROUP_ID)
    assert h.group is None


def test_s10_join_inconsistent_protocol_type() -> None:
    h = CoordinatorHarness()
    dyn1j(h, 500, 500)
    assert_join_error(
        h.join(protocol_type="connect"), Errors.INCONSISTENT_GROUP_PROTOCOL, member_id=""
    )


def test_s11_join_group_with_empty_protocol_type() -> None:
    h = CoordinatorHarness()
    assert_join_error(h.join(protocol_type=""), Errors.INCONSISTENT_GROUP_PROTOCOL)
    assert_join_error(
        h.join(version=9, iid="group-instance-id", protocol_type=""),
        Errors.INCONSISTENT_GROUP_PROTOCOL,
    )
    h.assert_state(EMPTY, 0, members=set())


def test_s13_join_group_inconsistent_group_protocol() -> None:
    h = CoordinatorHarness()
    a = h.join()
    assert a.parked
    assert_join_error(h.join(protocols=RB), Errors.INCONSISTENT_GROUP_PROTOCOL)
    h.advance_to(3000)
    assert_join_ok(a, generation=1, leader=a.member_id, members={a.member_id})


def test_s14_join_group_second_join_inconsistent_protocol() -> None:
    h = CoordinatorHarness()
    p = h.join(version=4).member_id
    assert_join_error(h.join(p, version=4, protocols=()), Errors.INCONSISTENT_GROUP_PROTOCOL)
    assert h.pending() == {p}
    joined = h.join(p, version=4)
    assert joined.parked
    h.advance_to(3000)
    assert_join_ok(joined, generation=1, leader=p, members={p})


def test_s16_join_group_returns_the_protocol_type() -> None:
    h = CoordinatorHarness()
    a, b = h.join(), h.join()
    h.advance_to(3000)
    ids = {a.member_id, b.member_id}
    assert_join_ok(a, generation=1, leader=a.member_id, members=ids)
    assert_join_ok(b, generation=1, leader=a.member_id)


# -- §12.2 initial rebalance delay --------------------------------------------------------------


def test_s17_delay_initial_rebalance_on_empty_group() -> None:
    h = CoordinatorHarness()
    a = h.join()
    h.advance_to(1500)
    assert a.parked
    h.advance_to(3000)
    assert a.ok().generation_id == 1


def test_s19_delay_rebalance_up_to_rebalance_timeout() -> None:
    h = CoordinatorHarness()
    a, b = h.join(rebalance_ms=6000), h.join(rebalance_ms=6000)
    assert h.timer(TimerKind.JOIN) == 3000
    h.advance_to(3000)
    assert h.timer(TimerKind.JOIN) == 6000
    c = h.join(rebalance_ms=6000)
    h.advance_to(5999)
    assert a.parked
    assert b.parked
    assert c.parked
    h.advance_to(6000)
    for call in (a, b, c):
        assert call.ok().generation_id == 1


# -- §12.3 expiry of pending, new and joined members ---------------------------------------------


def test_s20_heartbeat_expiration_should_remove_pending_member() -> None:
    h = CoordinatorHarness()
    p = h.join(version=4, session_ms=1000).member_id
    assert h.pending() == {p}
    assert h.session_deadline(p) == 1000
    h.advance_to(1000)
    h.assert_state(EMPTY, 0)
    assert h.pending() == set()


def test_s22_new_member_join_expiration() -> None:
    h = CoordinatorHarness()
    a = dyn1j(h, 305000, 600000)
    assert h.session_deadline(a) == 308000
    b = h.join(session_ms=5000, rebalance_ms=5000)
    assert b.parked
    h.assert_state(PREPARING, 1, members={a, b.member_id})
    assert h.timer(TimerKind.JOIN) == 603000
    assert h.session_deadline(b.member_id) == 303000
    h.advance_to(303000)
    assert_join_error(b, Errors.UNKNOWN_MEMBER_ID, member_id="")
    h.assert_state(PREPARING, 1, members={a}, leader=a)


def test_s23_new_member_timeout_completion() -> None:
    h = CoordinatorHarness()
    a = h.join(session_ms=305000)
    h.advance_to(3000)
    assert a.ok().generation_id == 1
    assert h.session_deadline(a.member_id) == 308000
    assert_sync(h.sync(a.member_id, 1), Errors.NONE)
    h.advance_to(303000)
    h.assert_state(STABLE, 1, members={a.member_id})
    h.advance_to(308000)
    h.assert_state(EMPTY, 2, members=set())


# -- §12.4 known-member rejoin, rebalance triggers, generation ---------------------------------


def test_s25_join_existing_member_updated_metadata_triggers_rebalance() -> None:
    h = CoordinatorHarness()
    a = dyn1j(h, 500, 500)
    assert_join_ok(h.join(a, protocols=RR), generation=2, leader=a, members={a})
    h.assert_state(COMPLETING, 2)


def test_s26_join_group_from_unchanged_leader_should_rebalance() -> None:
    h = CoordinatorHarness()
    a = dyn1(h)
    assert_join_ok(h.join(a), generation=2, leader=a, members={a})
    h.assert_state(COMPLETING, 2)


def test_s28_join_existing_member_does_not_trigger_rebalance_in_stable_state() -> None:
    h = CoordinatorHarness()
    a = dyn1(h)
    b = h.join()
    assert_join_ok(h.join(a), generation=2, leader=a, members={a, b.member_id})
    assert_sync(h.sync(a, 2), Errors.NONE)
    assert_sync(h.sync(b.member_id, 2), Errors.NONE)
    h.assert_state(STABLE, 2)
    assert_join_ok(h.join(b.member_id), generation=2, leader=a)
    h.assert_state(STABLE, 2)


def test_s29_join_group_from_unchanged_follower_does_not_rebalance() -> None:
    h = CoordinatorHarness()
    a = dyn1(h)
    f = h.join()
    assert f.parked
    lead = h.join(a)
    assert_join_ok(lead, generation=2, leader=a, members={a, f.member_id})
    assert_join_ok(f, generation=2, leader=a)
    h.assert_state(COMPLETING, 2)
    assert_join_ok(h.join(f.member_id), generation=2, leader=a)
    h.assert_state(COMPLETING, 2)


def test_s31_complete_join_phase_no_members_rejoined_extends_join_phase() -> None:
    h = CoordinatorHarness()
    a = h.join(version=9, iid="first", session_ms=30000, rebalance_ms=10000)
    h.advance_to(3000)
    assert a.ok().generation_id == 1
    b = h.join(iid="second", session_ms=30000, rebalance_ms=10000)
    assert b.parked
    assert h.phase is PREPARING
    again = h.join(a.member_id, iid="first", session_ms=30000, rebalance_ms=10000)
    both = {a.member_id, b.member_id}
    assert_join_ok(again, generation=2, leader=a.member_id, members=both)
    assert_join_ok(b, generation=2, leader=a.member_id)
    assert h.session_deadline(a.member_id) == 33000
    assert h.session_deadline(b.member_id) == 33000
    h.force_prepare_rebalance()
    h.assert_state(PREPARING, 2, members=both)
    assert h.awaiting_join() == set()
    assert h.timer(TimerKind.JOIN) == 13000
    h.advance_to(13000)
    h.assert_state(PREPARING, 2, members=both)
    assert h.timer(TimerKind.JOIN) == 23000
    h.advance_to(23000)
    assert h.timer(TimerKind.JOIN) == 33000
    ja = h.join(a.member_id, iid="first", session_ms=30000, rebalance_ms=10000)
    jb = h.join(b.member_id, iid="second", session_ms=30000, rebalance_ms=10000)
    assert_join_ok(ja, generation=3, leader=a.member_id, members=both)
    assert_join_ok(jb, generation=3, leader=a.member_id)
    h.assert_state(COMPLETING, 3)
