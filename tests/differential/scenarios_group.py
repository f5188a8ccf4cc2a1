"""Group protocol scenarios (docs/conformance.md).

Times: sessions and rebalance timeouts of 1-6 s against ``group.min.session.timeout.ms`` 500.
Steps between two waits happen at the same scenario time (our side) and within a few hundred ms
(the broker's side, ``harness.LATE_LIMIT_MS``); every timer a scenario waits for lands at least
500 ms from the nearest check, so the broker's real clock decides as the virtual one does.
The comments give the scenario clock (t) where it matters.
"""

from __future__ import annotations

from typing import Any

from differential.script import (
    RANGE_RR,
    RANGE_V2,
    ROUNDROBIN,
    RR_RANGE,
    BrokerSettings,
    Commit,
    DeleteGroup,
    Describe,
    Fetch,
    Heartbeat,
    Id,
    Join,
    Leave,
    Scenario,
    Step,
    Sync,
    Wait,
)

# No initial delay: a join into an Empty group completes at once.
MAIN = BrokerSettings("main", initial_rebalance_delay_ms=0)
# KIP-134's initial delay (1 s) and KIP-389's group.max.size (3).
DELAYED = BrokerSettings("delayed", initial_rebalance_delay_ms=1000, max_size=3)

Steps = tuple[Step, ...]


def joined(actor: str, version: int = 4, **join: Any) -> Steps:
    """A first join: v4+ dynamic members take the MEMBER_ID_REQUIRED round trip."""
    if version >= 4 and join.get("instance") is None:
        return (Join(actor, version, **join), Join(actor, version, **join))
    return (Join(actor, version, **join),)


def stable(actor: str = "A", version: int = 4, **join: Any) -> Steps:
    """``actor`` alone, Stable at generation 1 with assignment a0 (MAIN)."""
    return (*joined(actor, version, **join), Sync(actor, assignments={actor: b"a0"}))


def completing(a: dict[str, Any] | None = None, b: dict[str, Any] | None = None) -> Steps:
    """A (leader) and B in CompletingRebalance at generation 2: B joined the Stable group of A
    and A's rejoin completed the join phase; nobody has synced yet."""
    a, b = dict(a or {}), dict(b or {})
    version_a, version_b = a.pop("version", 4), b.pop("version", 4)
    return (
        *stable("A", version_a, **a),
        *joined("B", version_b, **b),
        Join("A", version_a, **a),
    )


def two_stable(a: dict[str, Any] | None = None, b: dict[str, Any] | None = None) -> Steps:
    """A (leader) and B, Stable at generation 2 with assignments a1 / b1."""
    return (
        *completing(a, b),
        Sync("B"),  # parked until the leader syncs
        Sync("A", assignments={"A": b"a1", "B": b"b1"}),
    )


def three_stable(**join: Any) -> Steps:
    """A (leader), B and C, Stable at generation 2 (B and C joined A's group together)."""
    return (
        *stable("A", **join),
        *joined("B", **join),
        *joined("C", **join),
        Join("A", 4, **join),
        Sync("B"),
        Sync("C"),
        Sync("A", assignments={"A": b"a1", "B": b"b1", "C": b"c1"}),
    )


JOIN_AND_REBALANCE: tuple[Scenario, ...] = (
    Scenario(
        "join_v3_without_member_id_required",
        MAIN,
        (Join("A", 3), Sync("A", 3, assignments={"A": b"x"}), Describe("A")),
        "JoinGroup v3 with an empty member id joins at once (no KIP-394 round trip); the "
        "leader's SyncGroup assigns; DescribeGroups shows the Stable group",
    ),
    Scenario(
        "join_v4_member_id_required",
        MAIN,
        (Join("A", 4), Describe("A"), Join("A", 4), Sync("A", assignments={"A": b"x"})),
        "JoinGroup v4 with an empty member id: MEMBER_ID_REQUIRED with a new id, the group "
        "stays Empty with no member, the rejoin with the id joins",
    ),
    Scenario(
        "pending_member_id_expires",
        MAIN,
        (Join("A", 4, session_ms=1000), Wait(1600), Join("A", 4, session_ms=1000)),
        "a MEMBER_ID_REQUIRED id not used within its session timeout is forgotten: joining "
        "with it later is UNKNOWN_MEMBER_ID",
    ),
    Scenario(
        "rebalance_two_members",
        MAIN,
        (
            *stable(),
            *joined("B"),  # parked: A's group rebalances
            Heartbeat("A"),
            Join("A", 4),  # the last member awaited: generation 2 completes at once
            Sync("A", assignments={"A": b"a1", "B": b"b1"}),
            Sync("B"),
            Describe("A"),
        ),
        "a second member joins a Stable group: it is parked, the leader's heartbeat says "
        "REBALANCE_IN_PROGRESS, the leader's rejoin completes generation 2 with both, the "
        "leader gets the member list and assigns",
    ),
    Scenario(
        "rebalance_three_members_followers_sync_first",
        MAIN,
        (
            *stable(),
            *joined("B"),
            *joined("C"),
            Join("A", 4),
            Sync("C"),
            Sync("B"),
            Sync("A", assignments={"A": b"a1", "B": b"b1", "C": b"c1"}),
            Describe("B"),
        ),
        "two members join together; followers that sync before the leader are parked and get "
        "their assignments when the leader's SyncGroup arrives (S65)",
    ),
    Scenario(
        "rejoin_in_completing_rebalance_unchanged",
        MAIN,
        (
            *completing(),
            Join("B", 4),
            Join("A", 4),
            Sync("B"),
            Sync("A", assignments={"A": b"a1", "B": b"b1"}),
        ),
        "in CompletingRebalance a rejoin with unchanged protocols is answered at once with the "
        "current generation (the member list for the leader only), no rebalance",
    ),
    Scenario(
        "rejoin_in_completing_rebalance_with_new_metadata",
        MAIN,
        (
            *completing(),
            Sync("B"),  # parked
            Join("A", 4, protocols=RANGE_V2),  # B's parked sync: REBALANCE_IN_PROGRESS
            Join("B", 4),  # completes generation 3
            Sync("A", assignments={"A": b"a2", "B": b"b2"}),
            Sync("B"),
        ),
        "in CompletingRebalance a rejoin with changed metadata starts a new rebalance: the "
        "parked SyncGroup is answered REBALANCE_IN_PROGRESS, the next generation completes "
        "when everyone rejoined",
    ),
    Scenario(
        "new_member_during_completing_rebalance",
        MAIN,
        (
            *completing(),
            Sync("B"),  # parked
            Join("C", 3),  # a new member: rebalance; B's parked sync is REBALANCE_IN_PROGRESS
            Heartbeat("A"),
            Join("A", 4),
            Join("B", 4),  # the last one awaited: generation 3 with A, B, C
            Sync("A", assignments={"A": b"a", "B": b"b", "C": b"c"}),
            Sync("C"),
        ),
        "a member joining while the group completes a rebalance starts another one: parked "
        "SyncGroups are answered REBALANCE_IN_PROGRESS",
    ),
    Scenario(
        "leader_rejoin_in_stable_rebalances",
        MAIN,
        (
            *two_stable(),
            Join("A", 4),  # unchanged, but the leader's join always rebalances
            Heartbeat("B"),
            Join("B", 4),
            Sync("A", assignments={"A": b"a3", "B": b"b3"}),
            Sync("B"),
        ),
        "the leader's JoinGroup in Stable rebalances even with unchanged protocols (§3.4)",
    ),
    Scenario(
        "follower_rejoin_in_stable",
        MAIN,
        (
            *two_stable(),
            Join("B", 4),  # unchanged: answered at once, no rebalance
            Sync("B"),
            Join("B", 4, protocols=RANGE_V2),  # changed: rebalances
            Heartbeat("A"),
            Join("A", 4),
            Sync("A", assignments={"A": b"a3", "B": b"b3"}),
            Sync("B"),
        ),
        "a follower's unchanged rejoin in Stable is answered at once with the current "
        "generation; with changed metadata it starts a rebalance",
    ),
    Scenario(
        "protocol_chosen_by_vote",
        MAIN,
        (
            Join("A", 3, protocols=RANGE_RR),
            Sync("A", 3, assignments={"A": b"a0"}),
            Join("B", 3, protocols=RR_RANGE),
            Join("C", 3, protocols=RR_RANGE),
            Join("A", 3, protocols=RANGE_RR),
            Sync("A", assignments={"A": b"a", "B": b"b", "C": b"c"}, protocol_name="roundrobin"),
            Sync("B", protocol_name="roundrobin"),
            Sync("C", protocol_name="range"),
            Describe("A"),
        ),
        "the protocol is chosen by vote among those every member supports: A prefers range, B "
        "and C roundrobin; a SyncGroup naming another protocol is INCONSISTENT_GROUP_PROTOCOL",
    ),
    Scenario(
        "join_inconsistent_protocols",
        MAIN,
        (
            *stable(),
            Join("B", 3, protocols=ROUNDROBIN),
            Join("B", 3, protocol_type="connect"),
            Describe("A"),
        ),
        "a join sharing no protocol with the group, or of another protocol type, is "
        "INCONSISTENT_GROUP_PROTOCOL and changes nothing",
    ),
    Scenario(
        "join_invalid_session_timeout",
        MAIN,
        (
            Join("A", 3, session_ms=100),
            Join("A", 3, session_ms=1_800_001),
            Describe("A"),
        ),
        "a session timeout outside [group.min.session.timeout.ms, group.max.session.timeout.ms] "
        "is INVALID_SESSION_TIMEOUT and creates no group",
    ),
    Scenario(
        "join_unknown_member_id_into_missing_group",
        MAIN,
        (Join("A", 4, member="unknown-member-id"), Describe("A")),
        "a JoinGroup with a member id for a group that does not exist is UNKNOWN_MEMBER_ID and "
        "creates no group",
    ),
)

SYNC_HEARTBEAT_SESSION: tuple[Scenario, ...] = (
    Scenario(
        "sync_errors",
        MAIN,
        (
            *stable(),
            Sync("A", member="unknown-member-id"),
            Sync("A", gen=2),
            Sync("A", protocol_name="roundrobin"),
            Sync("A", protocol_type="connect"),
            Sync("A"),  # Stable: the stored assignment
        ),
        "SyncGroup from an unknown member (S61), of another generation (S62), naming another "
        "protocol name or type; then the Stable path answers the stored assignment",
    ),
    Scenario(
        "sync_during_preparing_rebalance",
        MAIN,
        (*two_stable(), Join("C", 3), Sync("A"), Sync("B")),
        "a SyncGroup while the group prepares a rebalance is REBALANCE_IN_PROGRESS",
    ),
    Scenario(
        "sync_v5_without_protocol_type_and_name",
        MAIN,
        (
            *joined("A"),
            Sync("A", 4, assignments={"A": b"a0"}),
            Sync("A", 5, protocol_type=None, protocol_name=None),
            Sync("A", 5),
        ),
        "SyncGroup v5 with null protocol type and name: Kafka refuses it; our wire treats both "
        "as optional",
        differences=("sync_v5_protocol_optional",),
    ),
    Scenario(
        "heartbeat_errors",
        MAIN,
        (
            Heartbeat("A", member="member-id", gen=1),  # no such group
            *stable(),
            Heartbeat("A", gen=0),
            Heartbeat("A", member="unknown-member-id"),
            Heartbeat("A"),
        ),
        "Heartbeat to a missing group or from an unknown member is UNKNOWN_MEMBER_ID (S71), of "
        "another generation ILLEGAL_GENERATION; a member of the generation gets NONE (S76)",
    ),
    Scenario(
        "heartbeat_during_rebalance",
        MAIN,
        (
            *stable(),
            *joined("B"),
            Heartbeat("A"),  # PreparingRebalance
            Join("A", 4),
            Heartbeat("A"),  # CompletingRebalance
            Heartbeat("B"),
        ),
        "Heartbeat answers REBALANCE_IN_PROGRESS while the group prepares a rebalance and NONE "
        "once the join phase completed (S73, S74)",
    ),
    Scenario(
        "session_expiry",
        MAIN,
        (
            *stable(session_ms=1000),
            Wait(1800),
            Heartbeat("A"),
            Describe("A"),
            Join("A", 4, session_ms=1000),
        ),
        "a member that stops heartbeating is removed when its session expires: the group turns "
        "Empty and the member is unknown (S77)",
    ),
    Scenario(
        "heartbeats_keep_the_session",
        MAIN,
        (
            *stable(session_ms=1500),
            *(step for _ in range(4) for step in (Wait(800), Heartbeat("A"))),
            Describe("A"),
        ),
        "heartbeats every 800 ms keep a 1500 ms session alive for 3.2 s",
    ),
    Scenario(
        "session_expiry_during_rebalance",
        MAIN,
        (
            # t=0: B's session (1.5 s) runs from its sync; A's is 6 s; rebalance timeout 5 s
            *two_stable(a={"rebalance_ms": 5000}, b={"session_ms": 1500, "rebalance_ms": 5000}),
            Join("C", 3, rebalance_ms=5000),
            Join("A", 4, rebalance_ms=5000),
            Wait(2500),  # t=1.5 s: B expires, everyone left has joined: generation 3
            Heartbeat("B"),
            Sync("A", assignments={"A": b"a3", "C": b"c3"}),
            Sync("C"),
        ),
        "a member that neither rejoins nor heartbeats during a rebalance is removed when its "
        "session expires, and the join phase completes at once with the others (S79)",
    ),
    Scenario(
        "rebalance_timeout_removes_a_slow_member",
        MAIN,
        (
            *two_stable(a={"rebalance_ms": 2000}, b={"rebalance_ms": 2000}),
            Join("C", 3, rebalance_ms=2000),  # t=0: the join phase ends at t=2 s
            Join("A", 4, rebalance_ms=2000),
            Wait(1000),
            Heartbeat("B"),  # still a member, still told to rejoin; it does not
            Wait(1800),  # t=2.8 s
            Heartbeat("B"),
            Sync("A", assignments={"A": b"a3", "C": b"c3"}),
            Sync("C"),
        ),
        "a member that keeps heartbeating but does not rejoin within the rebalance timeout is "
        "removed when the join phase ends; the others form the next generation",
    ),
    Scenario(
        "pending_sync_timeout_removes_a_follower",
        MAIN,
        (
            *completing(a={"rebalance_ms": 2000}, b={"rebalance_ms": 2000}),
            Sync("A", assignments={"A": b"a1", "B": b"b1"}),  # t=0: Stable; B owes a sync
            Wait(1000),
            Heartbeat("B"),
            Heartbeat("A"),
            Wait(1800),  # t=2.8 s: the pending-sync timer fired at t=2 s
            Heartbeat("B"),
            Heartbeat("A"),
        ),
        "a follower that heartbeats but never sends SyncGroup is removed when the pending-sync "
        "timeout (the rebalance timeout) runs out, and the group rebalances (S68, KAFKA-12890)",
    ),
)

LEAVE_AND_STATIC: tuple[Scenario, ...] = (
    Scenario(
        "leave_single_member_v1",
        MAIN,
        (
            *two_stable(),
            Leave("B", 1),
            Heartbeat("A"),
            Join("A", 4),  # alone: completes at once
            Sync("A", assignments={"A": b"a3"}),
        ),
        "LeaveGroup v1 (one member, top-level error) makes the group rebalance without it",
    ),
    Scenario(
        "leave_batch_v3",
        MAIN,
        (
            *three_stable(),
            Leave("A", 3, members=((Id("B"), None), (Id("C"), None))),
            Heartbeat("A"),
            Join("A", 4),
            Sync("A", assignments={"A": b"a3"}),
            Describe("A"),
        ),
        "LeaveGroup v3 removes several members in one request (KIP-345 batch leave)",
    ),
    Scenario(
        "leave_with_an_unknown_member",
        MAIN,
        (
            *stable(),
            Leave("A", 3, members=((Id("A"), None), ("unknown-member-id", None))),
            Describe("A"),
        ),
        "a batch leave answers per member: the known one leaves (the group empties), the "
        "unknown one is UNKNOWN_MEMBER_ID",
    ),
    Scenario(
        "leave_unknown_group",
        MAIN,
        (Leave("A", 3, members=(("member-id", None),)), Describe("A")),
        "LeaveGroup on a group that does not exist: NONE at the top, UNKNOWN_MEMBER_ID for the "
        "member (S86)",
    ),
    Scenario(
        "leave_last_member_empties_the_group",
        MAIN,
        (
            *stable(),
            Leave("A", 4),
            Describe("A"),
            Commit("A", member="", gen=-1),
            Fetch("A"),
        ),
        "the last member leaving turns the group Empty (S88); an Empty group takes a commit "
        "with generation -1 without member checks (S101)",
    ),
    Scenario(
        "static_member_rejoins_with_a_new_member_id_v5",
        MAIN,
        (
            *stable("A", 5, instance="a"),
            Join("A", 5, member="", instance="a"),  # a restart: new id, no rebalance
            Heartbeat("A", member=Id("A", 1), instance="a"),
            Heartbeat("A", member=Id("A", 1)),
            Sync("A", instance="a"),  # the cached assignment
            Describe("A"),
        ),
        "a static member that rejoins with an empty member id replaces its old id without a "
        "rebalance; JoinGroup < v9 names the old id as leader; the old id is fenced "
        "(FENCED_INSTANCE_ID with the instance id, UNKNOWN_MEMBER_ID without)",
    ),
    Scenario(
        "static_leader_rejoins_v9",
        MAIN,
        (
            *stable("A", 9, instance="a"),
            Join("A", 9, member="", instance="a"),
            Sync("A", instance="a"),
        ),
        "JoinGroup v9: the static leader's replacement is answered with itself as leader, the "
        "member list and skip_assignment (§3.6)",
    ),
    Scenario(
        "static_old_member_id_is_fenced",
        MAIN,
        (
            *stable("A", 5, instance="a"),
            Join("A", 5, member="", instance="a"),
            Join("A", 5, member=Id("A", 1), instance="a"),
            Commit("A", member=Id("A", 1), gen=1, instance="a"),
            Join("A", 5, member=Id("A", 2), instance="other"),
        ),
        "after a static replacement, the old member id with the instance id is "
        "FENCED_INSTANCE_ID for JoinGroup and OffsetCommit; a known member id with an unknown "
        "instance id is UNKNOWN_MEMBER_ID",
    ),
    Scenario(
        "static_members_leave_by_instance_id",
        MAIN,
        (
            *two_stable(a={"version": 5, "instance": "a"}, b={"version": 5, "instance": "b"}),
            Leave("A", 3, members=(("", "unknown-instance"),)),
            Leave("A", 3, members=(("invalid-member-id", "b"),)),
            Leave("A", 3, members=(("", "a"),)),
            Describe("B"),
            Heartbeat("B", instance="b"),
        ),
        "LeaveGroup by instance id: an unknown instance is UNKNOWN_MEMBER_ID, a wrong member id "
        "for the instance FENCED_INSTANCE_ID, an empty member id removes the static member "
        "(S91, S92)",
    ),
    Scenario(
        "static_replacement_fences_the_parked_join",
        MAIN,
        (
            *two_stable(a={"version": 5, "instance": "a"}),
            Join("A", 5, instance="a"),  # the leader rejoins: PreparingRebalance, A parked
            Join("A", 5, member="", instance="a", conn="A2"),  # replaces A: its join is fenced
            Heartbeat("B"),
            Join("B", 4),  # the last one awaited: generation 3, led by A's new id
            Sync("A", instance="a", conn="A2", assignments={Id("A", 2): b"a3", "B": b"b3"}),
            Sync("B"),
            Heartbeat("A", member=Id("A", 1), instance="a", conn="A2"),
        ),
        "a static member rejoining with an empty member id while its old id's join is parked: "
        "the parked join is answered FENCED_INSTANCE_ID, the new id takes its place and the "
        "join phase completes with it (§3.6)",
    ),
    Scenario(
        "static_member_that_does_not_rejoin_stays",
        MAIN,
        (
            *two_stable(
                a={"version": 5, "instance": "a", "rebalance_ms": 2000},
                b={"rebalance_ms": 2000},
            ),
            Join("B", 4, protocols=RANGE_V2, rebalance_ms=2000),  # t=0: ends at t=2 s
            Wait(2800),  # A, static, did not rejoin: kept; B leads generation 3
            Heartbeat("A", instance="a"),
            Sync("B", assignments={"A": b"a3", "B": b"b3"}),
            Describe("A"),
        ),
        "at the end of a join phase a static member that did not rejoin stays in the group and "
        "is listed to the new leader; its heartbeat for the old generation is "
        "ILLEGAL_GENERATION (§2, §5)",
    ),
)


def _commit_steps() -> tuple[Scenario, ...]:
    return (
        Scenario(
            "commit_generation_and_member_checks",
            MAIN,
            (
                *stable(),
                Commit("A", gen=0),
                Commit("A", member="unknown-member-id", gen=1),
                Commit("A", offsets=((0, 5), (1, 7))),
                Fetch("A", partitions=(0, 1, 2)),
            ),
            "OffsetCommit from a stale generation is ILLEGAL_GENERATION, from an unknown member "
            "UNKNOWN_MEMBER_ID; a member of the generation commits; OffsetFetch returns the "
            "offsets (-1 for a partition without one)",
        ),
        Scenario(
            "commit_from_a_static_member",
            MAIN,
            (
                *stable("A", 7, instance="a"),
                Commit("A", 7, instance="a"),
                Commit("A", 7, instance="other"),
                Commit("A", 7, member="", gen=1, instance="a"),
                Fetch("A"),
            ),
            "OffsetCommit v7 with a group instance id: the static member commits; an unknown "
            "instance id is UNKNOWN_MEMBER_ID, an empty member id for a known instance "
            "FENCED_INSTANCE_ID",
        ),
        Scenario(
            "commit_during_rebalance",
            MAIN,
            (
                *completing(),
                Commit("A"),  # CompletingRebalance
                Sync("B"),
                Sync("A", assignments={"A": b"a1", "B": b"b1"}),
                Join("C", 3),  # PreparingRebalance
                Commit("A", offsets=((0, 11),)),
                Fetch("A"),
            ),
            "OffsetCommit is REBALANCE_IN_PROGRESS in CompletingRebalance but accepted from the "
            "current generation while the group prepares the next one (§8)",
        ),
        Scenario(
            "commit_to_a_missing_group",
            MAIN,
            (
                Commit("A", 8, member="", gen=1),
                Commit("A", 9, member="", gen=1),
                Describe("A"),
                Commit("A", 8, member="", gen=-1),
                Describe("A"),
                Fetch("A", partitions=None),
            ),
            "OffsetCommit with a generation to a group that does not exist: ILLEGAL_GENERATION "
            "before v9, GROUP_ID_NOT_FOUND from v9 (S97); with generation -1 the commit creates "
            "an Empty group (S98)",
        ),
        Scenario(
            "commit_keeps_the_session",
            MAIN,
            (
                *stable(session_ms=1500),
                Wait(900),
                Commit("A"),
                Wait(900),
                Commit("A", offsets=((0, 20),)),
                Wait(900),
                Heartbeat("A"),
            ),
            "an accepted OffsetCommit resets the member's session as a heartbeat does (S100)",
        ),
        Scenario(
            "offset_fetch",
            MAIN,
            (
                *stable(),
                Commit("A", offsets=((0, 3), (2, 9))),
                Fetch("A", partitions=(0, 1, 2)),
                Fetch("A", partitions=None),
                Fetch("A", 2, partitions=(2,)),
            ),
            "OffsetFetch of listed partitions (-1 where nothing was committed) and of all "
            "(topics null), at v7 and v2",
        ),
    )


ADMIN: tuple[Scenario, ...] = (
    Scenario(
        "describe_through_the_states",
        MAIN,
        (
            Describe("A"),  # Dead: no such group
            *stable(),
            Describe("A"),
            *joined("B"),
            Describe("A"),  # PreparingRebalance
            Join("A", 4),
            Describe("A"),  # CompletingRebalance: protocol name (documented difference)
            Sync("A", assignments={"A": b"a1", "B": b"b1"}),
            Sync("B"),
            Describe("B"),
            Leave("A", 3, members=((Id("A"), None), (Id("B"), None))),
            Describe("A"),  # Empty
        ),
        "DescribeGroups in each state: members, protocol and stored assignments",
        differences=("describe_protocol_in_completing_rebalance",),
    ),
    Scenario(
        "describe_missing_group_v6",
        MAIN,
        (Describe("A", 5), Describe("A", 6), *stable(), Describe("A", 6)),
        "DescribeGroups of a group that does not exist: Dead with NONE at v5 on both sides; "
        "at v6 Kafka answers GROUP_ID_NOT_FOUND",
        differences=("describe_missing_group_v6",),
    ),
    Scenario(
        "delete_group",
        MAIN,
        (
            *stable(),
            Commit("A"),
            DeleteGroup("A"),
            Leave("A", 3),
            DeleteGroup("A"),
            Describe("A"),
            Fetch("A"),
            DeleteGroup("A"),
        ),
        "DeleteGroups: a group with members is NON_EMPTY_GROUP; an Empty one is deleted with "
        "its offsets; a missing one is GROUP_ID_NOT_FOUND",
    ),
)

INITIAL_DELAY_AND_MAX_SIZE: tuple[Scenario, ...] = (
    Scenario(
        "initial_delay_single_member",
        DELAYED,
        (
            Join("A", 3),
            Wait(500),
            Describe("A", conn="A2"),
            Wait(1000),  # t=1.5 s: completed at t=1 s
            Sync("A", assignments={"A": b"a"}),
        ),
        "the first generation forms group.initial.rebalance.delay.ms after the first join "
        "(KIP-134)",
    ),
    Scenario(
        "initial_delay_extended_by_a_new_member",
        DELAYED,
        (
            Join("A", 3),  # t=0: delay to 1 s, 2 s more at most (rebalance timeout 3 s)
            Wait(500),
            Join("B", 3),  # a new member: at t=1 s the delay extends to t=2 s
            Wait(1000),  # t=1.5 s
            Describe("A", conn="A2"),
            Wait(1000),  # t=2.5 s
            Sync("B"),
            Sync("A", assignments={"A": b"a", "B": b"b"}),
        ),
        "a member joining during the initial delay extends it by another delay, within the "
        "rebalance timeout (§3.7)",
    ),
    Scenario(
        "initial_delay_not_extended_past_the_rebalance_timeout",
        DELAYED,
        (
            Join("A", 3, rebalance_ms=1000),  # remaining = max(1000 - 1000, 0) = 0
            Wait(500),
            Join("B", 3, rebalance_ms=1000),
            Wait(1000),  # t=1.5 s: completed at t=1 s with both
            Sync("A", assignments={"A": b"a", "B": b"b"}),
            Sync("B"),
        ),
        "with a rebalance timeout no longer than the delay there is nothing left to extend by: "
        "the first generation forms at the delay with everyone who joined",
    ),
    Scenario(
        "initial_delay_three_members_extended_twice",
        DELAYED,
        (
            Join("A", 3, rebalance_ms=5000),  # t=0: delay to 1 s, remaining 4 s
            Wait(400),
            Join("B", 3, rebalance_ms=5000),  # t=0.4 s: extends at 1 s to 2 s
            Wait(1100),
            Join("C", 3, rebalance_ms=5000),  # t=1.5 s: extends at 2 s to 3 s
            Wait(1000),  # t=2.5 s
            Describe("A", conn="A2"),
            Wait(1000),  # t=3.5 s
            Sync("B"),
            Sync("C"),
            Sync("A", assignments={"A": b"a", "B": b"b", "C": b"c"}),
        ),
        "members joining in successive delay periods extend the initial rebalance each time",
    ),
    Scenario(
        "leave_during_the_initial_delay",
        DELAYED,
        (
            Join("A", 4),
            Join("B", 4),
            Join("A", 4),  # t=0: the initial delay runs to t=1 s
            Join("B", 4),  # a new member: at t=1 s the delay extends to t=2 s
            Wait(300),
            Leave("B", 3, conn="B2"),  # B's parked join: UNKNOWN_MEMBER_ID; no early completion
            Wait(1200),  # t=1.5 s
            Describe("A", conn="A2"),
            Wait(1000),  # t=2.5 s
            Sync("A", assignments={"A": b"a"}),
        ),
        "a leave during the initial rebalance does not end it early, and a member added earlier "
        "still extends it (§3.7, §13.2)",
    ),
    Scenario(
        "group_max_size_refuses_a_new_member",
        DELAYED,
        (
            Join("A", 3),
            Join("B", 3),
            Join("C", 3),  # t=0: B and C extend the initial delay to t=2 s
            Wait(900),
            Join("D", 3),  # t=0.9 s: 3 members awaiting the join: full
            Join("D", 4),
            Wait(1600),  # t=2.5 s: generation 1 with A, B, C
            Sync("B"),
            Sync("C"),
            Sync("A", assignments={"A": b"a", "B": b"b", "C": b"c"}),
            Join("D", 4),
            Describe("A"),
        ),
        "a join into a full group is GROUP_MAX_SIZE_REACHED with an empty member id, checked "
        "before MEMBER_ID_REQUIRED (KIP-389)",
    ),
    Scenario(
        "group_max_size_counts_only_awaiting_members_while_preparing",
        DELAYED,
        (
            Join("A", 3),
            Join("B", 3),
            Join("C", 3),
            Wait(2500),  # t=2.5 s: generation 1 (formed at t=2 s), {A, B, C}
            Sync("B"),
            Sync("C"),
            Sync("A", assignments={"A": b"a", "B": b"b", "C": b"c"}),
            Join("A", 3),  # the leader rejoins: PreparingRebalance, 1 awaiting
            Join("D", 3),  # 1 < 3 awaiting: taken in, 4 members
            Join("B", 3),  # 3 awaiting now
            Join("C", 3),  # a member, not awaiting, 3 awaiting: refused and removed
            Wait(1500),  # t=4 s
            Describe("C"),
            Wait(3500),  # t=7.5 s: the join phase ended at 6.5 s (rebalance timeout 4 s)
            Heartbeat("C"),
            Sync("D"),
            Sync("B"),
            Sync("A", assignments={"A": b"a", "B": b"b", "D": b"d"}),
        ),
        "while the group prepares a rebalance, the size check counts members awaiting the join: "
        "a new member is taken in beyond the limit and an existing member that rejoins last is "
        "refused and removed; the join phase then ends at the rebalance timeout (§3.2, D4)",
    ),
)

GROUP_SCENARIOS: tuple[Scenario, ...] = (
    *JOIN_AND_REBALANCE,
    *SYNC_HEARTBEAT_SESSION,
    *LEAVE_AND_STATIC,
    *_commit_steps(),
    *ADMIN,
    *INITIAL_DELAY_AND_MAX_SIZE,
)
