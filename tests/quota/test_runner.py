"""The Runner contract (controlplane.core.runtime): state, outputs, deadlines, ticks, codec."""

from __future__ import annotations

import struct
from dataclasses import replace
from typing import Any

import pytest

from controlplane.core.config import parse_settings
from controlplane.core.idempotence import digest
from controlplane.core.quota import codec
from controlplane.core.quota.bucket import INACTIVE_EXPIRATION_MS, Bucket
from controlplane.core.quota.codec import StateCodecError
from controlplane.core.quota.runner import DECISIONS, THROTTLES, QuotaRunner, QuotaShard
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
    shard = QuotaShard.decode(result.state, QUOTAS)
    assert shard.buckets["user=u"].tokens == -9.0
    assert shard.windows["user=u"] == digest("a") + digest("b")  # the window, oldest first


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
    before, after = (QuotaShard.decode(r.state, QUOTAS).buckets["user=u"] for r in (first, again))
    assert after == replace(before, handled_ms=T + 10)  # not charged; the key's clock moved


def test_id_window_keeps_the_last_64() -> None:
    runner = QuotaRunner(QUOTAS)
    events = [event(f"e{i}", T + i * 10_000, x=0) for i in range(70)]
    result = runner.run(None, events, None)
    window = QuotaShard.decode(result.state, QUOTAS).windows["user=u"]
    assert window == b"".join(digest(f"e{i}") for i in range(6, 70))
    replayed = runner.run(result.state, [event("e0", T + 800_000, x=0)], None)
    assert len(replayed.outputs[DECISIONS]) == 1  # e0 fell out of the window: answered again


def test_the_window_is_forgotten_with_its_bucket() -> None:
    """An expired bucket takes its window with it: a repeat sent after that is a new request."""
    runner = QuotaRunner(QUOTAS)
    first = runner.run(None, [event("a", T, x=1)], None)
    assert first.next_deadline_ms is not None
    later = first.next_deadline_ms + 5
    again = runner.run(first.state, [event("b", later, y=1), event("a", later, x=1)], None)
    assert [row["event_id"] for row in again.outputs[DECISIONS]] == ["b", "a"]


@pytest.mark.parametrize("validate_only_charged", [False, True])
def test_only_charged_requests_enter_the_window(validate_only_charged: bool) -> None:
    """A validate-only that is not charged is not remembered: the same id sent for real is
    charged. A repeat of a charged id is not answered, validate-only or not."""
    raw = {
        "controller.quota.validate.only.charged": validate_only_charged,
        "quotas": [{"user": "u", "controller_mutation_rate": 1}],
    }
    runner = QuotaRunner(parse_settings(raw).quota)
    check = TimedEvent({**event("v", T, x=1).event, "validate_only": True}, T)
    events = [check, event("v", T + 1, x=1), event("c", T + 2, y=1)]
    events.append(TimedEvent({**event("c", T + 3, y=1).event, "validate_only": True}, T + 3))
    answered = [row["event_id"] for row in runner.run(None, events, None).outputs[DECISIONS]]
    assert answered == (["v", "c"] if validate_only_charged else ["v", "v", "c"])


def test_shard_state_holds_many_buckets() -> None:
    config = parse_settings({"quotas": [{"user": "<default>", "controller_mutation_rate": 1}]})
    runner = QuotaRunner(config.quota)
    result = runner.run(None, [event("a", T, "u1", x=1), event("b", T + 5, "u2", x=1)], None)
    assert sorted(QuotaShard.decode(result.state, config.quota).buckets) == ["user=u1", "user=u2"]
    assert result.next_deadline_ms == T + INACTIVE_EXPIRATION_MS + 1


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"XX\x01\x00\x00\x00\x00", "magic"),  # not a quota state
        (b"QB\x04\x00\x00\x00\x00", "version 4"),  # written by a newer release
        (codec.encode({"k": Bucket(1.0, 2, 3)}, {"k": digest("id")})[:-1], "truncated"),
        (codec.encode({"k": Bucket(1.0, 2, 3)}, {}) + b"\x00", "trailing"),
        (b"QB\x03\x00\x00\x00\x01\x00\x00\x00\x00" + bytes(32) + b"\x00\x41", "window of 65"),
    ],
)
def test_codec_refuses_what_it_cannot_read(data: bytes, message: str) -> None:
    with pytest.raises(StateCodecError, match=message):
        codec.decode(data)


def test_codec_is_canonical() -> None:
    a = {"x": Bucket(1.0, 2, 3), "y": Bucket(-0.0, 5, 6)}
    b = {"y": Bucket(-0.0, 5, 6), "x": Bucket(1.0, 2, 3)}
    windows = {"y": digest("e"), "x": b""}
    assert codec.encode(a, windows) == codec.encode(b, dict(reversed(windows.items())))


def test_codec_reads_version_1() -> None:
    """A state written before ``handled_ms`` was kept: the clock is its last touch/creation."""
    v1 = (
        b"QB\x01\x00\x00\x00\x01"
        + b"\x00\x00\x00\x01k"
        + struct.pack(">dqqH", -2.5, T, T + 7, 1)
        + b"\x00\x00\x00\x02id"
    )
    buckets, windows = codec.decode(v1)
    assert buckets == {"k": Bucket(-2.5, T, T + 7, 0)}
    assert buckets["k"].clock_ms == T + 7
    assert windows == {"k": digest("id")}  # the ids as text become their digests
    assert codec.decode(codec.encode(buckets, windows)) == (buckets, windows)


# A checkpoint of schema version 2, as the build before version 3 wrote it: QuotaRunner.run of
# "a" (x: 5 partitions) at T and "b" (y: 20) at T + 10, user quota 1/s. Its window held the ids.
V2_STATE = bytes.fromhex(
    "5142020000000100000006757365723d75c02bfae147ae147b0000018bcfe5680a0000018bcfe5680a"
    "0000018bcfe5680a000200000001000000016162"
)


def test_a_version_2_checkpoint_is_read_and_its_ids_still_recognised() -> None:
    shard = QuotaShard.decode(V2_STATE, QUOTAS)
    assert shard.buckets == {"user=u": Bucket(11.0 - 5 + 0.01 - 20, T + 10, T + 10, T + 10)}
    assert shard.windows == {"user=u": digest("a") + digest("b")}
    runner = QuotaRunner(QUOTAS)
    again = runner.run(V2_STATE, [event("b", T + 20, y=20), event("c", T + 20, z=1)], None)
    assert [row["event_id"] for row in again.outputs[DECISIONS]] == ["c"]  # b: answered before
    assert again.state is not None
    assert again.state[2] == codec.SCHEMA_VERSION == 3  # written back as version 3
    assert QuotaShard.decode(again.state, QUOTAS).windows["user=u"] == b"".join(map(digest, "abc"))
