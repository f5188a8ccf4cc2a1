"""The coordinator's wire parser (docs/reference/events.md §1): every field, every type, every bad
value."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from controlplane.core.coordinator import wire
from controlplane.core.coordinator.requests import (
    Assignment,
    DeleteGroup,
    DescribeGroup,
    Heartbeat,
    JoinGroup,
    LeaveGroup,
    LeaveIdentity,
    OffsetCommit,
    OffsetEntry,
    OffsetFetch,
    Protocol,
    RequestType,
    SyncGroup,
    Tick,
    TopicPartitions,
)
from controlplane.core.coordinator.wire import KNOWN_FIELDS, InvalidEvent, parse_event
from controlplane.core.errors import Errors
from controlplane.core.jsonwire import WireError
from controlplane.core.runtime import TimedEvent

LINE = "events.jsonl:7"

VALID: dict[str, dict[str, Any]] = {
    "join": {
        "event_id": "e-join",
        "event_time_ms": 1_000,
        "type": "join",
        "group_id": "g",
        "member_id": "",
        "group_instance_id": "i-1",
        "client_id": "c",
        "client_host": "/10.0.0.1",
        "request_version": 9,
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 30_000,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": "AAEC"}, {"name": "rr", "metadata": ""}],
        "reason": "startup",
        "timeout_ms": 5_000,
        "arrival_time_ms": 1_001,
    },
    "sync": {
        "event_id": "e-sync",
        "event_time_ms": 1_000,
        "type": "sync",
        "group_id": "g",
        "member_id": "m",
        "generation_id": 1,
        "protocol_type": "consumer",
        "protocol_name": "range",
        "assignments": [{"member_id": "m", "assignment": "AAE="}],
    },
    "heartbeat": {
        "event_id": "e-hb",
        "event_time_ms": 1_000,
        "type": "heartbeat",
        "group_id": "g",
        "member_id": "m",
        "generation_id": 1,
    },
    "leave": {
        "event_id": "e-leave",
        "event_time_ms": 1_000,
        "type": "leave",
        "group_id": "g",
        "members": [{"member_id": "m", "group_instance_id": "i-1", "reason": "bye"}],
    },
    "offset_commit": {
        "event_id": "e-oc",
        "event_time_ms": 1_000,
        "type": "offset_commit",
        "group_id": "g",
        "member_id": "m",
        "generation_id": 1,
        "offsets": [{"topic": "t", "partition": 0, "offset": 42, "metadata": "x"}],
    },
    "offset_fetch": {
        "event_id": "e-of",
        "event_time_ms": 1_000,
        "type": "offset_fetch",
        "group_id": "g",
        "topics": [{"topic": "t", "partitions": [0, 1]}],
    },
    "describe": {"event_id": "e-d", "event_time_ms": 1_000, "type": "describe", "group_id": "g"},
    "delete_group": {
        "event_id": "e-del",
        "event_time_ms": 1_000,
        "type": "delete_group",
        "group_id": "g",
    },
    "tick": {"event_id": "e-t", "event_time_ms": 1_000, "type": "tick"},
}


def parse(raw: Any, line: str | None = LINE) -> Any:
    return parse_event(TimedEvent(raw, None, line=line))


def invalid(raw: Any, line: str | None = LINE) -> InvalidEvent:
    result = parse(raw, line)
    assert isinstance(result, InvalidEvent), result
    return result


def with_value(kind: str, path: str, value: Any) -> dict[str, Any]:
    """The valid event of ``kind`` with ``path`` (``a.0.b`` for nested) set or removed."""
    raw = copy.deepcopy(VALID[kind])
    *parents, last = path.split(".")
    target: Any = raw
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    key: Any = int(last) if isinstance(target, list) else last
    if value is _ABSENT:
        del target[key]
    else:
        target[key] = value
    return raw


_ABSENT = object()


# --- the valid events parse into their requests ----------------------------------------------


def test_join_parses_every_field() -> None:
    join = parse(VALID["join"])
    assert isinstance(join, JoinGroup)
    assert join.header.event_id == "e-join"
    assert join.header.event_time_ms == 1_000
    assert join.header.group_instance_id == "i-1"
    assert join.header.request_version == 9
    assert join.header.reason == "startup"
    assert join.header.timeout_ms == 5_000
    assert join.header.arrival_time_ms == 1_001
    assert join.session_timeout_ms == 10_000
    assert join.rebalance_timeout_ms == 30_000
    assert join.protocol_type == "consumer"
    assert join.protocols == (Protocol("range", "AAEC"), Protocol("rr", ""))
    assert (join.client_id, join.client_host) == ("c", "/10.0.0.1")


def test_join_defaults() -> None:
    raw = {k: v for k, v in VALID["join"].items() if k in _JOIN_MINIMAL}
    join = parse(raw)
    assert isinstance(join, JoinGroup)
    assert join.header.member_id == ""
    assert join.header.group_instance_id is None
    assert join.header.request_version is None
    assert join.rebalance_timeout_ms is None
    assert (join.client_id, join.client_host) == ("", "")


_JOIN_MINIMAL = {
    "event_id",
    "event_time_ms",
    "type",
    "group_id",
    "session_timeout_ms",
    "protocol_type",
    "protocols",
}


def test_each_type_parses() -> None:
    sync = parse(VALID["sync"])
    assert isinstance(sync, SyncGroup)
    assert sync.assignments == (Assignment("m", "AAE="),)
    assert (sync.generation_id, sync.protocol_name) == (1, "range")
    heartbeat = parse(VALID["heartbeat"])
    assert isinstance(heartbeat, Heartbeat)
    assert (heartbeat.header.member_id, heartbeat.generation_id) == ("m", 1)
    leave = parse(VALID["leave"])
    assert isinstance(leave, LeaveGroup)
    assert leave.members == (LeaveIdentity("m", "i-1", "bye"),)
    commit = parse(VALID["offset_commit"])
    assert isinstance(commit, OffsetCommit)
    assert commit.offsets == (OffsetEntry("t", 0, 42, "x"),)
    fetch = parse(VALID["offset_fetch"])
    assert isinstance(fetch, OffsetFetch)
    assert fetch.topics == (TopicPartitions("t", (0, 1)),)
    assert isinstance(parse(VALID["describe"]), DescribeGroup)
    assert isinstance(parse(VALID["delete_group"]), DeleteGroup)
    tick = parse(VALID["tick"])
    assert isinstance(tick, Tick)
    assert tick.header.group_id is None


def test_optional_arrays_default() -> None:
    sync = parse(with_value("sync", "assignments", _ABSENT))
    assert isinstance(sync, SyncGroup)
    assert sync.assignments == ()
    leave = parse(with_value("leave", "members", None))
    assert isinstance(leave, LeaveGroup)
    assert leave.members is None
    fetch = parse(with_value("offset_fetch", "topics", _ABSENT))
    assert isinstance(fetch, OffsetFetch)
    assert fetch.topics is None
    member = parse(with_value("leave", "members.0.member_id", _ABSENT))
    assert isinstance(member, LeaveGroup)
    assert member.members == (LeaveIdentity("", "i-1", "bye"),)


def test_values_the_coordinator_judges_pass_through() -> None:
    """Kafka answers these itself (INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT, ...)."""
    assert isinstance(parse(with_value("join", "group_id", "")), JoinGroup)
    assert isinstance(parse(with_value("join", "protocols", [])), JoinGroup)
    assert isinstance(parse(with_value("join", "session_timeout_ms", -1)), JoinGroup)
    assert isinstance(parse(with_value("join", "protocol_type", "")), JoinGroup)
    assert isinstance(parse(with_value("heartbeat", "member_id", "")), Heartbeat)
    assert isinstance(parse(with_value("offset_commit", "generation_id", -1)), OffsetCommit)
    assert isinstance(parse(with_value("offset_commit", "offsets", [])), OffsetCommit)
    assert isinstance(parse(with_value("tick", "group_id", "g")), Tick)


def test_annotations_and_unused_known_fields_are_accepted() -> None:
    raw = dict(VALID["heartbeat"], _comment="note", protocols=None, client_id="c")
    assert isinstance(parse(raw), Heartbeat)


# --- every bad value is answered INVALID_REQUEST naming the field and the line ---------------

BAD: list[tuple[str, str, Any, str]] = [
    # (type, field path, bad value, the field the message names)
    *[(kind, "event_id", _ABSENT, "event_id") for kind in VALID],
    *[(kind, "event_time_ms", _ABSENT, "event_time_ms") for kind in VALID],
    *[(kind, "type", _ABSENT, "type") for kind in ("join", "tick")],
    *[(kind, "group_id", _ABSENT, "group_id") for kind in VALID if kind != "tick"],
    ("sync", "member_id", _ABSENT, "member_id"),
    ("heartbeat", "member_id", _ABSENT, "member_id"),
    ("join", "session_timeout_ms", _ABSENT, "session_timeout_ms"),
    ("join", "protocol_type", _ABSENT, "protocol_type"),
    ("join", "protocols", _ABSENT, "protocols"),
    ("sync", "generation_id", _ABSENT, "generation_id"),
    ("heartbeat", "generation_id", _ABSENT, "generation_id"),
    ("offset_commit", "generation_id", _ABSENT, "generation_id"),
    ("offset_commit", "offsets", _ABSENT, "offsets"),
    # strings
    ("join", "event_id", 7, "event_id"),
    ("join", "event_id", "", "event_id"),
    ("join", "type", 1, "type"),
    ("join", "type", "rejoin", "type"),
    ("join", "type", "JOIN", "type"),
    ("join", "group_id", ["g"], "group_id"),
    ("join", "member_id", 0, "member_id"),
    ("join", "group_instance_id", 5, "group_instance_id"),
    ("join", "group_instance_id", "", "group_instance_id"),
    ("join", "client_id", True, "client_id"),
    ("join", "client_host", {}, "client_host"),
    ("join", "protocol_type", 1, "protocol_type"),
    ("join", "reason", 1.5, "reason"),
    ("sync", "protocol_name", False, "protocol_name"),
    ("sync", "protocol_type", [], "protocol_type"),
    # ints and longs: a bool is not an int, neither is a float or a numeric string
    ("join", "event_time_ms", "1000", "event_time_ms"),
    ("join", "event_time_ms", 1000.0, "event_time_ms"),
    ("join", "event_time_ms", True, "event_time_ms"),
    ("join", "event_time_ms", -1, "event_time_ms"),
    ("join", "event_time_ms", 2**63, "event_time_ms"),
    ("join", "session_timeout_ms", True, "session_timeout_ms"),
    ("join", "session_timeout_ms", 10_000.5, "session_timeout_ms"),
    ("join", "session_timeout_ms", 2**31, "session_timeout_ms"),
    ("join", "rebalance_timeout_ms", "30000", "rebalance_timeout_ms"),
    ("join", "rebalance_timeout_ms", -1, "rebalance_timeout_ms"),
    ("join", "request_version", "9", "request_version"),
    ("join", "request_version", -1, "request_version"),
    ("join", "request_version", 10, "request_version"),
    ("sync", "request_version", 6, "request_version"),
    ("heartbeat", "request_version", 5, "request_version"),
    ("leave", "request_version", 6, "request_version"),
    ("offset_commit", "request_version", 10, "request_version"),
    ("join", "timeout_ms", -5, "timeout_ms"),
    ("join", "timeout_ms", False, "timeout_ms"),
    ("join", "arrival_time_ms", "now", "arrival_time_ms"),
    ("join", "arrival_time_ms", -1, "arrival_time_ms"),
    ("sync", "generation_id", "1", "generation_id"),
    ("heartbeat", "generation_id", True, "generation_id"),
    ("heartbeat", "generation_id", 1.0, "generation_id"),
    ("offset_commit", "generation_id", -(2**31) - 1, "generation_id"),
    # protocols
    ("join", "protocols", {"name": "range"}, "protocols"),
    ("join", "protocols", "range", "protocols"),
    ("join", "protocols.0", "range", "protocols[0]"),
    ("join", "protocols.1.name", _ABSENT, "protocols[1].name"),
    ("join", "protocols.1.name", 3, "protocols[1].name"),
    ("join", "protocols.0.metadata", _ABSENT, "protocols[0].metadata"),
    ("join", "protocols.0.metadata", "not base64!", "protocols[0].metadata"),
    ("join", "protocols.0.metadata", "AAE", "protocols[0].metadata"),
    ("join", "protocols.0.metadata", [0, 1], "protocols[0].metadata"),
    ("join", "protocols.0.extra", 1, "protocols[0].extra"),
    # assignments
    ("sync", "assignments", {}, "assignments"),
    ("sync", "assignments.0", None, "assignments[0]"),
    ("sync", "assignments.0.member_id", _ABSENT, "assignments[0].member_id"),
    ("sync", "assignments.0.member_id", 1, "assignments[0].member_id"),
    ("sync", "assignments.0.assignment", "@@@@", "assignments[0].assignment"),
    ("sync", "assignments.0.assignment", _ABSENT, "assignments[0].assignment"),
    ("sync", "assignments.0.partitions", [0], "assignments[0].partitions"),
    # members (batch leave)
    ("leave", "members", [], "members"),
    ("leave", "members", "m", "members"),
    ("leave", "members.0", ["m"], "members[0]"),
    ("leave", "members.0.member_id", 1, "members[0].member_id"),
    ("leave", "members.0.group_instance_id", 1, "members[0].group_instance_id"),
    ("leave", "members.0.group_instance_id", "", "members[0].group_instance_id"),
    ("leave", "members.0.reason", True, "members[0].reason"),
    ("leave", "members.0.generation_id", 1, "members[0].generation_id"),
    # offsets
    ("offset_commit", "offsets", {"topic": "t"}, "offsets"),
    ("offset_commit", "offsets.0", 42, "offsets[0]"),
    ("offset_commit", "offsets.0.topic", _ABSENT, "offsets[0].topic"),
    ("offset_commit", "offsets.0.topic", 1, "offsets[0].topic"),
    ("offset_commit", "offsets.0.partition", _ABSENT, "offsets[0].partition"),
    ("offset_commit", "offsets.0.partition", "0", "offsets[0].partition"),
    ("offset_commit", "offsets.0.partition", 2**31, "offsets[0].partition"),
    ("offset_commit", "offsets.0.offset", _ABSENT, "offsets[0].offset"),
    ("offset_commit", "offsets.0.offset", 4.2, "offsets[0].offset"),
    ("offset_commit", "offsets.0.offset", 2**63, "offsets[0].offset"),
    ("offset_commit", "offsets.0.metadata", 1, "offsets[0].metadata"),
    ("offset_commit", "offsets.0.leader_epoch", 1, "offsets[0].leader_epoch"),
    # topics
    ("offset_fetch", "topics", "t", "topics"),
    ("offset_fetch", "topics.0", "t", "topics[0]"),
    ("offset_fetch", "topics.0.topic", _ABSENT, "topics[0].topic"),
    ("offset_fetch", "topics.0.topic", None, "topics[0].topic"),
    ("offset_fetch", "topics.0.partitions", _ABSENT, "topics[0].partitions"),
    ("offset_fetch", "topics.0.partitions", 0, "topics[0].partitions"),
    ("offset_fetch", "topics.0.partitions.1", "1", "topics[0].partitions[1]"),
    ("offset_fetch", "topics.0.partitions.1", True, "topics[0].partitions[1]"),
    # known fields the type does not use are still type-checked
    ("heartbeat", "protocols", [{"name": 1, "metadata": ""}], "protocols[0].name"),
    ("heartbeat", "session_timeout_ms", "10s", "session_timeout_ms"),
    ("describe", "offsets", 1, "offsets"),
    ("tick", "generation_id", "x", "generation_id"),
    # unknown fields are refused
    ("join", "group_instance", "i-1", "group_instance"),
    ("heartbeat", "generationId", 1, "generationId"),
]


@pytest.mark.parametrize(("kind", "path", "value", "named"), BAD)
def test_bad_field_is_invalid_request_naming_field_and_line(
    kind: str, path: str, value: Any, named: str
) -> None:
    bad = invalid(with_value(kind, path, value))
    assert bad.message.startswith(f"{LINE}: {named}: "), bad.message
    row = bad.decision(decided_at_ms=5).to_row()
    assert row["error_code"] == Errors.INVALID_REQUEST.code == 42
    assert row["error"] == "INVALID_REQUEST"
    assert row["error_message"] == bad.message
    assert row["decided_at_ms"] == 5


def test_invalid_row_echoes_what_could_be_read() -> None:
    bad = invalid(with_value("heartbeat", "generation_id", "1"))
    row = bad.decision(decided_at_ms=1_000).to_row()
    assert row["event_id"] == "e-hb"
    assert row["group_id"] == "g"
    assert row["type"] == "heartbeat"
    assert row["member_id"] == "m"
    assert row["event_time_ms"] == 1_000
    assert row["generation_id"] == -1
    unreadable = invalid({"event_id": 3, "event_time_ms": "x", "type": None, "member_id": 1})
    row = unreadable.decision(decided_at_ms=0).to_row()
    assert (row["event_id"], row["group_id"], row["type"]) == (None, None, None)
    assert (row["member_id"], row["event_time_ms"]) == ("", None)


def test_without_a_line_the_message_names_the_field_only() -> None:
    bad = invalid(with_value("join", "session_timeout_ms", True), line=None)
    assert bad.message == "session_timeout_ms: expected an int, got a boolean (true)"


def test_messages_say_what_was_expected() -> None:
    assert invalid(with_value("join", "type", "rejoin")).message == (
        f"{LINE}: type: unknown request type 'rejoin' (expected one of join, sync, heartbeat, "
        "leave, offset_commit, offset_fetch, describe, delete_group, tick)"
    )
    assert invalid(with_value("join", "session_timeout_ms", 1.5)).message.endswith(
        "session_timeout_ms: expected an int, got a number (1.5)"
    )
    assert invalid(with_value("join", "event_time_ms", 2**63)).message.endswith(
        f"event_time_ms: out of range for a long: {2**63}"
    )
    assert invalid(with_value("join", "request_version", 10)).message.endswith(
        "request_version: join supports 0..9, got 10"
    )
    assert invalid(with_value("join", "protocols.0.metadata", "AAE")).message.startswith(
        f"{LINE}: protocols[0].metadata: not valid base64"
    )


def test_first_bad_field_wins_and_is_stable() -> None:
    raw = with_value("join", "session_timeout_ms", "x")
    raw["bogus"] = 1
    assert invalid(raw).message == f"{LINE}: bogus: unknown field"


def test_text_that_was_not_an_object_is_invalid_request_with_the_reason() -> None:
    event = TimedEvent({}, None, line="f.jsonl:3", error="not valid JSON: Expecting value", raw="x")
    bad = parse_event(event)
    assert isinstance(bad, InvalidEvent)
    assert bad.message == "f.jsonl:3: not valid JSON: Expecting value"
    assert bad.event_id is None


@pytest.mark.parametrize("raw", [[], "join", 1, None])
def test_a_non_object_is_invalid(raw: Any) -> None:
    assert invalid(raw).message == f"{LINE}: event: not a JSON object"


# --- never a crash ------------------------------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(
    base=st.sampled_from(sorted(VALID)),
    changes=st.dictionaries(st.sampled_from(sorted(KNOWN_FIELDS)), _JSON, max_size=4),
)
def test_any_json_values_give_a_request_or_an_invalid_row(
    base: str, changes: dict[str, Any]
) -> None:
    raw = dict(VALID[base], **changes)
    result = parse(raw)
    if isinstance(result, InvalidEvent):
        assert result.message.startswith(f"{LINE}: ")
        assert result.decision(decided_at_ms=0).to_row()["error_code"] == 42
    else:
        assert result.header.event_id == raw["event_id"]


_HEADER_VALUES = st.sampled_from([None, True, "", "x", -1, 0, 3, 10, 2**31, 2**63, 1.0])
_HEADER_NAMES = (
    "event_id",
    "event_time_ms",
    "group_id",
    "member_id",
    "group_instance_id",
    "request_version",
    "reason",
    "timeout_ms",
    "arrival_time_ms",
)


@settings(max_examples=400)
@given(
    kind=st.sampled_from(list(RequestType)),
    changes=st.dictionaries(st.sampled_from(_HEADER_NAMES), _HEADER_VALUES, max_size=3),
)
@example(kind=RequestType.JOIN, changes={"group_instance_id": ""})
@example(kind=RequestType.JOIN, changes={"request_version": 10})
@example(kind=RequestType.HEARTBEAT, changes={"request_version": True})
@example(kind=RequestType.SYNC, changes={"group_instance_id": "i1", "request_version": 5})
def test_the_quick_header_is_the_checked_header(kind: RequestType, changes: dict[str, Any]) -> None:
    """The common shape of a header is built without the per-field checks: it must be exactly
    what the checks give, or fall back to them."""
    fields = {"event_id": "e", "event_time_ms": 5, "group_id": "g", "member_id": "m", **changes}

    def outcome(read: Any) -> Any:
        try:
            return read(fields, kind)
        except WireError as error:
            return ("WireError", str(error))

    assert outcome(wire._header) == outcome(wire._checked_header)
