"""docs/reference/group-coordinator.md §12.4 (Dead) and §12.5: static membership (KIP-345),
replacement, fencing, rejoin."""

from __future__ import annotations

import pytest

from controlplane.core.coordinator.state import GroupPhase, TimerKind
from controlplane.core.errors import Errors
from support.harness import (
    COMPLETING,
    EMPTY,
    FOLLOWER_IID,
    LEADER_IID,
    PREPARING,
    RB,
    RR,
    STABLE,
    CoordinatorHarness,
    assert_join_error,
    assert_join_ok,
    assert_sync,
    dyn1,
    static2,
)


def test_s32_dead_group_answers_coordinator_not_available() -> None:
    h = CoordinatorHarness()
    a = dyn1(h)
    h.force_phase(GroupPhase.DEAD)
    assert_join_error(h.join(), Errors.COORDINATOR_NOT_AVAILABLE, member_id="")
    assert_join_error(h.join(a), Errors.COORDINATOR_NOT_AVAILABLE, member_id=a)
    assert_sync(h.sync(a, 1), Errors.COORDINATOR_NOT_AVAILABLE)
    assert h.heartbeat(a, 1).error is Errors.COORDINATOR_NOT_AVAILABLE
    left = h.leave([(a, None)])
    assert left.error is Errors.COORDINATOR_NOT_AVAILABLE
    assert h.member_ids() == {a}


def test_s34_static_member_rejoin_with_explicit_unknown_member_id() -> None:
    h = CoordinatorHarness()
    a = h.join(iid="I", session_ms=5000, rebalance_ms=5000)
    h.advance_to(3000)
    assert a.ok().generation_id == 1
    unknown = h.join("unknown-member-id", iid="I", session_ms=5000, rebalance_ms=5000)
    assert_join_error(unknown, Errors.FENCED_INSTANCE_ID, member_id="unknown-member-id")


def test_s35_join_group_replace_static_member() -> None:
    h = CoordinatorHarness()
    old = h.join(iid="I", session_ms=5000)
    assert old.parked
    new = h.join(iid="I", session_ms=5000)
    assert new.parked
    assert_join_error(old, Errors.FENCED_INSTANCE_ID, member_id=old.member_id)
    h.assert_state(PREPARING, 0, members={new.member_id})
    assert h.awaiting_join() == {new.member_id}
    h.advance_to(3000)
    assert_join_ok(new, generation=1, leader=new.member_id, members={new.member_id})


def test_s37_replace_static_member_in_stable_state_with_updated_protocol_triggers_rebalance() -> (
    None
):
    h = CoordinatorHarness()
    old = h.join(version=9, iid="I", protocols=RR)
    h.advance_to(3000)
    assert_sync(h.sync(old.member_id, 1, iid="I"), Errors.NONE)
    h.assert_state(STABLE, 1)
    new = h.join(iid="I", protocols=RB)
    n = new.member_id
    assert_join_ok(new, generation=2, leader=n, members={n}, protocol_name="roundrobin")
    h.assert_state(COMPLETING, 2)


def test_s38_replace_static_member_in_completing_rebalance_state_triggers_rebalance() -> None:
    h = CoordinatorHarness()
    h.join(version=9, iid="I")
    h.advance_to(3000)
    h.assert_state(COMPLETING, 1)
    new = h.join(iid="I")
    assert_join_ok(new, generation=2, leader=new.member_id, members={new.member_id})
    h.assert_state(COMPLETING, 2, members={new.member_id})


def test_s40_static_member_fence_duplicate_syncing_follower_after_member_id_changed() -> None:
    h = CoordinatorHarness()
    leader, follower = static2(h, 10000, 5000)
    lj = h.join(leader, iid=LEADER_IID, protocols=RR, rebalance_ms=10000)
    assert lj.parked
    assert h.timer(TimerKind.JOIN) == 16000
    fj = h.join(follower, iid=FOLLOWER_IID, protocols=RR, rebalance_ms=10000)
    assert_join_ok(lj, generation=2, leader=leader, members={leader, follower})
    assert_join_ok(fj, generation=2, leader=leader)
    assert h.session_deadline(leader) == 6500
    fs = h.sync(follower, 2, iid=FOLLOWER_IID)
    assert fs.parked
    new = h.join(iid=FOLLOWER_IID, protocols=RR, rebalance_ms=10000)
    assert new.parked
    assert_sync(fs, Errors.FENCED_INSTANCE_ID)
    h.assert_state(PREPARING, 2, members={leader, new.member_id})
    assert h.session_deadline(new.member_id) == 6500
    h.advance_to(6500)
    n = new.member_id
    assert_join_ok(new, generation=3, leader=n, members={n})
    h.assert_state(COMPLETING, 3, members={n}, leader=n)


def test_s41_static_member_fence_duplicate_rejoining_follower_after_member_id_changed() -> None:
    h = CoordinatorHarness()
    leader, follower = static2(h)
    lj = h.join(leader, iid=LEADER_IID, rebalance_ms=10000)
    assert lj.parked
    new = h.join(iid=FOLLOWER_IID, rebalance_ms=10000)
    assert_join_ok(lj, generation=2, leader=leader, members={leader, new.member_id})
    assert_join_ok(new, generation=2, leader=leader)
    h.assert_state(COMPLETING, 2)
    stale = h.join(follower, iid=FOLLOWER_IID, rebalance_ms=10000)
    assert_join_error(stale, Errors.FENCED_INSTANCE_ID, member_id=follower)


@pytest.mark.parametrize("version", [4, 9])
def test_s43_static_member_rejoin_with_leader_id_and_unknown_member_id(version: int) -> None:
    h = CoordinatorHarness()
    leader, follower = static2(h)
    new = h.join(version=version, iid=LEADER_IID, protocols=RR)
    n = new.member_id
    if version == 4:
        assert_join_ok(new, generation=1, leader=leader)  # the old leader id
    else:
        assert_join_ok(new, generation=1, leader=n, members={n, follower}, skip=True)
    h.assert_state(STABLE, 1, members={n, follower}, leader=n)
    stale = h.join(leader, version=version, iid=LEADER_IID, protocols=RR)
    assert_join_error(stale, Errors.FENCED_INSTANCE_ID)
    assert_sync(h.sync(leader, 1, iid=LEADER_IID), Errors.FENCED_INSTANCE_ID)
    assert_sync(h.sync(leader, 1), Errors.UNKNOWN_MEMBER_ID)


def test_s44_static_member_rejoin_with_leader_id_and_known_member_id() -> None:
    h = CoordinatorHarness()
    leader, _ = static2(h, 10000, 5000)
    assert h.session_deadline(leader) == 11000
    lj = h.join(leader, version=9, iid=LEADER_IID, rebalance_ms=10000)
    assert lj.parked
    h.assert_state(PREPARING, 1)
    assert h.timer(TimerKind.JOIN) == 16000
    h.advance_to(11000)
    assert_join_ok(lj, generation=2, leader=leader, members={leader})
    h.assert_state(COMPLETING, 2, members={leader})


def test_s46_static_rejoin_unknown_member_id_change_of_protocol_selected_protocol_changed() -> None:
    h = CoordinatorHarness()
    leader, _ = static2(h, 10000, 15000)
    new = h.join(iid=FOLLOWER_IID, protocols=RB, rebalance_ms=10000, session_ms=15000)
    assert new.parked
    h.advance_to(16000)
    n = new.member_id
    assert_join_ok(new, generation=2, leader=n, members={leader, n}, protocol_name="roundrobin")
    h.assert_state(COMPLETING, 2)


def test_s47_static_rejoin_unknown_member_id_change_of_protocol_selected_protocol_unchanged() -> (
    None
):
    h = CoordinatorHarness()
    leader, follower = static2(h)
    new = h.join(version=9, iid=FOLLOWER_IID)
    assert_join_ok(new, generation=1, leader=leader)
    h.assert_state(STABLE, 1)
    assert_join_error(h.join(follower, iid=FOLLOWER_IID), Errors.FENCED_INSTANCE_ID)
    assert_sync(h.sync(follower, 1, iid=FOLLOWER_IID), Errors.FENCED_INSTANCE_ID)
    assert_sync(h.sync(new.member_id, 1, iid=FOLLOWER_IID), Errors.NONE, "Ag==")


def test_s49_static_member_rejoin_as_follower_with_unknown_member_id() -> None:
    h = CoordinatorHarness()
    leader, _ = static2(h)
    new = h.join(version=9, iid=FOLLOWER_IID, protocols=RR)
    assert_join_ok(new, generation=1, leader=leader)
    h.assert_state(STABLE, 1, members={leader, new.member_id})
    assert_sync(h.sync(new.member_id, 1, iid=FOLLOWER_IID), Errors.NONE, "Ag==")


def test_s50_static_member_rejoin_as_follower_with_known_member_id_and_no_protocol_change() -> None:
    h = CoordinatorHarness()
    leader, follower = static2(h)
    before = h.state
    again = h.join(follower, version=9, iid=FOLLOWER_IID, protocols=RR)
    assert_join_ok(again, generation=1, leader=leader)
    assert h.state == before  # nothing written


def test_s52_static_member_sync_as_leader_with_invalid_member_id() -> None:
    h = CoordinatorHarness()
    static2(h)
    assert_sync(h.sync("invalid-member-id", 0, iid=FOLLOWER_IID), Errors.FENCED_INSTANCE_ID)


def test_s53_static_member_heartbeat_leader_with_invalid_member_id() -> None:
    h = CoordinatorHarness()
    leader, _ = static2(h)
    assert_sync(h.sync(leader, 1, iid=LEADER_IID), Errors.NONE, "AQ==")
    assert h.heartbeat(leader, 1).error is Errors.NONE
    fenced = h.heartbeat("invalid-member-id", 1, iid=LEADER_IID)
    assert fenced.error is Errors.FENCED_INSTANCE_ID


def test_s55_static_member_join_with_unknown_instance_id_and_known_member_id() -> None:
    h = CoordinatorHarness()
    leader, _ = static2(h)
    joined = h.join(leader, version=9, iid="unknown-instance-id")
    assert_join_error(joined, Errors.UNKNOWN_MEMBER_ID)


def test_s56_static_member_follower_fail_to_rejoin_before_rebalance_timeout() -> None:
    h = CoordinatorHarness()
    leader, follower = static2(h, 10000, 15000)
    new = h.join(version=9, iid="new-member-instance-id", protocols=RR)
    assert new.parked
    assert h.timer(TimerKind.JOIN) == 16000
    lj = h.join(leader, version=9, iid=LEADER_IID, protocols=RR)
    assert lj.parked
    h.advance_to(16000)
    everyone = {leader, follower, new.member_id}
    answer = assert_join_ok(lj, generation=2, leader=leader, members=everyone)
    assert {(m.member_id, m.group_instance_id) for m in answer.members or ()} == {
        (leader, LEADER_IID),
        (follower, FOLLOWER_IID),
        (new.member_id, "new-member-instance-id"),
    }
    assert_join_ok(new, generation=2, leader=leader)
    h.assert_state(COMPLETING, 2, members=everyone)


def _s58_stuck_group() -> tuple[CoordinatorHarness, str]:
    h = CoordinatorHarness()
    leader, follower = static2(h, rebalance_ms=5000, session_ms=10000)
    assert h.session_deadline(leader) == 15000
    dynamic = h.join(protocols=RR, session_ms=10000)
    d = dynamic.member_id
    assert dynamic.parked
    assert h.timer(TimerKind.JOIN) == 10000
    h.advance_to(10000)
    assert_join_ok(dynamic, generation=2, leader=d, members={leader, follower, d})
    h.assert_state(COMPLETING, 2)
    assert h.session_deadline(leader) == 20000
    assert h.timer(TimerKind.SYNC) == 15000
    left = h.leave([(follower, FOLLOWER_IID)])
    assert left.ok().member_results is not None
    assert [r.error_code for r in left.ok().member_results or ()] == [0]
    h.assert_state(PREPARING, 2, members={leader, d})
    assert h.timer(TimerKind.JOIN) == 15000
    h.advance_to(15000)
    h.assert_state(PREPARING, 2, members={leader}, leader=leader)
    assert h.timer(TimerKind.JOIN) == 20000
    return h, leader


def test_s58_group_stuck_in_rebalance_timeout_leader_never_returns() -> None:
    h, _ = _s58_stuck_group()
    h.advance_to(20000)
    h.assert_state(EMPTY, 3, members=set())
    assert h.leader is None


def test_s58_group_stuck_in_rebalance_timeout_leader_returns() -> None:
    h, _ = _s58_stuck_group()
    new = h.join(iid=LEADER_IID)
    n = new.member_id
    assert_join_ok(new, generation=3, leader=n, members={n})
    h.assert_state(COMPLETING, 3, members={n})
