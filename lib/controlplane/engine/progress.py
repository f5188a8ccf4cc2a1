"""A ``query_progress`` row per micro-batch, and a log line per query per interval.

The foreachBatch sink (``batch.BatchSink``) adds up the adapter's per-call figures (events,
rejected lines, timers fired, the largest timer lateness) and leaves them here by
(query name, batch id); a StreamingQueryListener on the driver joins them with Spark's own
progress (input rows, batch time, duration, state rows, rows dropped by the watermark),
appends the row, idempotently by the query id and batch id, sums it into the query's next
log line (``ProgressReport``), then runs the query's after-commit hook (the landing
directory's archiver, io/archive.py): when Spark reports a batch's progress, the batch is
committed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

log = logging.getLogger("controlplane.progress")

_LOCK = threading.Lock()
_FIGURES: dict[tuple[str, int], dict[str, int]] = {}


def stash(query: str, batch_id: int, figures: Mapping[str, int]) -> None:
    with _LOCK:
        _FIGURES[(query, batch_id)] = dict(figures)


def take(query: str, batch_id: int) -> dict[str, int]:
    with _LOCK:
        return _FIGURES.pop((query, batch_id), {})


def _iso_ms(text: str | None) -> int | None:
    if not text:
        return None
    from datetime import datetime

    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def progress_row(progress: Any, figures: Mapping[str, int]) -> dict[str, Any]:
    """The query_progress row of one StreamingQueryProgress plus the adapter's figures."""
    operators = list(progress.stateOperators or [])
    durations = dict(progress.durationMs or {})
    return {
        "query": progress.name or str(progress.id),
        "batch_id": int(progress.batchId),
        "batch_time_ms": _iso_ms(progress.timestamp),
        "processed_at_ms": int(time.time() * 1000),
        "input_rows": int(progress.numInputRows),
        "events": figures.get("events", 0),
        "rejected": figures.get("rejected", 0),
        "keys_called": figures.get("keys_called", 0),
        "timers_fired": figures.get("timers_fired", 0),
        "max_timer_lateness_ms": figures.get("max_timer_lateness_ms", 0),
        "state_rows": sum(int(op.numRowsTotal) for op in operators),
        "late_rows_dropped": sum(int(op.numRowsDroppedByWatermark) for op in operators),
        "duration_ms": int(durations.get("triggerExecution", 0)),
    }


class ProgressReport:
    """One log line per query per interval, instead of one per batch.

    A query's first batch in a run gets its line at once (it is the slow one, and shows the
    query works); then each line sums the batches of the last ``interval_ms`` (0: a line per
    batch). A batch that lost rows to the watermark gets a WARNING line of its own at once;
    an interval whose timers fired later than ``lateness_warning_ms`` is logged at WARNING
    (the job is falling behind), every other line at INFO. The batch durations are compared
    with the trigger interval: with processing-time timeouts Spark runs a batch every trigger
    even when idle, and Spark's own "Current batch is falling behind" warning fires whenever
    one takes longer than the trigger, which says little; the line reports how many did, and
    the timer lateness, which is what a slow batch costs.
    """

    def __init__(
        self,
        interval_ms: int,
        trigger_interval_ms: int | None = None,
        lateness_warning_ms: int | None = None,
    ) -> None:
        self.interval_ms = interval_ms
        self.trigger_interval_ms = trigger_interval_ms
        self.lateness_warning_ms = lateness_warning_ms
        self._windows: dict[str, _Window] = {}
        self._seen: set[str] = set()

    def add(self, row: Mapping[str, Any], now_ms: int) -> list[tuple[int, str]]:
        """The (level, line) pairs to log after this batch's row, usually none."""
        query = str(row["query"])
        lines: list[tuple[int, str]] = []
        if row["late_rows_dropped"]:
            lines.append(
                (
                    logging.WARNING,
                    f"{query}: batch {row['batch_id']} dropped {row['late_rows_dropped']} "
                    "row(s) behind the watermark (lines without a row)",
                )
            )
        window = self._windows.setdefault(query, _Window(started_ms=now_ms))
        window.add(row, self.trigger_interval_ms)
        first = query not in self._seen
        self._seen.add(query)
        if first or now_ms - window.started_ms >= self.interval_ms:
            late = self.lateness_warning_ms
            level = (
                logging.WARNING
                if late is not None and window.max_timer_lateness_ms > late
                else logging.INFO
            )
            lines.append((level, window.line(query, now_ms, self.trigger_interval_ms, late)))
            del self._windows[query]
        return lines


class _Window:
    """The batches of one query since its last line."""

    def __init__(self, started_ms: int) -> None:
        self.started_ms = started_ms
        self.first_batch: int | None = None
        self.last_batch = 0
        self.batches = 0
        self.sums = dict.fromkeys(("input_rows", "events", "rejected", "timers_fired"), 0)
        self.max_timer_lateness_ms = 0
        self.state_rows = 0
        self.total_duration_ms = 0
        self.max_duration_ms = 0
        self.over_trigger = 0

    def add(self, row: Mapping[str, Any], trigger_interval_ms: int | None) -> None:
        batch = int(row["batch_id"])
        self.first_batch = batch if self.first_batch is None else self.first_batch
        self.last_batch = batch
        self.batches += 1
        for name in self.sums:
            self.sums[name] += int(row[name])
        self.max_timer_lateness_ms = max(
            self.max_timer_lateness_ms, int(row["max_timer_lateness_ms"])
        )
        self.state_rows = int(row["state_rows"])
        duration = int(row["duration_ms"])
        self.total_duration_ms += duration
        self.max_duration_ms = max(self.max_duration_ms, duration)
        if trigger_interval_ms is not None and duration > trigger_interval_ms:
            self.over_trigger += 1

    def line(
        self,
        query: str,
        now_ms: int,
        trigger_interval_ms: int | None,
        lateness_warning_ms: int | None,
    ) -> str:
        if self.batches == 1:
            span = f"batch {self.last_batch}"
        else:
            seconds = max(0, now_ms - self.started_ms) // 1000
            span = f"{self.batches} batches ({self.first_batch}-{self.last_batch}) in {seconds} s"
        figures = " ".join(f"{name}={value}" for name, value in self.sums.items())
        text = (
            f"{query}: {span}: {figures} max_timer_lateness_ms={self.max_timer_lateness_ms} "
            f"state_rows={self.state_rows} batch_ms avg={self.total_duration_ms // self.batches} "
            f"max={self.max_duration_ms}"
        )
        if trigger_interval_ms is not None:
            text += f" ({self.over_trigger} over the {trigger_interval_ms} ms trigger)"
        if lateness_warning_ms is not None and self.max_timer_lateness_ms > lateness_warning_ms:
            text += f"; timers fire more than {lateness_warning_ms} ms late: falling behind"
        return text


_HOOKS_LOCK = threading.Lock()
_AFTER_COMMIT: dict[str, Callable[[Any], None]] = {}


def after_commit(query: str, hook: Callable[[Any], None] | None) -> None:
    """Run ``hook(progress)`` once each batch of the named query is committed (the listener
    calls it after the batch's query_progress row); None removes it. Query names are unique
    among a session's active queries, so the hook of the last query built under a name is
    the one of the query running under it."""
    with _HOOKS_LOCK:
        if hook is None:
            _AFTER_COMMIT.pop(query, None)
        else:
            _AFTER_COMMIT[query] = hook


def _hook(query: str) -> Callable[[Any], None] | None:
    with _HOOKS_LOCK:
        return _AFTER_COMMIT.get(query)


def make_listener(writer_factory: Any, report: ProgressReport | None = None) -> Any:
    """A StreamingQueryListener writing through ``writer_factory(query_id) -> BatchWriter``,
    logging through ``report`` and running the queries' after-commit hooks."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    lines = report or ProgressReport(0)

    class ProgressListener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            log.info("query %s started (id %s, run %s)", event.name, event.id, event.runId)

        def onQueryProgress(self, event: Any) -> None:
            progress = event.progress
            try:
                row = progress_row(progress, take(progress.name or "", int(progress.batchId)))
                writer_factory(str(progress.id)).write("query_progress", [row], row["batch_id"])
                for level, line in lines.add(row, int(time.time() * 1000)):
                    log.log(level, "%s", line)
            except Exception:  # progress must never stop the query
                log.exception("could not record progress of batch %s", progress.batchId)
            hook = _hook(progress.name or "")
            if hook is not None:
                try:
                    hook(progress)
                except Exception:
                    log.exception("%s: after batch %s", progress.name, progress.batchId)

        def onQueryIdle(self, event: Any) -> None:
            return None

        def onQueryTerminated(self, event: Any) -> None:
            if event.exception:
                log.error("query %s failed: %s", event.id, event.exception)
            else:  # the job says why it stopped, in one line
                log.debug("query %s stopped", event.id)

    return ProgressListener()
