"""The quota on the real runner: event-time equivalence with the replay command for key and
shard keying, throttles included; unparseable lines reach rejected_events."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from controlplane.engine.options import EngineOptions, Keying, TimeMode
from controlplane.engine.queries import build_quota_query
from controlplane.io.options import CleanSource, SourceOptions
from controlplane.settings import load_settings
from spark.conftest import ROOT, assert_same_rows, read_table, run_to_end
from spark.test_coordinator_engine import canonical

pytestmark = pytest.mark.spark

SAMPLE = ROOT / "conf" / "sample" / "quota_events.jsonl"
CONFIG = {
    "quotas": [
        {"user": "<default>", "controller_mutation_rate": 10},
        {"user": "bob", "client_id": "etl", "controller_mutation_rate": 5},
    ]
}


def replay(events: Path, config: Path, out: Path) -> dict[str, list[dict[str, Any]]]:
    command = [sys.executable, "-m", "controlplane", "replay", "quota"]
    command += ["--events", str(events), "--out", str(out), "--config", str(config)]
    env = {"PYTHONPATH": str(ROOT / "lib"), "PATH": "/usr/bin:/bin"}
    subprocess.run(command, check=True, cwd=ROOT, env=env, capture_output=True)
    return {
        table: [
            json.loads(line) for line in (out / f"{table}.jsonl").read_text().splitlines() if line
        ]
        for table in ("quota_decisions", "throttle_events")
    }


@pytest.mark.parametrize("keying", [Keying.GROUP, Keying.SHARD])
def test_event_time_quota_engine_equals_the_replay(
    spark: Any, tmp_path: Path, keying: Keying
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps(CONFIG))
    landing = tmp_path / "landing"
    landing.mkdir()
    events = landing / "events.jsonl"
    events.write_text(SAMPLE.read_text())
    expected = replay(events, config, tmp_path / "replay")
    options = EngineOptions(
        mode=TimeMode.EVENT_TIME,
        watermark_delay_ms=600_000,
        keying=keying,
        shards=4,
        checkpoint_root=str(tmp_path / "checkpoints"),
        tables_root=str(tmp_path / "tables"),
        writer="delta-rs",
        quota_source=SourceOptions(format="jsonl", path=str(landing), clean_source=CleanSource.OFF),
    )
    settings = load_settings(config)
    run_to_end(
        build_quota_query(
            spark, settings, config_path=str(config), options=options, available_now=True
        )
    )
    tables = Path(options.tables_root)
    decisions = read_table(tables / "quota_decisions")
    parsed = [r for r in expected["quota_decisions"] if r.get("event_id") is not None]
    assert_same_rows(spark, canonical(decisions), canonical(parsed))
    assert_same_rows(
        spark,
        canonical(read_table(tables / "throttle_events")),
        canonical(expected["throttle_events"]),
    )
    assert read_table(tables / "throttle_events"), "the sample traffic is throttled under 10/s"
    rejected = read_table(tables / "rejected_events")
    assert [r["raw"] for r in rejected] == ["this line is not json"]
    assert rejected[0]["reason"].startswith("not JSON")


def mutation(event_id: str, partitions: int) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "event_time_ms": 1,
        "type": "create_topics",
        "user": "alice",
        "client_id": "tf",
        "request_version": 7,
        "topics": [{"name": f"topic-{event_id}", "partitions": partitions}],
    }


def test_a_quota_change_applies_from_the_next_batch(spark: Any, tmp_path: Path) -> None:
    from spark.conftest import drop_events, wait_for

    config = tmp_path / "config.yaml"
    config.write_text("quotas:\n  - {user: alice, controller_mutation_rate: 1000}\n")
    landing = tmp_path / "landing"
    options = EngineOptions(
        trigger_interval_ms=500,
        keying=Keying.SHARD,
        shards=4,
        checkpoint_root=str(tmp_path / "checkpoints"),
        tables_root=str(tmp_path / "tables"),
        writer="delta-rs",
        quota_source=SourceOptions(
            format="jsonl", path=str(landing), clean_source=CleanSource.DELETE
        ),
    )
    query = build_quota_query(
        spark, load_settings(config), config_path=str(config), options=options
    ).start()
    tables = Path(options.tables_root)

    def answer(event_id: str) -> dict[str, Any]:
        rows = wait_for(
            lambda: [
                r for r in read_table(tables / "quota_decisions") if r["event_id"] == event_id
            ],
            query,
            what=event_id,
        )
        return dict(rows[0])

    try:
        drop_events(landing, [mutation("q1", 100)])
        first = answer("q1")
        assert (first["rate_per_s"], first["throttle_time_ms"], first["error"]) == (
            1000.0,
            0,
            "NONE",
        )
        config.write_text("quotas:\n  - {user: alice, controller_mutation_rate: 1}\n")
        drop_events(landing, [mutation("q2", 100)])
        second = answer("q2")
        assert second["rate_per_s"] == 1.0
        assert second["quota_key"] == first["quota_key"] == "user=alice"
        drop_events(landing, [mutation("q3", 1)])
        third = answer("q3")
        assert third["throttle_time_ms"] > 0
        assert (
            third["error"] == "THROTTLING_QUOTA_EXCEEDED"
            or third["topics"][0]["error"] == "THROTTLING_QUOTA_EXCEEDED"
        )
    finally:
        query.stop()
