"""The record of the coordinator query's runs in its checkpoint (engine.runs): each start is
planned when the query is built and appended once it is; the runner takes a call's epoch from
the starts (tests/coordinator/test_runner.py), and a restart on Spark records a second run
(tests/spark/test_processing_time.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controlplane.core.config import ConfigError, parse_settings
from controlplane.engine import queries
from controlplane.engine.options import EngineOptions, TimeMode
from controlplane.engine.runs import (
    next_start,
    parse_runs,
    plan_run_start,
    record_run_start,
    run_line,
)
from controlplane.io.checkpoint import KEYING_RECORD, RUNS_RECORD
from controlplane.io.options import SourceOptions
from engine.test_checkpoints import NoSpark
from engine.test_keying_record import RemoteSpark


def started(checkpoint: str, now_ms: int) -> tuple[int, ...]:
    """A start planned and recorded, as the coordinator query's build does."""
    starts = plan_run_start(NoSpark(), checkpoint, now_ms)
    record_run_start(NoSpark(), checkpoint, starts[-1])
    return starts


def test_each_start_is_recorded_after_the_ones_before(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "coordinator")  # created by the first start
    assert plan_run_start(NoSpark(), checkpoint, 1_000) == (1_000,)
    assert not (tmp_path / "coordinator").exists()  # planning writes nothing
    assert started(checkpoint, 1_000) == (1_000,)
    assert started(checkpoint, 5_000) == (1_000, 5_000)
    lines = (tmp_path / "coordinator" / RUNS_RECORD).read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"version": 1, "start": 1_000},
        {"version": 1, "start": 5_000},
    ]
    assert not (tmp_path / "coordinator" / KEYING_RECORD).exists()  # a record of its own


def test_a_start_behind_the_last_one_or_the_last_batch_follows_it(tmp_path: Path) -> None:
    assert started(str(tmp_path), 5_000) == (5_000,)
    assert started(str(tmp_path), 4_000) == (5_000, 5_001)
    offsets = tmp_path / "offsets"  # Spark's offset log: the last planned batch's time
    offsets.mkdir()
    (offsets / "7").write_text('v1\n{"batchTimestampMs":9000,"batchWatermarkMs":0}\n{}\n')
    (offsets / "12").write_text('v1\n{"batchTimestampMs":9500,"batchWatermarkMs":0}\n{}\n')
    (offsets / ".12.crc").write_text("")
    assert started(str(tmp_path), 6_000) == (5_000, 5_001, 9_501)


@pytest.mark.parametrize(
    ("starts", "planned_ms", "now_ms", "start"),
    [
        ((), None, 7, 7),
        ((3,), None, 7, 7),
        ((3, 9), None, 7, 10),
        ((9,), None, 9, 10),
        ((3,), 12, 7, 13),
        ((3,), 5, 7, 7),
        ((), 7, 7, 8),
    ],
)
def test_the_next_start(
    starts: tuple[int, ...], planned_ms: int | None, now_ms: int, start: int
) -> None:
    assert next_start(starts, planned_ms, now_ms) == start


def test_lines_written_through_spark_come_in_any_order_and_maybe_twice() -> None:
    lines = [run_line(9), "", run_line(3), run_line(9)]
    assert parse_runs(lines) == (3, 9)
    assert parse_runs([]) == ()  # an append that wrote nothing yet


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("[1, 2]", "not a version 1 line"),
        ('{"version": 2, "start": 1}', "not a version 1 line"),
        ('{"version": 1}', "not a whole number"),
        ('{"version": 1, "start": 2.5}', "not a whole number"),
        ('{"version": 1, "start": true}', "not a whole number"),
        ("{not json", "Expecting property name"),
    ],
)
def test_a_line_this_build_cannot_read_is_refused(line: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_runs([run_line(1), line])


def test_an_unreadable_record_stops_the_job_and_is_kept(tmp_path: Path) -> None:
    (tmp_path / RUNS_RECORD).write_text(run_line(1) + "\n{not json\n")
    with pytest.raises(ConfigError, match=f"record of runs .{RUNS_RECORD}.*moving it away"):
        plan_run_start(NoSpark(), str(tmp_path), 1_000)
    assert (tmp_path / RUNS_RECORD).read_text() == run_line(1) + "\n{not json\n"


class WritingSpark(RemoteSpark):
    """RemoteSpark whose text writer keeps what it is asked to write, how and where; its
    reader answers the offset log with ``planned`` (a batch time, or no log)."""

    def __init__(self, lines: list[str], planned: int | None = None) -> None:
        super().__init__(lines=lines)
        self.planned = planned
        self.written: list[tuple[str, str, str]] = []  # (mode, location, line)
        self.rows: list[tuple[str]] = []
        self.mode_name = ""

    def createDataFrame(self, rows: list[tuple[str]], schema: str) -> WritingSpark:
        assert schema == "value string"
        self.rows = rows
        return self

    def coalesce(self, partitions: int) -> WritingSpark:
        return self

    @property
    def write(self) -> WritingSpark:
        return self

    def mode(self, name: str) -> WritingSpark:
        self.mode_name = name
        return self

    def text(self, location: str) -> Any:
        if self.rows:  # the writer's
            [(line,)] = self.rows
            self.written.append((self.mode_name, location, line))
            self.rows = []
            return None
        if location.endswith("/offsets"):
            self.asked.append(location)
            return OffsetLog(self.planned)
        return super().text(location)


class OffsetLog:
    """The answer of Spark's reader over an offset log, to the one query the engine makes."""

    def __init__(self, planned: int | None) -> None:
        self.planned = planned

    def selectExpr(self, expression: str) -> OffsetLog:
        assert "batchTimestampMs" in expression
        return self

    def collect(self) -> list[tuple[int | None]]:
        return [(self.planned,)]


def test_a_checkpoint_elsewhere_is_read_and_appended_to_through_spark() -> None:
    """Elsewhere (Databricks, Spark Connect) Spark's text source reads the record and the
    offset log, and its writer appends the new start: nothing is rewritten."""
    spark = WritingSpark([run_line(1_000)], planned=2_500)
    starts = plan_run_start(spark, "s3://b/c", 2_000)
    assert starts == (1_000, 2_501)
    assert spark.asked == [f"s3://b/c/{RUNS_RECORD}", "s3://b/c/offsets"]
    record_run_start(spark, "s3://b/c", starts[-1])
    assert spark.written == [("append", f"s3://b/c/{RUNS_RECORD}", run_line(2_501))]
    with pytest.raises(ConfigError, match="Access Denied"):
        plan_run_start(RemoteSpark(error="Access Denied\n\tat org..."), "s3://b/c", 1)
    fresh = WritingSpark([])
    fresh.error = f"[PATH_NOT_FOUND] Path does not exist: s3://b/c/{RUNS_RECORD}."
    assert plan_run_start(fresh, "s3://b/c", 3_000) == (3_000,)


def coordinator_options(tmp_path: Path, mode: TimeMode) -> EngineOptions:
    return EngineOptions(
        mode=mode,
        checkpoint_root=str(tmp_path / "checkpoints"),
        coordinator_source=SourceOptions(format="jsonl", path=str(tmp_path / "landing")),
    )


@pytest.mark.parametrize("refused", [False, True])
def test_the_coordinator_query_records_a_start_once_it_is_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, refused: bool
) -> None:
    """In processing time, once its query is built (not when building refuses it); the
    runners are given every start, this one last."""
    built: list[Any] = []

    def build_query(spark: Any, options: Any, **kwargs: Any) -> str:
        runners = kwargs["runners_for"](options.checkpoint(kwargs["name"]))
        built.append(runners)
        if refused:
            raise ConfigError("the keying changed")
        return "writer"

    monkeypatch.setattr(queries, "build_query", build_query)
    options = coordinator_options(tmp_path, TimeMode.PROCESSING_TIME)
    record = tmp_path / "checkpoints" / "coordinator" / RUNS_RECORD
    if refused:
        with pytest.raises(ConfigError):
            queries.build_coordinator_query(NoSpark(), parse_settings({}), options=options)
        assert not record.exists()
        return
    for _ in range(2):
        assert queries.build_coordinator_query(NoSpark(), parse_settings({}), options=options) == (
            "writer"
        )
    starts = parse_runs(record.read_text().splitlines())
    assert len(starts) == 2
    assert [r.run_starts for r in built] == [starts[:1], starts]
    assert built[0].failover_gap_ms == options.failover_gap_ms


def test_event_time_records_no_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[Any] = []

    def build_query(spark: Any, options: Any, **kwargs: Any) -> str:
        built.append(kwargs["runners_for"](options.checkpoint(kwargs["name"])))
        return "writer"

    monkeypatch.setattr(queries, "build_query", build_query)
    options = coordinator_options(tmp_path, TimeMode.EVENT_TIME)
    queries.build_coordinator_query(NoSpark(), parse_settings({}), options=options)
    assert (built[0].run_starts, built[0].failover_gap_ms) == ((), None)
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(
    "text", ["v1\n", "v1\n{not json\n", 'v1\n{"batchTimestampMs": "9"}\n', 'v1\n["x"]\n']
)
def test_an_offset_log_that_is_not_spark_s_stops_the_job(tmp_path: Path, text: str) -> None:
    offsets = tmp_path / "offsets"
    offsets.mkdir()
    (offsets / "3").write_text(text)
    with pytest.raises(ConfigError, match=r"its offset log: .*offsets"):
        plan_run_start(NoSpark(), str(tmp_path), 1_000)
    assert not (tmp_path / RUNS_RECORD).exists()  # nothing recorded
