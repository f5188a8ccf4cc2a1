"""The job's progress log: a line per query per interval (its first batch at once), sums of
the interval's batches, warnings only when something is wrong. The query_progress table keeps
a row per batch (test_engine_wiring); these are the lines an operator reads."""

from __future__ import annotations

import logging
from typing import Any

from controlplane.engine.progress import ProgressReport

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


def test_interval_zero_logs_every_batch() -> None:
    report = ProgressReport(0)
    lines = [report.add(batch("quota", n), now_ms=n) for n in range(3)]
    assert [len(batch_lines) for batch_lines in lines] == [1, 1, 1]
    assert lines[2][0][1].startswith("quota: batch 2: ")
