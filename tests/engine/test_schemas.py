"""The engine's table schemas carry every field the cores emit (nothing silently dropped by
the sinks), checked on the sample traffic without a JVM."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controlplane.core.config import parse_settings
from controlplane.core.runtime import TimedEvent
from controlplane.io.schemas import ENGINE_COLUMNS, TABLES, arrow_schema

ROOT = Path(__file__).resolve().parents[2]
CONFIG = {"quotas": [{"user": "<default>", "controller_mutation_rate": 10}]}


def sample(name: str) -> list[TimedEvent]:
    events = []
    for line in (ROOT / "conf" / "sample" / name).read_text().splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        stamp = event.get("event_time_ms")
        events.append(TimedEvent(event, stamp if isinstance(stamp, int) else None))
    return events


def nested_keys(rows: list[dict[str, Any]], prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for row in rows:
        for key, value in row.items():
            keys.add(prefix + key)
            items = value if isinstance(value, list) else []
            dicts = [item for item in items if isinstance(item, dict)]
            keys |= nested_keys(dicts, f"{prefix}{key}.")
    return keys


def schema_keys(table: str) -> set[str]:
    keys: set[str] = set()

    def walk(schema: Any, prefix: str) -> None:
        for field in schema:
            keys.add(prefix + field.name)
            kind = field.type
            if hasattr(kind, "value_type"):
                kind = kind.value_type
            if hasattr(kind, "num_fields") and kind.num_fields:
                walk([kind.field(i) for i in range(kind.num_fields)], f"{prefix}{field.name}.")

    walk(arrow_schema(TABLES[table]), "")
    return keys


@pytest.mark.parametrize("table", ["decisions", "group_events", "groups"])
def test_coordinator_rows_fit_the_schemas(table: str) -> None:
    from controlplane.core.coordinator.runner import CoordinatorRunner

    result = CoordinatorRunner(parse_settings({}).coordinator).run(
        None, sample("group_events.jsonl"), None
    )
    rows = [dict(row) for row in result.outputs[table]]
    assert rows
    extra = nested_keys(rows) - schema_keys(table) - {"deleted"}  # groups: MERGE flag
    assert extra == set()


@pytest.mark.parametrize("table", ["quota_decisions", "throttle_events"])
def test_quota_rows_fit_the_schemas(table: str) -> None:
    from controlplane.core.quota.runner import QuotaRunner

    result = QuotaRunner(parse_settings(CONFIG).quota).run(None, sample("quota_events.jsonl"), None)
    rows = [dict(row) for row in result.outputs[table]]
    assert rows
    assert nested_keys(rows) - schema_keys(table) == set()


def test_engine_columns_are_on_every_output_table() -> None:
    for name, schema in TABLES.items():
        if name != "query_progress":
            assert {f.name for f in schema.fields} >= {c for c, _ in ENGINE_COLUMNS}
