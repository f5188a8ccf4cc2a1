"""The coordinator on the real runner: event-time equivalence with the replay command for
group and shard keying, and bad input."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from controlplane.core.config import parse_settings
from controlplane.engine.options import (
    EngineOptions,
    Keying,
    SourceOptions,
    TimeMode,
)
from controlplane.engine.queries import build_coordinator_query
from spark.conftest import ROOT, assert_same_rows, read_table

pytestmark = pytest.mark.spark

SAMPLE = ROOT / "conf" / "sample" / "group_events.jsonl"
ENGINE_COLUMNS = ("batch_id", "processed_at_ms")
LOCATION = re.compile(r"[^\s(]*events\.jsonl:")


def canonical(rows: list[dict[str, Any]]) -> list[str]:
    """Rows as sorted canonical JSON: engine columns and nulls dropped (events.md §5)."""

    def clean(value: Any) -> Any:
        if isinstance(value, str):  # the file is named by URI in the engine, as given in replay
            return LOCATION.sub("events.jsonl:", value)
        if isinstance(value, dict):
            return {
                k: clean(v) for k, v in value.items() if v is not None and k not in ENGINE_COLUMNS
            }
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value

    return sorted(json.dumps(clean(row), sort_keys=True) for row in rows)


def replay(events: Path, out: Path) -> dict[str, list[dict[str, Any]]]:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "controlplane",
            "replay",
            "group",
            "--events",
            str(events),
            "--out",
            str(out),
        ],
        check=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT / "lib"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
    )
    return {
        table: [
            json.loads(line) for line in (out / f"{table}.jsonl").read_text().splitlines() if line
        ]
        for table in ("decisions", "group_events")
    }


def event_time_options(tmp_path: Path, keying: Keying) -> EngineOptions:
    return EngineOptions(
        mode=TimeMode.EVENT_TIME,
        watermark_delay_ms=60_000,
        keying=keying,
        shards=4,
        checkpoint_root=str(tmp_path / "checkpoints"),
        tables_root=str(tmp_path / "tables"),
        writer="delta-rs",
        coordinator_source=SourceOptions(
            format="jsonl",
            path=str(tmp_path / "landing"),
            clean_source="off",  # type: ignore[arg-type]
        ),
    )


def events_with_final_tick(tmp_path: Path) -> Path:
    """The sample traffic, then a global tick two hours later: every timer due by then fires
    in the replay, and the engine's watermark (tick - 60 s) passes the same deadlines."""
    lines = SAMPLE.read_text().splitlines()
    last = max(
        json.loads(line)["event_time_ms"]
        for line in lines
        if line.startswith("{") and line.endswith("}")
    )
    lines.append(
        json.dumps({"event_id": "tick-end", "event_time_ms": last + 7_200_000, "type": "tick"})
    )
    path = tmp_path / "landing" / "events.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("keying", [Keying.GROUP, Keying.SHARD])
def test_event_time_engine_equals_the_replay(spark: Any, tmp_path: Path, keying: Keying) -> None:
    options = event_time_options(tmp_path, keying)
    events = events_with_final_tick(tmp_path)
    expected = replay(events, tmp_path / "replay")
    query = build_coordinator_query(
        spark, parse_settings({}), options=options, available_now=True
    ).start()
    try:
        assert query.awaitTermination(300), "availableNow did not finish in event-time mode"
        assert query.exception() is None
    finally:
        query.stop()
    tables = Path(options.tables_root)
    decisions = read_table(tables / "decisions")
    unparsed = [row for row in expected["decisions"] if row.get("event_id") is None]
    assert_same_rows(
        spark,
        canonical(decisions),
        canonical([r for r in expected["decisions"] if r.get("event_id") is not None]),
    )
    assert_same_rows(
        spark, canonical(read_table(tables / "group_events")), canonical(expected["group_events"])
    )
    invalid = [r for r in decisions if r["error"] == "INVALID_REQUEST" and r["error_message"]]
    assert any("events.jsonl:37: session_timeout_ms" in r["error_message"] for r in invalid)
    rejected = read_table(tables / "rejected_events")
    assert len(rejected) == len(unparsed) == 1
    assert rejected[0]["raw"].startswith('{"event_id": "bad-1"')
    kinds = {row["reason"] for row in read_table(tables / "group_events")}
    assert "session_timeout" in kinds
    groups = {row["group_id"]: row for row in read_table(tables / "groups")}
    assert "orders" in groups
    shutil.rmtree(tables, ignore_errors=True)
