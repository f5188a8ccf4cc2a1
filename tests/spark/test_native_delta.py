"""The native Delta writer on local Spark with the pinned delta-spark jars, and the two writers
on each other's tables: exactly once per (app id, batch id), the ``groups`` MERGE with its
idempotence confs and its retry on a lost commit race, the same table properties, and tables
that either side reads and writes."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from controlplane.io.sinks import (
    NATIVE_ONLY,
    PORTABLE_FEATURES,
    TXN_APP_ID_CONF,
    DeltaRsWriter,
    NativeDeltaWriter,
    UnportableTable,
    choose_writer,
    local_absolute,
    table_properties,
    to_arrow,
)
from engine.test_sinks import decision, group

pytestmark = pytest.mark.spark


def spark_rows(spark: Any, path: Path) -> list[dict[str, Any]]:
    return [
        row.asDict(recursive=True) for row in spark.read.format("delta").load(str(path)).collect()
    ]


def rs_rows(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return rows


def properties(spark: Any, path: Path) -> dict[str, str]:
    rows = spark.sql(f"SHOW TBLPROPERTIES delta.`{path}`").collect()
    return {row["key"]: row["value"] for row in rows if row["key"].startswith("delta.")}


def test_appends_are_written_once_per_app_id_and_batch(spark: Any, tmp_path: Path) -> None:
    writer = NativeDeltaWriter(spark, str(tmp_path), "app-1")
    assert writer.write("decisions", [decision("a", 0)], 0)
    assert writer.write("decisions", [decision("b", 1)], 1)
    writer.write("decisions", [decision("b", 1)], 1)  # replay after a crash: Delta skips it
    writer.write("decisions", [decision("a", 0)], 0)
    NativeDeltaWriter(spark, str(tmp_path), "app-2").write("decisions", [decision("c", 0)], 0)
    assert sorted(r["event_id"] for r in spark_rows(spark, tmp_path / "decisions")) == [
        "a",
        "b",
        "c",
    ]
    assert not writer.write("decisions", [], 2)
    assert rs_rows(tmp_path / "decisions")[0]["offsets"][0]["offset"] == 5


def test_a_relative_tables_root_is_a_directory_under_the_working_directory(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """conf/demo.yaml's out/demo/tables: Delta's builder took the relative location for a
    table name and refused it."""
    monkeypatch.chdir(tmp_path)
    writer = NativeDeltaWriter(spark, "out/demo/tables", "app")
    assert writer.write("decisions", [decision("a", 0)], 0)
    assert [r["event_id"] for r in rs_rows(tmp_path / "out/demo/tables/decisions")] == ["a"]
    assert (
        local_absolute("abfss://c@a.dfs.core.windows.net/t") == "abfss://c@a.dfs.core.windows.net/t"
    )
    assert local_absolute("dbfs:/Volumes/x") == "dbfs:/Volumes/x"
    assert local_absolute("/abs/t") == "/abs/t"


def test_the_groups_merge_inserts_updates_deletes_and_skips_a_replayed_batch(
    spark: Any, tmp_path: Path
) -> None:
    writer = NativeDeltaWriter(spark, str(tmp_path), "app")
    writer.write("groups", [group("g1", "Stable"), group("g2", "Empty")], 0)
    # A key called twice in a batch: the last row wins; a deleted group goes away.
    writer.write(
        "groups",
        [group("g1", "PreparingRebalance"), group("g1", "Stable", generation=2)],
        1,
    )
    writer.write(
        "groups", [group("g2", "Dead", deleted=True), group("g3", "Dead", deleted=True)], 2
    )
    state = {
        r["group_id"]: (r["group_state"], r["generation_id"]) for r in rs_rows(tmp_path / "groups")
    }
    assert state == {"g1": ("Stable", 2)}
    # Batch 1 again (a replay after a crash): the MERGE's txn confs make Delta skip it.
    writer.write("groups", [group("g1", "Empty", generation=9)], 1)
    assert [r["generation_id"] for r in spark_rows(spark, tmp_path / "groups")] == [2]
    # The confs were set on the writer's own session, and unset after the MERGE.
    assert spark.conf.get(TXN_APP_ID_CONF, None) is None
    assert writer.spark.conf.get(TXN_APP_ID_CONF, None) is None


@pytest.mark.parametrize("table", ["decisions", "groups"])
def test_both_writers_create_tables_with_the_same_properties(
    spark: Any, tmp_path: Path, table: str
) -> None:
    row = group("g1", "Stable") if table == "groups" else decision("a", 0)
    NativeDeltaWriter(spark, str(tmp_path / "native"), "app").write(table, [row], 0)
    DeltaRsWriter(tmp_path / "rs", "app").write(table, [row], 0)
    native, rs = (
        properties(spark, tmp_path / "native" / table),
        properties(spark, tmp_path / "rs" / table),
    )
    for key, value in table_properties(table).items():
        assert native.get(key) == value, (key, native)
        assert rs.get(key) == value, (key, rs)
    for side in (tmp_path / "native" / table, tmp_path / "rs" / table):
        protocol = DeltaTable(str(side)).protocol()
        assert protocol.min_reader_version == 1, protocol
        assert set(protocol.writer_features or []) <= PORTABLE_FEATURES, protocol


# A feature listed by a table-features protocol, and one a legacy protocol implies by its
# versions (column mapping: reader 2, writer 5, no feature list).
UNPORTABLE = {
    "deletionVectors": {"delta.enableDeletionVectors": "true"},
    "columnMapping": {
        "delta.columnMapping.mode": "name",
        "delta.minReaderVersion": "2",
        "delta.minWriterVersion": "5",
    },
}


@pytest.mark.parametrize("feature", sorted(UNPORTABLE))
@pytest.mark.parametrize("writer", ["native", "delta-rs"])
def test_a_table_with_a_feature_the_other_writer_lacks_is_refused(
    spark: Any, tmp_path: Path, writer: str, feature: str
) -> None:
    path = tmp_path / "decisions"
    from delta.tables import DeltaTable as SparkDeltaTable

    builder = SparkDeltaTable.create(spark).location(str(path)).addColumn("event_id", "STRING")
    for key, value in UNPORTABLE[feature].items():
        builder = builder.property(key, value)
    builder.execute()
    chosen = (
        NativeDeltaWriter(spark, str(tmp_path), "app")
        if writer == "native"
        else DeltaRsWriter(tmp_path, "app")
    )
    with pytest.raises(UnportableTable, match=feature):
        chosen.write("decisions", [decision("a", 0)], 0)


def test_an_appended_table_refuses_a_delete(spark: Any, tmp_path: Path) -> None:
    NativeDeltaWriter(spark, str(tmp_path), "app").write("decisions", [decision("a", 0)], 0)
    with pytest.raises(Exception, match=r"(?i)append"):
        spark.sql(f"DELETE FROM delta.`{tmp_path / 'decisions'}`")


def test_groups_records_its_changes(spark: Any, tmp_path: Path) -> None:
    writer = NativeDeltaWriter(spark, str(tmp_path), "app")
    writer.write("groups", [group("g1", "Stable")], 0)
    writer.write("groups", [group("g1", "Dead", deleted=True)], 1)
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(str(tmp_path / "groups"))
        .select("group_id", "_change_type")
        .collect()
    )
    assert {(r["group_id"], r["_change_type"]) for r in changes} >= {
        ("g1", "insert"),
        ("g1", "delete"),
    }


@pytest.mark.parametrize("first", ["native", "delta-rs"])
def test_a_table_written_by_one_writer_is_read_and_written_by_the_other(
    spark: Any, tmp_path: Path, first: str
) -> None:
    native = NativeDeltaWriter(spark, str(tmp_path), "native-app")
    rs = DeltaRsWriter(tmp_path, "rs-app")
    one, other = (native, rs) if first == "native" else (rs, native)
    one.write("decisions", [decision("a", 0)], 0)
    one.write("groups", [group("g1", "Stable"), group("g2", "Stable")], 0)
    other.write("decisions", [decision("b", 0)], 0)
    other.write("groups", [group("g1", "Dead", deleted=True), group("g3", "Empty")], 0)
    for read in (lambda t: spark_rows(spark, tmp_path / t), lambda t: rs_rows(tmp_path / t)):
        assert sorted(r["event_id"] for r in read("decisions")) == ["a", "b"]
        assert sorted(r["group_id"] for r in read("groups")) == ["g2", "g3"]


class RacedByACompaction(NativeDeltaWriter):
    """While the MERGE scans its source (a Python UDF, in a worker), another process commits to
    the target with delta-rs, ``races`` times: a real Delta commit conflict, not a faked one."""

    def __init__(self, spark: Any, root: Path, races: int) -> None:
        super().__init__(spark, str(root), "app")
        # Delta materializes a MERGE's source before its transaction reads the table unless told
        # not to: then the source is scanned inside the transaction, where a commit conflicts.
        self.spark.conf.set("spark.databricks.delta.merge.materializeSource", "none")
        self.marker = root / "races-left"
        self.marker.write_text(str(races))
        self.attempts = 0

    def _merge(self, table: str, source: Any, batch_id: int) -> None:
        from pyspark.sql.functions import col, udf

        self.attempts += 1
        target, marker = self.path(table), str(self.marker)
        attempt = f"{marker}-{uuid.uuid4().hex}"  # a MERGE may scan its source more than once

        def commit_under_the_merge(group_id: str) -> bool:
            import os
            from pathlib import Path as WorkerPath

            from deltalake import write_deltalake

            from controlplane.io.sinks import to_arrow

            try:  # one task of this attempt wins; the others (and later scans) pass
                os.close(os.open(attempt, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return True
            left = int(WorkerPath(marker).read_text())
            if left > 0:
                WorkerPath(marker).write_text(str(left - 1))
                row = {"group_id": f"other-{left}", "group_state": "Empty", "members": []}
                write_deltalake(target, to_arrow("groups", [row]), mode="append")
            return True

        # a plain row-at-a-time UDF, said so: left to infer it, pyspark warns about the hints
        racing = udf(commit_under_the_merge, "boolean", useArrow=False).asNondeterministic()
        super()._merge(table, source.filter(racing(col("group_id"))), batch_id)


def test_a_merge_that_loses_a_commit_race_runs_again(spark: Any, tmp_path: Path) -> None:
    writer = RacedByACompaction(spark, tmp_path, races=0)
    writer.write("groups", [group("g1", "Stable")], 0)
    writer.marker.write_text("2")
    writer.attempts = 0
    assert writer.write("groups", [group("g1", "Dead", deleted=True), group("g2", "Stable")], 1)
    assert writer.attempts == 3  # lost twice, then committed
    assert sorted(r["group_id"] for r in rs_rows(tmp_path / "groups")) == [
        "g2",
        "other-1",
        "other-2",
    ]


def test_a_merge_that_keeps_losing_fails_the_batch(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("controlplane.io.sinks.MERGE_RETRY_BACKOFF_S", 0.0)
    writer = RacedByACompaction(spark, tmp_path, races=0)
    writer.write("groups", [group("g1", "Stable")], 0)
    writer.marker.write_text("100")
    writer.attempts = 0
    with pytest.raises(Exception, match=r"(?i)concurrent"):
        writer.write("groups", [group("g1", "Dead", deleted=True)], 1)
    assert writer.attempts == 5
    assert writer.spark.conf.get(TXN_APP_ID_CONF, None) is None  # unset after a failed MERGE too
    assert "g1" in {r["group_id"] for r in rs_rows(tmp_path / "groups")}  # nothing of batch 1


def test_auto_means_native_in_a_session_with_delta(spark: Any, tmp_path: Path) -> None:
    assert choose_writer(spark, str(tmp_path), "app", "auto").kind == "native"
    assert choose_writer(spark, str(tmp_path), "app", "delta-rs").kind == "delta-rs"


@pytest.mark.parametrize("table", ["decisions", "groups"])
@pytest.mark.parametrize("writer", ["native", "delta-rs"])
def test_a_table_whose_create_died_before_its_first_commit_is_created(
    spark: Any, tmp_path: Path, writer: str, table: str
) -> None:
    """A job stopped or killed while it created a table leaves the table's directory with a
    Delta log and no commit in it. The next run creates the table there, with its
    properties, instead of failing on it at every start."""
    (tmp_path / table / "_delta_log").mkdir(parents=True)
    row = group("g1", "Stable") if table == "groups" else decision("a", 0)
    chosen = (
        NativeDeltaWriter(spark, str(tmp_path), "app")
        if writer == "native"
        else DeltaRsWriter(tmp_path, "app")
    )
    assert chosen.write(table, [row], 0)
    assert len(spark_rows(spark, tmp_path / table)) == 1
    expected = {**table_properties(table), **(NATIVE_ONLY if writer == "native" else {})}
    for key, value in expected.items():
        assert properties(spark, tmp_path / table).get(key) == value, key


def test_a_directory_with_more_than_an_empty_log_is_left_alone(spark: Any, tmp_path: Path) -> None:
    """A data file beside the empty log (or a commit in it) is not a create that died: the
    native writer leaves it, with Delta's error, for a person to look at."""
    table = tmp_path / "decisions"
    (table / "_delta_log").mkdir(parents=True)
    stray = table / "part-00000.parquet"
    stray.write_bytes(b"not ours to bury")
    with pytest.raises(Exception, match="DELTA_TABLE_NOT_FOUND"):
        NativeDeltaWriter(spark, str(tmp_path), "app").write("decisions", [decision("a", 0)], 0)
    assert sorted(p.name for p in table.iterdir()) == ["_delta_log", "part-00000.parquet"]
    assert list((table / "_delta_log").iterdir()) == []


def test_a_table_another_writer_created_meanwhile_is_taken_as_it_is(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race of the half-made table's repair: another writer commits the table between the
    failed create and the repair's empty append, whose commit then conflicts; the create runs
    again and finds the table."""
    from controlplane.io.locations import TablePaths

    table = tmp_path / "decisions"
    (table / "_delta_log").mkdir(parents=True)
    real_save = TablePaths.save

    def another_writer_first(self: Any, writer: Any, name: str) -> None:
        other = spark.createDataFrame(to_arrow("decisions", [decision("x", 0)]))
        real_save(self, other.write.format("delta").mode("append"), name)
        raise RuntimeError("ProtocolChangedException: a concurrent writer created the table")

    monkeypatch.setattr(TablePaths, "save", another_writer_first)
    writer = NativeDeltaWriter(spark, str(tmp_path), "app")
    writer.create("decisions")
    monkeypatch.setattr(TablePaths, "save", real_save)
    assert writer.write("decisions", [decision("a", 0)], 0)
    assert sorted(r["event_id"] for r in spark_rows(spark, table)) == ["a", "x"]
