"""Tables by name (``engine.tables_schema``: Unity Catalog's ``catalog.schema`` on Databricks),
run here against Spark's own catalog (``spark_catalog``, delta-spark's DeltaCatalog, managed
tables in the session's temporary warehouse): the same code path as on Databricks. Appends
once per (app id, batch id), the ``groups`` MERGE, the table properties, the engine's whole
pipeline with its progress table, SQL and maintenance, all by name."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.cli import maintenance, sql
from controlplane.core.config import ConfigError, parse_settings
from controlplane.engine.options import Keying
from controlplane.engine.queries import build_coordinator_query, register_progress_listener
from controlplane.io.locations import TableNames
from controlplane.io.schemas import TABLES
from controlplane.io.sinks import TXN_APP_ID_CONF, NativeDeltaWriter, UnportableTable
from engine.test_cli_sql import write_read_side_tables
from engine.test_sinks import decision, group
from spark.conftest import assert_same_rows, run_to_end
from spark.test_coordinator_engine import (
    canonical,
    event_time_options,
    events_with_final_tick,
    replay,
)
from spark.test_sql_files import QUESTIONS, ROOT, same

pytestmark = pytest.mark.spark


@pytest.fixture
def names(spark: Any) -> Iterator[TableNames]:
    """A schema of its own in Spark's catalog, dropped with its tables afterwards."""
    schema = TableNames(f"spark_catalog.cp_{uuid.uuid4().hex[:10]}")
    spark.sql(f"CREATE SCHEMA {schema.sql_schema}")
    yield schema
    spark.sql(f"DROP SCHEMA IF EXISTS {schema.sql_schema} CASCADE")


def rows(spark: Any, names: TableNames, table: str) -> list[dict[str, Any]]:
    return [row.asDict(recursive=True) for row in spark.read.table(names.name(table)).collect()]


def properties(spark: Any, names: TableNames, table: str) -> dict[str, str]:
    found = spark.sql(f"SHOW TBLPROPERTIES {names.sql_name(table)}").collect()
    return {row["key"]: row["value"] for row in found}


def test_appends_by_name_are_written_once_per_app_id_and_batch(
    spark: Any, names: TableNames
) -> None:
    writer = NativeDeltaWriter(spark, names, "app-1")
    assert writer.write("decisions", [decision("a", 0)], 0)
    assert writer.write("decisions", [decision("b", 1)], 1)
    writer.write("decisions", [decision("b", 1)], 1)  # replay after a crash: Delta skips it
    writer.write("decisions", [decision("a", 0)], 0)
    NativeDeltaWriter(spark, names, "app-2").write("decisions", [decision("c", 0)], 0)
    assert sorted(r["event_id"] for r in rows(spark, names, "decisions")) == ["a", "b", "c"]
    # a table of the catalog, managed by it (in the warehouse), not a path
    (table,) = spark.catalog.listTables(names.sql_schema)
    assert (table.name, table.tableType) == ("decisions", "MANAGED")


def test_the_groups_merge_by_name_updates_deletes_and_skips_a_replayed_batch(
    spark: Any, names: TableNames
) -> None:
    writer = NativeDeltaWriter(spark, names, "app")
    writer.write("groups", [group("g1", "Stable"), group("g2", "Empty")], 0)
    writer.write(
        "groups", [group("g1", "PreparingRebalance"), group("g1", "Stable", generation=2)], 1
    )
    writer.write("groups", [group("g2", "Dead", deleted=True)], 2)
    writer.write("groups", [group("g1", "Empty", generation=9)], 1)  # batch 1 again: skipped
    state = {
        r["group_id"]: (r["group_state"], r["generation_id"]) for r in rows(spark, names, "groups")
    }
    assert state == {"g1": ("Stable", 2)}
    assert writer.spark.conf.get(TXN_APP_ID_CONF, None) is None
    changes = (
        spark.read.option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .table(names.name("groups"))
        .select("group_id", "_change_type")
        .collect()
    )
    assert ("g2", "delete") in {(r["group_id"], r["_change_type"]) for r in changes}


@pytest.mark.parametrize(
    ("table", "row", "expected"),
    [
        ("decisions", decision("a", 0), {"delta.appendOnly": "true"}),
        ("groups", group("g1", "Stable"), {"delta.enableChangeDataFeed": "true"}),
    ],
)
def test_tables_by_name_are_created_with_the_writers_properties(
    spark: Any, names: TableNames, table: str, row: dict[str, Any], expected: dict[str, str]
) -> None:
    NativeDeltaWriter(spark, names, "app").write(table, [row], 0)
    assert spark.read.table(names.name(table)).schema == TABLES[table]
    found = properties(spark, names, table)
    for key, value in {
        **expected,
        "delta.enableDeletionVectors": "false",
        "delta.enableRowTracking": "false",
        "delta.minReaderVersion": "1",
    }.items():
        assert found.get(key) == value, (key, found)
    if table == "decisions":
        with pytest.raises(Exception, match=r"(?i)append"):
            spark.sql(f"DELETE FROM {names.sql_name(table)}")


def test_a_table_by_name_with_a_feature_delta_rs_lacks_is_refused(
    spark: Any, names: TableNames
) -> None:
    spark.sql(
        f"CREATE TABLE {names.sql_name('decisions')} (event_id STRING) USING delta "
        "TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')"
    )
    with pytest.raises(UnportableTable, match="deletionVectors"):
        NativeDeltaWriter(spark, names, "app").write("decisions", [decision("a", 0)], 0)


def test_the_engine_writes_its_tables_and_progress_by_name(
    spark: Any, names: TableNames, tmp_path: Path
) -> None:
    """The whole pipeline with ``engine.tables_schema``: the rows the replay writes, in the
    schema's tables, a ``query_progress`` row per batch there too, nothing under the root."""
    options = dataclasses.replace(
        event_time_options(tmp_path, Keying.SHARD, "native"), tables_schema=names.schema
    )
    events = events_with_final_tick(tmp_path)
    expected = replay(events, tmp_path / "replay")
    listener = register_progress_listener(spark, options)
    try:
        progress = run_to_end(
            build_coordinator_query(spark, parse_settings({}), options=options, available_now=True)
        )
    finally:
        spark.streams.removeListener(listener)
    answered = [r for r in expected["decisions"] if r.get("event_id") is not None]
    assert_same_rows(spark, canonical(rows(spark, names, "decisions")), canonical(answered))
    assert_same_rows(
        spark,
        canonical(rows(spark, names, "group_events")),
        canonical(expected["group_events"]),
    )
    assert len(rows(spark, names, "rejected_events")) == 1
    assert "orders" in {r["group_id"] for r in rows(spark, names, "groups")}
    batches = {r["batch_id"] for r in rows(spark, names, "query_progress")}
    assert batches == {p["batchId"] for p in progress}
    assert not Path(options.tables_root).exists()


def test_a_missing_schema_stops_the_query_before_it_starts(spark: Any, tmp_path: Path) -> None:
    options = dataclasses.replace(
        event_time_options(tmp_path, Keying.SHARD, "native"),
        tables_schema="spark_catalog.no_such_schema",
    )
    with pytest.raises(ConfigError, match=r"no schema spark_catalog\.no_such_schema"):
        build_coordinator_query(spark, parse_settings({}), options=options, available_now=True)


def spark_answer(
    question: str, location: list[str], capsys: pytest.CaptureFixture[str]
) -> list[dict[str, Any]]:
    argv = [str(ROOT / "sql" / question), *location, "--engine", "spark", "--json"]
    assert sql.main(argv) == 0, capsys.readouterr().err
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_every_sql_question_reads_tables_by_name(
    spark: Any, names: TableNames, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``sql --engine spark --tables-schema``: the schema is the session's current one, so the
    files' bare names resolve there; the answers are those over the same tables by path."""
    root = write_read_side_tables(tmp_path / "paths")
    for path in sorted(p for p in root.iterdir() if (p / "_delta_log").is_dir()):
        spark.read.format("delta").load(str(path)).writeTo(names.sql_name(path.name)).using(
            "delta"
        ).create()
    for question in QUESTIONS:
        by_path = spark_answer(question, ["--tables-root", str(root)], capsys)
        by_name = spark_answer(question, ["--tables-schema", names.schema], capsys)
        assert by_name, question
        assert len(by_name) == len(by_path), question
        for named, pathed in zip(by_name, by_path, strict=True):
            assert list(named) == list(pathed)
            assert all(same(named[k], pathed[k]) for k in named), (question, named, pathed)
    assert (
        sql.main(["SELECT * FROM nowhere", "--tables-schema", names.schema, "--engine", "spark"])
        == 1
    )
    err = capsys.readouterr().err
    assert f"under schema {names.schema} (--tables-schema)" in err
    assert "decisions" in err  # the tables that are there


def test_maintenance_by_name_compacts_and_vacuums_the_engines_tables(
    spark: Any, names: TableNames, capsys: pytest.CaptureFixture[str]
) -> None:
    NativeDeltaWriter(spark, names, "one").write("decisions", [decision("early", 0)], 0)
    NativeDeltaWriter(spark, names, "more").write("decisions", [decision("late", 1)], 1)
    spark.sql(f"CREATE TABLE {names.sql_name('not_ours')} (x INT) USING delta")
    argv = ["--engine", "spark", "--tables-schema", names.schema]
    assert maintenance.main([*argv, "--retention-hours", "0", "--force"]) == 0
    report = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    assert report == {"decisions": "2 files compacted into 1; vacuum removed 2 files"}
    assert sorted(r["event_id"] for r in rows(spark, names, "decisions")) == ["early", "late"]
    assert maintenance.main([*argv, "--retention-hours", "0", "--force"]) == 0
    assert capsys.readouterr().out.strip() == (
        "decisions: 0 files compacted into 0; vacuum removed 0 files"
    )
    assert maintenance.main([*argv, "--retention-hours", "0"]) == 1  # below the table's
    assert "retention" in capsys.readouterr().err.lower()


def test_commands_use_the_clusters_session_on_databricks(
    spark: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A wheel task on Databricks runs on the driver of a running session and has no pinned
    jars: ``sql``/``maintenance --engine spark`` take that session."""
    from controlplane.engine.session import command_session

    monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")
    monkeypatch.setenv("CONTROLPLANE_JARS", str(tmp_path / "no-jars"))
    session = command_session("controlplane-sql")
    assert session.sparkContext.applicationId == spark.sparkContext.applicationId
