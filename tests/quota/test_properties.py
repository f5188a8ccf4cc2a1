"""Hypothesis properties of the bucket and the machine (issue 3), a differential test against a
deliberately naive integer model, and batch independence with state encoding between batches."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.core.config import parse_settings
from controlplane.core.idempotence import WINDOW, digest, remembered
from controlplane.core.quota import codec
from controlplane.core.quota.bucket import (
    INACTIVE_EXPIRATION_MS,
    Bucket,
    burst_of,
    throttle_time_ms,
)
from controlplane.core.quota.machine import admit_permissive, admit_strict
from controlplane.core.quota.resolution import key_of
from controlplane.core.quota.runner import DECISIONS, THROTTLES, QuotaRunner, QuotaShard
from controlplane.core.runtime import TimedEvent
from support.token_bucket import measure

T = 1_700_000_000_000

rates = st.floats(min_value=0.001, max_value=1e6, allow_nan=False, allow_infinity=False)
token_values = st.floats(min_value=-1e7, max_value=1e7, allow_nan=False, allow_infinity=False)
partition_lists = st.lists(st.integers(min_value=0, max_value=5000), max_size=8)
samples = st.integers(min_value=1, max_value=20)
windows = st.integers(min_value=1, max_value=5)
deltas = st.integers(min_value=0, max_value=100_000)


@given(token_values, rates, samples, windows, deltas, partition_lists, st.booleans())
def test_tokens_never_exceed_burst(
    tokens: float, rate: float, s: int, w: int, delta: int, parts: list[int], strict: bool
) -> None:
    burst = burst_of(s, w, rate)
    start = min(tokens, burst)
    admit = admit_strict if strict else admit_permissive
    result = admit(start, T, parts, rate, burst, T + delta)
    assert result.tokens <= burst


@given(token_values, rates, samples, deltas, partition_lists)
def test_strict_admits_iff_tokens_before_are_not_negative(
    tokens: float, rate: float, s: int, delta: int, parts: list[int]
) -> None:
    burst = burst_of(s, 1, rate)
    start = min(tokens, burst)
    now = T + delta
    full = admit_strict(start, T, parts, rate, burst, now)
    for i in range(len(parts)):
        prefix = admit_strict(start, T, parts[:i], rate, burst, now)
        before = measure(prefix.tokens, now if i else T, now, rate, burst)
        assert full.admitted[i] == (before >= 0)
        if not full.admitted[i]:
            # A rejected topic leaves the bucket as it was before it (refill only).
            upto = admit_strict(start, T, parts[: i + 1], rate, burst, now)
            assert upto.tokens == before


@given(token_values, rates, samples, deltas, partition_lists)
def test_strict_throttle_is_the_formula_of_the_last_rejection(
    tokens: float, rate: float, s: int, delta: int, parts: list[int]
) -> None:
    burst = burst_of(s, 1, rate)
    start = min(tokens, burst)
    now = T + delta
    full = admit_strict(start, T, parts, rate, burst, now)
    rejected = [i for i, ok in enumerate(full.admitted) if not ok]
    if not rejected:
        assert full.throttle_time_ms == 0
        return
    last = rejected[-1]
    prefix = admit_strict(start, T, parts[:last], rate, burst, now)
    before = measure(prefix.tokens, now if last else T, now, rate, burst)
    assert full.throttle_time_ms == min(2**31 - 1, throttle_time_ms(before, rate))


@given(token_values, rates, samples, deltas, partition_lists)
def test_permissive_throttle_is_the_formula_of_the_last_violation(
    tokens: float, rate: float, s: int, delta: int, parts: list[int]
) -> None:
    burst = burst_of(s, 1, rate)
    start = min(tokens, burst)
    now = T + delta
    full = admit_permissive(start, T, parts, rate, burst, now)
    assert all(full.admitted)
    expected = 0
    for i in range(len(parts)):
        after = admit_permissive(start, T, parts[: i + 1], rate, burst, now).tokens
        if after < 0:
            expected = max(0, min(2**31 - 1, throttle_time_ms(after, rate)))
    assert full.throttle_time_ms == expected


# --- a deliberately naive reference: integers, whole seconds, Fraction rounding ------------
@dataclass
class NaiveBucket:
    tokens: int
    clock_s: int
    last_record_s: int
    ids: list[str] = field(default_factory=list)


@dataclass
class NaiveModel:
    """One bucket per user (a user-level quota for everyone), refilled one second at a time."""

    rate: int
    burst: int
    buckets: dict[str, NaiveBucket] = field(default_factory=dict)

    def request(
        self, event_id: str, user: str, time_s: int, parts: list[int], strict: bool, create: bool
    ) -> tuple[list[str], int] | None:
        bucket = self.buckets.get(user)
        if bucket is not None and max(bucket.clock_s, time_s) * 1000 > (
            bucket.last_record_s * 1000 + INACTIVE_EXPIRATION_MS
        ):
            bucket = None
        if bucket is None:
            bucket = NaiveBucket(self.burst, time_s, time_s)
            self.buckets[user] = bucket
        if event_id in bucket.ids:
            return None
        bucket.ids = [*bucket.ids, event_id][-64:]
        while bucket.clock_s < time_s:  # one second of refill at a time
            bucket.tokens = min(self.burst, bucket.tokens + self.rate)
            bucket.clock_s += 1
        answers: list[str] = []
        throttle = 0
        for count in parts:
            if create and count == 0:  # refused before the quota
                answers.append("INVALID_PARTITIONS")
                continue
            if strict and bucket.tokens < 0:
                answers.append("THROTTLING_QUOTA_EXCEEDED")
                throttle = self.round_half_up(Fraction(-bucket.tokens * 1000, self.rate))
                continue
            bucket.tokens = min(self.burst, bucket.tokens - count)
            bucket.last_record_s = time_s
            answers.append("NONE")
            if not strict and bucket.tokens < 0:
                throttle = self.round_half_up(Fraction(-bucket.tokens * 1000, self.rate))
        return answers, throttle

    @staticmethod
    def round_half_up(value: Fraction) -> int:
        return math.floor(value + Fraction(1, 2))


naive_requests = st.lists(
    st.tuples(
        st.sampled_from(["ann", "ben", "cy"]),
        st.integers(min_value=0, max_value=30) | st.just(4000),  # seconds later (or > 1 h)
        st.lists(st.integers(min_value=0, max_value=40), max_size=4),
        st.booleans(),  # strict
        st.booleans(),  # repeat the previous event id
        st.booleans(),  # CreateTopics (0 partitions refused) or DeleteTopics (0 recorded)
    ),
    max_size=40,
)


@given(st.sampled_from([1, 2, 4, 5, 8, 10, 16, 25]), st.integers(1, 12), naive_requests)
@settings(max_examples=200)
def test_differential_against_naive_model(rate: int, s: int, requests: list[Any]) -> None:
    config = parse_settings(
        {
            "controller.quota.window.num": s,
            "quotas": [{"user": "<default>", "controller_mutation_rate": rate}],
        }
    ).quota
    shard = QuotaShard(config)
    naive = NaiveModel(rate, rate * s)
    time_s = T // 1000
    for index, (user, later_s, parts, strict, repeat, create) in enumerate(requests):
        time_s += later_s
        event_id = f"e{index - 1}" if repeat and index else f"e{index}"
        event = {
            "event_id": event_id,
            "event_time_ms": time_s * 1000,
            "type": "create_topics" if create else "delete_topics",
            "user": user,
            "client_id": "c",
            "request_version": (7 if strict else 5) if create else (6 if strict else 4),
            "topics": [{"name": f"t{i}", "partitions": n} for i, n in enumerate(parts)],
        }
        decisions = shard.feed(TimedEvent(event, time_s * 1000))[DECISIONS]
        expected = naive.request(event_id, user, time_s, parts, strict, create)
        if expected is None:
            assert decisions == []
            continue
        (decision,) = decisions
        assert [topic["error"] for topic in decision["topics"]] == expected[0]
        assert decision["throttle_time_ms"] == expected[1]
        bucket = shard.buckets[f"user={user}"]
        measured = measure(bucket.tokens, bucket.last_update_ms, time_s * 1000, rate, rate * s)
        assert measured == naive.buckets[user].tokens  # as the `tokens` metric would read


# --- batch independence and keying independence --------------------------------------------
QUOTAS = {
    "quotas": [
        {"user": "ann", "controller_mutation_rate": 2},
        {"user": "<default>", "client_id": "<default>", "controller_mutation_rate": 1},
        {"client_id": "tool", "controller_mutation_rate": 3},
    ]
}
users = st.sampled_from(["ann", "ben", "cy"])
clients = st.sampled_from(["", "tool", "web"])


@st.composite
def event_streams(draw: st.DrawFn) -> list[TimedEvent]:
    events: list[TimedEvent] = []
    time_ms = T
    for index in range(draw(st.integers(0, 30))):
        time_ms += draw(st.sampled_from([0, 1, 250, 1000, 7000, INACTIVE_EXPIRATION_MS + 1]))
        jitter = draw(st.sampled_from([0, 0, -500]))  # some events arrive out of time order
        kind = draw(st.sampled_from(["create_topics", "delete_topics", "create_partitions"]))
        event: dict[str, Any] = {
            "event_id": f"e{draw(st.integers(0, index))}",  # duplicates happen
            "event_time_ms": time_ms + jitter,
            "type": kind,
            "user": draw(users),
            "client_id": draw(clients),
            "request_version": draw(st.sampled_from([None, 0, 2, 4, 5, 7])),
            "topics": [
                {
                    "name": f"t{i}",
                    "partitions": draw(st.integers(-1 if kind != "delete_topics" else 0, 30)),
                }
                for i in range(draw(st.integers(0, 3)))
            ],
        }
        if kind != "delete_topics" and draw(st.integers(0, 3)) == 0:
            event["validate_only"] = True  # charged or not, by the configuration
        if draw(st.integers(0, 9)) == 0:
            event["topics"] = "broken"  # an INVALID_REQUEST row
        events.append(TimedEvent(event, time_ms + jitter, line=f"f:{index + 1}"))
    return events


def run_in_batches(
    runner: QuotaRunner, events: list[TimedEvent], cuts: list[int]
) -> tuple[list[Any], list[Any]]:
    decisions: list[Any] = []
    throttles: list[Any] = []
    state: bytes | None = None
    bounds = sorted({0, len(events), *[c for c in cuts if 0 < c < len(events)]})
    for start, end in itertools.pairwise(bounds):
        later = [e.time_ms for e in events[end:] if e.time_ms is not None]
        tick = min(later) if later else None  # the tick never runs ahead of a later event
        result = runner.run(state, events[start:end], tick)
        state = codec.encode(*codec.decode(result.state)) if result.state else None
        decisions.extend(result.outputs[DECISIONS])
        throttles.extend(result.outputs[THROTTLES])
        if state is not None:
            assert result.next_deadline_ms is not None
    return decisions, throttles


@given(event_streams(), st.lists(st.integers(0, 30), max_size=6), st.booleans())
@settings(max_examples=150)
def test_batch_independence(events: list[TimedEvent], cuts: list[int], charged: bool) -> None:
    raw = {**QUOTAS, "controller.quota.validate.only.charged": charged}
    runner = QuotaRunner(parse_settings(raw).quota)
    whole = run_in_batches(runner, events, [])
    assert run_in_batches(runner, events, cuts) == whole


@given(event_streams())
@settings(max_examples=100)
def test_keying_independence(events: list[TimedEvent]) -> None:
    """One runner per quota key gives, key by key, the rows of one runner for everything."""
    config = parse_settings(QUOTAS).quota
    runner = QuotaRunner(config)
    together = runner.run(None, events, None).outputs[DECISIONS]
    by_key: dict[str, list[TimedEvent]] = {}
    for event in events:
        by_key.setdefault(key_of(event.event, config), []).append(event)
    apart = [
        row for evs in by_key.values() for row in runner.run(None, evs, None).outputs[DECISIONS]
    ]
    assert sorted(map(json.dumps, apart)) == sorted(map(json.dumps, together))


@given(
    st.dictionaries(
        st.text(max_size=12),
        st.tuples(
            st.builds(
                Bucket,
                st.floats(allow_nan=False),
                st.integers(0, 2**62),
                st.integers(0, 2**62),
                st.integers(0, 2**62),
            ),
            st.lists(st.text(max_size=8), max_size=WINDOW + 3),
        ),
        max_size=5,
    )
)
def test_codec_round_trips_exactly(keys: dict[str, tuple[Bucket, list[str]]]) -> None:
    buckets = {key: bucket for key, (bucket, _) in keys.items()}
    windows = {key: _window(ids) for key, (_, ids) in keys.items()}
    decoded = codec.decode(codec.encode(buckets, windows))
    assert decoded == (buckets, windows)
    for key, bucket in buckets.items():
        assert math.copysign(1, decoded[0][key].tokens) == math.copysign(1, bucket.tokens)


def _window(ids: list[str]) -> bytes:
    window = b""
    for event_id in ids:
        window = remembered(window, digest(event_id))
    return window
