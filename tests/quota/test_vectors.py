"""Every numeric vector of docs/reference/mutation-quota.md §8.1, as tables (one comment per row).

T is an epoch time, so a bucket is full on first use. Bucket vectors (K-01..K-08) drive the
bucket arithmetic: each record through the permissive admission loop (TokenBucket.record, then
a measure of no time), each bare measure through the tests' oracle (support/token_bucket.py);
quota-object vectors (K-12..K-35) drive the strict and permissive admission loops; integration
vectors (K-36..K-47, K-78) go through the whole shard (resolution, wire parser, machine) with
the harness.
"""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.core.quota.bucket import (
    UNLIMITED_RATE_PER_S,
    burst_of,
    response_throttle_ms,
    throttle_time_ms,
)
from controlplane.core.quota.machine import admit_permissive, admit_strict
from support.quota_harness import T_MS, QuotaHarness, errors
from support.token_bucket import measure

T = T_MS

# --- TokenBucketTest.testRecord / testUnrecord: Q=5, S=10, W=2 s -> B=100 -----------------
BUCKET_RECORD = [
    # (id, time, operation, value, expected tokens)
    ("K-01", T, "measure", 0, 100.0),  # first touch at an epoch time fills the bucket
    ("K-02", T, "record", 60, 40.0),  # same ms: no refill, deduct 60
    ("K-03", T + 2000, "record", 5, 45.0),  # refill +10 (2 s at 5/s), deduct 5
    ("K-04", T + 4000, "record", 60, -5.0),  # refill +10 -> 55, deduct 60: negative allowed
]
BUCKET_UNRECORD = [
    ("K-05", T, "measure", 0, 100.0),  # full on first use
    ("K-06", T, "record", -60, 100.0),  # unrecord cannot exceed the burst
    ("K-07", T + 2000, "record", 60, 40.0),  # refill capped at 100, deduct 60
    ("K-08", T + 4000, "record", -60, 100.0),  # 50 + 60 = 110, capped at B
]


def _replay_bucket(ops: list[tuple[str, int, str, int, float]], upto: int) -> float:
    burst = burst_of(10, 2, 5.0)
    tokens, last = 0.0, 0
    for _, time_ms, operation, value, _ in ops[: upto + 1]:
        if operation == "record":
            tokens = admit_permissive(tokens, last, [value], 5.0, burst, time_ms).tokens
        else:
            tokens = measure(tokens, last, time_ms, 5.0, burst)
        last = time_ms
    return tokens


@pytest.mark.parametrize(
    ("ops", "index"),
    [(BUCKET_RECORD, i) for i in range(4)] + [(BUCKET_UNRECORD, i) for i in range(4)],
    ids=[row[0] for row in BUCKET_RECORD + BUCKET_UNRECORD],
)
def test_token_bucket_vectors(ops: list[Any], index: int) -> None:
    assert burst_of(10, 2, 5.0) == 100.0  # the test comment says 20; the assertion says 100
    assert _replay_bucket(ops, index) == ops[index][4]


# --- Strict/PermissiveControllerMutationQuotaTest: Q=10, S=10, W=1 -> B=100, one object ------
QUOTA_OBJECT = [
    # (id, mode, topics of one quota object, admitted, tokens after, throttle)
    ("K-12", "strict", [90], [True], 10.0, 0),  # 100 -> 10
    ("K-13", "strict", [90, 90], [True, True], -80.0, 0),  # 10 >= 0 admits 90: -80, no throttle
    ("K-14", "strict", [90, 90, 90], [True, True, False], -80.0, 8000),  # -80 < 0: rejected
    ("K-16", "permissive", [90], [True], 10.0, 0),  # 100 -> 10
    ("K-17", "permissive", [90, 90], [True, True], -80.0, 8000),  # -80: throttle 80/10 s
    ("K-18", "permissive", [90, 90, 90], [True] * 3, -170.0, 17000),  # last violation wins
]


@pytest.mark.parametrize(
    ("mode", "topics", "admitted", "tokens", "throttle"),
    [row[1:] for row in QUOTA_OBJECT],
    ids=[row[0] for row in QUOTA_OBJECT],
)
def test_quota_object_vectors(
    mode: str, topics: list[int], admitted: list[bool], tokens: float, throttle: int
) -> None:
    admit = admit_strict if mode == "strict" else admit_permissive
    result = admit(0.0, 0, topics, 10.0, burst_of(10, 1, 10.0), T)
    assert list(result.admitted) == admitted
    assert result.tokens == tokens
    assert result.throttle_time_ms == throttle


@pytest.mark.parametrize(
    ("last_throttle", "expected"),
    [
        (8000, 3000),  # K-15: strict throttle 8000, read 5 s later
        (17000, 12000),  # K-19: permissive throttle 17000, read 5 s later
    ],
    ids=["K-15", "K-19"],
)
def test_throttle_read_later(last_throttle: int, expected: int) -> None:
    assert response_throttle_ms(last_throttle, T, T + 5000) == expected


@pytest.mark.parametrize(
    ("tokens", "rate", "expected"),
    [
        (0.0, 10.0, 0),  # testThrottleTime: (0, 10) -> 0
        (-5.0, 10.0, 500),  # (-5, 10) -> 500
        (-10.0, 10.0, 1000),  # (-10, 10) -> 1000
    ],
)
def test_throttle_time_unit_vectors(tokens: float, rate: float, expected: int) -> None:
    assert throttle_time_ms(tokens, rate) == expected


# --- ControllerMutationQuotaManagerTest: Q=10 on <ANONYMOUS, test-client>, S=10, W=1 ---------
MANAGER = [(f"K-{23 + k}", T + k * 1000, 10, 0, 90.0) for k in range(10)] + [
    # (id, time, mutations, throttle returned, tokens after)
    ("K-33", T + 10000, 110, 0, -10.0),  # refilled to 100: admitted, -10
    ("K-34", T + 10000, 110, 1000, -10.0),  # -10 < 0: rejected, not recorded, 10/10 s
    ("K-35", T + 11000, 110, 0, -110.0),  # refilled to exactly 0: admitted (0 is no violation)
]


@pytest.mark.parametrize("index", range(len(MANAGER)), ids=[row[0] for row in MANAGER])
def test_manager_vectors(index: int) -> None:
    # K-23..K-32: ten requests of 10, one per second: 0 each, refilled to 100 before the next.
    h = QuotaHarness(
        [{"user": "ANONYMOUS", "client_id": "test-client", "controller_mutation_rate": 10}],
        window_num=10,
    )
    row: dict[str, Any] = {}
    for _, time_ms, count, _, _ in MANAGER[: index + 1]:
        h.now_ms = time_ms
        row = h.create_topics("ANONYMOUS", {"t": count}, client_id="test-client")
    _, _, _, throttle, tokens = MANAGER[index]
    assert row["throttle_time_ms"] == throttle
    assert h.tokens("user=ANONYMOUS/client-id=test-client") == tokens


# --- ControllerMutationQuotaTest (integration): Q=2 on user ThrottledPrincipal, S=10 -> B=20 --
def _cluster() -> QuotaHarness:
    quotas = [{"user": "ThrottledPrincipal", "controller_mutation_rate": 2.0}]
    return QuotaHarness(quotas, window_num=10, window_size_seconds=1)


STRICT_APIS = [
    # (id, verb, strict version)
    ("K-36/K-37", "create_topics", 7),  # CreateTopics v7 {30, 30}, retry after 5 s
    ("K-40", "delete_topics", 6),  # DeleteTopics v6 of two 30-partition topics, retry
    ("K-43", "create_partitions", 3),  # CreatePartitions v3, both 1 -> 31 (+30 each), retry
]


@pytest.mark.parametrize(
    ("verb", "version"), [r[1:] for r in STRICT_APIS], ids=[r[0] for r in STRICT_APIS]
)
def test_strict_integration(verb: str, version: int) -> None:
    h = _cluster()
    row = h.mutate(verb, "ThrottledPrincipal", {"topic-1": 30, "topic-2": 30}, version=version)
    assert errors(row) == ["NONE", "THROTTLING_QUOTA_EXCEEDED"]  # 20 -> -10, then rejected
    assert row["throttle_time_ms"] == 5000  # 10 tokens at 2/s
    assert h.tokens("user=ThrottledPrincipal") == -10.0
    h.sleep(5000)
    retry = h.mutate(verb, "ThrottledPrincipal", {"topic-2": 30}, version=version)
    assert errors(retry) == ["NONE"]  # refilled to exactly 0: admitted
    assert retry["throttle_time_ms"] == 0
    assert h.tokens("user=ThrottledPrincipal") == -30.0


PERMISSIVE_APIS = [
    ("K-38", "create_topics", 5),  # CreateTopics v5 {30, 30}: both NONE, thr 20000
    ("K-41", "delete_topics", 4),  # DeleteTopics v4: both NONE, thr 20000
    ("K-44", "create_partitions", 2),  # CreatePartitions v2, both +30: thr 20000
]


@pytest.mark.parametrize(
    ("verb", "version"), [r[1:] for r in PERMISSIVE_APIS], ids=[r[0] for r in PERMISSIVE_APIS]
)
def test_permissive_integration(verb: str, version: int) -> None:
    h = _cluster()
    row = h.mutate(verb, "ThrottledPrincipal", {"topic-1": 30, "topic-2": 30}, version=version)
    assert errors(row) == ["NONE", "NONE"]
    assert row["throttle_time_ms"] == 20000  # tokens -10 then -40: 40 at 2/s
    assert h.tokens("user=ThrottledPrincipal") == -40.0
    assert h.throttles[-1]["mode"] == "permissive"


UNBOUNDED_APIS = [
    ("K-39", "create_topics", 7),  # UnboundedPrincipal: no quota applies, Long.MAX_VALUE
    ("K-42", "delete_topics", 6),
    ("K-45", "create_partitions", 3),
]


@pytest.mark.parametrize(
    ("verb", "version"), [r[1:] for r in UNBOUNDED_APIS], ids=[r[0] for r in UNBOUNDED_APIS]
)
def test_unbounded_integration(verb: str, version: int) -> None:
    h = _cluster()
    row = h.mutate(verb, "UnboundedPrincipal", {"topic-1": 30, "topic-2": 30}, version=version)
    assert errors(row) == ["NONE", "NONE"]
    assert row["throttle_time_ms"] == 0
    assert row["quota_entity"] is None
    assert row["rate_per_s"] is None  # unlimited
    assert row["quota_key"] == "user=UnboundedPrincipal"  # tracked: quotas are enabled


def test_set_unset_quota_k46() -> None:
    """K-46: before set / set 1.5 / removed: unlimited, 1.5, unlimited (still tracked)."""
    before = QuotaHarness([{"user": "Other", "controller_mutation_rate": 1.0}])
    assert before.create_topics("User", {"t": 1})["rate_per_s"] is None
    with_quota = QuotaHarness([{"user": "User", "controller_mutation_rate": 1.5}])
    assert with_quota.create_topics("User", {"t": 1})["rate_per_s"] == 1.5
    removed = QuotaHarness([{"user": "User", "controller_mutation_rate": None}])
    row = removed.create_topics("User", {"t": 1})
    assert row["rate_per_s"] is None
    assert row["quota_key"] == "user=User"


def test_quota_metric_lazily_created_k47() -> None:
    """K-47: no bucket before the first request; then tags (ThrottledPrincipal, ""); a rate
    change to 4.0 applies to the same bucket (burst 10 * 1 * 4)."""
    h = _cluster()
    assert h.shard.buckets == {}
    h.create_topics("ThrottledPrincipal", {"topic": 1})
    assert list(h.shard.buckets) == ["user=ThrottledPrincipal"]
    assert h.tokens("user=ThrottledPrincipal") == 19.0
    quotas = [{"user": "ThrottledPrincipal", "controller_mutation_rate": 4.0}]
    faster = QuotaHarness(quotas, window_num=10)
    faster.carry_state_from(h)
    faster.now_ms = h.now_ms + 10_000
    row = faster.create_topics("ThrottledPrincipal", {"topic2": 50}, event_id="later")
    assert row["rate_per_s"] == 4.0
    assert faster.tokens("user=ThrottledPrincipal") == -10.0  # refilled to 40, not 20


VALIDATE_ONLY = [
    # (id, charged, expected error of a validate-only CreateTopics on an exhausted bucket)
    ("K-78 KRaft", True, "THROTTLING_QUOTA_EXCEEDED"),  # KRaft applies the quota
    ("K-78 ZK", False, "NONE"),  # ZooKeeper mode exempts validateOnly
]


@pytest.mark.parametrize(
    ("charged", "expected"), [r[1:] for r in VALIDATE_ONLY], ids=[r[0] for r in VALIDATE_ONLY]
)
def test_validate_only_k78(charged: bool, expected: str) -> None:
    quotas = [{"user": "u", "controller_mutation_rate": 1.0}]
    h = QuotaHarness(quotas, validate_only_charged=charged)
    h.create_topics("u", {"big": 100})  # 11 -> -89
    row = h.create_topics("u", {"foo": 1}, validate_only=True)
    assert errors(row) == [expected]
    assert h.tokens("user=u") == -89.0  # rejected or exempt: nothing deducted


def test_unlimited_rate_is_long_max() -> None:
    assert UNLIMITED_RATE_PER_S == 9.223372036854775807e18
