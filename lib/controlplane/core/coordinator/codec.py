"""A compact, versioned encoding of a ``Group`` (what the streaming engine keeps in Spark state).

Format: one version byte, then the group as nested positional tuples (no field names) of
str, int, bool and None, serialised by ``marshal`` format 4 (stdlib, stable since Python 3.4 for
these types, and about three times faster than JSON here). ``decode_group(encode_group(g)) == g``
for every group. An unknown version or a malformed body is refused with a ValueError that says
so.

The positions of the fields in those lists are named below (``G_*`` for a group, ``M_*`` for a
member, ``T_*`` for a timer), for code that reads or updates an encoding as its lists
(``read_fields``, ``encode_fields``) without building the group: the heartbeat fast path of
``fields.py``.
"""

from __future__ import annotations

import marshal
from typing import Any, Final

from controlplane.core.coordinator.requests import make_protocol
from controlplane.core.coordinator.state import (
    Group,
    GroupPhase,
    Member,
    ParkedRequest,
    StoredOffset,
    Timer,
    TimerKind,
    make_group,
    make_member,
    make_offset,
    make_parked,
    make_timer,
)

VERSION: Final = 1
_PHASES: Final = tuple(GroupPhase)
_PHASE_CODE: Final = {phase: i for i, phase in enumerate(_PHASES)}
_KINDS: Final = {kind.value: kind for kind in TimerKind}
_MARSHAL_VERSION: Final = 4

# A group's lists, by position (encode_group's order).
GROUP_FIELDS: Final = 17
(
    G_GROUP_ID,
    G_PHASE,
    G_PREVIOUS_PHASE,
    G_GENERATION_ID,
    G_PROTOCOL_TYPE,
    G_PROTOCOL_NAME,
    G_LEADER_ID,
    G_MEMBERS,
    G_PENDING_JOIN,
    G_PENDING_SYNC,
    G_NEW_MEMBER_ADDED,
    G_TIMERS,
    G_TIMER_SEQ,
    G_OFFSETS,
    G_EMPTY_SINCE_MS,
    G_LAST_COMMIT_MS,
    G_EXPANSION_QUEUE,
) = range(GROUP_FIELDS)
# A member's (_member's order) and a timer's.
M_MEMBER_ID, M_GROUP_INSTANCE_ID, M_CLIENT_ID, M_CLIENT_HOST = range(4)
M_SESSION_TIMEOUT_MS, M_ASSIGNMENT, M_OFFLINE_SINCE_MS = 5, 8, 12
T_KIND, T_MEMBER_ID, T_DEADLINE_MS, T_SEQ = range(4)


def phase_code(phase: GroupPhase) -> int:
    return _PHASE_CODE[phase]


def phase_of(code: int) -> GroupPhase:
    return _PHASES[code]


def _parked(p: ParkedRequest | None) -> list[Any] | None:
    if p is None:
        return None
    return [p.event_id, p.event_time_ms, p.request_version, p.group_instance_id]


def _member(m: Member) -> list[Any]:
    return [
        m.member_id,
        m.group_instance_id,
        m.client_id,
        m.client_host,
        m.rebalance_timeout_ms,
        m.session_timeout_ms,
        m.protocol_type,
        [[p.name, p.metadata] for p in m.protocols],
        m.assignment,
        _parked(m.awaiting_join),
        _parked(m.awaiting_sync),
        m.is_new,
        m.offline_since_ms,
    ]


def encode_group(group: Group) -> bytes:
    body = [
        group.group_id,
        _PHASE_CODE[group.phase],
        _PHASE_CODE[group.previous_phase],
        group.generation_id,
        group.protocol_type,
        group.protocol_name,
        group.leader_id,
        [_member(m) for m in group.members],
        list(group.pending_join_members),
        list(group.pending_sync_members),
        group.new_member_added,
        [
            [t.kind.value, t.member_id, t.deadline_ms, t.seq, t.delay_ms, t.remaining_ms]
            for t in group.timers
        ],
        group.timer_seq,
        [[o.topic, o.partition, o.offset, o.metadata, o.commit_time_ms] for o in group.offsets],
        group.empty_since_ms,
        group.last_commit_ms,
        [_member(m) for m in group.expansion_queue],
    ]
    return bytes((VERSION,)) + marshal.dumps(body, _MARSHAL_VERSION)


def _unparked(raw: list[Any] | None) -> ParkedRequest | None:
    if raw is None:
        return None
    return make_parked(
        event_id=raw[0], event_time_ms=raw[1], request_version=raw[2], group_instance_id=raw[3]
    )


def _unmember(raw: list[Any]) -> Member:
    return make_member(
        member_id=raw[0],
        group_instance_id=raw[1],
        client_id=raw[2],
        client_host=raw[3],
        rebalance_timeout_ms=raw[4],
        session_timeout_ms=raw[5],
        protocol_type=raw[6],
        protocols=tuple([make_protocol(name=name, metadata=data) for name, data in raw[7]]),
        assignment=raw[8],
        awaiting_join=_unparked(raw[9]),
        awaiting_sync=_unparked(raw[10]),
        is_new=raw[11],
        offline_since_ms=raw[12],
    )


def decode_group(data: bytes) -> Group:
    return group_of_fields(read_fields(data))


def read_fields(data: bytes) -> list[Any]:
    """An encoding's lists (``G_*`` positions), without building the group; ValueError for an
    unknown version or a body that is not a group's list."""
    if not data:
        raise ValueError("coordinator state: empty encoding")
    if data[0] != VERSION:
        raise ValueError(
            f"coordinator state: unknown encoding version {data[0]} (this build reads {VERSION})"
        )
    try:
        raw = marshal.loads(data[1:])
    except (ValueError, TypeError, EOFError) as error:
        raise _malformed(error) from None
    if type(raw) is not list or len(raw) != GROUP_FIELDS:
        raise _malformed(f"not a list of {GROUP_FIELDS} fields")
    return raw


def group_of_fields(raw: list[Any]) -> Group:
    """The group of an encoding's lists (``read_fields``); ValueError if they are malformed."""
    try:
        return _ungroup(raw)
    except (ValueError, TypeError, IndexError, KeyError) as error:
        raise _malformed(error) from None


def encode_fields(raw: list[Any]) -> bytes:
    """An encoding from its lists: ``encode_group`` of the group they hold."""
    return bytes((VERSION,)) + marshal.dumps(raw, _MARSHAL_VERSION)


def _malformed(error: object) -> ValueError:
    return ValueError(f"coordinator state: malformed version {VERSION} body: {error}")


def _ungroup(raw: list[Any]) -> Group:
    return make_group(
        group_id=raw[0],
        phase=_PHASES[raw[1]],
        previous_phase=_PHASES[raw[2]],
        generation_id=raw[3],
        protocol_type=raw[4],
        protocol_name=raw[5],
        leader_id=raw[6],
        members=tuple(map(_unmember, raw[7])),
        pending_join_members=tuple(raw[8]),
        pending_sync_members=tuple(raw[9]),
        new_member_added=raw[10],
        timers=tuple(map(_untimer, raw[11])),
        timer_seq=raw[12],
        offsets=tuple(map(_unoffset, raw[13])),
        empty_since_ms=raw[14],
        last_commit_ms=raw[15],
        expansion_queue=tuple(map(_unmember, raw[16])),
    )


def _untimer(raw: list[Any]) -> Timer:
    return make_timer(
        kind=_KINDS[raw[0]],
        member_id=raw[1],
        deadline_ms=raw[2],
        seq=raw[3],
        delay_ms=raw[4],
        remaining_ms=raw[5],
    )


def _unoffset(raw: list[Any]) -> StoredOffset:
    return make_offset(
        topic=raw[0], partition=raw[1], offset=raw[2], metadata=raw[3], commit_time_ms=raw[4]
    )
