"""The record of the coordinator query's runs in its checkpoint (engine.runs): each start is
recorded, in order, before the query starts; the runner takes a call's epoch from it
(tests/coordinator/test_runner.py), and a restart on Spark records a second run
(tests/spark/test_processing_time.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controlplane.core.config import ConfigError
from controlplane.engine.runs import next_start, parse_runs, record_run_start, runs_text
from controlplane.io.checkpoint import KEYING_RECORD, RUNS_RECORD
from engine.test_checkpoints import NoSpark
from engine.test_keying_record import RemoteSpark


def test_each_start_is_recorded_after_the_ones_before(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "coordinator")  # created by the first start
    assert record_run_start(NoSpark(), checkpoint, 1_000) == (1_000,)
    assert record_run_start(NoSpark(), checkpoint, 5_000) == (1_000, 5_000)
    record = json.loads((tmp_path / "coordinator" / RUNS_RECORD).read_text())
    assert record == {"version": 1, "starts": [1_000, 5_000]}
    assert not (tmp_path / "coordinator" / KEYING_RECORD).exists()  # a record of its own


def test_a_start_behind_the_last_one_s_clock_follows_it(tmp_path: Path) -> None:
    record_run_start(NoSpark(), str(tmp_path), 5_000)
    assert record_run_start(NoSpark(), str(tmp_path), 4_000) == (5_000, 5_001)
    assert record_run_start(NoSpark(), str(tmp_path), 5_001) == (5_000, 5_001, 5_002)


@pytest.mark.parametrize(
    ("starts", "now_ms", "start"), [((), 7, 7), ((3,), 7, 7), ((3, 9), 7, 10), ((9,), 9, 10)]
)
def test_the_next_start(starts: tuple[int, ...], now_ms: int, start: int) -> None:
    assert next_start(starts, now_ms) == start


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[1, 2]", "not a version 1 record"),
        ('{"version": 2, "starts": [1]}', "not a version 1 record"),
        ('{"version": 1}', "not a list of whole numbers"),
        ('{"version": 1, "starts": [1, 2.5]}', "not a list of whole numbers"),
        ('{"version": 1, "starts": [1, true]}', "not a list of whole numbers"),
        ('{"version": 1, "starts": [2, 2]}', "not in increasing order"),
        ('{"version": 1, "starts": [3, 1]}', "not in increasing order"),
    ],
)
def test_a_record_this_build_cannot_read_is_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_runs(text)


@pytest.mark.parametrize("text", ["{not json", '{"version": 1, "starts": [3, 1]}', ""])
def test_an_unreadable_record_stops_the_job_and_is_kept(tmp_path: Path, text: str) -> None:
    (tmp_path / RUNS_RECORD).write_text(text)
    with pytest.raises(ConfigError, match=f"record of runs .{RUNS_RECORD}.*moving it away"):
        record_run_start(NoSpark(), str(tmp_path), 1_000)
    assert (tmp_path / RUNS_RECORD).read_text() == text


def test_the_text_round_trip() -> None:
    assert parse_runs(runs_text((1, 5, 9))) == (1, 5, 9)
    assert parse_runs(runs_text(())) == ()


class WritingSpark(RemoteSpark):
    """RemoteSpark whose text writer keeps what it is asked to write, and where."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines=lines)
        self.written: list[tuple[str, str, str]] = []  # (mode, location, text)
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
        return super().text(location)


def test_a_checkpoint_elsewhere_is_read_and_written_through_spark() -> None:
    """Elsewhere (Databricks, Spark Connect) Spark's text source reads the record and its
    writer writes the new one over it."""
    spark = WritingSpark([runs_text((1_000,))])
    assert record_run_start(spark, "s3://b/c", 2_000) == (1_000, 2_000)
    assert spark.asked == [f"s3://b/c/{RUNS_RECORD}"]
    assert spark.written == [("overwrite", f"s3://b/c/{RUNS_RECORD}", runs_text((1_000, 2_000)))]
    missing = f"[PATH_NOT_FOUND] Path does not exist: s3://b/c/{RUNS_RECORD}."
    with pytest.raises(ConfigError, match="Access Denied"):
        record_run_start(RemoteSpark(error="Access Denied\n\tat org..."), "s3://b/c", 1)
    first = WritingSpark([])
    first.error = missing
    assert record_run_start(first, "s3://b/c", 3_000) == (3_000,)
