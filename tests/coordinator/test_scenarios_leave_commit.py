"""docs/reference/group-coordinator.md §12.8-12.9: LeaveGroup (single, batch, pending, static) and
OffsetCommit validation."""

from __future__ import annotations

import pytest

from controlplane.core.coordinator.state import TimerKind
from controlplane.core.errors import Errors
from support.harness import (
    COMPLETING,
    EMPTY,
    FOLLOWER_IID,
    LEADER_IID,
    PREPARING,
    STABLE,
    Call,
    CoordinatorHarness,
    assert_join_error,
    assert_join_ok,
    dyn1,
    dyn1j,
    pending,
    static2,
)


def results(call: Call) -> list[tuple[str, str | None, int]]:
    """LV[(mid, iid, code), ...] of a LeaveGroup answer (top level NONE)."""
    answer = call.ok()
    return [(r.member_id, r.group_instance_id, r.error_code) for r in answer.member_results or ()]


# -- §12.8 LeaveGroup -----------------------------------------------------------------------------


def test_s85_pending_members_leave_group() -> None:
    h = CoordinatorHarness()
    leader, follower, p, lj, fj = pending(h)
    assert results(h.leave([(p, None)])) == [(p, None, 0)]
    assert_join_ok(lj, generation=3, leader=leader, members={leader, follower})
    assert_join_ok(fj, generation=3, leader=leader)
    h.assert_state(COMPLETING, 3, members={leader, follower})
    assert h.pending() == set()


def test_s86_leave_group_unknown_group() -> None:
    h = CoordinatorHarness()
    assert results(h.leave([("member-id", None)])) == [("member-id", None, 25)]
    assert h.group is None


def test_s88_valid_leave_group() -> None:
    h = CoordinatorHarness()
    a = dyn1j(h, 500, 500)
    assert results(h.leave([(a, None)])) == [(a, None, 0)]
    h.assert_state(EMPTY, 2, members=set())


def test_s89_leave_group_with_fenced_instance_id() -> None:
    h = CoordinatorHarness()
    a = h.join(version=9, iid="I")
    h.advance_to(3000)
    h.assert_state(COMPLETING, 1)
    before = h.state
    left = h.leave([("other-member-id", "I")])
    assert results(left) == [("other-member-id", "I", 82)]
    assert h.state == before
    assert h.member_ids() == {a.member_id}


def test_s91_static_members_valid_batch_leave_group() -> None:
    h = CoordinatorHarness()
    static2(h)
    left = h.leave([("", LEADER_IID), ("", FOLLOWER_IID)])
    assert results(left) == [("", LEADER_IID, 0), ("", FOLLOWER_IID, 0)]
    h.assert_state(EMPTY, 2, members=set())


def test_s92_static_members_fenced_instance_batch_leave_group() -> None:
    h = CoordinatorHarness()
    _, follower = static2(h)
    left = h.leave([("", LEADER_IID), ("invalid-member-id", FOLLOWER_IID)])
    assert results(left) == [("", LEADER_IID, 0), ("invalid-member-id", FOLLOWER_IID, 82)]
    h.assert_state(PREPARING, 1, members={follower}, leader=follower)
    assert h.timer(TimerKind.JOIN) == 16000


def test_s94_pending_member_batch_leave_group() -> None:
    h = CoordinatorHarness()
    leader, follower, p, lj, fj = pending(h)
    left = h.leave([("", "unknown-instance-id"), (p, None)])
    assert results(left) == [("", "unknown-instance-id", 25), (p, None, 0)]
    assert_join_ok(lj, generation=3, leader=leader, members={leader, follower})
    assert_join_ok(fj, generation=3, leader=leader)
    h.assert_state(COMPLETING, 3)


def test_s95_joined_member_pending_member_batch_leave_group_with_unknown_member() -> None:
    h = CoordinatorHarness()
    leader, follower, p, lj, fj = pending(h)
    left = h.leave([(leader, None), (follower, None), (p, None), ("unknown-member-id", None)])
    codes = [code for _, _, code in results(left)]
    assert codes == [0, 0, 0, 25]
    assert_join_error(lj, Errors.UNKNOWN_MEMBER_ID, member_id="")
    assert_join_error(fj, Errors.UNKNOWN_MEMBER_ID, member_id="")
    h.assert_state(EMPTY, 3, members=set())


# -- §12.9 OffsetCommit validation ----------------------------------------------------------------


@pytest.mark.parametrize(("version", "error"), [(8, 22), (9, 69), (None, 69)])
def test_s97_commit_offset_from_unknown_group(version: int | None, error: int) -> None:
    h = CoordinatorHarness()
    assert h.commit("member", 1, version=version).error.code == error
    assert h.group is None


def test_s98_commit_offset_with_default_generation_creates_a_simple_group() -> None:
    h = CoordinatorHarness()
    assert h.commit("", -1).error is Errors.NONE
    h.assert_state(EMPTY, 0, members=set())
    assert h.commit("", -1, iid="instance-id").error is Errors.NONE
    assert h.commit("unknown", -1).error is Errors.NONE


def test_s100_commit_maintains_session() -> None:
    h = CoordinatorHarness()
    a = dyn1(h, 1000, 1000)
    h.assert_state(STABLE, 1)
    assert h.session_deadline(a) == 4000
    h.advance_to(3500)
    assert h.commit(a, 1).error is Errors.NONE
    assert h.session_deadline(a) == 4500
    h.advance_to(4100)
    assert h.heartbeat(a, 1).error is Errors.NONE


def test_s101_commit_offsets_after_group_is_empty() -> None:
    h = CoordinatorHarness()
    a = dyn1j(h, 500, 500)
    h.leave([(a, None)])
    h.assert_state(EMPTY, 2)
    assert h.commit("", -1).error is Errors.NONE
