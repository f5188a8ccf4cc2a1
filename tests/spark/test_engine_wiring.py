"""The pipeline with a tiny counting runner: processing-time timeouts really fire, bad lines
reach rejected_events, every batch leaves a query_progress row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from controlplane.engine import progress as progress_module
from controlplane.engine.options import EngineOptions, Keying
from controlplane.engine.queries import build_query, register_progress_listener
from controlplane.io.options import SourceOptions
from engine.fakes import CountingRunner
from spark.conftest import drop_events, read_table, wait_for

pytestmark = pytest.mark.spark


def options_for(tmp_path: Path, keying: Keying = Keying.GROUP) -> EngineOptions:
    return EngineOptions(
        trigger_interval_ms=500,
        keying=keying,
        shards=4,
        # a URI, as dbfs:/ or s3:// checkpoints: the idempotence id must not need a local path
        checkpoint_root=(tmp_path / "checkpoints").as_uri(),
        tables_root=str(tmp_path / "tables"),
        writer="delta-rs",
    )


def test_timers_fire_without_input_and_bad_lines_are_rejected(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read_as_json: list[int] = []
    as_json = progress_module.progress_json

    def counted(jprogress: Any) -> dict[str, Any]:
        read_as_json.append(1)
        return as_json(jprogress)

    monkeypatch.setattr(progress_module, "progress_json", counted)
    options = options_for(tmp_path)
    landing = tmp_path / "landing"
    source = SourceOptions(format="jsonl", path=str(landing), archive_dir=str(tmp_path / "archive"))
    listener = register_progress_listener(spark, options)
    writer = build_query(
        spark,
        options,
        source=source,
        runners_for=lambda _: CountingRunner,
        routing_keys=lambda _state: (),  # a new checkpoint: never read
        tables=("decisions", "group_events", "rejected_events"),
        name="wiring",
    )
    drop_events(
        landing,
        [
            {"event_id": "a", "group_id": "g1", "type": "count", "timeout_ms": 2000},
            {"event_id": "b", "group_id": "g2", "type": "count", "timeout_ms": 600_000},
            "{this is not json",
        ],
    )
    query = writer.start()
    tables = tmp_path / "tables"
    try:
        fired = wait_for(
            lambda: read_table(tables / "group_events"), query, what="the g1 timer to fire"
        )
        assert [(r["group_id"], r["kind"], r["generation_id"]) for r in fired] == [
            ("g1", "timer_fired", 1)
        ]
        decisions = read_table(tables / "decisions")
        assert sorted(r["event_id"] for r in decisions) == ["a", "b"]
        assert fired[0]["at_ms"] == next(
            r["decided_at_ms"] + 2000 for r in decisions if r["event_id"] == "a"
        )
        rejected = read_table(tables / "rejected_events")
        assert [r["raw"] for r in rejected] == ["{this is not json"]
        assert rejected[0]["source"].endswith(".jsonl")
        progress = wait_for(
            lambda: [r for r in read_table(tables / "query_progress") if r["timers_fired"]],
            query,
            what="a progress row counting the fired timer",
        )
        assert {r["query"] for r in progress} == {"wiring"}
        assert progress[0]["max_timer_lateness_ms"] >= 0
        inputs = read_table(tables / "query_progress")
        assert sum(r["input_rows"] for r in inputs) == 3
        assert sum(r["rejected"] for r in inputs) == 1
        archived = wait_for(lambda: list((tmp_path / "archive").rglob("*.jsonl")), query)
        assert len(archived) == 1  # the archiver moved the committed file out of the landing dir
        assert not list(landing.glob("*.jsonl"))
        query_id = json.loads((tmp_path / "checkpoints" / "wiring" / "metadata").read_text())["id"]
        app_id = f"controlplane-wiring-{query_id}"  # the checkpoint's own id, read from Spark
        assert DeltaTable(str(tables / "decisions")).transaction_version(app_id) is not None
        assert read_as_json, "the listener read Spark's progress through PySpark's conversion"
    finally:
        query.stop()
        spark.streams.removeListener(listener)


def test_the_local_session_writes_checkpoints_through_the_filesystem_manager(spark: Any) -> None:
    # Every query of this suite checkpoints through it; the class is the one this Spark ships.
    from controlplane.engine.session import CHECKPOINT_MANAGER_KEY, checkpoint_manager_class

    assert spark.conf.get(CHECKPOINT_MANAGER_KEY) == checkpoint_manager_class()
    assert spark._jvm.java.lang.Class.forName(spark.conf.get(CHECKPOINT_MANAGER_KEY))


def test_the_local_session_s_jvm_runs_the_parallel_collector(spark: Any) -> None:
    # Given to spark-submit before the JVM starts (a builder conf, not a runtime one): the
    # collectors the running JVM reports are the parallel collector's, not G1's.
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    names = {bean.getName() for bean in beans}
    assert names == {"PS Scavenge", "PS MarkSweep"}, names


def pyspark_files(frames: Any) -> Any:
    import pandas as pd
    import pyspark

    for _ in frames:
        yield pd.DataFrame({"file": [pyspark.__file__]})


def test_the_local_session_s_workers_import_the_installed_pyspark_not_spark_s_zip(
    spark: Any,
) -> None:
    # Modules imported from a zip are compiled from source in every new worker (~1.2 s).
    files = {row.file for row in spark.range(2).mapInPandas(pyspark_files, "file string").collect()}
    assert files
    assert not any(".zip" in file for file in files), files
