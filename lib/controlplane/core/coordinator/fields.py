"""The heartbeat fast path on a group held as its encoding's lists (codec.py), not as a ``Group``.

Most of what a running engine handles is heartbeats from members of a stable group, and a batch
reaches most groups once. Decoding a group into frozen dataclasses, rescheduling one timer and
encoding it again cost more than the heartbeat itself, so the runner reads a group it reaches
as its marshal lists (``codec.read_fields``) and builds the ``Group`` only when a request or a
timer needs more than this module does.

``heartbeat`` is ``heartbeat.fast_heartbeat`` on those lists: the same cases (it answers
exactly when ``fast_heartbeat`` would, and returns None otherwise, leaving the lists as they
were), the same answer, and the lists updated so that ``codec.group_of_fields`` gives the group
``fast_heartbeat`` would have returned (the stateful test checks all three at every heartbeat).

What is checked, and when: ``codec.read_fields`` checks an encoding's version and that it is a
record of the group's 17 fields; ``heartbeat`` reads only the fields it needs (the phase, the
generation, the members up to the one it answers, the timers and their sequence) and returns
None when one of them is not what a group holds, so the general path builds the group and
refuses it with codec's error. A body damaged in a field the heartbeat does not read (an
offset, another member's protocols) is refused when the group is next built (any other request,
a due timer), not by the heartbeat, which carries it over as it found it. The state is only
ever written by this codec, inside Spark's checksummed state store, so the fast path does not
pay for a full check on every heartbeat. ``group_row`` reads every member: a damaged one is
refused there with codec's ValueError.
"""

from __future__ import annotations

import bisect
from operator import itemgetter
from typing import Any, Final

from controlplane.core.coordinator import admin, answers, codec
from controlplane.core.coordinator.codec import (
    G_GENERATION_ID,
    G_GROUP_ID,
    G_LEADER_ID,
    G_MEMBERS,
    G_PHASE,
    G_PROTOCOL_NAME,
    G_PROTOCOL_TYPE,
    G_TIMER_SEQ,
    G_TIMERS,
    M_ASSIGNMENT,
    M_CLIENT_HOST,
    M_CLIENT_ID,
    M_GROUP_INSTANCE_ID,
    M_MEMBER_ID,
    M_OFFLINE_SINCE_MS,
    M_SESSION_TIMEOUT_MS,
    T_DEADLINE_MS,
    T_KIND,
    T_MEMBER_ID,
    T_SEQ,
    phase_code,
    phase_of,
)
from controlplane.core.coordinator.heartbeat import LIVE_PHASES
from controlplane.core.coordinator.records import Decision
from controlplane.core.coordinator.requests import Heartbeat, RequestType
from controlplane.core.coordinator.state import GroupPhase, TimerKind
from controlplane.core.errors import Errors

Fields = list[Any]

_LIVE_CODES: Final = frozenset(phase_code(phase) for phase in LIVE_PHASES)
_PREPARING: Final = phase_code(GroupPhase.PREPARING_REBALANCE)
_HEARTBEAT: Final = int(TimerKind.HEARTBEAT)
_TIMER_ORDER: Final = itemgetter(T_DEADLINE_MS, T_SEQ)
# What a malformed list raises when read as a group's (the general path then refuses it).
_MALFORMED: Final = (TypeError, IndexError, KeyError, ValueError, AttributeError)


def heartbeat(fields: Fields, request: Heartbeat, now_ms: int) -> Decision | None:
    """``fast_heartbeat`` on a group's lists, updated in place; None (lists untouched) for a
    heartbeat the general path must decide."""
    try:
        return _heartbeat(fields, request, now_ms)
    except _MALFORMED:
        return None


def _heartbeat(fields: Fields, request: Heartbeat, now_ms: int) -> Decision | None:
    header = request.header
    phase = fields[G_PHASE]
    if phase not in _LIVE_CODES or request.generation_id != fields[G_GENERATION_ID]:
        return None
    member = _member(fields[G_MEMBERS], header.member_id)
    if member is None or member[M_OFFLINE_SINCE_MS] is not None:
        return None
    if header.group_instance_id not in (None, member[M_GROUP_INSTANCE_ID]):
        return None
    member_id = member[M_MEMBER_ID]
    seq = fields[G_TIMER_SEQ]
    next_seq = seq + 1
    deadline_ms = now_ms + member[M_SESSION_TIMEOUT_MS]
    timers = [t for t in fields[G_TIMERS] if t[T_MEMBER_ID] != member_id or t[T_KIND] != _HEARTBEAT]
    bisect.insort(timers, [_HEARTBEAT, member_id, deadline_ms, seq, None, None], key=_TIMER_ORDER)
    error = Errors.REBALANCE_IN_PROGRESS if phase == _PREPARING else Errors.NONE
    decision = answers.plain(fields[G_GROUP_ID], now_ms, header, RequestType.HEARTBEAT, error)
    # Nothing above wrote to the lists: a malformed one has raised by now and left them whole.
    fields[G_TIMERS] = timers
    fields[G_TIMER_SEQ] = next_seq
    return decision


def _member(members: list[list[Any]], member_id: str) -> list[Any] | None:
    for member in members:
        if member[M_MEMBER_ID] == member_id:
            return member
    return None


def next_deadline_ms(fields: Fields) -> int | None:
    """``Group.next_deadline_ms``: the first timer's deadline (timers are kept in order)."""
    timers = fields[G_TIMERS]
    return timers[0][T_DEADLINE_MS] if timers else None


def group_row(fields: Fields, now_ms: int) -> dict[str, Any]:
    """``admin.group_row`` of the group the lists hold; ValueError (codec's) if they are not a
    group's."""
    try:
        return _group_row(fields, now_ms)
    except _MALFORMED:
        return admin.group_row(codec.group_of_fields(fields), now_ms)  # raises codec's error


def _group_row(fields: Fields, now_ms: int) -> dict[str, Any]:
    return admin.table_row(
        fields[G_GROUP_ID],
        phase_of(fields[G_PHASE]),
        fields[G_GENERATION_ID],
        fields[G_PROTOCOL_TYPE],
        fields[G_PROTOCOL_NAME],
        fields[G_LEADER_ID],
        [
            (
                m[M_MEMBER_ID],
                m[M_GROUP_INSTANCE_ID],
                m[M_CLIENT_ID],
                m[M_CLIENT_HOST],
                m[M_ASSIGNMENT],
                m[M_OFFLINE_SINCE_MS] is not None,
            )
            for m in fields[G_MEMBERS]
        ],
        now_ms,
    )
