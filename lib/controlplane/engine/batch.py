"""The foreachBatch sink: splits the adapter's envelopes into tables and writes each table
exactly once per micro-batch (sinks.BatchWriter), then publishes the batch's answers to the
answers topic when there is one, then leaves the batch's figures for the progress line.

The batch DataFrame is materialised once (``toArrow``), so the stateful operator is never
evaluated twice for one batch. Each envelope already holds a call's rows of one table in the
table's Arrow columns, built on the executors (engine.envelope): the sink only reads the streams,
concatenates each table's and adds the engine's columns (``split_batch``), never through Python
dicts; a batch with no rows writes nothing.

The answers topic (docs/engine.md, "The answers topic") comes after the Delta tables, which
stay the audit and the source of truth: one record per ``decisions`` and ``quota_decisions``
row, the row as Delta holds it (its JSON built by the state function: engine.answer_json). A
failed produce fails the batch; Spark runs it again, the Delta writes are skipped as already
committed and the answers are produced again: at least once on the topic, and clients drop
duplicates by ``event_id``. With ``engine.answers_order: with_delta`` the answers are produced
while the tables are written (the publish's Spark job started from a thread of the sink's,
with the batch's job properties), and the batch ends when both have: an answer may then be read
before its row is committed, and a batch whose writes fail has published answers that its
replay publishes again (docs/engine.md, "The answers topic", says when the replay's may differ).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from controlplane.engine import envelope, progress
from controlplane.engine.envelope import METRICS_COLUMNS, METRICS_TABLE
from controlplane.engine.options import AnswersOrder
from controlplane.io.answers import ANSWERED_TABLES, ANSWERS_TABLE, AnswersPublisher
from controlplane.io.locations import TableNames
from controlplane.io.schemas import ENGINE_COLUMNS, TABLES
from controlplane.io.sinks import choose_writer

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# The threads every sink of the process shares, created when first needed and kept for the
# process's life: a driver that builds a query again (a notebook, a test) reuses them instead
# of keeping idle threads for each sink it built. The writers: one per engine table, at least
# the coordinator's four and the quota's three written at the same moment (both write
# rejected_events), so neither waits for a thread; the publishers: one per answered table, each
# of one query. A sink that waits for a thread is only slower: each batch still waits for its
# own writes and publish. Work on a pool never submits to the same pool (no deadlock).
WRITE_THREADS = "sink-write"
ANSWER_THREADS = "sink-answers"
_POOL_SIZES = {WRITE_THREADS: len(TABLES), ANSWER_THREADS: len(ANSWERED_TABLES)}
_pools: dict[str, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def shared_pool(name: str) -> ThreadPoolExecutor:
    """The process's pool ``name`` (``WRITE_THREADS`` or ``ANSWER_THREADS``)."""
    with _pools_lock:
        pool = _pools.get(name)
        if pool is None:
            pool = ThreadPoolExecutor(_POOL_SIZES[name], thread_name_prefix=name)
            _pools[name] = pool
        return pool


def split_envelopes(
    envelopes: Sequence[tuple[str, str]], batch_id: int, processed_at_ms: int
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
    """Rows per table (with batch_id, processed_at_ms) and the batch's summed figures, from
    the per-row form of a batch (``StateFunction.call``'s JSON texts): the reference
    ``split_batch`` is tested against."""
    tables: dict[str, list[dict[str, Any]]] = {}
    figures = _no_figures()
    for table, text in envelopes:
        row = json.loads(text)
        if table == METRICS_TABLE:
            figures["keys_called"] += 1
            for name in ("events", "rejected", "timers_fired"):
                figures[name] += int(row.get(name, 0))
            lateness = int(row.get("max_timer_lateness_ms", 0))
            figures["max_timer_lateness_ms"] = max(figures["max_timer_lateness_ms"], lateness)
            continue
        row["batch_id"] = batch_id
        row["processed_at_ms"] = processed_at_ms
        tables.setdefault(table, []).append(row)
    return tables, figures


def split_batch(
    arrow: Any, batch_id: int, processed_at_ms: int
) -> tuple[dict[str, Any], dict[str, int]]:
    """``split_envelopes`` on the batch's Arrow table (columns ``table`` and ``rows``, one
    Arrow stream of a call's rows of that table: engine.envelope): each table's rows as an
    Arrow table with the table's columns (and ``deleted`` for ``groups``), in batch order, and
    the batch's summed figures. The calls' answers (``_answers``, with an answers topic) come
    back as they were built, in batch order. A table this engine does not know comes back as
    its rows' texts (column ``row``), for the caller to report."""
    import pyarrow as pa

    figures = _no_figures()
    parts: dict[str, list[Any]] = {}
    names, packed = arrow.column("table"), arrow.column("rows")
    for name, data in zip(names.to_pylist(), _buffers(packed), strict=True):
        parts.setdefault(name, []).append(envelope.unpack(data))
    tables: dict[str, Any] = {}
    for name, pieces in parts.items():
        rows = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
        if name == METRICS_TABLE:
            _add_figures(figures, rows)
        elif name in TABLES:
            tables[name] = _with_engine_columns(name, rows, batch_id, processed_at_ms)
        else:
            tables[name] = rows
    return tables, figures


def _no_figures() -> dict[str, int]:
    """A batch's figures before its first ``_metrics`` row."""
    return {name: 0 for name in (*METRICS_COLUMNS, "keys_called")}


def _buffers(column: Any) -> list[Any]:
    """The binary values of a column, as Arrow buffers (no copy)."""
    return [value.as_buffer() for chunk in column.chunks for value in chunk]


def _with_engine_columns(table: str, rows: Any, batch_id: int, processed_at_ms: int) -> Any:
    """One table's rows with the engine's columns, where the table has them."""
    import pyarrow as pa

    count = rows.num_rows
    columns = rows.columns
    fields = list(rows.schema)
    at = len(TABLES[table].fields) - len(ENGINE_COLUMNS)  # the engine's columns end the table
    for offset, (name, value) in enumerate(
        (("batch_id", batch_id), ("processed_at_ms", processed_at_ms))
    ):
        columns.insert(at + offset, pa.array([value] * count, pa.int64()))
        fields.insert(at + offset, pa.field(name, pa.int64()))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields))


def _add_figures(figures: dict[str, int], metrics: Any) -> None:
    """The ``_metrics`` rows of the batch, summed into ``figures``."""
    import pyarrow.compute as pc

    figures["keys_called"] = metrics.num_rows
    for column in ("events", "rejected", "timers_fired"):
        figures[column] = int(pc.sum(pc.fill_null(metrics.column(column), 0)).as_py() or 0)
    lateness = pc.max(pc.fill_null(metrics.column("max_timer_lateness_ms"), 0)).as_py()
    figures["max_timer_lateness_ms"] = max(0, int(lateness or 0))


QUERY_ID_PROPERTY = "sql.streaming.queryId"  # set by Spark on the stream thread (StreamExecution)


def query_app_id(query: str, checkpoint: str, spark: Any = None) -> str:
    """Idempotence id: the query name plus the checkpoint's query id (a new checkpoint starts
    batch ids at 0 again, so it must not reuse the old id).

    The id is the local property Spark sets on the thread that runs foreachBatch (it is the id
    stored in the checkpoint's ``metadata``), else that file read as a local path. Never a
    made-up constant: an id shared by two checkpoints would make the new one skip every batch
    the old one wrote (a checkpoint at a URI such as ``file:/``, ``dbfs:/`` or ``s3://``
    cannot be read as a local path).
    """
    query_id = _query_id_property(spark)
    if query_id is None:
        metadata = Path(checkpoint) / "metadata"
        try:
            query_id = str(json.loads(metadata.read_text(encoding="utf-8"))["id"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RuntimeError(
                f"{query}: cannot read the query id of checkpoint {checkpoint} ({exc}); "
                "refusing to write without an idempotence id"
            ) from exc
    return f"controlplane-{query}-{query_id}"


def _query_id_property(spark: Any) -> str | None:
    try:
        value = spark.sparkContext.getLocalProperty(QUERY_ID_PROPERTY)
    except Exception:  # no session, or no SparkContext (Spark Connect)
        return None
    return str(value) if value else None


class BatchSink:
    def __init__(
        self,
        query: str,
        tables: Sequence[str],
        location: str | TableNames,  # the tables root, or the schema of the tables by name
        checkpoint: str,
        writer_preference: str = "auto",
        answers: AnswersPublisher | None = None,
        answers_order: AnswersOrder = AnswersOrder.AFTER_DELTA,
    ) -> None:
        self.query = query
        self.tables = tuple(tables)
        self.location = location
        self.checkpoint = checkpoint
        self.writer_preference = writer_preference
        self.answers = answers
        self.answers_order = answers_order
        self._writer: Any = None

    def writer(self, spark: Any) -> Any:
        if self._writer is None:
            app_id = query_app_id(self.query, self.checkpoint, spark)
            self._writer = choose_writer(spark, self.location, app_id, self.writer_preference)
        return self._writer

    def __call__(self, frame: Any, batch_id: int) -> None:
        started = time.perf_counter()
        arrow = frame.toArrow()
        processed_at_ms = int(time.time() * 1000)
        timings_ms = {"compute": _ms_since(started)}
        tables, figures = split_batch(arrow, batch_id, processed_at_ms)
        answers = tables.pop(ANSWERS_TABLE, None)
        if self.answers is not None:
            check_answers(answers, tables, batch_id)
        spark = frame.sparkSession
        publishing = self._publish_beside(spark, answers, batch_id, processed_at_ms)
        try:
            if tables:  # an idle batch opens no writer and writes nothing
                written = {table: tables.pop(table, []) for table in self.tables}
                self._write(self.writer(spark), written, batch_id, timings_ms)
        except BaseException:
            _wait_out(publishing, batch_id)  # no publish outlives its batch
            raise
        for table, rows in tables.items():
            log.error("batch %d: %d rows for unknown table %s dropped", batch_id, len(rows), table)
        if self.answers is not None:  # a failure here replays the whole batch
            if publishing is None:  # after Delta
                sent, took = self._timed_publish(spark, answers, batch_id, processed_at_ms)
            else:
                at = time.perf_counter()
                sent, took = publishing.result()
                timings_ms["answers_wait"] = _ms_since(at)  # what the batch waited after Delta
            if sent:
                timings_ms["answers"] = took
            log.debug("batch %d: %d answers on %s", batch_id, sent, self.answers.topic)
        progress.stash(self.query, batch_id, figures)
        log.debug(
            "batch %d: computed in %d ms, then written and published in %d ms",
            batch_id,
            timings_ms["compute"],
            _ms_since(started) - timings_ms["compute"],
            extra={SINK_TIMINGS: timings_ms, "batch_id": batch_id},
        )

    def _write(
        self, writer: Any, rows: dict[str, Any], batch_id: int, timings_ms: dict[str, int]
    ) -> None:
        """Each table's rows, exactly once (a replayed batch skips the tables already
        committed). A writer whose tables are independent (``tables_at_once``) writes them
        side by side, on the core the batch's Spark job leaves idle; the batch fails if any
        table's write failed, after the others ended."""
        todo = [table for table in self.tables if len(rows[table])]
        if len(todo) < 2 or not getattr(writer, "tables_at_once", False):
            for table in self.tables:  # in a fixed order
                took = _timed_write(writer, table, rows[table], batch_id)
                if took is not None:
                    timings_ms[table] = took
            return
        pool = shared_pool(WRITE_THREADS)
        futures = [(t, pool.submit(_timed_write, writer, t, rows[t], batch_id)) for t in todo]
        failures: list[BaseException] = []
        for table, future in futures:
            try:
                took = future.result()
            except BaseException as exc:  # raised below, once every write has ended
                log.error("batch %d: %s not written: %s", batch_id, table, exc, exc_info=exc)
                failures.append(exc)
                continue
            if took is not None:
                timings_ms[table] = took
        if failures:
            raise failures[0]

    def _publish_beside(
        self, spark: Any, answers: Any, batch_id: int, processed_at_ms: int
    ) -> Future[tuple[int, int]] | None:
        """With ``with_delta``, the batch's answers published on a thread of their own while the
        tables are written: the future's (answers sent, ms the publish took). None when they
        wait for the tables (``after_delta``, no answers topic, no answers in the batch)."""
        if self.answers is None or self.answers_order is not AnswersOrder.WITH_DELTA:
            return None
        if answers is None or not answers.num_rows:
            return None
        publish = functools.partial(self._timed_publish, spark, answers, batch_id, processed_at_ms)
        return shared_pool(ANSWER_THREADS).submit(with_job_properties(spark, publish))

    def _timed_publish(
        self, spark: Any, answers: Any, batch_id: int, processed_at_ms: int
    ) -> tuple[int, int]:
        """The batch's answers published: (answers sent, ms the publish took)."""
        assert self.answers is not None
        at = time.perf_counter()
        sent = self.answers.publish(spark, answers, batch_id, processed_at_ms)
        return sent, _ms_since(at)


def with_job_properties(spark: Any, work: Callable[[], _T]) -> Callable[[], _T]:
    """``work`` run with this thread's Spark job properties (the streaming query's job group,
    which its stop cancels; the batch's description) and ``spark``'s job tags, as PySpark's
    pinned threads need. The tags are the thread's own: cleared after ``work``, since the
    sink's thread serves every batch. ``work`` as it is without a running SparkContext (the
    sink's unit tests)."""
    from pyspark import SparkContext, inheritable_thread_target
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is None or not isinstance(spark, SparkSession):
        return work
    inheriting = inheritable_thread_target(spark)(work)

    def run() -> _T:
        try:
            return inheriting()  # type: ignore[no-any-return]
        finally:
            spark.clearTags()

    return run


def _wait_out(publishing: Future[tuple[int, int]] | None, batch_id: int) -> None:
    """The publish beside a batch whose writes failed, waited for: its own failure is logged,
    the write's is the batch's."""
    if publishing is None:
        return
    failure = publishing.exception()  # an interrupted wait is raised, not logged
    if failure is not None:
        log.error("batch %d: answers not published: %s", batch_id, failure, exc_info=failure)


def check_answers(answers: Any, tables: dict[str, Any], batch_id: int) -> None:
    """One answer per decision and per quota decision of the batch, else the batch fails before
    anything is written: a state function built without answers (``StateFunction(...,
    answers=True)``) behind a sink with an answers topic would otherwise publish none."""
    decided = sum(len(tables[table]) for table in ANSWERED_TABLES if table in tables)
    built = 0 if answers is None else answers.num_rows
    if built != decided:
        raise RuntimeError(
            f"batch {batch_id}: {built} answers for {decided} decisions; the state function "
            "must be built with answers=True when the query has an answers topic"
        )


def _timed_write(writer: Any, table: str, rows: Any, batch_id: int) -> int | None:
    """The ms the table's write took, or None when it wrote nothing (already committed)."""
    at = time.perf_counter()
    return _ms_since(at) if writer.write(table, rows, batch_id) else None


# A debug record's attribute: the ms of a batch's steps. ``answers`` is the publish's own time:
# on the batch's path after the tables (after_delta), beside them (with_delta), where
# ``answers_wait`` is what the batch waited for it after its writes.
SINK_TIMINGS = "sink_timings_ms"


def _ms_since(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)
