"""Every field and type of docs/reference/events.md §3 with a bad value gets an INVALID_REQUEST (42)
row whose message names the field and the input line; the run goes on."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.core.config import parse_settings
from controlplane.core.quota.runner import DECISIONS, THROTTLES, QuotaShard
from controlplane.core.quota.wire import Invalid, parse_request
from controlplane.core.runtime import TimedEvent

T = 1_700_000_000_000
GOOD: dict[str, Any] = {
    "event_id": "e1",
    "event_time_ms": T,
    "type": "create_topics",
    "user": "alice",
    "client_id": "app",
    "request_version": 7,
    "validate_only": False,
    "topics": [{"name": "t1", "partitions": 3}],
}
MISSING = object()


def with_field(name: str, value: object) -> dict[str, Any]:
    event = dict(GOOD)
    if value is MISSING:
        del event[name]
    else:
        event[name] = value
    return event


def with_topic(value: object) -> dict[str, Any]:
    return with_field("topics", [{"name": "ok", "partitions": 1}, value])


BAD = [
    # (event, field named in the message, comment)
    (with_field("event_id", MISSING), "event_id"),  # required
    (with_field("event_id", 5), "event_id"),  # a string
    (with_field("event_id", ""), "event_id"),  # not empty
    (with_field("event_time_ms", MISSING), "event_time_ms"),  # required
    (with_field("event_time_ms", "soon"), "event_time_ms"),  # a long
    (with_field("event_time_ms", 1.5), "event_time_ms"),  # not a float
    (with_field("event_time_ms", True), "event_time_ms"),  # not a boolean
    (with_field("event_time_ms", -1), "event_time_ms"),  # epoch ms are not negative
    (with_field("type", MISSING), "type"),  # required
    (with_field("type", "alter_configs"), "type"),  # one of the three mutation types
    (with_field("type", ["create_topics"]), "type"),  # a string
    (with_field("user", MISSING), "user"),  # required
    (with_field("user", 42), "user"),  # a string
    (with_field("client_id", MISSING), "client_id"),  # required (may be "")
    (with_field("client_id", {"id": 1}), "client_id"),  # a string
    (with_field("request_version", "7"), "request_version"),  # an int
    (with_field("request_version", -1), "request_version"),  # API versions are >= 0
    (with_field("request_version", 40000), "request_version"),  # an int16
    (with_field("validate_only", "yes"), "validate_only"),  # a boolean
    (with_field("validate_only", 1), "validate_only"),  # not an int
    (with_field("topics", MISSING), "topics"),  # required
    (with_field("topics", {"t1": 3}), "topics"),  # an array
    (with_topic("t2"), "topics[1]"),  # each entry an object
    (with_topic({"partitions": 1}), "topics[1].name"),  # name required
    (with_topic({"name": "", "partitions": 1}), "topics[1].name"),  # not empty
    (with_topic({"name": 3, "partitions": 1}), "topics[1].name"),  # a string
    (with_topic({"name": "t2"}), "topics[1].partitions"),  # partitions required
    (with_topic({"name": "t2", "partitions": "3"}), "topics[1].partitions"),  # an int
    (with_topic({"name": "t2", "partitions": -(2**31) - 1}), "topics[1].partitions"),  # int32
    # A DeleteTopics count is a topic's partition count: >= 0.
    (
        {**GOOD, "type": "delete_topics", "topics": [{"name": "t", "partitions": -1}]},
        "topics[0].partitions",
    ),
    (with_topic({"name": "t2", "partitions": 2**31}), "topics[1].partitions"),  # an int32
    (with_topic({"name": "t2", "partitions": 2.0}), "topics[1].partitions"),  # not a float
    # DeleteTopics has no validate_only mode.
    ({**GOOD, "type": "delete_topics", "validate_only": True}, "validate_only"),
]


@pytest.mark.parametrize(("event", "field"), BAD)
def test_bad_field_gets_invalid_request_row(event: dict[str, Any], field: str) -> None:
    config = parse_settings({"quotas": [{"user": "alice", "controller_mutation_rate": 1}]}).quota
    shard = QuotaShard(config)
    rows = shard.feed(TimedEvent(event, T, line="events.jsonl:7"))
    assert rows[THROTTLES] == []
    (row,) = rows[DECISIONS]
    assert row["error_code"] == 42
    assert row["error"] == "INVALID_REQUEST"
    assert f"'{field}'" in row["error_message"]
    assert "events.jsonl:7" in row["error_message"]
    assert row["topics"] is None
    assert row["decided_at_ms"] == T
    assert shard.buckets == {}  # nothing charged
    # The run goes on: the next good event is answered normally.
    (row,) = shard.feed(TimedEvent(GOOD, T, line="events.jsonl:8"))[DECISIONS]
    assert row["error"] == "NONE"


def test_echoes_what_it_can() -> None:
    shard = QuotaShard(parse_settings({}).quota)
    event = with_field("topics", "nope")
    (row,) = shard.feed(TimedEvent(event, None, line="f:1"))[DECISIONS]
    assert (row["event_id"], row["user"], row["client_id"], row["type"]) == (
        "e1",
        "alice",
        "app",
        "create_topics",
    )
    assert row["event_time_ms"] == T
    assert row["decided_at_ms"] == T  # no handling time given: the event's own time


def test_unparseable_line() -> None:
    shard = QuotaShard(parse_settings({}).quota)
    event = TimedEvent({}, None, line="f:3", error="Expecting value", raw="{oops")
    (row,) = shard.feed(event, tick_ms=T)[DECISIONS]
    assert row["event_id"] is None
    assert row["error_code"] == 42
    assert "f:3" in row["error_message"]
    assert row["decided_at_ms"] == T


def test_valid_event_parses_with_defaults() -> None:
    event = {key: value for key, value in GOOD.items() if key not in ("validate_only",)}
    event["request_version"] = None
    event["arrival_time_ms"] = T + 5  # unknown to the quota: ignored
    request = parse_request(event)
    assert not isinstance(request, Invalid)
    assert request.validate_only is False
    assert request.request_version is None
    assert request.topics[0].name == "t1"


def test_not_an_object() -> None:
    assert isinstance(parse_request(["x"]), Invalid)  # type: ignore[arg-type]


def test_duplicate_topic_names_are_invalid_per_topic_and_not_charged() -> None:
    config = parse_settings({"quotas": [{"user": "alice", "controller_mutation_rate": 1}]}).quota
    shard = QuotaShard(config)
    event = with_field(
        "topics",
        [
            {"name": "a", "partitions": 5},
            {"name": "b", "partitions": 2},
            {"name": "a", "partitions": 5},
        ],
    )
    (row,) = shard.feed(TimedEvent(event, T))[DECISIONS]
    assert row["error"] == "NONE"
    assert [t["error"] for t in row["topics"]] == ["INVALID_REQUEST", "NONE", "INVALID_REQUEST"]
    assert shard.buckets["user=alice"].tokens == 9.0  # only b's 2 partitions


def test_not_an_object_through_the_shard() -> None:
    shard = QuotaShard(parse_settings({"quotas": [{"user": "u"}]}).quota)
    (row,) = shard.feed(TimedEvent(["x"], T))[DECISIONS]  # type: ignore[arg-type]
    assert row["error"] == "INVALID_REQUEST"
    assert row["decided_at_ms"] == T
