"""The coordinator of one group as a pure function: ``handle`` one request, ``fire_due`` timers.

The same shape as the quota's machine (``core/quota/machine.py``): ``handle(group, request,
now_ms, config)`` and ``fire_due(group, now_ms, config)`` return a ``Step``: the group
afterwards (None: it does not exist), the rows (decisions, group events) and, from the group,
its next deadline. The caller (the shard, runner.py) fires every timer due at or before a
request's ``now_ms`` with ``fire_due`` and then calls ``handle``. Neither reads a clock or
mutates its input. Repeated event ids are the shard's concern (``core/idempotence.py``).
"""

from __future__ import annotations

from typing import Any

from controlplane.core.config import CoordinatorConfig
from controlplane.core.coordinator import admin, answers, join, leave, offsets, timers
from controlplane.core.coordinator.draft import Draft
from controlplane.core.coordinator.heartbeat import fast_heartbeat, handle_heartbeat
from controlplane.core.coordinator.records import Decision, EventKind, MemberResult
from controlplane.core.coordinator.requests import (
    REQUEST_TYPE,
    DeleteGroup,
    DescribeGroup,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    OffsetCommit,
    OffsetFetch,
    Request,
    RequestType,
    SyncGroup,
    Tick,
)
from controlplane.core.coordinator.state import Group, GroupPhase
from controlplane.core.coordinator.step import Step as Step
from controlplane.core.coordinator.step import make_step
from controlplane.core.coordinator.sync import handle_sync
from controlplane.core.errors import Errors


def next_deadline_ms(group: Group | None) -> int | None:
    """When the group's next timer is due (None: no group, or no timer)."""
    return None if group is None else group.next_deadline_ms


def fire_due(group: Group, now_ms: int, config: CoordinatorConfig) -> Step:
    """Fire every timer due at ``now_ms`` in (deadline, sequence) order, each at its deadline."""
    if not group.timers or group.timers[0].deadline_ms > now_ms:
        return make_step(
            group=group, decisions=(), events=()
        )  # timers are kept in (deadline, sequence) order
    d = Draft(group, now_ms, None, config)
    while not d.deleted:
        timer = timers.pop_due(d, now_ms)
        if timer is None:
            break
        timers.fire(d, timer)
    return make_step(group=d.freeze(), decisions=tuple(d.decisions), events=tuple(d.events))


def reset_sessions(group: Group, now_ms: int, config: CoordinatorConfig) -> Step:
    """coordinator_failover (docs/reference/events.md §6), what Kafka does when a coordinator loads
    a group: every session deadline restarts at ``now_ms``; an interrupted rebalance's join or
    sync deadline moves to at least a rebalance timeout (or the initial delay's step) after it,
    and the other due timers come due at it; a group over ``group.max.size`` (the setting was
    lowered across the stop) rebalances."""
    d = Draft(group, now_ms, None, config)
    admin.reset_sessions(d)
    return make_step(group=d.freeze(), decisions=tuple(d.decisions), events=tuple(d.events))


def group_row(group: Group, now_ms: int) -> dict[str, Any]:
    return admin.group_row(group, now_ms)


def handle(group: Group | None, request: Request, now_ms: int, config: CoordinatorConfig) -> Step:
    """One request for this group at ``now_ms`` (timers due by then have already fired)."""
    if isinstance(request, Heartbeat) and group is not None and request.header.group_id:
        fast = fast_heartbeat(group, request, now_ms)
        if fast is not None:
            return fast
    return handle_general(group, request, now_ms, config)


def handle_general(
    group: Group | None, request: Request, now_ms: int, config: CoordinatorConfig
) -> Step:
    """``handle`` without the heartbeat fast path: every request through a step draft."""
    if isinstance(request, Tick):
        return make_step(group=group, decisions=(), events=())
    header = request.header
    d = Draft(group or Group(header.group_id or ""), now_ms, header.event_id, config)
    if header.group_id is None or (header.group_id == "" and isinstance(request, _COORDINATION)):
        _invalid_group_id(d, request)
        result = group
    else:
        result = _dispatch(d, group, request)
    return make_step(
        group=result,
        decisions=_own_first(d.decisions, header.event_id),
        events=tuple(d.events),
    )


def _own_first(decisions: list[Decision], event_id: str) -> tuple[Decision, ...]:
    """The request's own answer first, then the answers it released, in their order."""
    if len(decisions) < 2:
        return tuple(decisions)
    own: list[Decision] = []
    rest: list[Decision] = []
    for decision in decisions:
        (own if decision.event_id == event_id else rest).append(decision)
    return (*own, *rest)


def _dispatch(d: Draft, group: Group | None, request: Request) -> Group | None:
    if isinstance(request, JoinGroup):
        return _join(d, group, request)
    if isinstance(request, OffsetCommit):
        return _commit(d, group, request)
    if isinstance(request, DescribeGroup):
        admin.describe(d, request.header, group)
        return group
    if group is None:
        _missing_group(d, request)
        return None
    if isinstance(request, SyncGroup):
        handle_sync(d, request)
    elif isinstance(request, Heartbeat):
        handle_heartbeat(d, request)
    elif isinstance(request, LeaveGroup):
        leave.handle_leave(d, request)
    elif isinstance(request, OffsetFetch):
        offsets.handle_fetch(d, request)
    elif isinstance(request, DeleteGroup):
        admin.delete_group(d, request.header)
    return d.freeze()


def _join(d: Draft, group: Group | None, request: JoinGroup) -> Group | None:
    header = request.header
    error = join.coordinator_check(request, d.config)
    if error is None and group is None and header.member_id != "":
        error = Errors.UNKNOWN_MEMBER_ID  # no group is created
    if error is not None:
        d.answer(answers.join_error(d, answers.parked(header), header.member_id, error))
        return group
    if group is None:
        _created(d)
    join.handle_join(d, request)
    return d.freeze()


def _commit(d: Draft, group: Group | None, request: OffsetCommit) -> Group | None:
    if group is None:
        error = offsets.missing_group_commit_error(request)
        if error is not None:
            offsets.handle_commit(d, request, error)
            return None
        _created(d)
    offsets.handle_commit(d, request, None)
    return d.freeze()


def _created(d: Draft) -> None:
    d.emit(
        EventKind.STATE_CHANGED,
        state_from=GroupPhase.DEAD.value,
        state_to=GroupPhase.EMPTY.value,
        reason="created",
        generation_id=0,
    )
    d.empty_since_ms = d.now_ms
    d.schedule_retention()


def _missing_group(d: Draft, request: Request) -> None:
    """Sync, heartbeat and leave on a group that does not exist; fetch and delete too."""
    header = request.header
    if isinstance(request, SyncGroup):
        d.answer(
            answers.sync_error(
                d, answers.parked(header), header.member_id, Errors.UNKNOWN_MEMBER_ID
            )
        )
    elif isinstance(request, Heartbeat):
        d.answer(answers.simple(d, header, RequestType.HEARTBEAT, Errors.UNKNOWN_MEMBER_ID))
    elif isinstance(request, LeaveGroup):
        results = tuple(
            MemberResult(i.member_id, i.group_instance_id, Errors.UNKNOWN_MEMBER_ID.code)
            for i in leave.identities(request)
        )
        leave.leave_answer(d, request, results)
    elif isinstance(request, OffsetFetch):
        found = offsets.fetch_results({}, request)
        d.answer(answers.simple(d, header, RequestType.OFFSET_FETCH, Errors.NONE, offsets=found))
    elif isinstance(request, DeleteGroup):
        d.answer(answers.simple(d, header, RequestType.DELETE_GROUP, Errors.GROUP_ID_NOT_FOUND))


# The requests of group membership need a non-empty group id (GCS isGroupIdNotEmpty). Offset
# commit and fetch, describe and delete refuse only a null one: for backwards compatibility ""
# is an ordinary group there (GCS commitOffsets/describeGroups; Scala isValidGroupId).
_COORDINATION = (JoinGroup, SyncGroup, Heartbeat, LeaveGroup)


def _invalid_group_id(d: Draft, request: Request) -> None:
    header = request.header
    error = Errors.INVALID_GROUP_ID
    if isinstance(request, JoinGroup):
        d.answer(answers.join_error(d, answers.parked(header), header.member_id, error))
    elif isinstance(request, SyncGroup):
        d.answer(answers.sync_error(d, answers.parked(header), header.member_id, error))
    else:
        kind = REQUEST_TYPE[type(request)]
        d.answer(answers.simple(d, header, kind, error))
