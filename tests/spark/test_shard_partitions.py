"""Where Spark puts each shard, and the keying a checkpoint keeps (engine.keying,
engine.checkpoints): Spark's hash as the engine computes it, the stateful operator's own
partitions for the plain and the balanced names, a checkpoint started before the keying was
recorded restarted with its groups, and a changed shard count refused."""

from __future__ import annotations

import random
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import functions as F

from controlplane.core.config import ConfigError
from controlplane.engine import queries
from controlplane.engine.adapter import StateFormat
from controlplane.engine.checkpoints import checkpoint_keys, state_keys
from controlplane.engine.keying import (
    ShardNames,
    SparkKeys,
    balanced_names,
    spark_hash,
    spark_partition_of,
)
from controlplane.engine.options import Keying
from controlplane.io import checkpoint as checkpoint_files
from controlplane.io.checkpoint import KEYING_RECORD, RecordError, read_record, write_record
from spark.conftest import drop_events
from spark.test_processing_time import (
    known_after_a_restart,
    options_for,
    session_setting,
    start,
    started_with,
)

pytestmark = pytest.mark.spark


def test_spark_hash_is_the_hash_spark_computes(spark: Any) -> None:
    rnd = random.Random(7)
    alphabet = "az-.09é€😀\u00ff\u0080"
    words = ["", "a", "abcd", "abcde", "shard-63.17", "é", "ÿé€😀x"]
    words += ["".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 13))) for _ in range(2000)]
    frame = spark.createDataFrame([(w,) for w in words], "w string")
    rows = frame.select("w", F.hash("w").alias("h")).collect()
    assert [(r.w, spark_hash(r.w)) for r in rows] == [(r.w, r.h) for r in rows]


def where_it_runs(key: tuple[Any, ...], frames: Any, state: Any) -> Any:
    """A stateful function that says which state partition its key was called in."""
    from pyspark import TaskContext

    for _ in frames:
        pass
    context = TaskContext.get()
    assert context is not None
    yield pd.DataFrame({"key": [key[0]], "partition": [context.partitionId()]})


def partitions_of(spark: Any, tmp_path: Path, keys: list[str], partitions: int) -> dict[str, int]:
    """The partition applyInPandasWithState calls each key in, on a new checkpoint started
    with ``partitions`` state partitions."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    landing = tmp_path / "landing"
    drop_events(landing, [{"key": key} for key in keys])
    seen: list[Any] = []
    with session_setting(spark, "spark.sql.shuffle.partitions", str(partitions)):
        stream = spark.readStream.schema("key string").json(str(landing))
        located = stream.groupBy("key").applyInPandasWithState(
            where_it_runs,
            "key string, partition int",
            "n int",
            "append",
            GroupStateTimeout.NoTimeout,
        )
        query = (
            located.writeStream.foreachBatch(lambda batch, _id: seen.extend(batch.collect()))
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
    assert query.exception() is None
    return {row.key: row.partition for row in seen}


def test_the_stateful_operator_puts_each_shard_where_the_engine_says(
    spark: Any, tmp_path: Path
) -> None:
    balanced = balanced_names(64, 8)
    plain = SparkKeys(Keying.SHARD, 64).shard_names
    found = partitions_of(spark, tmp_path, [*balanced, *plain], 8)
    assert found == {key: spark_partition_of(key, 8) for key in [*balanced, *plain]}
    assert [found[name] for name in balanced] == [n % 8 for n in range(64)]
    per_partition = [sum(1 for name in plain if found[name] == p) for p in range(8)]
    assert max(per_partition) == 12  # the plain names: one partition holds 12 of the 64


def test_a_new_engine_checkpoint_keeps_its_shards_under_balanced_names(
    spark: Any, tmp_path: Path
) -> None:
    options = options_for(tmp_path)
    started_with(spark, options, "spark.sql.shuffle.partitions", "4", "fresh")
    checkpoint = options.checkpoint("coordinator")
    text = StateFormat.TEXT
    keys = checkpoint_keys(spark, checkpoint, Keying.SHARD, options.shards, existing=text)
    assert keys == SparkKeys(Keying.SHARD, options.shards, ShardNames.BALANCED, 4)
    held = state_keys(spark, checkpoint, limit=100)  # what the state store really holds
    assert held
    assert set(held) <= set(keys.shard_names)
    assert keys.of("fresh") in held


def test_the_spark_expression_keys_as_the_python_keyer_does(spark: Any) -> None:
    """The coordinator keys in Spark (``column``), the quota in Python (``of``)."""
    groups = ["", "orders", "payments", "é€😀", *(f"group-{i}" for i in range(500))]
    frame = spark.createDataFrame([(g,) for g in groups] + [(None,)], "g string")
    for keys in (
        SparkKeys(Keying.SHARD, 64, ShardNames.BALANCED, 8),
        SparkKeys(Keying.SHARD, 16),
        SparkKeys(Keying.GROUP, 16),
    ):
        rows = frame.select("g", keys.column(F.col("g")).alias("k")).collect()
        assert [(r.g, r.k) for r in rows] == [(r.g, keys.of(r.g)) for r in rows]


def test_a_checkpoint_without_a_keying_record_restarts_with_its_groups(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The build before kept its shards under shard-<n> and recorded nothing: a restart with a
    higher shard count is refused by the groups its state holds; one with its own takes the
    plain names (its groups are found), records them, and refuses another shard count."""
    options = options_for(tmp_path)
    plain = SparkKeys(Keying.SHARD, options.shards, ShardNames.PLAIN)
    balanced = SparkKeys(Keying.SHARD, options.shards, ShardNames.BALANCED, 2)
    assert plain.of("legacy") != balanced.of("legacy")  # its shard's names differ
    with monkeypatch.context() as before:
        before.setattr(queries, "checkpoint_keys", lambda *_args, **_kwargs: plain)
        member = started_with(spark, options, "spark.sql.shuffle.partitions", "2", "legacy")
    checkpoint = options.checkpoint("coordinator")
    assert read_record(spark, checkpoint) is None
    # 4 shards put "legacy" in shard-2, 8 in shard-6: among the plain names of 8 shards too,
    # its Spark key passes; the group in its state does not, and nothing is recorded
    with pytest.raises(ConfigError, match=r"'legacy' is under shard-2, not shard-6") as err:
        start(spark, replace(options, shards=8))
    assert re.search(r"started with (\d+ or )*4( or \d+)* shards", str(err.value))
    assert read_record(spark, checkpoint) is None
    known_after_a_restart(spark, options, "legacy", member)
    assert '"shard_names": "plain"' in str(read_record(spark, checkpoint))
    with pytest.raises(ConfigError, match="configure shard keying with 4 shards to restart"):
        start(spark, replace(options, shards=8))


@pytest.mark.parametrize("name", ["not-yet", "run[1]{a}"])
def test_the_record_of_a_checkpoint_spark_resolves_is_written_through_spark(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A checkpoint on a file system that is not Spark's local default (DBFS on Databricks) is
    Spark's: the record is written and read through Spark's text writer and source (glob
    characters in the path escaped for the reader), never over one that is there unless asked,
    and read directly from Spark's output here."""
    checkpoint = str(tmp_path / name)
    with monkeypatch.context() as elsewhere:
        elsewhere.setattr(checkpoint_files, "_default_fs_is_local", lambda _spark: False)
        assert read_record(spark, checkpoint) is None
        write_record(spark, checkpoint, '{"version": 1}', replace=False)
        assert read_record(spark, checkpoint) == '{"version": 1}'
        with pytest.raises(RecordError):
            write_record(spark, checkpoint, '{"version": 2}', replace=False)
        write_record(spark, checkpoint, '{"version": 3}', replace=True)
    assert (tmp_path / name / KEYING_RECORD).is_dir()  # Spark's output directory
    assert read_record(spark, checkpoint) == '{"version": 3}'  # here: read from its parts


def test_a_local_session_writes_a_new_checkpoints_record_itself(spark: Any, tmp_path: Path) -> None:
    """Spark's default file system here is the machine's: no Spark job for a file."""
    checkpoint = str(tmp_path / "new" / "coordinator")
    write_record(spark, checkpoint, '{"version": 1}', replace=False)
    assert (tmp_path / "new" / "coordinator" / KEYING_RECORD).is_file()
    assert read_record(spark, checkpoint) == '{"version": 1}'
