"""CoordinatorHarness: one group, a virtual clock, and the protocol's verbs.

It drives ``machine`` exactly as the runner does: before each request, ``fire_due`` at the
request's time, then ``handle``. Every step's group goes through ``encode``/``decode`` and must
come back equal, so every scenario also proves the codec. Verbs return a ``Call``: the request's
event id, the member id it names (or the id a new member is given), and its answer once there
is one (None while parked).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controlplane.core.config import CoordinatorConfig
from controlplane.core.coordinator import codec, machine
from controlplane.core.coordinator.draft import Draft
from controlplane.core.coordinator.ids import new_member_id
from controlplane.core.coordinator.rebalance import prepare_rebalance
from controlplane.core.coordinator.records import Decision, EventKind, GroupEvent
from controlplane.core.coordinator.requests import (
    Assignment,
    DeleteGroup,
    DescribeGroup,
    Header,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    LeaveIdentity,
    OffsetCommit,
    OffsetEntry,
    OffsetFetch,
    Protocol,
    Request,
    SyncGroup,
    TopicPartitions,
)
from controlplane.core.coordinator.state import Group, GroupPhase, Member, TimerKind
from controlplane.core.errors import Errors

# The protocol lists of docs/reference/group-coordinator.md §12.0; metadata is fixed per list.
R = (Protocol("range", "Ug=="),)
RR = (Protocol("range", "UlI="), Protocol("roundrobin", "UlI="))
RB = (Protocol("roundrobin", "UkI="),)

# The Java test fixture's broker settings (T-JC:409-413).
ENV = CoordinatorConfig(
    group_min_session_timeout_ms=10,
    group_max_session_timeout_ms=600000,
    group_initial_rebalance_delay_ms=3000,
)

EMPTY = GroupPhase.EMPTY
PREPARING = GroupPhase.PREPARING_REBALANCE
COMPLETING = GroupPhase.COMPLETING_REBALANCE
STABLE = GroupPhase.STABLE


@dataclass
class Call:
    event_id: str
    member_id: str
    harness: CoordinatorHarness = field(repr=False)

    @property
    def answer(self) -> Decision | None:
        return self.harness.answer_of(self.event_id)

    @property
    def parked(self) -> bool:
        return self.answer is None

    @property
    def error(self) -> Errors:
        answer = self.answer
        assert answer is not None, f"{self.event_id} is still parked"
        return answer.error

    def ok(self) -> Decision:
        answer = self.answer
        assert answer is not None, f"{self.event_id} is still parked"
        assert answer.error is Errors.NONE, f"{self.event_id}: {answer.error.name}"
        return answer


class CoordinatorHarness:
    def __init__(
        self, config: CoordinatorConfig = ENV, group_id: str = "group-id", **overrides: int
    ) -> None:
        self.config = dataclasses.replace(config, **overrides)  # type: ignore[arg-type]
        self.group_id = group_id
        self.group: Group | None = None
        self.now_ms = 0
        self.decisions: list[Decision] = []
        self.events: list[GroupEvent] = []
        self._count = 0

    # -- the clock ---------------------------------------------------------------------------

    def advance_to(self, at_ms: int) -> list[Decision]:
        """Move the clock to ``at_ms`` and fire what is due; return the answers released."""
        assert at_ms >= self.now_ms, "the clock never goes back"
        self.now_ms = at_ms
        return self._fire()

    def sleep(self, ms: int) -> list[Decision]:
        return self.advance_to(self.now_ms + ms)

    def _fire(self) -> list[Decision]:
        if self.group is None:
            return []
        return self._record(machine.fire_due(self.group, self.now_ms, self.config))

    def _record(self, step: machine.Step) -> list[Decision]:
        if step.group is not None:
            again = codec.decode_group(codec.encode_group(step.group))
            assert again == step.group, "the codec must round-trip every state"
            deadline = machine.next_deadline_ms(step.group)
            assert deadline is None or deadline >= self.now_ms, "a deadline in the past"
        self.group = step.group
        self.decisions.extend(step.decisions)
        self.events.extend(step.events)
        return list(step.decisions)

    def send(self, request: Request) -> list[Decision]:
        released = self._fire()
        step = machine.handle(self.group, request, self.now_ms, self.config)
        return released + self._record(step)

    def _header(
        self,
        member_id: str,
        group_instance_id: str | None,
        version: int | None,
        group_id: str | None = None,
    ) -> Header:
        self._count += 1
        return Header(
            event_id=f"e{self._count}",
            event_time_ms=self.now_ms,
            group_id=self.group_id if group_id is None else group_id,
            member_id=member_id,
            group_instance_id=group_instance_id,
            request_version=version,
            reason=None,
            timeout_ms=None,
            arrival_time_ms=None,
        )

    # -- verbs -------------------------------------------------------------------------------

    def join(
        self,
        member_id: str = "",
        *,
        version: int | None = 3,
        iid: str | None = None,
        protocols: tuple[Protocol, ...] = R,
        session_ms: int = 500,
        rebalance_ms: int | None = 500,
        protocol_type: str = "consumer",
        client_id: str = "",
        group_id: str | None = None,
    ) -> Call:
        header = self._header(member_id, iid, version, group_id)
        request = JoinGroup(
            header, session_ms, rebalance_ms, protocol_type, protocols, client_id, "/10.0.0.1"
        )
        self.send(request)
        if member_id:
            return Call(header.event_id, member_id, self)
        gid = header.group_id or ""
        return Call(header.event_id, new_member_id(gid, header.event_id, iid, client_id), self)

    def sync(
        self,
        member_id: str,
        generation_id: int,
        *,
        iid: str | None = None,
        assignments: Mapping[str, str] | None = None,
        protocol_type: str | None = "consumer",
        protocol_name: str | None = "range",
        version: int | None = 5,
    ) -> Call:
        header = self._header(member_id, iid, version)
        given = tuple(Assignment(m, a) for m, a in (assignments or {}).items())
        self.send(SyncGroup(header, generation_id, protocol_type, protocol_name, given))
        return Call(header.event_id, member_id, self)

    def heartbeat_request(
        self, member_id: str, generation_id: int, *, iid: str | None = None
    ) -> Heartbeat:
        return Heartbeat(self._header(member_id, iid, None), generation_id)

    def heartbeat(self, member_id: str, generation_id: int, *, iid: str | None = None) -> Call:
        request = self.heartbeat_request(member_id, generation_id, iid=iid)
        self.send(request)
        return Call(request.header.event_id, member_id, self)

    def leave(
        self,
        members: Iterable[tuple[str, str | None]] | None = None,
        *,
        member_id: str = "",
        iid: str | None = None,
        version: int | None = 5,
    ) -> Call:
        header = self._header(member_id, iid, version)
        identities = None
        if members is not None:
            identities = tuple(LeaveIdentity(m, i, None) for m, i in members)
        self.send(LeaveGroup(header, identities))
        return Call(header.event_id, member_id, self)

    def commit(
        self,
        member_id: str,
        generation_id: int,
        *,
        iid: str | None = None,
        offsets: Iterable[tuple[str, int, int]] = (("topic", 0, 1),),
        version: int | None = 8,
    ) -> Call:
        header = self._header(member_id, iid, version)
        entries = tuple(OffsetEntry(t, p, o, None) for t, p, o in offsets)
        self.send(OffsetCommit(header, generation_id, entries))
        return Call(header.event_id, member_id, self)

    def fetch(self, topics: Mapping[str, tuple[int, ...]] | None = None) -> Decision:
        header = self._header("", None, None)
        wanted = None
        if topics is not None:
            wanted = tuple(TopicPartitions(t, p) for t, p in topics.items())
        self.send(OffsetFetch(header, wanted))
        return self._own(header.event_id)

    def describe(self) -> Decision:
        header = self._header("", None, None)
        self.send(DescribeGroup(header))
        return self._own(header.event_id)

    def delete(self) -> Decision:
        header = self._header("", None, None)
        self.send(DeleteGroup(header))
        return self._own(header.event_id)

    def failover(self, at_ms: int | None = None) -> machine.Step:
        """A new coordinator loads the group at ``at_ms`` (now by default), as the runner does:
        the clock moves there with nothing fired, ``machine.reset_sessions``, then what is due
        fires. Returns the reset's step."""
        assert self.group is not None
        if at_ms is not None:
            assert at_ms >= self.now_ms, "the clock never goes back"
            self.now_ms = at_ms
        step = machine.reset_sessions(self.group, self.now_ms, self.config)
        self._record(step)
        self._fire()
        return step

    def force_prepare_rebalance(self) -> None:
        """The Java tests' PREPARE_REBALANCE hook (S31)."""
        assert self.group is not None
        draft = Draft(self.group, self.now_ms, None, self.config)
        prepare_rebalance(draft, "test_hook")
        step = machine.Step(draft.freeze(), tuple(draft.decisions), tuple(draft.events))
        self._record(step)

    def force_phase(self, phase: GroupPhase) -> None:
        assert self.group is not None
        self.group = dataclasses.replace(self.group, phase=phase)

    # -- reading the state -------------------------------------------------------------------

    def answer_of(self, event_id: str) -> Decision | None:
        found = [d for d in self.decisions if d.event_id == event_id]
        assert len(found) <= 1, f"{event_id} answered {len(found)} times"
        return found[0] if found else None

    def _own(self, event_id: str) -> Decision:
        answer = self.answer_of(event_id)
        assert answer is not None
        return answer

    @property
    def state(self) -> Group:
        assert self.group is not None, "the group does not exist"
        return self.group

    @property
    def phase(self) -> GroupPhase:
        return self.state.phase

    @property
    def generation(self) -> int:
        return self.state.generation_id

    @property
    def leader(self) -> str | None:
        return self.state.leader_id

    def member_ids(self) -> set[str]:
        return {m.member_id for m in self.state.members}

    def member(self, member_id: str) -> Member:
        found = self.state.member(member_id)
        assert found is not None, f"{member_id} is not a member"
        return found

    def awaiting_join(self) -> set[str]:
        return {m.member_id for m in self.state.members if m.awaiting_join is not None}

    def pending(self) -> set[str]:
        return set(self.state.pending_join_members)

    def pending_sync(self) -> set[str]:
        return set(self.state.pending_sync_members)

    def timer(self, kind: TimerKind, member_id: str = "") -> int | None:
        for timer in self.state.timers:
            if timer.kind is kind and timer.member_id == member_id:
                return timer.deadline_ms
        return None

    def session_deadline(self, member_id: str) -> int | None:
        return self.timer(TimerKind.HEARTBEAT, member_id)

    def events_of(self, kind: EventKind) -> list[GroupEvent]:
        return [e for e in self.events if e.kind is kind]

    # -- assertions in the notation of docs/reference/group-coordinator.md §12.0 -------------------

    def assert_state(
        self,
        phase: GroupPhase,
        generation: int | None = None,
        *,
        members: set[str] | None = None,
        leader: str | None = None,
    ) -> None:
        assert self.phase is phase, f"{self.phase} != {phase}"
        if generation is not None:
            assert self.generation == generation, f"generation {self.generation} != {generation}"
        if members is not None:
            assert self.member_ids() == members
        if leader is not None:
            assert self.leader == leader


def assert_join_ok(
    call: Call,
    *,
    generation: int,
    leader: str,
    members: set[str] | None = None,
    protocol_name: str = "range",
    skip: bool = False,
) -> Decision:
    """OK{g, ld, ms, pn, skip}; ``members`` None = not the leader (an empty list)."""
    answer = call.ok()
    assert answer.generation_id == generation, f"g{answer.generation_id} != g{generation}"
    assert answer.leader_id == leader
    assert answer.member_id == call.member_id
    assert answer.protocol_type == "consumer"
    assert answer.protocol_name == protocol_name
    assert answer.skip_assignment is skip
    listed = {m.member_id for m in answer.members or ()}
    assert listed == (members or set()), f"{listed} != {members}"
    return answer


def assert_join_error(call: Call, error: Errors, member_id: str | None = None) -> None:
    """ERR(c, mid): generation -1, leader "", protocol type and name null, no members."""
    answer = call.answer
    assert answer is not None, f"{call.event_id} is still parked"
    assert answer.error is error, f"{answer.error.name} != {error.name}"
    assert answer.generation_id == -1
    assert answer.leader_id == ""
    assert answer.protocol_type is None
    assert answer.protocol_name is None
    assert answer.members == ()
    if member_id is not None:
        assert answer.member_id == member_id


def assert_sync(call: Call, error: Errors, assignment: str = "") -> None:
    answer = call.answer
    assert answer is not None, f"{call.event_id} is still parked"
    assert answer.error is error, f"{answer.error.name} != {error.name}"
    assert answer.assignment == assignment
    if error is not Errors.NONE:
        assert answer.protocol_type is None
        assert answer.protocol_name is None


# -- the macros of docs/reference/group-coordinator.md §12.0 ---------------------------------------


def dyn1j(h: CoordinatorHarness, session_ms: int, rebalance_ms: int) -> str:
    """DYN1J: one dynamic member A joins (v4) and the join completes at 3000: ⟨CR g1 ld=A⟩."""
    first = h.join(version=4, session_ms=session_ms, rebalance_ms=rebalance_ms)
    assert_join_error(first, Errors.MEMBER_ID_REQUIRED)
    a = first.member_id
    assert h.phase is EMPTY
    assert h.pending() == {a}
    joined = h.join(a, version=4, session_ms=session_ms, rebalance_ms=rebalance_ms)
    assert joined.parked
    h.advance_to(3000)
    assert_join_ok(joined, generation=1, leader=a, members={a})
    h.assert_state(COMPLETING, 1, members={a}, leader=a)
    return a


def dyn1(h: CoordinatorHarness, session_ms: int = 5000, rebalance_ms: int = 10000) -> str:
    """DYN1: DYN1J, then A syncs: ⟨St g1 ld=A⟩."""
    a = dyn1j(h, session_ms, rebalance_ms)
    assert_sync(h.sync(a, 1), Errors.NONE)
    h.assert_state(STABLE, 1)
    return a


LEADER_IID = "leader-instance-id"
FOLLOWER_IID = "follower-instance-id"


def static2(
    h: CoordinatorHarness, rebalance_ms: int = 10000, session_ms: int = 5000
) -> tuple[str, str]:
    """STATIC2: static leader L and follower F, Stable g1 at T0 with assignments L:[1], F:[2]."""
    lj = h.join(iid=LEADER_IID, protocols=RR, rebalance_ms=rebalance_ms, session_ms=session_ms)
    fj = h.join(iid=FOLLOWER_IID, protocols=RR, rebalance_ms=rebalance_ms, session_ms=session_ms)
    leader, follower = lj.member_id, fj.member_id
    assert lj.parked
    assert fj.parked
    h.advance_to(3000)
    assert lj.parked
    t0 = h.timer(TimerKind.JOIN)
    assert t0 == 3000 + min(3000, max(rebalance_ms - 3000, 0))
    h.advance_to(t0)
    assert_join_ok(lj, generation=1, leader=leader, members={leader, follower})
    assert_join_ok(fj, generation=1, leader=leader)
    h.assert_state(COMPLETING, 1)
    assert_sync(
        h.sync(leader, 1, iid=LEADER_IID, assignments={leader: "AQ==", follower: "Ag=="}),
        Errors.NONE,
        "AQ==",
    )
    assert_sync(h.sync(follower, 1, iid=FOLLOWER_IID), Errors.NONE, "Ag==")
    h.assert_state(STABLE, 1, members={leader, follower}, leader=leader)
    return leader, follower


def pending(h: CoordinatorHarness) -> tuple[str, str, str, Call, Call]:
    """PENDING: L leads, F follows, P is pending; L and F are parked waiting only for P."""
    leader = dyn1j(h, 5000, 10000)
    assert_sync(h.sync(leader, 1, assignments={leader: ""}), Errors.NONE)
    fj = h.join(session_ms=5000, rebalance_ms=10000)
    follower = fj.member_id
    assert fj.parked
    assert h.phase is PREPARING
    assert h.timer(TimerKind.JOIN) == 13000
    lj = h.join(leader, session_ms=5000, rebalance_ms=10000)
    assert_join_ok(lj, generation=2, leader=leader, members={leader, follower})
    assert_join_ok(fj, generation=2, leader=leader)
    assert_sync(h.sync(leader, 2), Errors.NONE)
    h.assert_state(STABLE, 2)
    assert h.pending_sync() == {follower}
    lj = h.join(leader, session_ms=5000, rebalance_ms=10000)
    assert lj.parked
    assert h.phase is PREPARING
    assert h.timer(TimerKind.SYNC) is None
    pj = h.join(version=4, session_ms=2500, rebalance_ms=10000)
    assert_join_error(pj, Errors.MEMBER_ID_REQUIRED)
    p = pj.member_id
    assert h.session_deadline(p) == 5500
    fj = h.join(follower, session_ms=5000, rebalance_ms=10000)
    assert fj.parked
    assert h.awaiting_join() == {leader, follower}
    assert h.pending() == {p}
    return leader, follower, p, lj, fj


def joinn(
    h: CoordinatorHarness, n: int, rebalance_ms: int, session_ms: int
) -> tuple[list[str], list[Call]]:
    """JOINN: n dynamic members join (v4) and the first generation forms."""
    firsts = [h.join(version=4, rebalance_ms=rebalance_ms, session_ms=session_ms) for _ in range(n)]
    ids = [c.member_id for c in firsts]
    calls = [h.join(m, version=4, rebalance_ms=rebalance_ms, session_ms=session_ms) for m in ids]
    h.advance_to(3000)
    deadline = h.timer(TimerKind.JOIN)
    assert deadline == 3000 + min(3000, max(rebalance_ms - 3000, 0))
    h.advance_to(deadline)
    for call in calls:
        assert_join_ok(
            call, generation=1, leader=ids[0], members=set(ids) if call is calls[0] else None
        )
    h.assert_state(COMPLETING, 1)
    return ids, calls
