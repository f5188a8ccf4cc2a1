"""Model-based test: random joins, syncs, heartbeats, leaves, commits, static restarts and clock
jumps against one group, with the coordinator's invariants checked after every step.

The harness itself checks, at every step, that the state round-trips through the codec and that
no deadline lies in the past.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from controlplane.core.config import CoordinatorConfig
from controlplane.core.coordinator import admin, codec, fields, machine
from controlplane.core.coordinator.heartbeat import fast_heartbeat
from controlplane.core.coordinator.records import EventKind
from controlplane.core.coordinator.requests import Heartbeat
from controlplane.core.coordinator.state import GroupPhase, Member, TimerKind
from controlplane.core.errors import Errors
from support.harness import ENV, RB, RR, CoordinatorHarness, R

INSTANCES = ("pod-0", "pod-1", "pod-2")
PROTOCOLS = st.sampled_from((R, RR, RB))
DELAYS_MS = st.sampled_from((0, 1, 250, 500, 1000, 3000, 5000, 10_000, 300_000))
SESSIONS_MS = st.sampled_from((500, 1000, 5000))
ANSWERING = ("join", "sync", "heartbeat")


class CoordinatorMachine(RuleBasedStateMachine):
    config: CoordinatorConfig = ENV

    def __init__(self) -> None:
        super().__init__()
        self.h = CoordinatorHarness(self.config)
        self.ids: list[str] = []
        self.fenced: set[str] = set()
        self.generation = 0
        self.seen_decisions = 0
        self.seen_events = 0

    # -- helpers -------------------------------------------------------------------------------

    def _pick(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from([*self.ids, "stranger"]))

    def _learn(self, member_id: str) -> None:
        if member_id and member_id not in self.ids:
            self.ids.append(member_id)

    def _generation(self, data: st.DataObject) -> int:
        current = self.h.group.generation_id if self.h.group else 0
        return data.draw(st.sampled_from((current, current - 1, current + 1)))

    # -- rules ---------------------------------------------------------------------------------

    @rule(version=st.sampled_from((3, 4, 9)), protocols=PROTOCOLS, session_ms=SESSIONS_MS)
    def join_new_dynamic(self, version: int, protocols: tuple, session_ms: int) -> None:
        call = self.h.join(
            version=version, protocols=protocols, session_ms=session_ms, rebalance_ms=1000
        )
        self._learn(call.member_id)

    @rule(data=st.data(), protocols=PROTOCOLS, session_ms=SESSIONS_MS)
    def rejoin_known(self, data: st.DataObject, protocols: tuple, session_ms: int) -> None:
        member_id = self._pick(data)
        member = self.h.group.member(member_id) if self.h.group else None
        iid = member.group_instance_id if member else None
        self.h.join(member_id, iid=iid, protocols=protocols, session_ms=session_ms)

    @rule(
        iid=st.sampled_from(INSTANCES),
        version=st.sampled_from((4, 9)),
        protocols=PROTOCOLS,
        session_ms=SESSIONS_MS,
    )
    def static_restart(self, iid: str, version: int, protocols: tuple, session_ms: int) -> None:
        call = self.h.join(version=version, iid=iid, protocols=protocols, session_ms=session_ms)
        self._learn(call.member_id)

    @rule(data=st.data())
    def sync(self, data: st.DataObject) -> None:
        member_id = self._pick(data)
        group = self.h.group
        member = group.member(member_id) if group else None
        iid = member.group_instance_id if member else None
        assignments = {m.member_id: "AQ==" for m in group.members} if group else {}
        self.h.sync(
            member_id,
            self._generation(data),
            iid=iid,
            assignments=assignments,
            protocol_name=None,
        )

    @rule(data=st.data(), iid=st.sampled_from((None, *INSTANCES)))
    def heartbeat(self, data: st.DataObject, iid: str | None) -> None:
        request = self.h.heartbeat_request(self._pick(data), self._generation(data), iid=iid)
        self.h.advance_to(self.h.now_ms)  # fire what is due, as the runner does first
        if self.h.group is not None:
            fast = machine.handle(self.h.group, request, self.h.now_ms, self.config)
            general = machine.handle_general(self.h.group, request, self.h.now_ms, self.config)
            assert fast == general, "the heartbeat fast path must decide as the general path"
            self._check_fields_path(request)
        self.h.send(request)

    def _check_fields_path(self, request: Heartbeat) -> None:
        """The runner's path on the group's encoding (fields.py) answers exactly when the fast
        path does, with its answer, its group and its row, and leaves the lists alone when not."""
        group, now_ms = self.h.group, self.h.now_ms
        assert group is not None
        lists = codec.read_fields(codec.encode_group(group))
        decision = fields.heartbeat(lists, request, now_ms)
        fast = fast_heartbeat(group, request, now_ms)
        if fast is None:
            assert decision is None, "the fields path answered what the fast path leaves"
            assert codec.group_of_fields(lists) == group, "refused, yet the lists changed"
            return
        assert fast.group is not None
        assert decision is not None
        assert (decision,) == fast.decisions
        assert codec.group_of_fields(lists) == fast.group
        assert fields.next_deadline_ms(lists) == fast.group.next_deadline_ms
        assert fields.group_row(lists, now_ms) == admin.group_row(fast.group, now_ms)

    @rule(data=st.data(), by_instance=st.booleans())
    def leave(self, data: st.DataObject, by_instance: bool) -> None:
        if by_instance:
            self.h.leave([("", data.draw(st.sampled_from(INSTANCES)))])
        else:
            self.h.leave([(self._pick(data), None)])

    def _offline(self) -> list[Member]:
        members = self.h.group.members if self.h.group else ()
        return [m for m in members if m.offline_since_ms is not None]

    @precondition(lambda self: self._offline())
    @rule(data=st.data(), by_instance=st.booleans())
    def remove_offline_member(self, data: st.DataObject, by_instance: bool) -> None:
        """KIP-345's administrative removal, of a member offline (§14.1)."""
        member = data.draw(st.sampled_from(self._offline()))
        iid = member.group_instance_id
        call = self.h.leave([("", iid)] if by_instance else [(member.member_id, iid)])
        results = call.ok().member_results or ()
        assert [r.error_code for r in results] == [Errors.NONE.code]
        assert self.h.group is not None
        assert self.h.group.member(member.member_id) is None

    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        if data.draw(st.booleans()):
            self.h.commit("", -1)
        else:
            member_id, generation = self._pick(data), self._generation(data)
            call = self.h.commit(member_id, generation)
            if member_id in self.fenced and generation >= 0:
                assert call.error is not Errors.NONE, "a fenced id committed as a member"

    @precondition(lambda self: self.h.group is not None)
    @rule()
    def describe(self) -> None:
        answer = self.h.describe()
        assert answer.group_state == self.h.state.phase.value

    @rule()
    def delete_group(self) -> None:
        self.h.advance_to(self.h.now_ms)  # fire what is due first (a 0 ms join timer may empty it)
        existed = self.h.group is not None
        empty = existed and self.h.state.phase is GroupPhase.EMPTY
        answer = self.h.delete()
        if empty:
            assert answer.error is Errors.NONE
            assert self.h.group is None
        elif existed:
            assert answer.error is Errors.NON_EMPTY_GROUP
        else:
            assert answer.error is Errors.GROUP_ID_NOT_FOUND

    @rule()
    def fetch(self) -> None:
        stored = len(self.h.group.offsets) if self.h.group else 0
        answer = self.h.fetch()
        assert len(answer.offsets or ()) == stored

    @rule(delay_ms=DELAYS_MS)
    def advance_clock(self, delay_ms: int) -> None:
        self.h.sleep(delay_ms)

    @precondition(lambda self: self.h.group is not None)
    @rule(delay_ms=DELAYS_MS)
    def failover(self, delay_ms: int) -> None:
        """A new coordinator loads the group ``delay_ms`` later, as the runner does (nothing fired
        meanwhile): the load changes nothing but deadlines (the group is within
        ``group.max.size``); a rebalance's moves to at least a rebalance timeout after the load;
        nothing is left overdue (the harness checks that every step leaves no deadline in the
        past)."""
        before = self.h.state
        at_ms = self.h.now_ms + delay_ms
        after = self.h.failover(at_ms=at_ms).group
        assert after is not None
        assert (after.phase, after.generation_id, after.members) == (
            before.phase,
            before.generation_id,
            before.members,
        )
        old = {(t.kind, t.member_id): t for t in before.timers}
        new = {(t.kind, t.member_id): t for t in after.timers}
        longest_ms = max((m.rebalance_timeout_ms for m in before.members), default=0)
        join = old.get((TimerKind.JOIN, ""))
        if before.phase is GroupPhase.PREPARING_REBALANCE and join is not None:
            step_ms = longest_ms if join.delay_ms is None else join.delay_ms
            expected = max(join.deadline_ms, at_ms + step_ms)
            assert new[(TimerKind.JOIN, "")].deadline_ms == expected
        sync = old.get((TimerKind.SYNC, ""))
        if sync is not None and before.pending_sync_members:
            expected = max(sync.deadline_ms, at_ms + longest_ms)
            assert new[(TimerKind.SYNC, "")].deadline_ms == expected

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def follow_the_trail(self) -> None:
        for event in self.h.events[self.seen_events :]:
            if event.kind is EventKind.MEMBER_FENCED and event.member_id:
                self.fenced.add(event.member_id)
        self.seen_events = len(self.h.events)
        for decision in self.h.decisions[self.seen_decisions :]:
            if decision.error is Errors.MEMBER_ID_REQUIRED:
                self._learn(decision.member_id)
            if decision.type in ANSWERING and decision.error is Errors.NONE:
                assert decision.member_id not in self.fenced, "a fenced id answered as member"
        self.seen_decisions = len(self.h.decisions)

    @invariant()
    def every_request_is_answered_at_most_once(self) -> None:
        ids = [d.event_id for d in self.h.decisions]
        assert len(ids) == len(set(ids))

    @invariant()
    def at_most_one_member_per_instance_id(self) -> None:
        """Members and members parked by the expansion countdown (§14.2) together."""
        if self.h.group is None:
            return
        group = self.h.state
        iids = [m.group_instance_id for m in (*group.members, *group.expansion_queue)]
        assert None not in iids[len(group.members) :], "only static members are parked"
        named = [iid for iid in iids if iid is not None]
        assert len(named) == len(set(named))

    @invariant()
    def the_registration_deadline_belongs_to_a_member_offline_now(self) -> None:
        """§14.1: the earliest offline_since_ms among the members offline now, plus the timeout;
        no registration timer while no member is offline."""
        if self.h.group is None:
            return
        timeout_ms = self.config.group_static_registration_timeout_ms
        offline = [
            m.offline_since_ms for m in self.h.state.members if m.offline_since_ms is not None
        ]
        expected = None
        if offline and timeout_ms is not None:
            expected = min(offline) + timeout_ms
        assert self.h.timer(TimerKind.REGISTRATION) == expected

    @invariant()
    def the_expansion_countdown_runs_while_a_member_is_parked(self) -> None:
        """§14.2: a countdown has a parked member to take in, and a parked member a countdown."""
        if self.h.group is None:
            return
        counting = self.h.timer(TimerKind.EXPANSION) is not None
        assert counting == bool(self.h.state.expansion_queue)

    @invariant()
    def the_generation_never_decreases(self) -> None:
        if self.h.group is None:
            self.generation = 0  # deleted or expired: a new group starts again
            return
        assert self.h.state.generation_id >= self.generation
        self.generation = self.h.state.generation_id

    @invariant()
    def every_live_member_has_a_session_or_is_satisfied(self) -> None:
        if self.h.group is None:
            return
        for member in self.h.state.members:
            timer = self.h.timer(TimerKind.HEARTBEAT, member.member_id)
            offline = member.offline_since_ms is not None
            assert timer is not None or member.has_satisfied_heartbeat or offline, member

    @invariant()
    def the_leader_is_a_member(self) -> None:
        if self.h.group is None:
            return
        group = self.h.state
        if group.members:
            assert group.leader_id is not None
            assert group.member(group.leader_id) is not None
        else:
            assert group.leader_id is None

    @invariant()
    def parked_requests_match_the_phase(self) -> None:
        if self.h.group is None:
            return
        group = self.h.state
        if any(m.awaiting_join for m in group.members):
            assert group.phase is GroupPhase.PREPARING_REBALANCE
        if any(m.awaiting_sync for m in group.members):
            assert group.phase is GroupPhase.COMPLETING_REBALANCE
        assert set(group.pending_sync_members) <= {m.member_id for m in group.members}
        assert not set(group.pending_join_members) & {m.member_id for m in group.members}

    @invariant()
    def a_rebalance_in_progress_has_its_deadline(self) -> None:
        if self.h.group is None:
            return
        group = self.h.state
        if group.phase is GroupPhase.PREPARING_REBALANCE:
            assert self.h.timer(TimerKind.JOIN) is not None
        if group.pending_sync_members:
            assert self.h.timer(TimerKind.SYNC) is not None

    @invariant()
    def the_groups_row_is_the_describe_answer_s_fields(self) -> None:
        """``group_row`` (built directly, per group a batch touches) says what DescribeGroups
        says of the group: its state, generation, protocol, leader and described members."""
        if self.h.group is None:
            return
        fields = admin.summary(self.h.state)
        members = [
            {name: getattr(m, name) for name in m.__slots__} for m in fields.pop("group_members")
        ]
        expected = {"group_id": self.h.state.group_id, **fields, "members": members}
        assert machine.group_row(self.h.state, 7) == {**expected, "updated_at_ms": 7}

    @invariant()
    def next_deadline_is_not_in_the_past(self) -> None:
        if self.h.group is not None:
            deadlines = [t.deadline_ms for t in self.h.state.timers]
            assert all(d >= self.h.now_ms for d in deadlines)


class SmallGroupMachine(CoordinatorMachine):
    config = CoordinatorConfig(
        group_min_session_timeout_ms=10,
        group_max_session_timeout_ms=600000,
        group_initial_rebalance_delay_ms=500,
        group_max_size=2,
        offsets_retention_minutes=1,
    )


class StaticTimeoutsMachine(CoordinatorMachine):
    config = CoordinatorConfig(
        group_min_session_timeout_ms=10,
        group_max_session_timeout_ms=600000,
        group_initial_rebalance_delay_ms=500,
        group_static_registration_timeout_ms=20_000,
        group_static_expansion_timeout_ms=5_000,
    )


TestCoordinator = CoordinatorMachine.TestCase
TestSmallGroup = SmallGroupMachine.TestCase
TestStaticTimeouts = StaticTimeoutsMachine.TestCase
