"""One log line per micro-batch and the same figures in the ``query_progress`` table.

The foreachBatch sink (``batch.BatchSink``) adds up the adapter's per-call figures (events,
rejected lines, timers fired, the largest timer lateness) and leaves them here by
(query name, batch id); a StreamingQueryListener on the driver joins them with Spark's own
progress (input rows, batch time, duration, state rows, rows dropped by the watermark), logs
the line and appends the row, idempotently by the query id and batch id.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
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


def log_line(row: Mapping[str, Any]) -> str:
    return (
        f"{row['query']} batch={row['batch_id']} input_rows={row['input_rows']} "
        f"events={row['events']} rejected={row['rejected']} state_rows={row['state_rows']} "
        f"timers_fired={row['timers_fired']} max_timer_lateness_ms={row['max_timer_lateness_ms']} "
        f"late_rows_dropped={row['late_rows_dropped']} duration_ms={row['duration_ms']}"
    )


def make_listener(writer_factory: Any) -> Any:
    """A StreamingQueryListener writing through ``writer_factory(query_id) -> BatchWriter``."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class ProgressListener(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            log.info("query %s started (id %s, run %s)", event.name, event.id, event.runId)

        def onQueryProgress(self, event: Any) -> None:
            progress = event.progress
            try:
                row = progress_row(progress, take(progress.name or "", int(progress.batchId)))
                log.info(log_line(row))
                writer_factory(str(progress.id)).write("query_progress", [row], row["batch_id"])
            except Exception:  # progress must never stop the query
                log.exception("could not record progress of batch %s", progress.batchId)

        def onQueryIdle(self, event: Any) -> None:
            return None

        def onQueryTerminated(self, event: Any) -> None:
            if event.exception:
                log.error("query %s failed: %s", event.id, event.exception)
            else:
                log.info("query %s stopped", event.id)

    return ProgressListener()
