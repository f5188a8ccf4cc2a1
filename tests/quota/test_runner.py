"""The Runner contract (controlplane.core.runtime): state, outputs, deadlines, ticks, codec."""

from __future__ import annotations

import struct
from dataclasses import replace
from typing import Any

import pytest

from controlplane.core.config import parse_settings
from controlplane.core.quota import codec
from controlplane.core.quota.bucket import INACTIVE_EXPIRATION_MS, Bucket
from controlplane.core.quota.codec import StateCodecError
from controlplane.core.quota.runner import DECISIONS, THROTTLES, QuotaRunner
from controlplane.core.runtime import TimedEvent

T = 1_700_000_000_000
QUOTAS = parse_settings({"quotas": [{"user": "u", "controller_mutation_rate": 1}]}).quota


def event(event_id: str, time_ms: int, user: str = "u", **topics: int) -> TimedEvent:
    raw: dict[str, Any] = {
        "event_id": event_id,
        "event_time_ms": time_ms,
        "type": "create_topics",
        "user": user,
        "client_id": "c",
        "topics": [{"name": n, "partitions": p} for n, p in topics.items()],
    }
    return TimedEvent(raw, time_ms)


def test_outputs_state_and_deadline() -> None:
    runner = QuotaRunner(QUOTAS)
    result = runner.run(None, [event("a", T, x=20), event("b", T, y=1)], None)
    assert [row["event_id"] for row in result.outputs[DECISIONS]] == ["a", "b"]
    assert [row["event_id"] for row in result.outputs[THROTTLES]] == ["b"]  # b rejected
    assert result.next_deadline_ms == T + INACTIVE_EXPIRATION_MS + 1
    buckets = codec.decode(result.state)
    assert buckets["user=u"].tokens == -9.0
    assert buckets["user=u"].recent_event_ids == ("a", "b")


def test_tick_fires_expiry_and_forgets_the_key() -> None:
    runner = QuotaRunner(QUOTAS)
    first = runner.run(None, [event("a", T, x=1)], None)
    assert first.next_deadline_ms is not None
    early = runner.run(first.state, [], first.next_deadline_ms - 1)
    assert early.state == first.state
    late = runner.run(first.state, [], first.next_deadline_ms)
    assert late.state is None
    assert late.next_deadline_ms is None
    assert late.outputs == {DECISIONS: [], THROTTLES: []}  # timers emit no rows


@pytest.mark.parametrize("odd", [2**63, -(2**63) - 1, 10**30])
def test_an_event_time_past_the_long_range_is_not_echoed(odd: int) -> None:
    """The row's columns are longs: an integer past them would fail the table write."""
    runner = QuotaRunner(QUOTAS)
    raw = dict(event("a", T, x=1).event, event_time_ms=odd)
    result = runner.run(None, [TimedEvent(raw, None)], T)
    (row,) = result.outputs[DECISIONS]
    assert row["error"] == "INVALID_REQUEST"
    assert (row["event_time_ms"], row["decided_at_ms"]) == (None, T)


def test_untracked_keys_keep_no_state() -> None:
    runner = QuotaRunner(parse_settings({}).quota)
    result = runner.run(None, [event("a", T, x=1000)], T)
    assert result.state is None
    assert result.next_deadline_ms is None
    (row,) = result.outputs[DECISIONS]
    assert row["quota_key"] is None
    assert row["topics"][0]["error"] == "NONE"


def test_duplicate_in_a_later_batch_is_not_charged_twice() -> None:
    runner = QuotaRunner(QUOTAS)
    first = runner.run(None, [event("a", T, x=5)], None)
    again = runner.run(first.state, [event("a", T + 10, x=5)], None)
    assert again.outputs[DECISIONS] == []
    before, after = codec.decode(first.state)["user=u"], codec.decode(again.state)["user=u"]
    assert after == replace(before, handled_ms=T + 10)  # not charged; the key's clock moved


def test_id_window_keeps_the_last_64() -> None:
    runner = QuotaRunner(QUOTAS)
    events = [event(f"e{i}", T + i * 10_000, x=0) for i in range(70)]
    result = runner.run(None, events, None)
    ids = codec.decode(result.state)["user=u"].recent_event_ids
    assert ids == tuple(f"e{i}" for i in range(6, 70))
    replayed = runner.run(result.state, [event("e0", T + 800_000, x=0)], None)
    assert len(replayed.outputs[DECISIONS]) == 1  # e0 fell out of the window: answered again


def test_shard_state_holds_many_buckets() -> None:
    config = parse_settings({"quotas": [{"user": "<default>", "controller_mutation_rate": 1}]})
    runner = QuotaRunner(config.quota)
    result = runner.run(None, [event("a", T, "u1", x=1), event("b", T + 5, "u2", x=1)], None)
    assert sorted(codec.decode(result.state)) == ["user=u1", "user=u2"]
    assert result.next_deadline_ms == T + INACTIVE_EXPIRATION_MS + 1


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"XX\x01\x00\x00\x00\x00", "magic"),  # not a quota state
        (b"QB\x03\x00\x00\x00\x00", "version 3"),  # written by a newer release
        (codec.encode({"k": Bucket(1.0, 2, 3, ("id",))})[:-1], "truncated"),
        (codec.encode({"k": Bucket(1.0, 2, 3)}) + b"\x00", "trailing"),
    ],
)
def test_codec_refuses_what_it_cannot_read(data: bytes, message: str) -> None:
    with pytest.raises(StateCodecError, match=message):
        codec.decode(data)


def test_codec_is_canonical() -> None:
    a = {"x": Bucket(1.0, 2, 3), "y": Bucket(-0.0, 5, 6, ("e",))}
    b = {"y": Bucket(-0.0, 5, 6, ("e",)), "x": Bucket(1.0, 2, 3)}
    assert codec.encode(a) == codec.encode(b)


def test_codec_reads_version_1() -> None:
    """A state written before ``handled_ms`` was kept: the clock is its last touch/creation."""
    v1 = (
        b"QB\x01\x00\x00\x00\x01"
        + b"\x00\x00\x00\x01k"
        + struct.pack(">dqqH", -2.5, T, T + 7, 1)
        + b"\x00\x00\x00\x02id"
    )
    (bucket,) = codec.decode(v1).values()
    assert bucket == Bucket(-2.5, T, T + 7, ("id",), 0)
    assert bucket.clock_ms == T + 7
    assert codec.decode(codec.encode({"k": bucket})) == {"k": bucket}
