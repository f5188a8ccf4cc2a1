"""Group vs shard keying: stable, in range, and independent of the process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from controlplane.core.config import parse_settings
from controlplane.core.quota.resolution import index_for
from controlplane.engine.keying import (
    ShardNames,
    SparkKeys,
    balanced_names,
    shard_of,
    spark_hash,
    spark_key_of,
    spark_partition_of,
)
from controlplane.engine.options import Keying
from controlplane.engine.queries import QuotaKeyer
from controlplane.engine.reload import SettingsSource


def test_group_keying_is_the_group_id() -> None:
    assert spark_key_of("orders", Keying.GROUP, 64) == "orders"
    assert spark_key_of(None, Keying.GROUP, 64) == ""


# crc32 (IEEE, as zlib and Spark's crc32 compute it) of the UTF-8 bytes, written down once
@pytest.mark.parametrize(
    ("key", "shard"), [("", 0), ("a", 3904355907 % 64), ("orders", 3845127662 % 64)]
)
def test_shard_is_crc32_mod_shards(key: str, shard: int) -> None:
    assert shard_of(key, 64) == shard
    assert spark_key_of(key, Keying.SHARD, 64) == f"shard-{shard}"


def test_shards_spread_groups() -> None:
    counts = [0] * 16
    for i in range(16_000):
        counts[shard_of(f"group-{i}", 16)] += 1
    assert min(counts) > 800
    assert max(counts) < 1200


def test_shard_is_the_same_in_another_process() -> None:
    code = "from controlplane.engine.keying import shard_of; print(shard_of('payments', 50))"
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": "lib", "PYTHONHASHSEED": "123"},
    )
    assert int(other.stdout) == shard_of("payments", 50)


def test_bad_shard_count_is_refused() -> None:
    with pytest.raises(ValueError, match="shards must be >= 1"):
        shard_of("g", 0)


QUOTAS = parse_settings({"quotas": [{"user": "<default>", "controller_mutation_rate": 10}]})


def quota_keyer() -> QuotaKeyer:
    return QuotaKeyer(SettingsSource(path=None, initial=QUOTAS), SparkKeys(Keying.GROUP, 64))


def test_quota_keyer_keys_a_mutation_by_its_quota_key() -> None:
    raw = '{"type": "create_topics", "user": "alice", "client_id": "app", "event_time_ms": 5}'
    key, time_ms = quota_keyer().key(raw, None, QUOTAS.quota)
    assert key == index_for(QUOTAS.quota).resolve("alice", "app").quota_key
    assert key not in ("", None)
    assert time_ms == 5


@pytest.mark.parametrize("odd", [2**63, -(2**63) - 1, 1.5, "5"])
def test_quota_keyer_keeps_only_a_long_event_time(odd: object) -> None:
    """The keyed frame's event_time_ms is a long column: a larger integer fails Arrow."""
    raw = json.dumps({"type": "create_topics", "user": "a", "client_id": "c", "event_time_ms": odd})
    key, time_ms = quota_keyer().key(raw, None, QUOTAS.quota)
    assert key == index_for(QUOTAS.quota).resolve("a", "c").quota_key
    assert time_ms is None


@pytest.mark.parametrize(
    "raw",
    [
        "{not json",
        '{"type": "create_topics", "user": "al\\ud800ice", "event_time_ms": 5}',
        '{"type": "create_topics", "user": "alice", "event_time_ms": NaN}',
        "[1]",
    ],
)
def test_quota_keyer_sends_text_that_is_not_a_json_object_to_the_empty_key(raw: str) -> None:
    """The runner answers it there with INVALID_REQUEST; a lone surrogate must not reach the
    key (Arrow cannot encode it, and the mapInPandas stage would fail the query)."""
    assert quota_keyer().key(raw, None, QUOTAS.quota) == ("", None)


# Spark's hash() of these strings, written down once from pyspark 4.2.0 (F.hash); the Spark
# test tests/spark/test_shard_partitions.py compares thousands more, and the stateful
# operator's own partitions.
@pytest.mark.parametrize(
    ("text", "spark_hash_value"),
    [
        ("", 142593372),
        ("a", 1485273170),
        ("orders", 1175203872),
        ("shard-0", 1500264606),
        ("shard-63", 182754351),
        ("é€😀", -1844856255),  # the bytes after the last whole word are signed in Spark
    ],
)
def test_spark_hash_is_sparks_murmur3(text: str, spark_hash_value: int) -> None:
    assert spark_hash(text) == spark_hash_value


def shards_per_partition(names: tuple[str, ...], partitions: int) -> list[int]:
    counts = [0] * partitions
    for name in names:
        counts[spark_partition_of(name, partitions)] += 1
    return counts


@pytest.mark.parametrize(
    ("shards", "partitions"), [(64, 2), (64, 8), (64, 16), (64, 6), (64, 200), (50, 8), (1, 1)]
)
def test_balanced_names_give_each_partition_its_share(shards: int, partitions: int) -> None:
    names = balanced_names(shards, partitions)
    assert len(set(names)) == shards
    for n, name in enumerate(names):
        assert name == f"shard-{n}" or name.startswith(f"shard-{n}.")
        assert spark_partition_of(name, partitions) == n % partitions
    counts = shards_per_partition(names, partitions)
    assert max(counts) - min(counts) <= 1
    assert max(counts) == -(-shards // partitions)  # ceil: with more partitions, one shard each


def test_the_plain_names_spread_unevenly() -> None:
    """Why the names are balanced: 64 plain names over 8 partitions put 12 in one of them."""
    plain = SparkKeys(Keying.SHARD, 64).shard_names
    assert sorted(shards_per_partition(plain, 8), reverse=True)[0] == 12


def test_a_balanced_name_is_the_plain_one_when_that_lands_where_it_should() -> None:
    names = balanced_names(64, 8)
    plain = SparkKeys(Keying.SHARD, 64).shard_names
    kept = [n for n in range(64) if spark_partition_of(plain[n], 8) == n % 8]
    assert kept
    assert all(names[n] == plain[n] for n in kept)


def test_the_keys_of_a_group_under_balanced_names() -> None:
    keys = SparkKeys(Keying.SHARD, 64, ShardNames.BALANCED, 8)
    assert keys.of("orders") == balanced_names(64, 8)[shard_of("orders", 64)]
    assert keys.of(None) == keys.of("")
    assert SparkKeys(Keying.GROUP, 64, ShardNames.BALANCED, 8).of("orders") == "orders"


@pytest.mark.parametrize("partitions", [None, 0])
def test_balanced_names_need_partitions(partitions: int | None) -> None:
    with pytest.raises(ValueError, match="balanced shard names need partitions"):
        SparkKeys(Keying.SHARD, 64, ShardNames.BALANCED, partitions)


def test_the_balanced_names_found_today() -> None:
    """Written down: a checkpoint records its names, but a change to how they are found
    should be a decision, not an accident."""
    assert balanced_names(4, 2) == ("shard-0", "shard-1.6", "shard-2.1", "shard-3.2")
    assert balanced_names(64, 8)[:4] == ("shard-0.21", "shard-1.6", "shard-2.3", "shard-3.2")
