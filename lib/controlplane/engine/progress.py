"""A ``query_progress`` row per micro-batch, and a log line per query per interval.

The foreachBatch sink (``batch.BatchSink``) adds up the adapter's per-call figures (events,
rejected lines, timers fired, the largest timer lateness) and leaves them here by
(query name, batch id); a StreamingQueryListener on the driver joins them with Spark's own
progress (input rows, batch time, duration, state rows, rows dropped by the watermark), holds
the row until its query's next commit (``ProgressCommits``: a commit per query per
``engine.progress_commit_interval_ms``, idempotent by the query id and the last batch id of
the commit), sums it into the query's next log line (``ProgressReport``), then runs the query's
after-commit hook (the landing directory's archiver, io/archive.py): when Spark reports a
batch's progress, the batch is committed.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
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


Row = Mapping[str, Any]


def records_left_unread(progress: Any) -> int:
    """The most records of one partition the batch's sources left unread when it was planned:
    a Kafka source's ``maxOffsetsBehindLatest`` (Spark's source metric), above 0 only when the
    batch read ``maxOffsetsPerTrigger`` with more waiting. 0 for sources without the metric."""
    return max(unread_metrics(progress), default=0)


def unread_metrics(progress: Any) -> list[int]:
    """Each source's readable ``maxOffsetsBehindLatest``; none for a source without it (a file
    source, or a batch planned before a restart and run again) or with an unreadable one."""
    values: list[int] = []
    for source in getattr(progress, "sources", None) or ():
        value: Any = (getattr(source, "metrics", None) or {}).get("maxOffsetsBehindLatest")
        try:
            values.append(int(float(value)))
        except (TypeError, ValueError, OverflowError):  # absent (None) or unreadable
            continue
    return values


class ProgressCommits:
    """The ``query_progress`` rows of each query, held and committed together.

    A query's rows are committed once ``interval_ms`` has passed since the first row it holds
    (0: each row at once), when the query ends, and when the job stops (``take_all``); the
    first row of each query in a run at once (it shows the query records its progress). With
    processing-time timeouts Spark runs a batch every trigger, idle or not: a commit per batch
    was ~86,000 Delta commits a day per query at a 1 s trigger; a minute's interval makes it
    1,440. The table still has a row per batch. A commit that failed gives its rows back
    (``put_back``), to go with the next one, up to ``max_rows`` held per query (the oldest
    go first). A job that dies loses the rows it held (at most an interval's).
    """

    MAX_ROWS = 10_000

    def __init__(self, interval_ms: int, max_rows: int = MAX_ROWS) -> None:
        self.interval_ms = interval_ms
        self.max_rows = max_rows
        self._lock = threading.Lock()
        self._held: dict[str, list[Row]] = {}
        self._since_ms: dict[str, int] = {}
        self._seen: set[str] = set()

    def add(self, query_id: str, row: Row, now_ms: int) -> list[Row]:
        """Hold ``row``; the rows to commit now (usually none)."""
        with self._lock:
            held = self._held.setdefault(query_id, [])
            if not held:
                self._since_ms[query_id] = now_ms
            held.append(row)
            first = query_id not in self._seen
            self._seen.add(query_id)
            if first or now_ms - self._since_ms[query_id] >= self.interval_ms:
                return self._take(query_id)
            return []

    def take(self, query_id: str) -> list[Row]:
        with self._lock:
            return self._take(query_id)

    def take_all(self) -> dict[str, list[Row]]:
        with self._lock:
            return {query_id: self._take(query_id) for query_id in list(self._held)}

    def put_back(self, query_id: str, rows: Sequence[Row], now_ms: int) -> int:
        """Rows whose commit failed, before those held since; how many were dropped."""
        with self._lock:
            held = [*rows, *self._held.get(query_id, [])]
            dropped = max(0, len(held) - self.max_rows)
            self._held[query_id] = held[dropped:]
            self._since_ms.setdefault(query_id, now_ms)
            return dropped

    def _take(self, query_id: str) -> list[Row]:
        self._since_ms.pop(query_id, None)
        return self._held.pop(query_id, [])


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

    With ``unread_warning`` (processing time), an interval in which a batch read its source's
    cap and left records unread (``unread_records``: a Kafka source's ``maxOffsetsBehindLatest``
    when the batch was planned) is a WARNING too: those records wait at least a batch more, and
    so do their answers (docs/engine.md, "The cap and the members' sessions").
    """

    def __init__(
        self,
        interval_ms: int,
        trigger_interval_ms: int | None = None,
        lateness_warning_ms: int | None = None,
        unread_warning: bool = False,
    ) -> None:
        self.interval_ms = interval_ms
        self.trigger_interval_ms = trigger_interval_ms
        self.lateness_warning_ms = lateness_warning_ms
        self.unread_warning = unread_warning
        self._windows: dict[str, _Window] = {}
        self._seen: set[str] = set()

    def add(
        self, row: Mapping[str, Any], now_ms: int, unread_records: int = 0
    ) -> list[tuple[int, str]]:
        """The (level, line) pairs to log after this batch's row, usually none.
        ``unread_records``: the most records of one source partition the batch left unread."""
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
        window.add(row, self.trigger_interval_ms, unread_records if self.unread_warning else 0)
        first = query not in self._seen
        self._seen.add(query)
        if first or now_ms - window.started_ms >= self.interval_ms:
            late = self.lateness_warning_ms
            warn = window.falling_behind(late) or window.capped
            level = logging.WARNING if warn else logging.INFO
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
        self.capped = 0  # batches that left records unread
        self.max_unread = 0

    def add(
        self, row: Mapping[str, Any], trigger_interval_ms: int | None, unread_records: int
    ) -> None:
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
        if unread_records > 0:
            self.capped += 1
            self.max_unread = max(self.max_unread, unread_records)

    def falling_behind(self, lateness_warning_ms: int | None) -> bool:
        """Timers fired later than the warning threshold (None: no threshold)."""
        return lateness_warning_ms is not None and self.max_timer_lateness_ms > lateness_warning_ms

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
        if self.falling_behind(lateness_warning_ms):
            text += f"; timers fire more than {lateness_warning_ms} ms late: falling behind"
        if self.capped:
            text += (
                f"; {self.capped} batch(es) read the source's max_records_per_trigger and left up "
                f"to {self.max_unread} records a partition unread, to wait a batch more: size it "
                'to hold what arrives during the longest batch (docs/engine.md, "The cap and '
                "the members' sessions\")"
            )
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


def _wall_ms() -> int:
    return int(time.time() * 1000)


class ProgressRecorder:
    """What the listener does, without Spark's listener class: each batch's row is held and
    committed through ``writer_factory(query_id) -> BatchWriter`` when ``commits`` says so,
    logged through ``report``, then the query's after-commit hook runs. ``flush()`` commits
    every row still held (the job calls it when it stops, before removing the listener)."""

    def __init__(
        self,
        writer_factory: Any,
        report: ProgressReport | None = None,
        commits: ProgressCommits | None = None,
        clock: Callable[[], int] = _wall_ms,
    ) -> None:
        self.writer_factory = writer_factory
        self.report = report or ProgressReport(0)
        self.commits = commits or ProgressCommits(0)
        self.clock = clock

    def progress(self, progress: Any) -> None:
        try:
            row = progress_row(progress, take(progress.name or "", int(progress.batchId)))
            now_ms = self.clock()
            self._commit(str(progress.id), self.commits.add(str(progress.id), row, now_ms))
            for level, line in self.report.add(row, now_ms, records_left_unread(progress)):
                log.log(level, "%s", line)
        except Exception:  # progress must never stop the query
            log.exception("could not record progress of batch %s", progress.batchId)
        hook = _hook(progress.name or "")
        if hook is not None:
            try:
                hook(progress)
            except Exception:
                log.exception("%s: after batch %s", progress.name, progress.batchId)

    def terminated(self, query_id: str) -> None:
        self._commit(query_id, self.commits.take(query_id))

    def flush(self) -> None:
        for query_id, rows in self.commits.take_all().items():
            self._commit(query_id, rows)

    def _commit(self, query_id: str, rows: list[Row]) -> None:
        if not rows:
            return
        try:  # idempotent by the last batch id: a replayed commit is skipped
            self.writer_factory(query_id).write("query_progress", rows, int(rows[-1]["batch_id"]))
        except Exception:  # progress must never stop the query
            dropped = self.commits.put_back(query_id, rows, self.clock())
            log.exception(
                "could not record progress of batches %s-%s (kept for the next commit%s)",
                rows[0]["batch_id"],
                rows[-1]["batch_id"],
                f"; {dropped} older row(s) dropped" if dropped else "",
            )


def make_listener(
    writer_factory: Any,
    report: ProgressReport | None = None,
    commits: ProgressCommits | None = None,
    clock: Callable[[], int] = _wall_ms,
) -> Any:
    """A StreamingQueryListener around a ``ProgressRecorder``; its ``flush()`` is the
    recorder's."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    recorder = ProgressRecorder(writer_factory, report, commits, clock)

    class ProgressListener(StreamingQueryListener):
        def flush(self) -> None:
            recorder.flush()

        def onQueryStarted(self, event: Any) -> None:
            log.info("query %s started (id %s, run %s)", event.name, event.id, event.runId)

        def onQueryProgress(self, event: Any) -> None:
            recorder.progress(event.progress)

        def onQueryIdle(self, event: Any) -> None:
            return None

        def onQueryTerminated(self, event: Any) -> None:
            recorder.terminated(str(event.id))
            if event.exception:
                log.error("query %s failed: %s", event.id, event.exception)
            else:  # the job says why it stopped, in one line
                log.debug("query %s stopped", event.id)

        @property
        def _jlistener(self) -> Any:  # what spark.streams.addListener registers
            made = getattr(self, "_jlistenerobj", None)
            if made is None:
                try:
                    made = self._jlistenerobj = json_progress_listener(self)
                except Exception:  # a PySpark without these classes: its own listener
                    log.debug("progress listener: PySpark's conversion", exc_info=True)
                    made = super()._jlistener
            return made

    return ProgressListener()


_OFFSETS = ("startOffset", "endOffset", "latestOffset")


def progress_json(jprogress: Any) -> dict[str, Any]:
    """A StreamingQueryProgress's JSON, with each source's offsets as the JSON texts the JVM
    object gives (``SourceProgress.endOffset()``): the JSON nests them as objects, which some
    PySpark versions' ``fromJson`` turn into Python reprs."""
    progress: dict[str, Any] = json.loads(jprogress.json())
    for source in progress.get("sources") or ():
        for name in _OFFSETS:
            value = source.get(name)
            if value is not None and not isinstance(value, str):
                source[name] = json.dumps(value, separators=(",", ":"))
    return progress


def json_progress_listener(pylistener: Any) -> Any:
    """The JVM side of a Python StreamingQueryListener, as PySpark builds it, around
    ``json_progress_events``."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    assert jvm is not None, "a listener is registered with a running SparkContext"
    wrapper = jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper
    return wrapper(json_progress_events(pylistener))


def json_progress_events(pylistener: Any) -> Any:
    """PySpark's Py4J callback for a Python listener (``JStreamingQueryListener``), except that a
    progress event is read as its JSON text (``progress().json()``, as Spark Connect and
    PySpark 4.2's ``StreamingQuery.lastProgress`` read one): two calls to the JVM. PySpark's
    own conversion (``QueryProgressEvent.fromJObject``) makes about 630 calls to the JVM per
    event, which took the driver 140-830 ms each (docs/benchmarks/engine.md). An event whose
    JSON cannot be read goes through PySpark's conversion."""
    from pyspark.sql.streaming.listener import JStreamingQueryListener, QueryProgressEvent

    class JsonProgressEvents(JStreamingQueryListener):
        warned = False  # the first event read the slow way is a warning, the rest debug

        def onQueryProgress(self, jevent: Any) -> None:
            try:
                event = QueryProgressEvent.fromJson({"progress": progress_json(jevent.progress())})
            except Exception:
                level = logging.DEBUG if self.warned else logging.WARNING
                self.warned = True
                log.log(level, "progress read through PySpark's conversion", exc_info=True)
                super().onQueryProgress(jevent)
                return
            self.pylistener.onQueryProgress(event)

    return JsonProgressEvents(pylistener)
