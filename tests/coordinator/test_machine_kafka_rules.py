"""More of Kafka's unit-test situations (T-J / T-S names in the docstrings), written from the
rules of docs/reference/group-coordinator.md: failures during sync, pending expiry, over-capacity
groups, static leaders."""

from __future__ import annotations

import dataclasses

from controlplane.core.coordinator.records import EventKind
from controlplane.core.coordinator.state import TimerKind
from controlplane.core.errors import Errors
from support.harness import (
    COMPLETING,
    EMPTY,
    FOLLOWER_IID,
    LEADER_IID,
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
    static2,
)


def test_known_member_join_in_empty_state_is_unknown_member() -> None:
    """T-J testJoinGroupExistingMemberInEmptyState (a forced transition)."""
    h = CoordinatorHarness()
    a = dyn1(h)
    h.force_phase(EMPTY)
    assert_join_error(h.join(a), Errors.UNKNOWN_MEMBER_ID, member_id=a)


def test_leader_failure_in_sync_group_resets_parked_syncs() -> None:
    """T-J testLeaderFailureInSyncGroup: the leader never syncs and its session runs out."""
    h = CoordinatorHarness()
    a = dyn1j(h, 5000, 10000)
    b = h.join(session_ms=5000, rebalance_ms=10000)
    h.join(a, session_ms=5000, rebalance_ms=10000)
    h.assert_state(COMPLETING, 2)
    h.advance_to(5000)
    follower_sync = h.sync(b.member_id, 2)
    assert follower_sync.parked
    assert h.session_deadline(a) == 8000
    h.advance_to(8000)
    assert_sync(follower_sync, Errors.REBALANCE_IN_PROGRESS)
    h.assert_state(PREPARING, 2, members={b.member_id}, leader=b.member_id)
    assert h.session_deadline(b.member_id) == 13000  # reset when its sync was answered


def test_join_completes_when_the_pending_member_times_out() -> None:
    """T-J testJoinGroupCompletionWhenPendingMemberTimesOut."""
    h = CoordinatorHarness()
    leader, follower, p, lj, fj = pending(h)
    h.advance_to(5500)
    assert p not in h.pending()
    assert_join_ok(lj, generation=3, leader=leader, members={leader, follower})
    assert_join_ok(fj, generation=3, leader=leader)
    h.assert_state(COMPLETING, 3)


def test_last_joining_members_are_kicked_out_of_an_over_capacity_group() -> None:
    """T-S testLastJoiningMembersAreKickedOutWhenReJoiningGroupWithMaxSize: a group loaded with
    more members than group.max.size now allows."""
    h = CoordinatorHarness(group_max_size=12)
    calls = [h.join(session_ms=60000, rebalance_ms=500) for _ in range(12)]
    h.advance_to(3000)
    ids = [c.member_id for c in calls]
    h.sync(ids[0], 1)
    h.assert_state(STABLE, 1)
    h.config = dataclasses.replace(h.config, group_max_size=10)
    h.force_prepare_rebalance()
    rejoins = [h.join(m, session_ms=60000, rebalance_ms=500) for m in ids]
    assert all(c.parked for c in rejoins[:10])
    for call in rejoins[10:]:
        assert_join_error(call, Errors.GROUP_MAX_SIZE_REACHED, member_id="")
    h.advance_to(3500)
    assert all(c.ok().generation_id == 2 for c in rejoins[:10])
    h.assert_state(COMPLETING, 2, members=set(ids[:10]))


def test_complete_join_removes_dynamic_members_that_did_not_rejoin() -> None:
    """T-J testCompleteJoinRemoveNotYetRejoinedDynamicMembers."""
    h = CoordinatorHarness()
    a = dyn1(h, 5000, 10000)
    b = h.join(session_ms=5000, rebalance_ms=10000)
    h.join(a, session_ms=5000, rebalance_ms=10000)
    h.sync(a, 2)
    h.sync(b.member_id, 2)
    h.assert_state(STABLE, 2)
    lj = h.join(a, session_ms=5000, rebalance_ms=10000)  # b never rejoins but heartbeats
    for at_ms in (6000, 10000):
        h.advance_to(at_ms)
        assert h.heartbeat(b.member_id, 2).error is Errors.REBALANCE_IN_PROGRESS
    h.advance_to(13000)
    assert_join_ok(lj, generation=3, leader=a, members={a})
    removed = h.events_of(EventKind.MEMBER_REMOVED)
    assert [(e.member_id, e.reason) for e in removed] == [(b.member_id, "rebalance_timeout")]


def test_static_leader_fails_to_rejoin_before_rebalance_timeout() -> None:
    """T-J testStaticMemberLeaderFailToRejoinBeforeRebalanceTimeout."""
    h = CoordinatorHarness()
    leader, follower = static2(h, 10000, 15000)
    # new metadata: the follower's rejoin starts a rebalance the leader never joins
    fj = h.join(follower, version=9, iid=FOLLOWER_IID, rebalance_ms=10000)
    assert fj.parked
    h.advance_to(16000)
    assert_join_ok(fj, generation=2, leader=follower, members={leader, follower})
    h.assert_state(COMPLETING, 2, members={leader, follower}, leader=follower)


def test_a_duplicate_rejoin_of_a_replaced_follower_is_fenced_during_rebalance() -> None:
    """T-J testStaticMemberFenceDuplicateRejoinedFollower."""
    h = CoordinatorHarness()
    leader, follower = static2(h)
    h.join(leader, iid=LEADER_IID, protocols=RR, rebalance_ms=10000)
    h.assert_state(PREPARING, 1)
    new = h.join(iid=FOLLOWER_IID, protocols=RR, rebalance_ms=10000)
    assert new.ok().generation_id == 2  # everyone awaiting: the join completed at once
    old = h.join(follower, iid=FOLLOWER_IID, protocols=RR, rebalance_ms=10000)
    assert_join_error(old, Errors.FENCED_INSTANCE_ID, member_id=follower)


def test_unknown_instances_in_a_batch_leave_change_nothing() -> None:
    """T-J testStaticMembersUnknownInstanceBatchLeaveGroup."""
    h = CoordinatorHarness()
    static2(h)
    before = h.state
    left = h.leave([("", "unknown-1"), ("", "unknown-2")])
    answer = left.ok()
    assert [r.error_code for r in answer.member_results or ()] == [25, 25]
    assert h.state == before


def test_sync_in_preparing_rebalance_is_rebalance_in_progress() -> None:
    h = CoordinatorHarness()
    a = dyn1(h)
    h.join()
    assert_sync(h.sync(a, 1), Errors.REBALANCE_IN_PROGRESS)


def test_sync_checks_the_protocol_name_only_when_the_group_has_one() -> None:
    """GMM validateSyncGroup, isProtocolInconsistent: a mismatch needs both the request's and
    the group's protocol type (or name) non-null (§11 D8, Java). The group has no protocol
    name in the initial rebalance, nor after it turned Empty (the name is cleared), so a sync
    naming one reaches the state check: REBALANCE_IN_PROGRESS, not INCONSISTENT_GROUP_PROTOCOL."""
    h = CoordinatorHarness()
    a = h.join()
    h.assert_state(PREPARING, 0)
    assert h.state.protocol_name is None
    assert_sync(h.sync(a.member_id, 0), Errors.REBALANCE_IN_PROGRESS)
    assert_sync(h.sync(a.member_id, 0, protocol_name="roundrobin"), Errors.REBALANCE_IN_PROGRESS)
    h.advance_to(3000)
    assert_sync(
        h.sync(a.member_id, 1, protocol_name="roundrobin"), Errors.INCONSISTENT_GROUP_PROTOCOL
    )
    assert_sync(h.sync(a.member_id, 1), Errors.NONE)
    h.leave([(a.member_id, None)])
    h.assert_state(EMPTY, 2)
    b = h.join()
    h.assert_state(PREPARING, 2)
    assert h.state.protocol_name is None
    assert_sync(h.sync(b.member_id, 2), Errors.REBALANCE_IN_PROGRESS)


def test_a_pending_member_leaving_a_stable_group_starts_a_rebalance() -> None:
    """§11 D5: Java counts the pending id as a valid leaver."""
    h = CoordinatorHarness()
    a = dyn1(h)
    p = h.join(version=4).member_id
    h.leave([(p, None)])
    h.assert_state(PREPARING, 1, members={a})
    assert h.timer(TimerKind.HEARTBEAT, p) is None


def test_rebalance_times_out_when_the_leader_never_syncs() -> None:
    """T-J testRebalanceTimesOutWhenSyncRequestIsNotReceivedFromLeaders."""
    h = CoordinatorHarness()
    (m1, m2, m3), _ = joinn(h, 3, 5000, 5000)
    h.advance_to(7500)
    for m in (m1, m2, m3):
        assert h.heartbeat(m, 1).error is Errors.NONE
    follower_syncs = [h.sync(m, 1) for m in (m2, m3)]
    assert all(c.parked for c in follower_syncs)
    h.advance_to(10000)
    for call in follower_syncs:
        assert_sync(call, Errors.REBALANCE_IN_PROGRESS)
    h.assert_state(PREPARING, 1, members={m2, m3})
    assert h.leader == m2


def test_a_follower_rejoining_with_a_mismatched_instance_id_is_fenced() -> None:
    """T-J testStaticMemberRejoinAsFollowerWithMismatchedInstanceId."""
    h = CoordinatorHarness()
    _, follower = static2(h)
    call = h.join(follower, version=9, iid=LEADER_IID, protocols=RR)
    assert_join_error(call, Errors.FENCED_INSTANCE_ID, member_id=follower)
