"""Rules of docs/reference/group-coordinator.md §1-§11 the scenarios do not cover: describe,
delete_group, versions, member ids, the audit trail, answer order, failover, and the groups row."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from controlplane.core.coordinator import machine
from controlplane.core.coordinator.records import EventKind
from controlplane.core.coordinator.requests import Header, Heartbeat, JoinGroup, Tick
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
    R,
    assert_join_error,
    assert_sync,
    dyn1,
    dyn1j,
    pending,
    static2,
)

# -- describe and delete_group ----------------------------------------------------------------


def test_describe_a_missing_group_is_dead_with_none() -> None:
    h = CoordinatorHarness()
    answer = h.describe()
    assert answer.error is Errors.NONE
    assert answer.group_state == "Dead"
    assert answer.group_members == ()
    assert h.group is None


def test_describe_a_stable_group() -> None:
    h = CoordinatorHarness()
    a = dyn1(h)
    h.join(version=4)  # a pending id is not a member
    answer = h.describe()
    assert answer.group_state == "Stable"
    assert answer.generation_id == 1
    assert answer.protocol_type == "consumer"
    assert answer.protocol_name == "range"
    assert answer.leader_id == a
    assert [(m.member_id, m.assignment, m.offline) for m in answer.group_members or ()] == [
        (a, "", False)
    ]


def test_describe_outside_stable_and_completing_has_no_protocol_name() -> None:
    """The protocol name only in Stable and CompletingRebalance (docs/reference/events.md §2);
    the members' stored assignments in every state, as Kafka's DescribeGroups shows them: while
    a rebalance from Stable prepares, the previous generation's (found against a real broker,
    docs/conformance.md)."""
    h = CoordinatorHarness()
    a = dyn1(h)
    h.join(a)  # the leader's join in Stable rebalances ... and completes at once
    assert_sync(h.sync(a, 2, assignments={a: "AAE="}), Errors.NONE, "AAE=")
    b = h.join().member_id  # a new member: PreparingRebalance
    h.assert_state(PREPARING, 2)
    answer = h.describe()
    assert answer.group_state == "PreparingRebalance"
    assert answer.protocol_name == ""
    assert [(m.member_id, m.assignment) for m in answer.group_members or ()] == [
        (a, "AAE="),
        (b, ""),
    ]


def test_delete_group_only_when_empty() -> None:
    h = CoordinatorHarness()
    assert h.delete().error is Errors.GROUP_ID_NOT_FOUND
    a = dyn1(h)
    assert h.delete().error is Errors.NON_EMPTY_GROUP
    h.leave([(a, None)])
    h.assert_state(EMPTY, 2)
    assert h.delete().error is Errors.NONE
    assert h.group is None
    assert [e.reason for e in h.events_of(EventKind.GROUP_DELETED)] == ["delete_group"]
    assert h.describe().group_state == "Dead"


@pytest.mark.parametrize("verb", ["join", "sync", "heartbeat", "leave"])
def test_an_empty_group_id_is_invalid_group_id(verb: str) -> None:
    """GCS joinGroup/syncGroup/heartbeat/leaveGroup: isGroupIdNotEmpty, else INVALID_GROUP_ID."""
    h = CoordinatorHarness(group_id="")
    if verb == "join":
        assert_join_error(h.join(), Errors.INVALID_GROUP_ID)
        return
    calls = {
        "sync": lambda: h.sync("m", 1),
        "heartbeat": lambda: h.heartbeat("m", 1),
        "leave": lambda: h.leave([("m", None)]),
    }
    assert calls[verb]().error is Errors.INVALID_GROUP_ID
    assert h.group is None


def test_the_empty_group_id_is_a_group_for_offsets_describe_and_delete() -> None:
    """GCS commitOffsets, fetchOffsets, describeGroups and deleteGroups refuse only a null group
    id ("For backwards compatibility, we support offset commits for the empty groupId"; Scala
    GroupCoordinator.isValidGroupId): "" is an ordinary group there. A simple commit creates it,
    fetch reads it back, describe shows it Empty, and delete removes it."""
    h = CoordinatorHarness(group_id="")
    assert h.describe().group_state == "Dead"
    assert h.describe().error is Errors.NONE
    assert h.delete().error is Errors.GROUP_ID_NOT_FOUND
    commit = h.commit("", -1, offsets=(("topic", 0, 7),))
    assert commit.error is Errors.NONE
    assert [(o.topic, o.partition, o.error_code) for o in commit.ok().offsets or ()] == [
        ("topic", 0, 0)
    ]
    h.assert_state(EMPTY, 0)
    fetched = h.fetch({"topic": (0,)})
    assert fetched.error is Errors.NONE
    assert [(o.topic, o.partition, o.offset) for o in fetched.offsets or ()] == [("topic", 0, 7)]
    described = h.describe()
    assert (described.error, described.group_state) == (Errors.NONE, "Empty")
    assert h.commit("", 1).error is Errors.UNKNOWN_MEMBER_ID  # gen >= 0: member checks apply
    assert h.delete().error is Errors.NONE
    assert h.group is None


# -- versions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "rebalance_ms"), [(0, 9000), (1, None), (None, None)])
def test_v0_rebalance_timeout_is_the_session_timeout(
    version: int | None, rebalance_ms: int | None
) -> None:
    h = CoordinatorHarness()
    call = h.join(iid="s", version=version, session_ms=7000, rebalance_ms=rebalance_ms)
    assert h.member(call.member_id).rebalance_timeout_ms == 7000


def test_v4_and_newer_require_a_member_id_for_dynamic_members_only() -> None:
    h = CoordinatorHarness()
    assert_join_error(h.join(version=4), Errors.MEMBER_ID_REQUIRED)
    assert_join_error(h.join(version=None), Errors.MEMBER_ID_REQUIRED)
    assert h.join(version=3).parked
    assert h.join(version=9, iid="static").parked
    h.assert_state(PREPARING, 0)


@pytest.mark.parametrize(("version", "top"), [(2, Errors.UNKNOWN_MEMBER_ID), (3, Errors.NONE)])
def test_leave_v2_and_older_lift_the_member_error_to_the_top(version: int, top: Errors) -> None:
    h = CoordinatorHarness()
    dyn1(h)
    left = h.leave(member_id="not-a-member", version=version)
    answer = left.answer
    assert answer is not None
    assert answer.error is top
    assert [(r.member_id, r.error_code) for r in answer.member_results or ()] == [
        ("not-a-member", 25)
    ]


def test_a_single_leave_names_the_member_of_its_header() -> None:
    h = CoordinatorHarness()
    a = dyn1(h)
    assert h.leave(member_id=a, version=1).error is Errors.NONE
    h.assert_state(EMPTY, 2)


def test_generated_member_ids_follow_the_wire_contract() -> None:
    h = CoordinatorHarness(group_id="g")
    dynamic = h.join(version=4, client_id="app")
    anonymous = h.join(version=4)
    static = h.join(iid="pod-1", client_id="app")

    def suffix(event_id: str) -> uuid.UUID:
        return uuid.uuid5(uuid.NAMESPACE_URL, f"g/{event_id}")

    for call, prefix in ((dynamic, "app"), (anonymous, "member")):
        answer = call.answer
        assert answer is not None
        assert answer.member_id == f"{prefix}-{suffix(call.event_id)}"
    assert static.member_id == f"pod-1-{suffix(static.event_id)}"
    assert h.member_ids() == {static.member_id}


# -- max size, pending and new members ---------------------------------------------------------


def test_max_size_check_kicks_out_an_existing_member_during_preparing_rebalance() -> None:
    h = CoordinatorHarness(group_max_size=2)
    a = dyn1(h)
    b = h.join(session_ms=5000, rebalance_ms=10000)
    h.join(a, session_ms=5000, rebalance_ms=10000)
    h.sync(a, 2)
    h.sync(b.member_id, 2)
    h.assert_state(STABLE, 2, members={a, b.member_id})
    assert h.join(a, session_ms=5000, rebalance_ms=10000).parked  # the leader rebalances
    c = h.join(session_ms=5000, rebalance_ms=10000)
    assert c.parked
    assert h.awaiting_join() == {a, c.member_id}
    kicked = h.join(b.member_id, session_ms=5000, rebalance_ms=10000)
    assert_join_error(kicked, Errors.GROUP_MAX_SIZE_REACHED, member_id="")
    h.assert_state(PREPARING, 2, members={a, c.member_id})  # no completion attempt (Java)
    removed = h.events_of(EventKind.MEMBER_REMOVED)[-1]
    assert (removed.member_id, removed.reason) == (b.member_id, "group_max_size")
    assert h.session_deadline(b.member_id) is not None  # left to fire and find nothing
    h.advance_to(13000)
    h.assert_state(COMPLETING, 3, members={a, c.member_id})


def test_a_pending_member_id_that_times_out_leaves_a_trace() -> None:
    """docs/reference/events.md §2 names the reason pending_member_timeout: a MEMBER_ID_REQUIRED id
    whose timer fires (§7.1 step 2) is dropped by a timer, with no answer to show it; the audit
    row is its only trace. It carries the deadline and no event id, as every timer row."""
    h = CoordinatorHarness()
    p = h.join(version=4, session_ms=1000).member_id
    h.advance_to(1500)
    assert h.pending() == set()
    removed = h.events_of(EventKind.MEMBER_REMOVED)
    assert [(e.member_id, e.reason, e.at_ms, e.event_id) for e in removed] == [
        (p, "pending_member_timeout", 1000, None)
    ]


# -- parked answers, order, audit --------------------------------------------------------------


def test_a_parked_answer_carries_its_own_time_and_the_time_it_was_decided() -> None:
    h = CoordinatorHarness()
    h.advance_to(100)
    a = h.join()
    h.advance_to(3100)
    answer = a.ok()
    assert answer.event_time_ms == 100
    assert answer.decided_at_ms == 3100


def test_timer_rows_carry_the_deadline_and_no_event_id() -> None:
    h = CoordinatorHarness()
    a = dyn1(h)
    h.advance_to(20_000)  # A's session expired at 8000
    removed = h.events_of(EventKind.MEMBER_REMOVED)
    assert [(e.member_id, e.reason, e.at_ms, e.event_id) for e in removed] == [
        (a, "session_timeout", 8000, None)
    ]
    changes = [(e.state_from, e.state_to, e.at_ms) for e in h.events_of(EventKind.STATE_CHANGED)]
    assert changes[-2:] == [
        ("Stable", "PreparingRebalance", 8000),
        ("PreparingRebalance", "Empty", 8000),
    ]


def test_lifecycle_audit_trail() -> None:
    h = CoordinatorHarness()
    a = dyn1j(h, 5000, 5000)
    kinds = [e.kind for e in h.events]
    assert kinds == [
        EventKind.STATE_CHANGED,  # created Empty
        EventKind.MEMBER_ADDED,
        EventKind.REBALANCE_STARTED,
        EventKind.STATE_CHANGED,  # Empty -> PreparingRebalance
        EventKind.STATE_CHANGED,  # PreparingRebalance -> CompletingRebalance
        EventKind.GENERATION_COMPLETED,
    ]
    added = h.events_of(EventKind.MEMBER_ADDED)[0]
    assert (added.member_id, added.reason, added.event_id) == (a, "join", "e2")
    assert h.events_of(EventKind.GENERATION_COMPLETED)[0].generation_id == 1


def test_a_fenced_static_member_leaves_a_trace() -> None:
    h = CoordinatorHarness()
    old = h.join(iid="I")
    new = h.join(iid="I")
    fenced = h.events_of(EventKind.MEMBER_FENCED)
    assert [(e.member_id, e.group_instance_id, e.reason) for e in fenced] == [
        (old.member_id, "I", "static_replaced")
    ]
    assert new.parked


# -- the machine's edges -----------------------------------------------------------------------


def test_a_tick_is_not_a_request() -> None:
    header = Header("t", 0, "g", "", None, None, None, None, None)
    step = machine.handle(None, Tick(header), 0, CoordinatorHarness().config)
    assert step == machine.Step(None, (), ())


def test_handle_never_changes_its_input() -> None:
    h = CoordinatorHarness()
    a = dyn1(h)
    before = h.state
    header = Header("x", 3000, "group-id", a, None, None, None, None, None)
    machine.handle(before, Heartbeat(header, 1), 3000, h.config)
    assert h.state is before
    assert h.session_deadline(a) == 8000


def test_reset_sessions_restarts_every_session() -> None:
    h = CoordinatorHarness()
    a = dyn1(h)
    step = machine.reset_sessions(h.state, 50_000, h.config)
    assert step.group is not None
    assert [t.deadline_ms for t in step.group.timers if t.kind is TimerKind.HEARTBEAT] == [55_000]
    assert [(e.kind, e.reason) for e in step.events] == [
        (EventKind.STATE_CHANGED, "coordinator_failover")
    ]
    assert step.group.member(a) is not None


def test_a_rebalance_interrupted_by_a_failover_gets_a_whole_join_deadline_again() -> None:
    """Kafka loads the group Stable and its members join again, each with a whole rebalance
    timeout after the load; here the rebalance goes on, so its deadline moves to a rebalance
    timeout after the load, and a JoinGroup sent before the old deadline and read after it is
    taken in."""
    h = CoordinatorHarness()
    a = dyn1(h, session_ms=30_000)
    b = h.join(session_ms=30_000, rebalance_ms=10_000)
    assert h.timer(TimerKind.JOIN) == 3000 + 10_000
    h.failover(at_ms=16_000)
    assert h.timer(TimerKind.JOIN) == 16_000 + 10_000
    assert [(e.reason, e.at_ms) for e in h.events if e.kind is EventKind.STATE_CHANGED][-1] == (
        "coordinator_failover",
        16_000,
    )
    h.advance_to(17_000)
    h.join(a, session_ms=30_000, rebalance_ms=10_000)
    h.assert_state(COMPLETING, 2, members={a, b.member_id})
    assert b.ok().generation_id == 2


def test_a_later_join_deadline_is_kept_at_failover() -> None:
    """The deadline set by a member with a longer rebalance timeout, who left since, is later
    than a rebalance timeout after the load: it stays."""
    h = CoordinatorHarness()
    a = dyn1(h, session_ms=30_000, rebalance_ms=10_000)
    b = h.join(session_ms=30_000, rebalance_ms=30_000)
    assert h.timer(TimerKind.JOIN) == 3000 + 30_000
    h.leave(member_id=b.member_id)
    h.assert_state(PREPARING, 1, members={a})
    h.failover(at_ms=4000)
    assert h.timer(TimerKind.JOIN) == 33_000


def test_a_sync_interrupted_by_a_failover_gets_a_whole_deadline_again() -> None:
    h = CoordinatorHarness()
    a = dyn1j(h, session_ms=30_000, rebalance_ms=10_000)
    assert h.timer(TimerKind.SYNC) == 13_000
    h.failover(at_ms=15_000)
    assert h.timer(TimerKind.SYNC) == 25_000
    h.advance_to(16_000)
    assert_sync(h.sync(a, 1), Errors.NONE)
    h.assert_state(STABLE, 1, members={a})


def stable_awaiting_the_follower(h: CoordinatorHarness) -> tuple[str, str]:
    """The leader has synced generation 2, the follower still owes its SyncGroup."""
    leader = dyn1j(h, session_ms=30_000, rebalance_ms=10_000)
    assert_sync(h.sync(leader, 1, assignments={leader: ""}), Errors.NONE)
    fj = h.join(session_ms=30_000, rebalance_ms=10_000)
    h.join(leader, session_ms=30_000, rebalance_ms=10_000)
    assert fj.ok().generation_id == 2
    assert_sync(h.sync(leader, 2), Errors.NONE)
    h.assert_state(STABLE, 2, members={leader, fj.member_id})
    assert h.pending_sync() == {fj.member_id}
    assert h.timer(TimerKind.SYNC) == 13_000
    return leader, fj.member_id


def test_a_follower_s_sync_owed_in_stable_gets_a_whole_deadline_again() -> None:
    h = CoordinatorHarness()
    _, follower = stable_awaiting_the_follower(h)
    h.failover(at_ms=15_000)
    assert h.timer(TimerKind.SYNC) == 25_000
    h.advance_to(16_000)
    assert_sync(h.sync(follower, 2), Errors.NONE)
    h.assert_state(STABLE, 2)


def test_a_later_sync_deadline_is_kept_at_failover() -> None:
    """The deadline set with the members' longer rebalance timeouts of then (lowered since, as
    by a static member replaced with a shorter one) is later than a timeout after the load."""
    h = CoordinatorHarness()
    stable_awaiting_the_follower(h)
    shorter = tuple(dataclasses.replace(m, rebalance_timeout_ms=1000) for m in h.state.members)
    h.group = dataclasses.replace(h.state, members=shorter)
    h.failover(at_ms=4000)
    assert h.timer(TimerKind.SYNC) == 13_000


def test_a_sync_deadline_nobody_owes_a_sync_to_stays() -> None:
    """The static follower that owed its SyncGroup went offline (§14.1), which leaves the
    deadline with no member owing a sync: the load does not move it."""
    h = CoordinatorHarness(group_static_registration_timeout_ms=60_000)
    leader, follower = static2(h, rebalance_ms=10_000, session_ms=5000)
    h.join(leader, iid=LEADER_IID, protocols=RR, rebalance_ms=10_000, session_ms=5000)
    h.join(follower, iid=FOLLOWER_IID, protocols=RR, rebalance_ms=10_000, session_ms=5000)
    assert_sync(h.sync(leader, 2, iid=LEADER_IID), Errors.NONE)
    assert h.pending_sync() == {follower}
    deadline = h.timer(TimerKind.SYNC)
    assert deadline is not None
    offline_at = h.session_deadline(follower)
    assert offline_at is not None
    h.advance_to(offline_at - 100)
    h.heartbeat(leader, 2, iid=LEADER_IID)
    h.advance_to(offline_at)
    assert [e.member_id for e in h.events_of(EventKind.STATIC_MEMBER_OFFLINE)] == [follower]
    assert h.pending_sync() == set()
    h.failover(at_ms=offline_at + 1)
    assert h.timer(TimerKind.SYNC) == deadline


def test_a_pending_member_overdue_at_failover_is_removed_at_the_load() -> None:
    """Its timer, fired at its old deadline (5500), would have completed the join then, and the
    new generation's sync deadline would have removed the leader and the follower before the
    load: now it fires at the load, and the join completes there."""
    h = CoordinatorHarness()
    leader, follower, p, lj, fj = pending(h)
    h.failover(at_ms=20_000)
    removed = [(e.member_id, e.reason, e.at_ms) for e in h.events_of(EventKind.MEMBER_REMOVED)]
    assert removed == [(p, "pending_member_timeout", 20_000)]
    h.assert_state(COMPLETING, 3, members={leader, follower})
    assert (lj.ok().generation_id, fj.ok().generation_id) == (3, 3)
    assert h.timer(TimerKind.SYNC) == 20_000 + 10_000


def test_timers_due_at_the_load_fire_in_their_order() -> None:
    """Two pending members, one overdue at the load, the other's deadline the load itself:
    removed in their deadlines' order, both at the load."""
    h = CoordinatorHarness()
    pending(h)
    first = sorted(h.pending())
    [p1] = first
    h.advance_to(4000)
    p2 = h.join(version=4, session_ms=2500, rebalance_ms=10_000).member_id
    due = h.session_deadline(p2)
    assert (h.session_deadline(p1), due) == (5500, 6500)
    h.failover(at_ms=6500)
    removed = [(e.member_id, e.at_ms) for e in h.events_of(EventKind.MEMBER_REMOVED)]
    assert removed == [(p1, 6500), (p2, 6500)]


def test_an_initial_delay_interrupted_by_a_failover_starts_its_step_again() -> None:
    h = CoordinatorHarness(group_initial_rebalance_delay_ms=3000)
    first = h.join(session_ms=5000, rebalance_ms=10_000)
    [timer] = [t for t in h.state.timers if t.kind is TimerKind.JOIN]
    h.failover(at_ms=2000)
    [restarted] = [t for t in h.state.timers if t.kind is TimerKind.JOIN]
    assert (restarted.deadline_ms, restarted.delay_ms, restarted.remaining_ms) == (
        2000 + 3000,
        timer.delay_ms,
        timer.remaining_ms,
    )
    h.advance_to(4000)
    assert first.parked
    h.advance_to(5000)
    assert first.ok().generation_id == 1


def test_a_group_over_a_lowered_max_size_rebalances_at_failover() -> None:
    """GMM onLoaded: a freshly loaded group over ``group.max.size`` (lowered across the stop)
    rebalances; the rejoins beyond the limit are refused GROUP_MAX_SIZE_REACHED."""
    h = CoordinatorHarness(group_initial_rebalance_delay_ms=50)
    firsts = [h.join(session_ms=5000, rebalance_ms=10_000) for _ in range(3)]
    ids = [c.member_id for c in firsts]
    h.advance_to(50)
    h.advance_to(100)
    assert_sync(h.sync(h.leader or "", 1), Errors.NONE)
    h.assert_state(STABLE, 1, members=set(ids))
    h.config = dataclasses.replace(h.config, group_max_size=2)
    h.failover(at_ms=60_000)
    started = h.events_of(EventKind.REBALANCE_STARTED)
    assert [(e.reason, e.at_ms) for e in started][-1] == ("group_max_size", 60_000)
    h.assert_state(PREPARING, 1, members=set(ids))
    assert h.timer(TimerKind.JOIN) == 60_000 + 10_000
    rejoins = [h.join(m, session_ms=5000, rebalance_ms=10_000) for m in ids]
    assert all(c.parked for c in rejoins[:2])
    assert_join_error(rejoins[2], Errors.GROUP_MAX_SIZE_REACHED, member_id="")
    h.assert_state(PREPARING, 1, members=set(ids[:2]))


def test_a_group_within_max_size_does_not_rebalance_at_failover() -> None:
    h = CoordinatorHarness()
    dyn1(h)
    step = machine.reset_sessions(h.state, 50_000, dataclasses.replace(h.config, group_max_size=1))
    assert step.group is not None
    assert step.group.phase is STABLE
    assert [e.kind for e in step.events] == [EventKind.STATE_CHANGED]


def test_group_row() -> None:
    h = CoordinatorHarness()
    a = dyn1(h)
    row = machine.group_row(h.state, 4000)
    assert row["group_id"] == "group-id"
    assert row["group_state"] == "Stable"
    assert row["generation_id"] == 1
    assert row["leader_id"] == a
    assert row["updated_at_ms"] == 4000
    assert [m["member_id"] for m in row["members"]] == [a]


def test_a_follower_sync_with_the_leaders_assignment_map_is_ignored() -> None:
    h = CoordinatorHarness()
    a = dyn1j(h, 5000, 5000)
    b = h.join()
    h.join(a)
    h.assert_state(COMPLETING, 2)
    follower = h.sync(b.member_id, 2, assignments={b.member_id: "Zm9v"})
    assert follower.parked
    leader = h.sync(a, 2, assignments={a: "YQ==", "stranger": "eA=="})
    assert_sync(leader, Errors.NONE, "YQ==")
    assert_sync(follower, Errors.NONE, "")  # left out by the leader: empty
    h.assert_state(STABLE, 2)


def test_a_reused_event_id_never_overwrites_a_member() -> None:
    h = CoordinatorHarness()
    a = h.join()
    header = dataclasses.replace(h.heartbeat_request("", 0).header, event_id=a.event_id)
    request = JoinGroup(header, 500, 500, "consumer", R, "", "")
    step = machine.handle(h.state, request, h.now_ms, h.config)
    assert step.group == h.state
    assert [(d.error, d.member_id) for d in step.decisions] == [(Errors.INVALID_REQUEST, "")]
