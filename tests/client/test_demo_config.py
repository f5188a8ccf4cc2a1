"""The demo's configuration: conf/demo.yaml is valid for the engine, the clients and the story."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from controlplane.cli.demo_plan import DEMO_CLIENT_DEFAULTS, parse_plan
from controlplane.cli.demo_summary import format_rows
from controlplane.client.config import ClientConfigError, consumer_config
from controlplane.core.config import ConfigError
from controlplane.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]


def test_demo_yaml_is_valid_and_its_story_can_happen() -> None:
    settings = load_settings(ROOT / "conf" / "demo.yaml")
    client = consumer_config("orders", {**DEMO_CLIENT_DEFAULTS, **settings.sections["client"]})
    plan = parse_plan(settings.sections["demo"])
    assert plan.stall_s * 1000 > client.max_poll_interval_ms  # the stall exceeds the poll interval
    assert plan.restart_pause_s * 1000 < client.session_timeout_ms  # static restart in time
    assert client.session_timeout_ms >= settings.coordinator.group_min_session_timeout_ms
    assert plan.crash_at_s + client.session_timeout_ms // 1000 < plan.duration_s
    burst = plan.topics_per_burst * plan.partitions_per_topic
    rate = next(q.controller_mutation_rate for q in settings.quota.quotas if q.user == "admin")
    assert rate is not None
    assert burst > rate * settings.quota.controller_quota_window_num  # bursts get throttled


def test_bad_demo_and_client_settings_are_refused_with_the_key() -> None:
    with pytest.raises(ConfigError, match=r"demo\.duration_s"):
        parse_plan({"duration_s": "long"})
    with pytest.raises(ConfigError, match="unknown key"):
        parse_plan({"crash_at": 3})
    with pytest.raises(ClientConfigError, match=r"session\.timeout\.ms"):
        consumer_config("g", {"session.timeout.ms": "soon"})
    with pytest.raises(ClientConfigError, match="unknown client setting"):
        consumer_config("g", {"sesion.timeout.ms": 1})
    with pytest.raises(ClientConfigError, match=r"heartbeat\.interval\.ms"):
        consumer_config("g", {"heartbeat.interval.ms": 50_000})


def test_summary_table_formatting() -> None:
    text = format_rows(
        [{"group_id": "orders", "rebalances": 1234}, {"group_id": "b", "rebalances": None}]
    )
    assert "1,234" in text
    assert "-" in text.splitlines()[-1]
    assert format_rows([]) == "  (no rows)"


def test_the_kafka_demo_runs_the_same_configuration_on_kafka_sources_and_an_answers_topic() -> None:
    from controlplane.cli.demo_kafka import (
        ANSWERS_TOPIC,
        COORDINATOR_TOPIC,
        QUOTA_TOPIC,
        kafka_settings,
    )
    from controlplane.engine.options import parse_engine_options

    settings = load_settings(ROOT / "conf" / "demo.yaml")
    on_kafka = kafka_settings(settings, "127.0.0.1:1234")
    engine = on_kafka.sections["engine"]
    assert engine["answers_topic"] == ANSWERS_TOPIC
    assert engine["trigger_interval_ms"] == settings.sections["engine"]["trigger_interval_ms"]
    for name, topic in (("coordinator", COORDINATOR_TOPIC), ("quota", QUOTA_TOPIC)):
        source = on_kafka.sections["sources"][name]
        assert source["format"] == "kafka"
        assert source["path"] == topic
        assert source["kafka_bootstrap_servers"] == "127.0.0.1:1234"
        assert not {"archive_dir", "clean_source", "max_files_per_trigger"} & set(source)
    assert settings.sections["sources"]["coordinator"]["format"] == "jsonl"  # not changed
    for section in ("client", "demo"):
        assert on_kafka.sections.get(section) == settings.sections.get(section)
    assert on_kafka.quota == settings.quota
    assert on_kafka.coordinator == settings.coordinator
    # the sources it writes are engine sources (answers_topic is the engine side's key)
    engine_only = {k: v for k, v in engine.items() if k != "answers_topic"}
    options = parse_engine_options(
        replace(on_kafka, sections={**on_kafka.sections, "engine": engine_only})
    )
    assert options.coordinator_source is not None
    assert options.coordinator_source.format == "kafka"
    assert options.tables_root != parse_engine_options(settings).tables_root
