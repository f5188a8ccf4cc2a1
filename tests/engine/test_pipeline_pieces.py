"""Pieces of the pipeline that need no JVM: line numbering, envelope splitting, options."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from controlplane.core.config import ConfigError, parse_settings
from controlplane.engine.adapter import METRICS_TABLE
from controlplane.engine.batch import split_envelopes
from controlplane.engine.options import (
    Keying,
    TimeMode,
    parse_engine_options,
    with_tables,
)
from controlplane.io.locations import TableNames, TablePaths
from controlplane.io.options import CleanSource
from controlplane.io.sources import line_numbers


def test_lines_are_numbered_within_each_block_and_stay_increasing_in_a_file() -> None:
    sources = pd.Series(["f1", "f1", "f2", "f1", "f1", "f1"])
    starts = pd.Series([0, 0, 0, 100, 100, 100])  # f1 split in two blocks, f2 between them
    # Arrow batches may cut a block: the count goes on in the next batch
    batches = [(sources[:4], starts[:4]), (sources[4:], starts[4:])]
    out = [seq for batch in line_numbers(iter(batches)) for seq in batch.tolist()]
    assert out == [0, 1, 0, 100, 101, 102]


def test_envelopes_split_into_tables_and_figures() -> None:
    envelopes = [
        ("decisions", json.dumps({"event_id": "a"})),
        (
            METRICS_TABLE,
            json.dumps(
                {"events": 2, "rejected": 1, "timers_fired": 1, "max_timer_lateness_ms": 40}
            ),
        ),
        ("rejected_events", json.dumps({"raw": "x"})),
        (
            METRICS_TABLE,
            json.dumps(
                {"events": 1, "rejected": 0, "timers_fired": 1, "max_timer_lateness_ms": 70}
            ),
        ),
    ]
    tables, figures = split_envelopes(envelopes, 7, 1234)
    assert tables == {
        "decisions": [{"event_id": "a", "batch_id": 7, "processed_at_ms": 1234}],
        "rejected_events": [{"raw": "x", "batch_id": 7, "processed_at_ms": 1234}],
    }
    assert figures == {
        "events": 3,
        "rejected": 1,
        "timers_fired": 2,
        "max_timer_lateness_ms": 70,
        "keys_called": 2,
    }


def test_engine_options_defaults_and_sections() -> None:
    settings = parse_settings(
        {
            "engine": {"mode": "event_time", "keying": "group", "trigger_interval_ms": 250},
            "sources": {"coordinator": {"format": "jsonl", "path": "in", "clean_source": "delete"}},
        }
    )
    options = parse_engine_options(settings, "conf.yaml")
    assert options.mode is TimeMode.EVENT_TIME
    assert options.keying is Keying.GROUP
    assert options.trigger_interval_ms == 250
    assert options.shards == 64
    assert options.progress_log_interval_ms == 60_000  # a line a minute per query
    assert options.progress_commit_interval_ms == 0  # locally a query_progress commit a batch
    assert options.config_path == "conf.yaml"
    assert options.coordinator_source is not None
    assert options.coordinator_source.clean_source is CleanSource.DELETE
    assert options.quota_source is None


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        ({"keying": "partition"}, "engine.keying: expected one of group, shard"),
        ({"shards": 0}, "engine.shards: expected an integer >= 1"),
        ({"trigger_interval_ms": "1s"}, "engine.trigger_interval_ms"),
        ({"mode": "realtime"}, "engine.mode"),
        ({"speed": 1}, "engine: unknown key(s) ['speed']"),
        ({"writer": "spark"}, "engine.writer"),
        ({"progress_log_interval_ms": -1}, "engine.progress_log_interval_ms: expected an integer"),
        (
            {"progress_commit_interval_ms": "1m"},
            "engine.progress_commit_interval_ms: expected an integer",
        ),
        ({"tables_schema": "controlplane"}, "engine.tables_schema: expected catalog.schema"),
        ({"tables_schema": "main.cp.tables"}, "engine.tables_schema: expected catalog.schema"),
        ({"tables_schema": "main.`cp`"}, "engine.tables_schema: expected catalog.schema"),
        ({"tables_schema": 7}, "engine.tables_schema: expected catalog.schema"),
        (
            {"tables_schema": "main.cp", "tables_root": "/t"},
            "engine: tables_root and tables_schema both given",
        ),
        (
            {"tables_schema": "main.cp", "writer": "delta-rs"},
            "engine.tables_schema: tables by name need the native writer",
        ),
    ],
)
def test_bad_engine_settings_are_refused_naming_the_key(
    engine: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        parse_engine_options(parse_settings({"engine": engine}))
    assert message in str(error.value)


def test_tables_are_by_path_unless_a_schema_names_them() -> None:
    by_path = parse_engine_options(parse_settings({"engine": {"tables_root": "/t"}}))
    assert by_path.tables() == "/t"
    by_name = parse_engine_options(parse_settings({"engine": {"tables_schema": "main.cp-dev"}}))
    assert by_name.tables() == TableNames("main.cp-dev")
    assert by_name.tables_description() == "tables by name in main.cp-dev"


def test_the_command_line_chooses_paths_or_names_whole() -> None:
    """A job's --tables-root or --tables-schema replaces the file's choice: the bundle passes
    the schema built from its catalog and schema variables."""
    by_name = parse_engine_options(parse_settings({"engine": {"tables_schema": "main.cp"}}))
    by_path = parse_engine_options(parse_settings({"engine": {"tables_root": "/t"}}))
    assert with_tables(by_name, root="/v").tables() == "/v"
    assert with_tables(by_path, schema="dev.cp").tables() == TableNames("dev.cp")
    assert with_tables(by_path) == by_path
    with pytest.raises(ConfigError, match="--tables-root and --tables-schema: give one"):
        with_tables(by_path, root="/v", schema="dev.cp")
    with pytest.raises(ConfigError, match=r"--tables-schema: expected catalog\.schema"):
        with_tables(by_path, schema="cp")
    delta_rs = parse_engine_options(parse_settings({"engine": {"writer": "delta-rs"}}))
    with pytest.raises(ConfigError, match="need the native writer"):
        with_tables(delta_rs, schema="dev.cp")


def test_tables_are_named_in_sql_with_each_part_quoted() -> None:
    names = TableNames("main.controlplane-dev")
    assert names.name("groups") == "main.controlplane-dev.groups"
    assert names.sql_name("groups") == "`main`.`controlplane-dev`.`groups`"
    assert TablePaths("/v/t/").sql_name("groups") == "delta.`/v/t/groups`"
    with pytest.raises(ConfigError):
        TableNames("main")


def test_a_source_without_path_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"sources\.quota\.path"):
        parse_engine_options(parse_settings({"sources": {"quota": {"format": "jsonl"}}}))


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"format": "kafka", "path": "t"}, r"sources\.quota\.kafka_bootstrap_servers: required"),
        ({"path": "in", "archive_dir": 5}, r"sources\.quota\.archive_dir: expected a non-empty"),
        ({"path": "in", "user_header": None}, r"sources\.quota\.user_header"),
    ],
)
def test_bad_source_settings_are_refused_at_start_naming_the_key(
    source: dict[str, object], message: str
) -> None:
    """They used to pass and fail later: Kafka at query start, a bad archive_dir with a
    TypeError, a null user_header as the header named "None"."""
    with pytest.raises(ConfigError, match=message):
        parse_engine_options(parse_settings({"sources": {"quota": source}}))
