"""The job's progress log: a line per query per interval (its first batch at once), sums of
the interval's batches, warnings only when something is wrong; these are the lines an operator
reads. The query_progress table keeps a row per batch (test_engine_wiring), committed together,
a commit per query per interval (below)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from controlplane.engine.progress import ProgressReport, records_left_unread

MINUTE_MS = 60_000


def batch(query: str, batch_id: int, **figures: int) -> dict[str, Any]:
    row = {
        "query": query,
        "batch_id": batch_id,
        "input_rows": 0,
        "events": 0,
        "rejected": 0,
        "timers_fired": 0,
        "max_timer_lateness_ms": 0,
        "state_rows": 0,
        "late_rows_dropped": 0,
        "duration_ms": 400,
    }
    row.update(figures)
    return row


def test_an_idle_minute_of_batches_is_one_line_per_query() -> None:
    """With processing-time timeouts Spark runs a batch every trigger, idle or not: the log
    used to carry a line per batch, 60 a minute per query."""
    report = ProgressReport(MINUTE_MS, trigger_interval_ms=1000)
    lines = []
    for second in range(0, 190):  # three minutes and some
        for query in ("coordinator", "quota"):
            lines += report.add(batch(query, second), now_ms=second * 1000)
    texts = [text for _, text in lines]
    assert len(texts) == 2 * (1 + 3)  # each query's first batch, then one line a minute
    assert texts[0] == (
        "coordinator: batch 0: input_rows=0 events=0 rejected=0 timers_fired=0 "
        "max_timer_lateness_ms=0 state_rows=0 batch_ms avg=400 max=400 "
        "(0 over the 1000 ms trigger)"
    )
    assert texts[2].startswith("coordinator: 61 batches (1-61) in 60 s: ")
    assert texts[4].startswith("coordinator: 61 batches (62-122) in 60 s: ")
    assert {level for level, _ in lines} == {logging.INFO}


def test_a_line_sums_the_batches_of_its_interval_and_counts_the_slow_ones() -> None:
    report = ProgressReport(MINUTE_MS, trigger_interval_ms=1000)
    report.add(batch("coordinator", 0, duration_ms=20_000), now_ms=0)
    assert not report.add(
        batch("coordinator", 1, input_rows=5, events=4, rejected=1, duration_ms=1500),
        now_ms=1000,
    )
    assert not report.add(
        batch("coordinator", 2, timers_fired=2, max_timer_lateness_ms=900, state_rows=7),
        now_ms=30_000,
    )
    [(level, text)] = report.add(
        batch("coordinator", 3, input_rows=2, events=2, duration_ms=1200, state_rows=6),
        now_ms=61_000,
    )
    assert level == logging.INFO
    assert text == (
        "coordinator: 3 batches (1-3) in 60 s: input_rows=7 events=6 rejected=1 "
        "timers_fired=2 max_timer_lateness_ms=900 state_rows=6 batch_ms avg=1033 max=1500 "
        "(2 over the 1000 ms trigger)"
    )


def test_rows_lost_to_the_watermark_are_a_warning_at_once() -> None:
    report = ProgressReport(MINUTE_MS)
    report.add(batch("coordinator", 0), now_ms=0)
    lines = report.add(batch("coordinator", 1, late_rows_dropped=3), now_ms=1000)
    assert lines == [
        (
            logging.WARNING,
            "coordinator: batch 1 dropped 3 row(s) behind the watermark (lines without a row)",
        )
    ]


def test_timers_later_than_the_warning_threshold_make_the_line_a_warning() -> None:
    """The job is falling behind: timers fire later than the failover gap (the line a
    "Current batch is falling behind" warning every slow batch never said)."""
    report = ProgressReport(MINUTE_MS, trigger_interval_ms=1000, lateness_warning_ms=30_000)
    [(first, _)] = report.add(batch("quota", 0, max_timer_lateness_ms=30_000), now_ms=0)
    assert first == logging.INFO  # at the threshold, not over it
    report.add(batch("quota", 1, max_timer_lateness_ms=45_000), now_ms=1000)
    [(level, text)] = report.add(batch("quota", 2), now_ms=62_000)
    assert level == logging.WARNING
    assert text.endswith("; timers fire more than 30000 ms late: falling behind")
    assert "max_timer_lateness_ms=45000" in text


def test_a_batch_that_left_records_unread_makes_the_line_a_warning() -> None:
    """A source's cap (max_records_per_trigger) leaves records waiting: in processing time a
    heartbeat that waits past its session finds its member expired, so the line says so."""
    report = ProgressReport(MINUTE_MS, trigger_interval_ms=1000, unread_warning=True)
    [(first, text)] = report.add(batch("coordinator", 0), now_ms=0, unread_records=0)
    assert first == logging.INFO
    assert "unread" not in text
    report.add(batch("coordinator", 1), now_ms=1000, unread_records=40_000)
    report.add(batch("coordinator", 2), now_ms=2000, unread_records=12_000)
    [(level, text)] = report.add(batch("coordinator", 3), now_ms=61_000, unread_records=0)
    assert level == logging.WARNING
    assert text.endswith(
        "; 2 batch(es) read the source's max_records_per_trigger and left up to 40000 records "
        "a partition unread, to wait a batch more: size it to hold what arrives during the "
        'longest batch (docs/engine.md, "The cap and the members\' sessions")'
    )
    assert not report.add(batch("coordinator", 4), now_ms=62_000, unread_records=0)
    [(after, text)] = report.add(batch("coordinator", 5), now_ms=123_000, unread_records=0)
    assert after == logging.INFO  # the next interval read everything
    assert "unread" not in text


def test_in_event_time_records_left_unread_are_no_warning() -> None:
    """Event time follows the events, so a capped batch expires nobody (a replay's backlog)."""
    report = ProgressReport(0)
    [(level, text)] = report.add(batch("coordinator", 0), now_ms=0, unread_records=40_000)
    assert level == logging.INFO
    assert "unread" not in text


class Source:
    def __init__(self, metrics: dict[str, str] | None) -> None:
        self.metrics = metrics


class Progress:
    def __init__(self, *sources: Source) -> None:
        self.sources = list(sources)


def test_records_left_unread_are_the_kafka_sources_most_behind_partition() -> None:
    behind = {"avgOffsetsBehindLatest": "12.5", "maxOffsetsBehindLatest": "20"}
    assert records_left_unread(Progress(Source(behind))) == 20
    two = Progress(Source(behind), Source({"maxOffsetsBehindLatest": "7"}))
    assert records_left_unread(two) == 20
    assert records_left_unread(Progress(Source({"maxOffsetsBehindLatest": "0"}))) == 0
    # a file source reports no such metric; an unreadable value counts as none
    assert records_left_unread(Progress(Source({}), Source(None))) == 0
    assert records_left_unread(Progress(Source({"maxOffsetsBehindLatest": "n/a"}))) == 0
    assert records_left_unread(Progress()) == 0


def test_interval_zero_logs_every_batch() -> None:
    report = ProgressReport(0)
    lines = [report.add(batch("quota", n), now_ms=n) for n in range(3)]
    assert [len(batch_lines) for batch_lines in lines] == [1, 1, 1]
    assert lines[2][0][1].startswith("quota: batch 2: ")


# query_progress commits: a row per batch, committed together (engine.progress)


class RecordingWriter:
    """A BatchWriter that records each commit, or fails the next ``failures`` of them."""

    def __init__(self, commits: list[tuple[str, list[int], int]], query_id: str) -> None:
        self.commits, self.query_id = commits, query_id
        self.failures = 0

    def write(self, table: str, rows: Any, batch_id: int) -> bool:
        if self.failures:
            self.failures -= 1
            raise OSError("the storage is away")
        assert table == "query_progress"
        self.commits.append((self.query_id, [row["batch_id"] for row in rows], batch_id))
        return True


def spark_progress(query_id: str, batch_id: int, behind: int | None = None) -> Any:
    """What a StreamingQueryProgress shows the listener: a Kafka source ``behind`` records in
    its most behind partition, or a source without the metric (None)."""
    from types import SimpleNamespace

    metrics = {} if behind is None else {"maxOffsetsBehindLatest": str(behind)}
    return SimpleNamespace(
        id=query_id,
        name=f"name-of-{query_id}",
        batchId=batch_id,
        timestamp="2026-11-23T16:15:40.881Z",
        numInputRows=0,
        stateOperators=[],
        durationMs={"triggerExecution": 400},
        sources=[SimpleNamespace(metrics=metrics)],
    )


def recorder(interval_ms: int) -> tuple[Any, list[tuple[str, list[int], int]], dict[str, Any]]:
    from controlplane.engine.progress import ProgressCommits, ProgressRecorder

    commits: list[tuple[str, list[int], int]] = []
    writers: dict[str, RecordingWriter] = {}
    clock = {"now_ms": 0}

    def writer_for(query_id: str) -> RecordingWriter:
        return writers.setdefault(query_id, RecordingWriter(commits, query_id))

    rec = ProgressRecorder(
        writer_for, ProgressReport(MINUTE_MS), ProgressCommits(interval_ms), lambda: clock["now_ms"]
    )
    return rec, commits, {"clock": clock, "writers": writers}


def run_batches(rec: Any, clock: dict[str, int], seconds: range, queries: tuple[str, ...]) -> None:
    for second in seconds:
        clock["now_ms"] = second * 1000
        for query in queries:
            rec.progress(spark_progress(query, second))


def test_the_recorder_logs_a_batch_that_left_records_unread_as_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The listener's path: the source metric of a capped batch reaches the logged line."""
    from controlplane.engine.progress import ProgressCommits, ProgressRecorder

    report = ProgressReport(0, unread_warning=True)
    rec = ProgressRecorder(
        lambda query_id: RecordingWriter([], query_id), report, ProgressCommits(0), lambda: 0
    )
    with caplog.at_level(logging.INFO, logger="controlplane.progress"):
        rec.progress(spark_progress("q1", 0, behind=0))
        rec.progress(spark_progress("q1", 1, behind=25_000))
    assert [r.levelno for r in caplog.records] == [logging.INFO, logging.WARNING]
    assert "left up to 25000 records a partition unread" in caplog.records[1].getMessage()


def test_the_job_s_report_warns_of_unread_records_in_processing_time_only() -> None:
    from controlplane.engine.options import EngineOptions, TimeMode
    from controlplane.engine.queries import progress_report

    assert progress_report(EngineOptions(mode=TimeMode.PROCESSING_TIME)).unread_warning
    assert not progress_report(EngineOptions(mode=TimeMode.EVENT_TIME)).unread_warning


def test_a_minute_of_batches_is_one_commit_per_query_with_a_row_per_batch() -> None:
    """With processing-time timeouts Spark runs a batch every trigger: a commit per batch was
    86,400 Delta commits a day per query at a 1 s trigger. Each commit is idempotent by the
    last batch id it holds (the query's app transaction version)."""
    rec, commits, fakes = recorder(MINUTE_MS)
    run_batches(rec, fakes["clock"], range(0, 130), ("q1", "q2"))
    assert commits == [
        ("q1", [0], 0),  # a query's first row at once: it shows the query records progress
        ("q2", [0], 0),
        ("q1", list(range(1, 62)), 61),  # the first held row came at 1 s, this one at 61 s
        ("q2", list(range(1, 62)), 61),
        ("q1", list(range(62, 123)), 122),
        ("q2", list(range(62, 123)), 122),
    ]
    rec.flush()  # the job stops: what is held is committed
    assert commits[6:] == [("q1", list(range(123, 130)), 129), ("q2", list(range(123, 130)), 129)]
    rec.flush()
    assert len(commits) == 8  # nothing twice


def test_interval_zero_commits_every_batch() -> None:
    rec, commits, fakes = recorder(0)
    run_batches(rec, fakes["clock"], range(3), ("q1",))
    assert commits == [("q1", [0], 0), ("q1", [1], 1), ("q1", [2], 2)]


def test_a_query_that_ends_commits_what_it_held() -> None:
    rec, commits, fakes = recorder(MINUTE_MS)
    run_batches(rec, fakes["clock"], range(5), ("q1", "q2"))
    rec.terminated("q1")
    assert commits[-1] == ("q1", [1, 2, 3, 4], 4)
    assert [query for query, _, _ in commits] == ["q1", "q2", "q1"]


def test_a_failed_commit_keeps_its_rows_for_the_next_one(caplog: pytest.LogCaptureFixture) -> None:
    from controlplane.engine.progress import ProgressCommits

    rec, commits, fakes = recorder(MINUTE_MS)
    run_batches(rec, fakes["clock"], range(1), ("q1",))
    fakes["writers"]["q1"].failures = 1
    run_batches(rec, fakes["clock"], range(1, 62), ("q1",))  # the 61 s commit fails
    assert commits == [("q1", [0], 0)]
    assert "could not record progress of batches 1-61 (kept for the next commit)" in caplog.text
    run_batches(rec, fakes["clock"], range(62, 122), ("q1",))
    assert commits[-1] == ("q1", list(range(1, 122)), 121)  # the failed rows, then the new
    held = ProgressCommits(MINUTE_MS, max_rows=3)
    assert held.put_back("q", [{"batch_id": n} for n in range(5)], 0) == 2
    assert [row["batch_id"] for row in held.take("q")] == [2, 3, 4]  # the oldest go first


def test_the_listener_commits_through_the_recorder_and_flushes() -> None:
    """The StreamingQueryListener Spark calls (no JVM needed to build or call it)."""
    from types import SimpleNamespace

    from controlplane.engine.progress import ProgressCommits, make_listener

    commits: list[tuple[str, list[int], int]] = []
    listener = make_listener(
        lambda query_id: RecordingWriter(commits, query_id),
        ProgressReport(MINUTE_MS),
        ProgressCommits(MINUTE_MS),
        lambda: 5_000,
    )
    for batch in range(3):
        listener.onQueryProgress(SimpleNamespace(progress=spark_progress("q1", batch)))
    assert commits == [("q1", [0], 0)]
    listener.onQueryTerminated(SimpleNamespace(id="q1", exception=None))
    assert commits[-1] == ("q1", [1, 2], 2)
    listener.onQueryProgress(SimpleNamespace(progress=spark_progress("q2", 0)))
    listener.onQueryProgress(SimpleNamespace(progress=spark_progress("q2", 1)))
    listener.flush()
    assert commits[-1] == ("q2", [1], 1)


# A progress as Spark 4.2's JVM writes it (``StreamingQueryProgress.json()``), from a file-source
# query with state; customMetrics shortened.
JVM_PROGRESS = (
    '{"id":"8fd96d56-f082-42f1-b963-83eeb85dbd0b","runId":"ff11f8c7-a110-457e-9e99-1eda9c23897f'
    '","name":"coordinator","timestamp":"2026-11-27T11:54:47.000Z","batchId":1,"batchDuration":'
    '751,"numInputRows":1,"inputRowsPerSecond":1.0,"processedRowsPerSecond":1.3,"durationMs":{"'
    'addBatch":576,"commitOffsets":26,"getBatch":27,"latestOffset":29,"queryPlanning":61,"trigg'
    'erExecution":751,"walCommit":27},"stateOperators":[{"operatorName":"stateStoreSave","numRo'
    'wsTotal":3,"numRowsUpdated":1,"allUpdatesTimeMs":134,"numRowsRemoved":0,"allRemovalsTimeMs'
    '":0,"commitTimeMs":38,"memoryUsedBytes":8544,"numRowsDroppedByWatermark":0,"numShufflePart'
    'itions":4,"numStateStoreInstances":4,"customMetrics":{"SnapshotLastUploaded.partition_0_de'
    'fault":-1,"SnapshotLastUploaded.partition_1_default":-1,"SnapshotLastUploaded.partition_2_'
    'default":-1}}],"sources":[{"description":"FileStreamSource[file:/tmp/landing]","startOffse'
    't":{"logOffset":0},"endOffset":{"logOffset":1},"latestOffset":null,"numInputRows":1,"input'
    'RowsPerSecond":1.0,"processedRowsPerSecond":1.3}],"sink":{"description":"NoopTable","numOu'
    'tputRows":1}}'
)


class JvmProgress:
    def __init__(self, text: str) -> None:
        self.text = text

    def json(self) -> str:
        return self.text


class JvmEvent:
    def __init__(self, text: str) -> None:
        self.jprogress = JvmProgress(text)

    def progress(self) -> JvmProgress:
        return self.jprogress


def test_a_progress_read_from_its_json_gives_the_row_and_the_archivers_offset() -> None:
    """The listener reads Spark's progress as its JSON (two JVM calls, not PySpark's ~630):
    the fields the row and the landing archiver read, with the source offsets as JSON texts."""
    from types import SimpleNamespace

    from controlplane.engine.progress import json_progress_events, progress_row
    from controlplane.io.archive import _log_offset

    seen: list[Any] = []
    events = json_progress_events(SimpleNamespace(onQueryProgress=seen.append))
    events.onQueryProgress(JvmEvent(JVM_PROGRESS))
    progress = seen[0].progress
    assert progress.sources[0].endOffset == '{"logOffset":1}'
    assert _log_offset(progress.sources[0].endOffset) == 1
    row = progress_row(progress, {"events": 4})
    assert {k: v for k, v in row.items() if k != "processed_at_ms"} == {
        "query": "coordinator",
        "batch_id": 1,
        "batch_time_ms": 1795780487000,  # 2026-11-27T11:54:47.000Z
        "input_rows": 1,
        "events": 4,
        "rejected": 0,
        "keys_called": 0,
        "timers_fired": 0,
        "max_timer_lateness_ms": 0,
        "state_rows": 3,
        "late_rows_dropped": 0,
        "duration_ms": 751,
    }


def test_a_progress_whose_json_cannot_be_read_goes_through_pysparks_conversion(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from types import SimpleNamespace

    from pyspark.sql.streaming.listener import JStreamingQueryListener

    from controlplane.engine.progress import json_progress_events

    converted: list[Any] = []
    monkeypatch.setattr(
        JStreamingQueryListener, "onQueryProgress", lambda self, jevent: converted.append(jevent)
    )
    seen: list[Any] = []
    events = json_progress_events(SimpleNamespace(onQueryProgress=seen.append))
    broken = JvmEvent("{not json")
    with caplog.at_level(logging.DEBUG, logger="controlplane.progress"):
        events.onQueryProgress(broken)
        events.onQueryProgress(broken)
    assert converted == [broken, broken]
    assert seen == []
    levels = [r.levelno for r in caplog.records if "PySpark's conversion" in r.getMessage()]
    assert levels == [logging.WARNING, logging.DEBUG]  # said once, then quietly
