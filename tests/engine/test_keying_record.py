"""The keying a checkpoint's state is under (engine.checkpoints.checkpoint_keys): recorded
when a query first starts, kept at every restart, and a changed keying or shard count refused
before the query starts. On a local path, without Spark; the record read and written through
Spark, and a real restart, in tests/spark/test_shard_partitions.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from controlplane.core.config import ConfigError
from controlplane.engine.checkpoints import checkpoint_keys
from controlplane.engine.keying import ShardNames, SparkKeys
from controlplane.engine.options import Keying
from controlplane.io.checkpoint import KEYING_RECORD
from engine.test_checkpoints import NoSpark


class Conf:
    def __init__(self, partitions: str) -> None:
        self.partitions = partitions

    def get(self, name: str) -> str:
        assert name == "spark.sql.shuffle.partitions"
        return self.partitions


class LocalSpark(NoSpark):
    """A session whose only use here is its shuffle partitions (a local checkpoint's files are
    read directly: NoSpark refuses a read)."""

    def __init__(self, partitions: str = "8") -> None:
        self.conf = Conf(partitions)


def record(checkpoint: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((checkpoint / KEYING_RECORD).read_text())
    return loaded


def test_a_new_checkpoint_gets_balanced_names_over_the_sessions_partitions(
    tmp_path: Path,
) -> None:
    checkpoint = tmp_path / "coordinator"
    checkpoint.mkdir()
    keys = checkpoint_keys(LocalSpark("8"), str(checkpoint), Keying.SHARD, 64, has_state=False)
    assert keys == SparkKeys(Keying.SHARD, 64, ShardNames.BALANCED, 8)
    assert record(checkpoint) == {
        "version": 1,
        "keying": "shard",
        "shards": 64,
        "shard_names": "balanced",
        "partitions": 8,
    }


def test_a_restart_keeps_the_recorded_names_whatever_the_session_says_now(
    tmp_path: Path,
) -> None:
    """Spark keeps a checkpoint's state partitions too, so the names stay balanced."""
    first = checkpoint_keys(LocalSpark("8"), str(tmp_path), Keying.SHARD, 64, has_state=False)
    again = checkpoint_keys(LocalSpark("2"), str(tmp_path), Keying.SHARD, 64, has_state=True)
    assert again == first
    assert again.shard_names == first.shard_names


@pytest.mark.parametrize(
    ("keying", "shards", "said"),
    [
        (Keying.SHARD, 32, "shard keying with 32 shards"),
        (Keying.GROUP, 64, "group keying"),
    ],
)
def test_a_changed_keying_or_shard_count_is_refused_before_the_query_starts(
    tmp_path: Path, keying: Keying, shards: int, said: str
) -> None:
    checkpoint_keys(LocalSpark(), str(tmp_path), Keying.SHARD, 64, has_state=False)
    with pytest.raises(ConfigError, match="holds state under shard keying with 64 shards") as err:
        checkpoint_keys(LocalSpark(), str(tmp_path), keying, shards, has_state=True)
    assert f"the configuration says {said}" in str(err.value)
    assert "needs a new checkpoint" in str(err.value)


def test_group_keying_ignores_the_shard_count(tmp_path: Path) -> None:
    first = checkpoint_keys(LocalSpark(), str(tmp_path), Keying.GROUP, 64, has_state=False)
    assert checkpoint_keys(LocalSpark(), str(tmp_path), Keying.GROUP, 16, has_state=True) == first
    with pytest.raises(ConfigError, match="holds state under group keying"):
        checkpoint_keys(LocalSpark(), str(tmp_path), Keying.SHARD, 64, has_state=True)


def test_state_without_a_record_keeps_the_plain_names_and_is_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A checkpoint started before the record was kept: its shards are under shard-<n>."""
    with caplog.at_level(logging.WARNING):
        keys = checkpoint_keys(LocalSpark(), str(tmp_path), Keying.SHARD, 64, has_state=True)
    assert keys == SparkKeys(Keying.SHARD, 64, ShardNames.PLAIN)
    assert keys.of("orders") == f"shard-{3845127662 % 64}"
    assert record(tmp_path)["shard_names"] == "plain"
    assert "no keying record" in caplog.text
    with pytest.raises(ConfigError, match="with 64 shards"):  # recorded from now on
        checkpoint_keys(LocalSpark(), str(tmp_path), Keying.SHARD, 8, has_state=True)


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "[]",
        json.dumps({"version": 2, "keying": "shard", "shards": 64, "shard_names": "plain"}),
        json.dumps({"version": 1, "keying": "hash", "shards": 64, "shard_names": "plain"}),
        json.dumps({"version": 1, "keying": "shard", "shards": "64", "shard_names": "plain"}),
        json.dumps({"version": 1, "keying": "shard", "shards": 0, "shard_names": "plain"}),
        json.dumps({"version": 1, "keying": "shard", "shards": 64, "shard_names": "balanced"}),
        json.dumps({"version": 1, "keying": "shard", "shards": 64}),
    ],
)
def test_an_unreadable_record_stops_the_job(tmp_path: Path, text: str) -> None:
    (tmp_path / KEYING_RECORD).write_text(text)
    with pytest.raises(ConfigError, match="its keying record is unreadable"):
        checkpoint_keys(LocalSpark(), str(tmp_path), Keying.SHARD, 64, has_state=True)


@pytest.mark.parametrize("partitions", ["auto", "0", None])
def test_a_new_checkpoint_needs_a_number_of_state_partitions(
    tmp_path: Path, partitions: Any
) -> None:
    with pytest.raises(ConfigError, match=r"spark\.sql\.shuffle\.partitions"):
        checkpoint_keys(LocalSpark(partitions), str(tmp_path), Keying.SHARD, 64, has_state=False)
    assert not (tmp_path / KEYING_RECORD).exists()


def test_a_checkpoint_without_state_is_recorded_afresh(tmp_path: Path) -> None:
    """A start that never committed a batch left no group under any key: the next start may
    change the keying, and its record says the new one."""
    checkpoint_keys(LocalSpark("8"), str(tmp_path), Keying.SHARD, 64, has_state=False)
    keys = checkpoint_keys(LocalSpark("4"), str(tmp_path), Keying.SHARD, 32, has_state=False)
    assert keys == SparkKeys(Keying.SHARD, 32, ShardNames.BALANCED, 4)
    assert record(tmp_path)["shards"] == 32
