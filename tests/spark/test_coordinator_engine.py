"""The coordinator on the real runner: event-time equivalence with the replay command for
group and shard keying, and bad input."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from controlplane.core.config import parse_settings
from controlplane.engine.options import EngineOptions, Keying, TimeMode
from controlplane.engine.queries import build_coordinator_query
from controlplane.io.options import SourceOptions
from spark.conftest import ROOT, assert_same_rows, read_table, run_to_end

pytestmark = pytest.mark.spark

SAMPLE = ROOT / "conf" / "sample" / "group_events.jsonl"
ENGINE_COLUMNS = ("batch_id", "processed_at_ms")
LOCATION = re.compile(r"[^\s(]*events\.jsonl:")


def canonical(rows: list[dict[str, Any]]) -> list[str]:
    """Rows as sorted canonical JSON: engine columns and nulls dropped (docs/reference/events.md
    §5)."""

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


def event_time_options(tmp_path: Path, keying: Keying, writer: str = "delta-rs") -> EngineOptions:
    return EngineOptions(
        mode=TimeMode.EVENT_TIME,
        watermark_delay_ms=60_000,
        keying=keying,
        shards=4,
        checkpoint_root=str(tmp_path / "checkpoints"),
        tables_root=str(tmp_path / "tables"),
        writer=writer,
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


@pytest.mark.parametrize(
    ("keying", "writer"),
    [(Keying.GROUP, "delta-rs"), (Keying.SHARD, "delta-rs"), (Keying.SHARD, "native")],
)
def test_event_time_engine_equals_the_replay(
    spark: Any, tmp_path: Path, keying: Keying, writer: str
) -> None:
    options = event_time_options(tmp_path, keying, writer)
    events = events_with_final_tick(tmp_path)
    expected = replay(events, tmp_path / "replay")
    run_to_end(
        build_coordinator_query(spark, parse_settings({}), options=options, available_now=True)
    )
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


ODD_TIMES = ([1], "abc", "123", 1.5, 10**20, -(10**20), True)


def test_event_time_bad_lines_after_the_first_batch_are_kept_and_odd_times_do_not_fail(
    spark: Any, tmp_path: Path
) -> None:
    """Three batches (one file each). Spark judges lateness against the watermark of the
    batch before the previous one, so the third is the first that could lose a row: it holds a
    line that is not JSON, an event with no event time, events at the end of the long range (a
    heartbeat, and a join whose timer would fall past it), and one really late event. The bad
    lines reach rejected_events or get their INVALID_REQUEST row, the odd times are answered
    without failing the query, and the late event is answered too: Spark drops nothing."""
    options = event_time_options(tmp_path, Keying.SHARD)
    options = dataclasses.replace(
        options,
        coordinator_source=dataclasses.replace(options.coordinator_source, max_files_per_trigger=1),
    )
    landing = tmp_path / "landing"
    landing.mkdir()
    end = 2**63 - 1
    first = [
        {
            "event_id": "j1",
            "event_time_ms": 1_000_000,
            "type": "join",
            "group_id": "g1",
            "member_id": "",
            "request_version": 3,
            "session_timeout_ms": 10_000,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": ""}],
        }
    ]
    second = [{"event_id": "d1", "event_time_ms": 1_000_000, "type": "describe", "group_id": "g1"}]
    third = [
        "this is not json",
        {"event_id": "no-time", "type": "heartbeat", "group_id": "g1", "member_id": "m"},
        {"event_id": "far-hb", "event_time_ms": end, "type": "heartbeat", "group_id": "g2"}
        | {"member_id": "m", "generation_id": 1},
        {**first[0], "event_id": "far-join", "event_time_ms": end - 1_000, "group_id": "g3"},
        {"event_id": "late", "event_time_ms": 5, "type": "heartbeat", "group_id": "g4"}
        | {"member_id": "m", "generation_id": 1},
        # event times Spark must not cast (under ANSI a cast of [1] or "abc" fails the query)
        *(
            {"event_id": f"odd-{i}", "event_time_ms": odd, "type": "heartbeat", "group_id": "g1"}
            | {"member_id": "m", "generation_id": 1}
            for i, odd in enumerate(ODD_TIMES)
        ),
        '{"event_id": "lone", "type": "heartbeat", "group_id": "g\\ud800", "member_id": "m"}',
        # Spark reads no group_id from a line with a 2,000-digit number: misrouted, rejected
        '{"event_id": "long", "event_time_ms": 1000000, "type": "describe", "group_id": "g6",'
        f' "x": {"1" * 2000}}}',
    ]
    for index, lines in enumerate((first, second, third)):
        path = landing / f"events-{index}.jsonl"
        path.write_text(
            "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n"
        )
        os.utime(path, (1_700_000_000 + index * 100, 1_700_000_000 + index * 100))
    progress = run_to_end(
        build_coordinator_query(spark, parse_settings({}), options=options, available_now=True)
    )
    dropped = sum(
        int(op["numRowsDroppedByWatermark"]) for p in progress for op in p["stateOperators"]
    )
    batches = [p for p in progress if p["numInputRows"]]
    assert len(batches) == 3, "one file per batch"
    tables = Path(options.tables_root)
    decisions = {row["event_id"]: row for row in read_table(tables / "decisions")}
    assert decisions["no-time"]["error"] == "INVALID_REQUEST"
    assert "event_time_ms" in decisions["no-time"]["error_message"]
    assert decisions["far-hb"]["error"] == "UNKNOWN_MEMBER_ID"
    assert decisions["far-hb"]["decided_at_ms"] == end
    assert decisions["late"]["error"] == "UNKNOWN_MEMBER_ID"  # answered at the key's clock
    assert decisions["late"]["decided_at_ms"] == 5  # a new group's clock is its event's time
    assert dropped == 0
    for i in range(len(ODD_TIMES)):
        odd = decisions[f"odd-{i}"]
        assert odd["error"] == "INVALID_REQUEST"
        assert odd["error_message"].split(": ")[1] == "event_time_ms"
        assert odd["event_time_ms"] is None
    rejected = sorted(row["raw"] for row in read_table(tables / "rejected_events"))
    assert rejected == sorted(["this is not json", *third[-2:]])
    assert "long" not in decisions  # g6 is in shard 2 of 4, a line read with no group_id in 0
    [misrouted] = [row for row in read_table(tables / "rejected_events") if row["raw"] == third[-1]]
    assert misrouted["reason"].startswith("misrouted: ")
    groups = {row["group_id"]: row for row in read_table(tables / "groups")}
    assert groups["g3"]["group_state"] == "PreparingRebalance"


def test_event_time_lines_at_or_before_the_watermark_are_answered_as_in_the_replay(
    spark: Any, tmp_path: Path
) -> None:
    """Spark's stateful operator drops a row whose event time is at or before the watermark
    (``<=``): an event_time_ms of 0 in the first batch (whose watermark is 0), or an event
    exactly at the watermark the first batch's events set, arriving two batches later. Such a
    line used to leave no row at all while the replay answers it. Every line now reaches the
    core: the engine answers each as the replay does, and Spark drops nothing."""
    options = event_time_options(tmp_path, Keying.SHARD)
    options = dataclasses.replace(
        options,
        coordinator_source=dataclasses.replace(options.coordinator_source, max_files_per_trigger=1),
    )
    delay = options.watermark_delay_ms
    t = 1_000_000

    def join(event_id: str, time_ms: int, group: str) -> dict[str, Any]:
        return {
            "event_id": event_id,
            "event_time_ms": time_ms,
            "type": "join",
            "group_id": group,
            "member_id": "",
            "request_version": 4,  # asks for a member id first: one decision, no group yet
            "session_timeout_ms": 10_000,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": ""}],
        }

    files = [
        [join("at-zero", 0, "g0"), join("first", t, "g1")],  # batch 0: watermark 0
        [join("second", t, "g1")],  # batch 1: watermark t - delay
        [join("at-watermark", t - delay, "g2")],  # batch 2: late if <= t - delay
    ]
    landing = tmp_path / "landing"
    landing.mkdir()
    everything = tmp_path / "all.jsonl"
    for index, lines in enumerate(files):
        path = landing / f"events-{index}.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        os.utime(path, (1_700_000_000 + index * 100, 1_700_000_000 + index * 100))
        with everything.open("a") as out:
            out.write(path.read_text())
    expected = replay(everything, tmp_path / "replay")
    progress = run_to_end(
        build_coordinator_query(spark, parse_settings({}), options=options, available_now=True)
    )
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [2, 1, 1]
    watermarks = [p["eventTime"].get("watermark") for p in progress]
    assert watermarks[:3] == [
        "1970-01-01T00:00:00.000Z",
        "1970-01-01T00:15:40.000Z",  # t - delay: the third file's event sits exactly on it
        "1970-01-01T00:15:40.000Z",
    ]
    dropped = [int(op["numRowsDroppedByWatermark"]) for p in progress for op in p["stateOperators"]]
    assert sum(dropped) == 0
    decisions = read_table(Path(options.tables_root) / "decisions")
    assert sorted(row["event_id"] for row in decisions) == [
        "at-watermark",
        "at-zero",
        "first",
        "second",
    ]
    assert_same_rows(spark, canonical(decisions), canonical(expected["decisions"]))
    assert not read_table(Path(options.tables_root) / "rejected_events")
