"""Independent conformance check: Kafka unit tests that the §12 scenarios of
docs/reference/group-coordinator.md keep back (cited as §n below).

Each test restates one Kafka test (GroupMetadataManagerTest.java = T-J, GroupCoordinatorTest.scala
= T-S, OffsetMetadataManagerTest.java = T-O, ClassicGroupTest.java = T-CG) in the harness's
terms. Where the Kafka test overshoots a deadline (``timeout + 1`` under the Scala MockTimer, or
a large ``sleep``), the scenario is re-timed to land on the deadline that matters, so the result
is the same under deadline semantics (docs/reference/events.md §6) and Kafka's advanced-now
rule (§0.2-3).
The "probably Sxx" notes are guesses at the held-back scenario numbers, from the neighbours.
"""

from __future__ import annotations

import dataclasses

import pytest

from controlplane.core.coordinator.requests import Protocol
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
    Call,
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

# -- small local verbs ----------------------------------------------------------------------------


def leave_results(call: Call) -> list[tuple[str, str | None, int]]:
    """LV[(mid, iid, code), ...]: the per-member results of a LeaveGroup (top level NONE)."""
    answer = call.ok()
    return [(r.member_id, r.group_instance_id, r.error_code) for r in answer.member_results or ()]


def joined_instances(call: Call) -> set[str | None]:
    """The instance ids of the leader's member list (T-S checkJoinGroupResult compares these)."""
    return {m.group_instance_id for m in call.ok().members or ()}


def two_member_stable_group(
    h: CoordinatorHarness, session_ms: int, rebalance_ms: int
) -> tuple[str, str]:
    """DYN1J, then B joins and A rejoins (⟨CR g2⟩), then both sync: ⟨St g2 ld=A {A, B}⟩ at 3000."""
    a = dyn1j(h, session_ms, rebalance_ms)
    b = h.join(session_ms=session_ms, rebalance_ms=rebalance_ms)
    assert b.parked
    lead = h.join(a, session_ms=session_ms, rebalance_ms=rebalance_ms)
    assert_join_ok(lead, generation=2, leader=a, members={a, b.member_id})
    assert_join_ok(b, generation=2, leader=a)
    assert_sync(h.sync(a, 2, assignments={a: "AA==", b.member_id: "AQ=="}), Errors.NONE, "AA==")
    assert_sync(h.sync(b.member_id, 2), Errors.NONE, "AQ==")
    h.assert_state(STABLE, 2, members={a, b.member_id}, leader=a)
    return a, b.member_id


# -- JoinGroup: admission, max size, errors --------------------------------------------------------


def test_kafka_dynamic_members_join_group_with_max_size_and_not_required_known_member() -> None:
    """T-J testDynamicMembersJoinGroupWithMaxSizeAndNotRequiredKnownMember (twin in T-S
    testDynamicMembersJoinGroupWithMaxSize); probably S03. v3 joins: no MEMBER_ID_REQUIRED."""
    h = CoordinatorHarness(group_max_size=10, group_initial_rebalance_delay_ms=50)
    calls = [h.join() for _ in range(11)]
    assert all(c.parked for c in calls[:10])
    assert_join_error(calls[10], Errors.GROUP_MAX_SIZE_REACHED, member_id="")
    ids = [c.member_id for c in calls[:10]]
    h.assert_state(PREPARING, 0, members=set(ids))
    assert h.awaiting_join() == set(ids)
    h.advance_to(50)
    assert all(c.parked for c in calls[:10])  # extended: members were added during the delay
    h.advance_to(100)
    assert_join_ok(calls[0], generation=1, leader=ids[0], members=set(ids))
    for call in calls[1:10]:
        assert_join_ok(call, generation=1, leader=ids[0])
    h.assert_state(COMPLETING, 1, members=set(ids))
    # Accepted members rejoin (same metadata in CR: answered at once); the refused one ("") is
    # refused again, the group being full.
    again = [h.join(m) for m in ids]
    assert_join_ok(again[0], generation=1, leader=ids[0], members=set(ids))
    for call in again[1:]:
        assert_join_ok(call, generation=1, leader=ids[0])
    assert_join_error(h.join(), Errors.GROUP_MAX_SIZE_REACHED, member_id="")
    h.assert_state(COMPLETING, 1, members=set(ids))
    assert h.awaiting_join() == set()


def test_kafka_last_joining_members_are_kicked_out_when_rejoining_group_with_max_size() -> None:
    """T-J testLastJoiningMembersAreKickedOutWhenRejoiningGroupWithMaxSize (twin in T-S); probably
    S06. Kafka builds a 12-member group directly; here it forms under a larger limit, the limit
    drops to 10 and the PREPARE_REBALANCE hook starts the rebalance. The last two rejoiners are
    removed, and (Java, §11 D4) the join phase does not finish on the refusal even though
    every remaining member is then awaiting: only the rebalance timeout finishes it."""
    h = CoordinatorHarness(group_initial_rebalance_delay_ms=50)
    firsts = [h.join(session_ms=5000, rebalance_ms=10000) for _ in range(12)]
    ids = [c.member_id for c in firsts]
    h.advance_to(50)
    h.advance_to(100)
    assert all(c.ok().generation_id == 1 for c in firsts)
    assert_sync(h.sync(ids[0], 1), Errors.NONE)
    h.assert_state(STABLE, 1, members=set(ids))
    h.config = dataclasses.replace(h.config, group_max_size=10)
    h.force_prepare_rebalance()
    h.assert_state(PREPARING, 1)
    assert h.timer(TimerKind.JOIN) == 100 + 10000
    rejoins = [h.join(m, session_ms=5000, rebalance_ms=10000) for m in ids]
    assert all(c.parked for c in rejoins[:10])
    for call in rejoins[10:]:
        assert_join_error(call, Errors.GROUP_MAX_SIZE_REACHED, member_id="")
    h.assert_state(PREPARING, 1, members=set(ids[:10]))
    assert h.awaiting_join() == set(ids[:10])
    h.advance_to(10099)
    assert all(c.parked for c in rejoins[:10])
    h.assert_state(PREPARING, 1)
    h.advance_to(10100)
    assert_join_ok(rejoins[0], generation=2, leader=ids[0], members=set(ids[:10]))
    h.assert_state(COMPLETING, 2, members=set(ids[:10]))


def test_kafka_join_group_unknown_member_new_group() -> None:
    """T-J testJoinGroupUnknownMemberNewGroup (T-S testJoinGroupUnknownConsumerNewGroup), dynamic
    and static; probably S09. A known-looking id on a missing group creates nothing. Also T-J
    testJoinGroupProtocolTypeIsNotProvidedWhenAnErrorOccurs (twin in T-S), the same first
    request: the error answer carries no protocol type (assert_join_error checks pt and pn null,
    generation -1, leader "")."""
    h = CoordinatorHarness()
    assert_join_error(h.join("member-id"), Errors.UNKNOWN_MEMBER_ID, member_id="member-id")
    assert h.group is None
    static = h.join("member-id", iid="group-instance-id")
    assert_join_error(static, Errors.UNKNOWN_MEMBER_ID, member_id="member-id")
    assert h.group is None


def test_kafka_join_group_with_empty_group_protocol() -> None:
    """T-J testJoinGroupWithEmptyGroupProtocol (twin in T-S); probably S12."""
    h = CoordinatorHarness()
    refused = h.join(protocols=())
    assert_join_error(refused, Errors.INCONSISTENT_GROUP_PROTOCOL, member_id="")
    assert h.group is None or h.member_ids() == set()


def test_kafka_join_group_unknown_consumer_existing_group() -> None:
    """T-J testJoinGroupUnknownConsumerExistingGroup (twin in T-S); probably S15."""
    h = CoordinatorHarness()
    a = dyn1j(h, 5000, 5000)
    other = h.join("other-member-id", session_ms=5000, rebalance_ms=5000)
    assert_join_error(other, Errors.UNKNOWN_MEMBER_ID, member_id="other-member-id")
    h.assert_state(COMPLETING, 1, members={a})


def test_kafka_static_member_join_as_first_member() -> None:
    """T-J testStaticMemberJoinAsFirstMember (T-S staticMemberJoinAsFirstMember)."""
    h = CoordinatorHarness()
    a = h.join(version=9, iid="group-instance-id")
    assert a.parked
    h.assert_state(PREPARING, 0, members={a.member_id})
    h.advance_to(3000)
    assert_join_ok(a, generation=1, leader=a.member_id, members={a.member_id})
    assert a.member_id.startswith("group-instance-id-")


# -- initial delay and expiry ---------------------------------------------------------------------


def test_kafka_reset_rebalance_delay_when_new_member_joins_group_during_initial_rebalance() -> None:
    """T-J testResetRebalanceDelayWhenNewMemberJoinsGroupDuringInitialRebalance (T-S
    shouldResetRebalanceDelayWhenNewMemberJoinsGroupInInitialRebalance); probably S18.
    reb = 3×D = 9000: join@3000 (remaining 6000); B joins at 2999; the timer extends to
    3000 + min(3000, 6000) = 6000. Kafka's own times: 2999, 3001, 4502 (not done), 6002 (done)."""
    h = CoordinatorHarness()
    a = h.join(rebalance_ms=9000)
    assert h.timer(TimerKind.JOIN) == 3000
    h.advance_to(2999)
    b = h.join(rebalance_ms=9000)
    assert a.parked
    assert b.parked
    h.advance_to(3000)
    assert a.parked
    assert b.parked
    assert h.timer(TimerKind.JOIN) == 6000
    h.advance_to(4500)
    assert a.parked
    assert b.parked
    h.advance_to(5999)
    assert a.parked
    assert b.parked
    h.advance_to(6000)
    assert_join_ok(a, generation=1, leader=a.member_id, members={a.member_id, b.member_id})
    assert_join_ok(b, generation=1, leader=a.member_id)
    h.assert_state(COMPLETING, 1)


def test_kafka_heartbeat_expiration_should_remove_member() -> None:
    """T-J testHeartbeatExpirationShouldRemoveMember; probably S21. Initial delay 600000 keeps the
    group in its initial rebalance; the new-member join timeout (300000) removes the only member,
    its join gets UNKNOWN_MEMBER_ID, and (Java, §7.1 step 5 and §11 D3) the now all-joined
    empty group completes the join at once: Empty, generation 1."""
    h = CoordinatorHarness(group_initial_rebalance_delay_ms=600000)
    a = h.join()
    assert a.parked
    assert h.session_deadline(a.member_id) == 300000
    h.advance_to(299999)
    assert a.parked
    h.advance_to(300000)
    assert_join_error(a, Errors.UNKNOWN_MEMBER_ID, member_id="")
    h.assert_state(EMPTY, 1, members=set())
    assert h.timer(TimerKind.JOIN) is None


def test_kafka_new_member_failure_after_join_group_completion() -> None:
    """T-S testNewMemberFailureAfterJoinGroupCompletion: once the join phase is over, a new member
    follows the normal session timeout (not the 300000 new-member limit). Both members' sessions
    end at 3500 and the group empties (generation 3)."""
    h = CoordinatorHarness()
    a = dyn1(h, 500, 500)
    b = h.join(session_ms=500, rebalance_ms=500)
    lead = h.join(a, session_ms=500, rebalance_ms=500)
    assert_join_ok(lead, generation=2, leader=a, members={a, b.member_id})
    assert_join_ok(b, generation=2, leader=a)
    assert h.session_deadline(b.member_id) == 3500
    h.advance_to(3499)
    h.assert_state(COMPLETING, 2, members={a, b.member_id})
    h.advance_to(3500)
    h.assert_state(EMPTY, 3, members=set())


def test_kafka_new_member_failure_after_sync_group_completion() -> None:
    """T-S testNewMemberFailureAfterSyncGroupCompletion: as above, but the second generation is
    synced (follower first, parked; then the leader) before the sessions run out."""
    h = CoordinatorHarness()
    a = dyn1(h, 500, 500)
    b = h.join(session_ms=500, rebalance_ms=500)
    h.join(a, session_ms=500, rebalance_ms=500)
    fsync = h.sync(b.member_id, 2)
    assert fsync.parked
    assert_sync(h.sync(a, 2, assignments={a: "", b.member_id: ""}), Errors.NONE)
    assert_sync(fsync, Errors.NONE)
    h.assert_state(STABLE, 2)
    h.advance_to(3499)
    h.assert_state(STABLE, 2, members={a, b.member_id})
    h.advance_to(3500)
    h.assert_state(EMPTY, 3, members=set())


def test_kafka_complete_join_remove_not_yet_rejoined_dynamic_members() -> None:
    """T-J testCompleteJoinRemoveNotYetRejoinedDynamicMembers: DYN1J(1000, 1000); B joins at 3000
    (join@4000); at 4000 the leader, which never rejoined, is gone and B alone forms g2."""
    h = CoordinatorHarness()
    a = dyn1j(h, 1000, 1000)
    b = h.join(session_ms=1000, rebalance_ms=1000)
    assert b.parked
    h.assert_state(PREPARING, 1, members={a, b.member_id})
    h.advance_to(4000)
    assert_join_ok(b, generation=2, leader=b.member_id, members={b.member_id})
    h.assert_state(COMPLETING, 2, members={b.member_id}, leader=b.member_id)


# -- known-member rejoins --------------------------------------------------------------------------


def test_kafka_join_as_existing_member_with_updated_metadata_triggers_rebalance_in_stable() -> None:
    """T-J testJoinGroupAsExistingMemberWithUpdatedMetadataTriggersRebalanceInStableState; probably
    S27 (S28 takes its first four steps). Kafka forces Stable; here both members sync."""
    h = CoordinatorHarness()
    a, b = two_member_stable_group(h, 500, 500)
    changed = h.join(b, protocols=RR)
    assert changed.parked
    h.assert_state(PREPARING, 2)
    lead = h.join(a)
    assert_join_ok(lead, generation=3, leader=a, members={a, b})
    assert_join_ok(changed, generation=3, leader=a)
    h.assert_state(COMPLETING, 3, members={a, b})


# -- static membership -----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [4, 9])
def test_kafka_replace_static_member_in_stable_state_no_error(version: int) -> None:
    """T-J testReplaceStaticMemberInStableStateNoError [skip assignment false/true]; probably S36.
    The rejoin lists more protocols, the selected one stays range: no rebalance, the new id
    takes the new timeouts; v<9 names the old id as leader, v9 the new one with the list."""
    h = CoordinatorHarness()
    old = h.join(version=version, iid="group-instance-id")
    h.advance_to(3000)
    assert_join_ok(old, generation=1, leader=old.member_id, members={old.member_id})
    assert_sync(h.sync(old.member_id, 1, iid="group-instance-id"), Errors.NONE)
    h.assert_state(STABLE, 1)
    new = h.join(
        version=version, iid="group-instance-id", protocols=RR, rebalance_ms=7000, session_ms=4500
    )
    if version >= 9:
        assert_join_ok(new, generation=1, leader=new.member_id, members={new.member_id}, skip=True)
    else:
        assert_join_ok(new, generation=1, leader=old.member_id)
    assert new.member_id != old.member_id
    h.assert_state(STABLE, 1, members={new.member_id})
    member = h.member(new.member_id)
    assert member.group_instance_id == "group-instance-id"
    assert member.rebalance_timeout_ms == 7000
    assert member.session_timeout_ms == 4500
    assert member.protocols == RR


def test_kafka_static_member_fence_duplicate_rejoined_follower() -> None:
    """T-J testStaticMemberFenceDuplicateRejoinedFollower (T-S staticMemberFenceDuplicateRejoined
    Follower); probably S39. In PreparingRebalance the old id's parked join is fenced at once, the
    duplicate's join stays parked."""
    h = CoordinatorHarness()
    leader, follower = static2(h)
    third = h.join(protocols=RR, rebalance_ms=10000)
    assert third.parked
    h.assert_state(PREPARING, 1)
    old = h.join(follower, iid=FOLLOWER_IID, protocols=RR, rebalance_ms=10000)
    assert old.parked
    duplicate = h.join(iid=FOLLOWER_IID, protocols=RR, rebalance_ms=10000)
    assert_join_error(old, Errors.FENCED_INSTANCE_ID, member_id=follower)
    assert duplicate.parked
    h.assert_state(PREPARING, 1, members={leader, duplicate.member_id, third.member_id})


def test_kafka_static_member_rejoin_with_known_member_id() -> None:
    """T-J testStaticMemberRejoinWithKnownMemberId (T-S staticMemberRejoinWithKnownMemberId);
    probably S42. Same metadata in CompletingRebalance: answered at once; the sync stabilises."""
    h = CoordinatorHarness()
    a = h.join(iid="group-instance-id")
    h.advance_to(3000)
    a.ok()
    again = h.join(a.member_id, iid="group-instance-id")
    assert_join_ok(again, generation=1, leader=a.member_id, members={a.member_id})
    h.assert_state(COMPLETING, 1)
    synced = h.sync(a.member_id, 1, iid="group-instance-id", assignments={a.member_id: ""})
    assert_sync(synced, Errors.NONE)
    h.assert_state(STABLE, 1)


def test_kafka_static_member_rejoin_with_leader_id_and_unexpected_empty_group() -> None:
    """T-S staticMemberRejoinWithLeaderIdAndUnexpectedEmptyGroup: a forced Empty group answers a
    known member's join UNKNOWN_MEMBER_ID."""
    h = CoordinatorHarness()
    leader, _ = static2(h)
    h.force_phase(EMPTY)
    refused = h.join(leader, iid=LEADER_IID, protocols=RR, rebalance_ms=10000)
    assert_join_error(refused, Errors.UNKNOWN_MEMBER_ID, member_id=leader)


def test_kafka_static_member_rejoin_with_follower_id_and_change_of_protocol() -> None:
    """T-J/T-S staticMemberRejoinWithFollowerIdAndChangeOfProtocol; probably S45. STATIC2 with a
    session (20000) longer than the rebalance timeout: the follower rejoins with [roundrobin], the
    leader never does; at the rebalance timeout the leader (static) stays, the follower leads, and
    roundrobin is the only protocol everyone lists."""
    h = CoordinatorHarness()
    leader, follower = static2(h, rebalance_ms=10000, session_ms=20000)
    changed = h.join(follower, iid=FOLLOWER_IID, protocols=RB, rebalance_ms=10000, session_ms=20000)
    assert changed.parked
    h.assert_state(PREPARING, 1)
    assert h.timer(TimerKind.JOIN) == 16000
    h.advance_to(16000)
    assert_join_ok(
        changed,
        generation=2,
        leader=follower,
        members={leader, follower},
        protocol_name="roundrobin",
    )
    assert joined_instances(changed) == {LEADER_IID, FOLLOWER_IID}
    h.assert_state(COMPLETING, 2, members={leader, follower}, leader=follower)


def test_kafka_static_rejoin_with_known_leader_id_then_follower_with_change_of_protocol() -> None:
    """T-J/T-S staticMemberRejoinWithKnownLeaderIdToTriggerRebalanceAndFollowerWithChangeofProtocol;
    probably S48. Re-timed: the leader's session (reset to 11000 by the g2 completion) ends first,
    which leaves the rejoined follower alone: g3 led by the follower."""
    h = CoordinatorHarness()
    leader, follower = static2(h)
    lj = h.join(leader, iid=LEADER_IID, protocols=RR, rebalance_ms=10000, session_ms=5000)
    assert lj.parked
    fj = h.join(follower, iid=FOLLOWER_IID, protocols=RR, rebalance_ms=10000, session_ms=5000)
    assert_join_ok(lj, generation=2, leader=leader, members={leader, follower})
    assert_join_ok(fj, generation=2, leader=leader)
    h.assert_state(COMPLETING, 2)
    changed = h.join(follower, iid=FOLLOWER_IID, rebalance_ms=10000, session_ms=5000)  # P=R
    assert changed.parked
    h.assert_state(PREPARING, 2)
    h.advance_to(10999)
    assert changed.parked
    h.advance_to(11000)
    assert_join_ok(changed, generation=3, leader=follower, members={follower})
    assert joined_instances(changed) == {FOLLOWER_IID}
    h.assert_state(COMPLETING, 3, members={follower}, leader=follower)


def test_kafka_static_member_rejoin_with_mismatched_member_id() -> None:
    """T-S staticMemberRejoinAsFollowerWithMismatchedMemberId and
    staticMemberRejoinAsLeaderWithMismatchedMemberId; probably S51."""
    h = CoordinatorHarness()
    leader, follower = static2(h)
    before = h.state
    refused = h.join(follower, iid=LEADER_IID, protocols=RR, rebalance_ms=10000)
    assert_join_error(refused, Errors.FENCED_INSTANCE_ID, member_id=follower)
    refused = h.join(leader, iid=FOLLOWER_IID, protocols=RR, rebalance_ms=10000)
    assert_join_error(refused, Errors.FENCED_INSTANCE_ID, member_id=leader)
    h.assert_state(STABLE, 1, members={leader, follower}, leader=leader)
    assert h.state.members == before.members


def test_kafka_static_member_commit_offset_with_invalid_member_id() -> None:
    """T-S staticMemberCommitOffsetWithInvalidMemberId; probably S54. Also T-O
    testGenericGroupOffsetCommitWithFencedInstanceId: a known instance id with another member id
    (unknown, or another member's) is fenced; the right pair commits, and so does the member id
    alone."""
    h = CoordinatorHarness()
    leader, follower = static2(h)
    assert h.commit(leader, 1).error is Errors.NONE
    fenced = h.commit("invalid-member-id", 1, iid=LEADER_IID)
    assert fenced.error is Errors.FENCED_INSTANCE_ID
    assert h.commit(follower, 1, iid=LEADER_IID).error is Errors.FENCED_INSTANCE_ID
    assert h.commit(leader, 1, iid=LEADER_IID).error is Errors.NONE


def test_kafka_should_get_different_static_member_id_after_each_rejoin() -> None:
    """T-S shouldGetDifferentStaticMemberIdAfterEachRejoin: each rejoin with an unknown id replaces
    the leader's id; the group stays Stable g1."""
    h = CoordinatorHarness()
    last, follower = static2(h)
    for _ in range(5):
        h.sleep(1)
        call = h.join(iid=LEADER_IID, rebalance_ms=10000)  # P=R: range is still selected
        answer = call.ok()
        assert answer.member_id == call.member_id
        assert call.member_id.startswith(LEADER_IID)
        assert call.member_id != last
        last = call.member_id
        h.assert_state(STABLE, 1, members={last, follower}, leader=last)


# -- SyncGroup -------------------------------------------------------------------------------------


def test_kafka_sync_group_from_unknown_group() -> None:
    """T-J testSyncGroupFromUnknownGroup (twin in T-S)."""
    h = CoordinatorHarness()
    assert_sync(h.sync("member-id", 1), Errors.UNKNOWN_MEMBER_ID)
    assert h.group is None


def test_kafka_sync_group_empty_assignment() -> None:
    """T-S testSyncGroupEmptyAssignment: a leader sync with no assignments gives everyone an empty
    one and the group is Stable."""
    h = CoordinatorHarness()
    a = dyn1j(h, 500, 500)
    assert_sync(h.sync(a, 1, assignments={}), Errors.NONE, "")
    h.assert_state(STABLE, 1)
    assert h.heartbeat(a, 1).error is Errors.NONE


def test_kafka_rebalance_times_out_when_sync_request_is_not_received_from_leaders() -> None:
    """T-J testRebalanceTimesOutWhenSyncRequestIsNotReceivedFromLeaders (twin in T-S); probably
    S69. JOINN(3, 5000, 5000) ⟨CR g1 | sync@10000⟩; the followers sync (parked), the leader never
    does: at 10000 the leader is removed and the parked syncs get REBALANCE_IN_PROGRESS."""
    h = CoordinatorHarness()
    ids, _ = joinn(h, 3, 5000, 5000)
    assert h.timer(TimerKind.SYNC) == 10000
    h.advance_to(7500)
    for m in ids:
        assert h.heartbeat(m, 1).error is Errors.NONE
    syncs = [h.sync(m, 1) for m in ids[1:]]
    assert all(s.parked for s in syncs)
    h.advance_to(9999)
    assert all(s.parked for s in syncs)
    h.advance_to(10000)
    for s in syncs:
        assert_sync(s, Errors.REBALANCE_IN_PROGRESS)
    h.assert_state(PREPARING, 1, members=set(ids[1:]))
    assert h.heartbeat(ids[0], 1).error is Errors.UNKNOWN_MEMBER_ID
    for m in ids[1:]:
        assert h.heartbeat(m, 1).error is Errors.REBALANCE_IN_PROGRESS


# -- Heartbeat -------------------------------------------------------------------------------------


def test_kafka_heartbeat_during_rebalance_causes_rebalance_in_progress() -> None:
    """T-J testHeartbeatDuringRebalanceCausesRebalanceInProgress; probably S72."""
    h = CoordinatorHarness()
    a = dyn1j(h, 5000, 10000)
    b = h.join(session_ms=5000, rebalance_ms=10000)
    assert b.parked
    h.assert_state(PREPARING, 1)
    assert h.heartbeat(a, 1).error is Errors.REBALANCE_IN_PROGRESS


def test_kafka_heartbeat_unknown_consumer_existing_group() -> None:
    """T-J testHeartbeatUnknownMemberExistingGroup (T-S ...UnknownConsumerExistingGroup)."""
    h = CoordinatorHarness()
    dyn1(h)
    assert h.heartbeat("memberId", 1).error is Errors.UNKNOWN_MEMBER_ID


def test_kafka_heartbeat_illegal_generation() -> None:
    """T-J/T-S testHeartbeatIllegalGeneration."""
    h = CoordinatorHarness()
    a = dyn1(h)
    h.advance_to(4000)
    assert h.heartbeat(a, 2).error is Errors.ILLEGAL_GENERATION
    assert h.session_deadline(a) == 8000  # a refused heartbeat does not reset the session


def test_kafka_heartbeat_empty_group() -> None:
    """T-J/T-S testHeartbeatEmptyGroup: a member found in an Empty group (forced) is unknown."""
    h = CoordinatorHarness()
    a = dyn1(h)
    h.force_phase(EMPTY)
    assert h.heartbeat(a, 1).error is Errors.UNKNOWN_MEMBER_ID


def test_kafka_classic_group_member_heartbeat_maintains_session() -> None:
    """T-J testClassicGroupMemberHeartbeatMaintainsSession (T-S testHeartbeatMaintainsSession, the
    same steps at DYN1(1000, 1000)); probably S78. Java fixture times: DYN1(5000, 10000),
    hb(A)@8000; a heartbeat at 5500 moves it to 10500, so A is alive at 8000."""
    h = CoordinatorHarness()
    a = dyn1(h, 5000, 10000)
    assert h.session_deadline(a) == 8000
    h.advance_to(5500)
    assert h.heartbeat(a, 1).error is Errors.NONE
    assert h.session_deadline(a) == 10500
    h.advance_to(8000)
    assert h.heartbeat(a, 1).error is Errors.NONE
    h.assert_state(STABLE, 1, members={a})


# -- pending members -------------------------------------------------------------------------------


def test_kafka_join_group_completion_when_pending_member_times_out() -> None:
    """T-J testJoinGroupCompletionWhenPendingMemberTimesOut (twin in T-S); probably S84. PENDING:
    P's pending id expires at 5500, and the join phase, which waited only for P, completes."""
    h = CoordinatorHarness()
    leader, follower, _, lj, fj = pending(h)
    h.advance_to(5499)
    assert lj.parked
    assert fj.parked
    h.advance_to(5500)
    assert_join_ok(lj, generation=3, leader=leader, members={leader, follower})
    assert_join_ok(fj, generation=3, leader=leader)
    h.assert_state(COMPLETING, 3, members={leader, follower})
    assert h.pending() == set()


# -- LeaveGroup ------------------------------------------------------------------------------------


def test_kafka_leave_group_unknown_consumer_existing_group() -> None:
    """T-J testLeaveGroupUnknownMemberIdExistingGroup (T-S testLeaveGroupUnknownConsumerExisting
    Group); probably S87."""
    h = CoordinatorHarness()
    a = dyn1j(h, 500, 500)
    left = h.leave([("other-member-id", None)])
    assert leave_results(left) == [("other-member-id", None, 25)]
    h.assert_state(COMPLETING, 1, members={a})


def test_kafka_leave_group_static_member_with_unknown_member_id() -> None:
    """T-J testLeaveGroupStaticMemberWithUnknownMemberId: an empty member id with a known instance
    id removes that static member (administrative removal). The only member leaves a
    CompletingRebalance group, which goes through completeJoin into Empty g2."""
    h = CoordinatorHarness()
    a = h.join(version=9, iid="group-instance-id")
    h.advance_to(3000)
    a.ok()
    h.assert_state(COMPLETING, 1)
    left = h.leave([("", "group-instance-id")])
    assert leave_results(left) == [("", "group-instance-id", 0)]
    h.assert_state(EMPTY, 2, members=set())


def test_kafka_static_members_unknown_instance_batch_leave_group() -> None:
    """T-J/T-S testStaticMembersUnknownInstanceBatchLeaveGroup: the unknown instance gets 25, the
    follower (by instance id, empty member id) leaves; one rebalance starts."""
    h = CoordinatorHarness()
    leader, _ = static2(h)
    left = h.leave([("", "unknown-instance-id"), ("", FOLLOWER_IID)])
    assert leave_results(left) == [("", "unknown-instance-id", 25), ("", FOLLOWER_IID, 0)]
    h.assert_state(PREPARING, 1, members={leader}, leader=leader)
    assert h.timer(TimerKind.JOIN) == 16000


def test_kafka_static_members_all_unknown_batch_leave_changes_nothing() -> None:
    """Variant of T-J testStaticMembersUnknownInstanceBatchLeaveGroup with no valid identity: no
    NONE answer, so no rebalance (§6, "only if at least one answered NONE")."""
    h = CoordinatorHarness()
    leader, follower = static2(h)
    before = h.state
    left = h.leave([("unknown-member-id", "unknown-instance-id"), ("", "unknown-instance-2")])
    assert leave_results(left) == [
        ("unknown-member-id", "unknown-instance-id", 25),
        ("", "unknown-instance-2", 25),
    ]
    h.assert_state(STABLE, 1, members={leader, follower}, leader=leader)
    assert h.state.members == before.members


def test_kafka_static_members_leave_unknown_group() -> None:
    """T-J testStaticMembersLeaveUnknownGroup (twin in T-S)."""
    h = CoordinatorHarness()
    left = h.leave([("", LEADER_IID), ("", FOLLOWER_IID)])
    assert leave_results(left) == [("", LEADER_IID, 25), ("", FOLLOWER_IID, 25)]
    assert h.group is None


# -- OffsetCommit validation -----------------------------------------------------------------------


def test_kafka_generic_group_offset_commit_without_member_id_and_generation() -> None:
    """T-O testGenericGroupOffsetCommitWithoutMemberIdAndGeneration: gen -1 with no id skips the
    member checks only when the group is Empty."""
    h = CoordinatorHarness()
    dyn1(h)
    assert h.commit("", -1).error is Errors.UNKNOWN_MEMBER_ID


def test_kafka_generic_group_offset_commit_while_in_completing_rebalance_state() -> None:
    """T-O testGenericGroupOffsetCommitWhileInCompletingRebalanceState (T-S
    testCommitOffsetInCompletingRebalance)."""
    h = CoordinatorHarness()
    a = dyn1j(h, 500, 500)
    assert h.commit(a, 1).error is Errors.REBALANCE_IN_PROGRESS
    h.assert_state(COMPLETING, 1)
    assert h.fetch().offsets == ()  # nothing stored


def test_kafka_generic_group_offset_commit_with_illegal_generation() -> None:
    """T-O testGenericGroupOffsetCommitWithIllegalGeneration."""
    h = CoordinatorHarness()
    a = dyn1(h)
    assert h.commit(a, 10).error is Errors.ILLEGAL_GENERATION


def test_kafka_generic_group_offset_commit_with_unknown_member_id() -> None:
    """T-O testGenericGroupOffsetCommitWithUnknownMemberId."""
    h = CoordinatorHarness()
    dyn1(h)
    assert h.commit("unknown-member", 1).error is Errors.UNKNOWN_MEMBER_ID


def test_kafka_commit_in_preparing_rebalance_with_previous_generation() -> None:
    """T-O testGenericGroupOffsetCommitWhileInPreparingRebalanceState (§8 rule 6): the
    previous generation can still commit during the join phase; it resets the session."""
    h = CoordinatorHarness()
    a = dyn1(h, 5000, 10000)
    b = h.join(session_ms=5000, rebalance_ms=10000)
    assert b.parked
    h.assert_state(PREPARING, 1)
    h.advance_to(4000)
    assert h.commit(a, 1).error is Errors.NONE
    assert h.session_deadline(a) == 9000


# -- protocol selection (ClassicGroupTest) ---------------------------------------------------------


def test_kafka_select_protocol_chooses_compatible_protocol() -> None:
    """T-CG testSelectProtocolChoosesCompatibleProtocol: only names every member lists count."""
    h = CoordinatorHarness()
    first = (Protocol("range", "AA=="), Protocol("roundrobin", "AA=="))
    second = (Protocol("roundrobin", "AQ=="), Protocol("blah", "AQ=="))
    a = h.join(protocols=first)
    b = h.join(protocols=second)
    h.advance_to(3000)
    assert_join_ok(
        a,
        generation=1,
        leader=a.member_id,
        members={a.member_id, b.member_id},
        protocol_name="roundrobin",
    )
    assert_join_ok(b, generation=1, leader=a.member_id, protocol_name="roundrobin")
    leader_view = {m.member_id: m.metadata for m in a.ok().members or ()}
    assert leader_view == {a.member_id: "AA==", b.member_id: "AQ=="}


def test_kafka_select_protocol_majority_vote() -> None:
    """T-CG testSelectProtocol: each member votes for its first candidate; the most votes win
    (two for roundrobin against one for range)."""
    h = CoordinatorHarness()
    rr_first = (Protocol("roundrobin", "AA=="), Protocol("range", "AA=="))
    a = h.join(protocols=RR)
    b = h.join(protocols=rr_first)
    c = h.join(protocols=rr_first)
    h.advance_to(3000)
    everyone = {a.member_id, b.member_id, c.member_id}
    assert_join_ok(
        a, generation=1, leader=a.member_id, members=everyone, protocol_name="roundrobin"
    )
    assert h.state.protocol_name == "roundrobin"


# -- more neighbours: Dead group, timeouts carried by a replacement ------------------------------


def test_kafka_offset_commit_dead_group() -> None:
    """T-S testOffsetCommitDeadGroup (and T-S testSyncDeadGroup, T-J testHeartbeatDeadGroup,
    testLeaveDeadGroup for the other verbs of S32): a forced Dead group refuses a commit with
    COORDINATOR_NOT_AVAILABLE."""
    h = CoordinatorHarness()
    a = dyn1(h)
    h.force_phase(GroupPhase.DEAD)
    assert h.commit(a, 1).error is Errors.COORDINATOR_NOT_AVAILABLE
    assert h.commit("memberId", 1).error is Errors.COORDINATOR_NOT_AVAILABLE
    assert_sync(h.sync("memberId", 1), Errors.COORDINATOR_NOT_AVAILABLE)


def test_kafka_static_member_rejoin_with_updated_session_and_rebalance_timeouts() -> None:
    """T-S staticMemberRejoinWithUpdatedSessionAndRebalanceTimeoutsAndPersistChange: both static
    members rejoin with unknown ids and doubled timeouts, no rebalance; the v9 leader gets the list
    and skipAssignment. §3.6 step 3: the new id's first session timer uses the old timeout."""
    h = CoordinatorHarness()
    leader, _ = static2(h)
    f2 = h.join(version=9, iid=FOLLOWER_IID, protocols=RR, session_ms=10000, rebalance_ms=20000)
    assert_join_ok(f2, generation=1, leader=leader)
    assert h.session_deadline(f2.member_id) == 6000 + 5000
    l2 = h.join(version=9, iid=LEADER_IID, protocols=RR, session_ms=10000, rebalance_ms=20000)
    assert_join_ok(
        l2, generation=1, leader=l2.member_id, members={l2.member_id, f2.member_id}, skip=True
    )
    assert joined_instances(l2) == {LEADER_IID, FOLLOWER_IID}
    h.assert_state(STABLE, 1, members={l2.member_id, f2.member_id}, leader=l2.member_id)
    for m in h.state.members:
        assert m.session_timeout_ms == 10000
        assert m.rebalance_timeout_ms == 20000
    # The cached assignments carry over to the new ids.
    assert_sync(h.sync(f2.member_id, 1, iid=FOLLOWER_IID), Errors.NONE, "Ag==")
    assert_sync(h.sync(l2.member_id, 1, iid=LEADER_IID), Errors.NONE, "AQ==")


def test_kafka_commit_with_member_id_and_default_generation_on_a_live_group() -> None:
    """T-O generic-group commit validation (§8 rule 4): a member id with generation -1 on a
    non-Empty group is validated like any other, and -1 is not the group's generation."""
    h = CoordinatorHarness()
    a = dyn1(h)
    assert h.commit(a, -1).error is Errors.ILLEGAL_GENERATION
    assert h.commit("unknown", -1).error is Errors.UNKNOWN_MEMBER_ID


def test_kafka_heartbeat_from_a_pending_member_id_is_unknown() -> None:
    """T-J testSecondMemberPartiallyJoinAndTimeout neighbour (§5 note): a MEMBER_ID_REQUIRED
    id is not a member yet."""
    h = CoordinatorHarness()
    a = dyn1(h)
    p = h.join(version=4, session_ms=5000, rebalance_ms=10000)
    assert_join_error(p, Errors.MEMBER_ID_REQUIRED, member_id=p.member_id)
    assert h.heartbeat(p.member_id, 1).error is Errors.UNKNOWN_MEMBER_ID
    h.assert_state(STABLE, 1, members={a})


def test_kafka_sync_in_stable_does_not_reset_the_session() -> None:
    """§4 (Stable branch) and §11 D2, Java GMM: a SyncGroup answered in Stable does not reset
    the session (Scala did). DYN1(5000, 10000): hb(A)@8000; a Stable sync at 7000 changes
    nothing, so A expires at 8000."""
    h = CoordinatorHarness()
    a = dyn1(h, 5000, 10000)
    h.advance_to(7000)
    assert_sync(h.sync(a, 1), Errors.NONE)
    assert h.session_deadline(a) == 8000
    h.advance_to(8000)
    h.assert_state(EMPTY, 2, members=set())
