"""Kafka rules at their edges that the §8 vectors do not reach: the strict-from version of each
API (docs/reference/mutation-quota.md §2.1) and the partition counts Kafka refuses before the quota
(§3)."""

from __future__ import annotations

import pytest

from support.quota_harness import QuotaHarness, errors

# --- §2.1: strict from CreateTopics v6, DeleteTopics v5, CreatePartitions v3 ------------------
VERSIONS = [
    # (type, version, mode); None = the newest version, which is strict
    *[("create_topics", v, "permissive") for v in range(6)],
    ("create_topics", 6, "strict"),  # "may return a THROTTLING_QUOTA_EXCEEDED error"
    ("create_topics", 7, "strict"),
    ("create_topics", None, "strict"),
    *[("delete_topics", v, "permissive") for v in range(5)],
    ("delete_topics", 5, "strict"),
    ("delete_topics", 6, "strict"),
    ("delete_topics", None, "strict"),
    *[("create_partitions", v, "permissive") for v in range(3)],
    ("create_partitions", 3, "strict"),
    ("create_partitions", None, "strict"),
]


@pytest.mark.parametrize(("kind", "version", "mode"), VERSIONS)
def test_strict_from_version(kind: str, version: int | None, mode: str) -> None:
    h = QuotaHarness([{"user": "u", "controller_mutation_rate": 1.0}])
    row = h.mutate(kind, "u", {"a": 20, "b": 1}, version=version)  # 11 -> -9, then b
    assert h.throttles[-1]["mode"] == mode
    if mode == "strict":
        assert errors(row) == ["NONE", "THROTTLING_QUOTA_EXCEEDED"]
        assert row["throttle_time_ms"] == 9000  # from the tokens before b: -9
    else:
        assert errors(row) == ["NONE", "NONE"]
        assert row["throttle_time_ms"] == 10000  # from the tokens after b: -10


@pytest.mark.parametrize("kind", ["create_topics", "delete_topics", "create_partitions"])
def test_old_versions_are_strict_when_permissive_is_refused(kind: str) -> None:
    h = QuotaHarness([{"user": "u", "controller_mutation_rate": 1.0}], permissive_allowed=False)
    row = h.mutate(kind, "u", {"a": 20, "b": 1}, version=0)
    assert errors(row) == ["NONE", "THROTTLING_QUOTA_EXCEEDED"]
    assert h.throttles[-1]["mode"] == "strict"


# --- §3: counts Kafka refuses before the quota are never charged ------------------------------
# CreateTopics with numPartitions 0 and CreatePartitions with count == current (0 added) are
# answered INVALID_PARTITIONS (37) before any quota call (ReplicationControlManager: "Number of
# partitions was set to an invalid non-positive value." / "Topic already has N partition(s).";
# ZkAdminManager the same), so they neither record (the sensor's idle clock stays) nor are
# rejected by an exhausted bucket. DeleteTopics records a topic's current count, which ZK mode
# reads as 0 for a topic it does not know the partitions of: that one is checked and recorded.


@pytest.mark.parametrize("kind", ["create_topics", "create_partitions"])
@pytest.mark.parametrize("count", [0, -1, -(2**31)])
def test_no_partitions_to_create_is_invalid_partitions(kind: str, count: int) -> None:
    """0, or fewer than now for CreatePartitions ("would not be an increase"), or a
    numPartitions below -1 for CreateTopics: INVALID_PARTITIONS for that topic alone."""
    h = QuotaHarness([{"user": "u", "controller_mutation_rate": 1.0}])
    h.mutate(kind, "u", {"big": 20})  # 11 -> -9
    row = h.mutate(kind, "u", {"none": count, "one": 1})
    assert [(t["error"], t["error_code"]) for t in row["topics"]] == [
        ("INVALID_PARTITIONS", 37),
        ("THROTTLING_QUOTA_EXCEEDED", 89),
    ]
    assert row["topics"][0]["partitions"] == count
    assert row["error"] == "NONE"
    assert h.throttles[-1]["rejected_topics"] == ["one"]
    h.sleep(9000)  # back to exactly 0: the other topic is admitted, the refused one not charged
    row = h.mutate(kind, "u", {"one": 1, "none": count})
    assert errors(row) == ["NONE", "INVALID_PARTITIONS"]
    assert h.tokens("user=u") == -1.0


@pytest.mark.parametrize("kind", ["create_topics", "create_partitions"])
def test_zero_partitions_to_create_does_not_keep_the_bucket_alive(kind: str) -> None:
    h = QuotaHarness([{"user": "u", "controller_mutation_rate": 1.0}])
    h.mutate(kind, "u", {"a": 1})  # recorded at T
    h.sleep(1000)
    row = h.mutate(kind, "u", {"none": 0})
    assert errors(row) == ["INVALID_PARTITIONS"]
    bucket = h.bucket("user=u")
    assert bucket is not None
    assert bucket.last_record_ms == h.now_ms - 1000  # not a recorded mutation
    assert bucket.tokens == 10.0  # nothing recorded


def test_zero_partitions_to_create_is_refused_even_when_nothing_is_tracked() -> None:
    h = QuotaHarness([])
    row = h.create_partitions("u", {"none": 0, "one": 1})
    assert errors(row) == ["INVALID_PARTITIONS", "NONE"]


def test_deleting_a_topic_of_zero_partitions_is_checked_and_recorded() -> None:
    h = QuotaHarness([{"user": "u", "controller_mutation_rate": 1.0}])
    h.delete_topics("u", {"big": 20})  # 11 -> -9
    assert errors(h.delete_topics("u", {"empty": 0})) == ["THROTTLING_QUOTA_EXCEEDED"]
    h.sleep(9000)  # back to exactly 0: admitted, records 0
    assert errors(h.delete_topics("u", {"empty": 0})) == ["NONE"]
    bucket = h.bucket("user=u")
    assert bucket is not None
    assert bucket.last_record_ms == h.now_ms
