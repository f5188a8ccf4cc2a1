"""Events read from a Delta table (``sources.*.format: delta``, a ``raw`` text column): the engine
answers them as the replay command answers the same lines, in event-time mode."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from controlplane.core.config import parse_settings
from controlplane.engine.options import Keying
from controlplane.engine.queries import build_coordinator_query
from controlplane.io.options import SourceOptions
from spark.conftest import assert_same_rows, read_table, run_to_end
from spark.test_coordinator_engine import (
    canonical,
    event_time_options,
    events_with_final_tick,
    replay,
)

pytestmark = pytest.mark.spark

# Where an INVALID_REQUEST message says the line came from differs between a file and a table.
POSITION = re.compile(r"^[^\s(]*:\d+: ")


def without_position(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {**row, "error_message": POSITION.sub("", row["error_message"] or "") or None}
        for row in rows
    ]


def test_a_delta_source_is_answered_as_the_replay(spark: Any, tmp_path: Path) -> None:
    events = events_with_final_tick(tmp_path)
    expected = replay(events, tmp_path / "replay")
    lines = events.read_text().splitlines()
    table = str(tmp_path / "requests")
    half = len(lines) // 2
    for chunk in (lines[:half], lines[half:]):  # two commits: a key's events in commit order
        write_deltalake(
            table,
            pa.table({"raw": chunk}),
            mode="append",
            configuration={"delta.enableChangeDataFeed": "true"},
        )
    base = event_time_options(tmp_path, Keying.SHARD, "native")
    options = dataclasses.replace(
        base, coordinator_source=SourceOptions(format="delta", path=table)
    )
    run_to_end(
        build_coordinator_query(spark, parse_settings({}), options=options, available_now=True)
    )
    tables = Path(options.tables_root)
    decisions = without_position(read_table(tables / "decisions"))
    answered = [r for r in expected["decisions"] if r.get("event_id") is not None]
    assert_same_rows(spark, canonical(decisions), canonical(without_position(answered)))
    assert_same_rows(
        spark, canonical(read_table(tables / "group_events")), canonical(expected["group_events"])
    )
    rejected = read_table(tables / "rejected_events")
    assert len(rejected) == 1
    assert rejected[0]["raw"].startswith('{"event_id": "bad-1"')
