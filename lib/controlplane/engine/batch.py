"""The foreachBatch sink: splits the adapter's envelopes into tables and writes each table
exactly once per micro-batch (sinks.BatchWriter), then publishes the batch's answers to the
answers topic when there is one, then leaves the batch's figures for the progress line.

The batch DataFrame is materialised once (``toArrow``), so the stateful operator is never
evaluated twice for one batch. The rows of each table go from their JSON text straight into
the table's Arrow columns (``split_batch``: pyarrow's JSON reader, with the table's schema), never
through Python dicts; a batch with no rows writes nothing.

The answers topic (docs/engine.md, "The answers topic") comes after the Delta tables, which
stay the audit and the source of truth: one record per ``decisions`` and ``quota_decisions``
row, the row as Delta holds it. A failed produce fails the batch; Spark runs it again, the
Delta writes are skipped as already committed and the answers are produced again: at least
once on the topic, and clients drop duplicates by ``event_id``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from controlplane.engine import progress
from controlplane.engine.adapter import METRICS_TABLE
from controlplane.io.kafka_clients import AnswerRecord, AnswersPublisher
from controlplane.io.locations import TableNames
from controlplane.io.schemas import ENGINE_COLUMNS, TABLES, arrow_schema
from controlplane.io.sinks import choose_writer, to_arrow

log = logging.getLogger(__name__)


def split_envelopes(
    envelopes: Sequence[tuple[str, str]], batch_id: int, processed_at_ms: int
) -> tuple[dict[str, list[dict[str, Any]]], dict[str, int]]:
    """Rows per table (with batch_id, processed_at_ms) and the batch's summed figures."""
    tables: dict[str, list[dict[str, Any]]] = {}
    figures = {"events": 0, "rejected": 0, "timers_fired": 0, "max_timer_lateness_ms": 0}
    figures["keys_called"] = 0
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
    """``split_envelopes`` on the batch's Arrow table (columns ``table`` and ``row``, a row
    text holding one or more rows, one JSON object a line): each table's rows as an Arrow
    table with the table's columns (and ``deleted`` for ``groups``), in batch order, and the
    batch's summed figures. A table this engine does not know comes back as its rows' texts
    (column ``row``), for the caller to report."""
    import pyarrow as pa
    import pyarrow.compute as pc

    figures = {"events": 0, "rejected": 0, "timers_fired": 0, "max_timer_lateness_ms": 0}
    figures["keys_called"] = 0
    tables: dict[str, Any] = {}
    if not arrow.num_rows:
        return tables, figures
    names, texts = arrow.column("table"), arrow.column("row")
    for name in pc.unique(names).to_pylist():
        selected = pc.filter(texts, pc.equal(names, name))
        if name == METRICS_TABLE:
            _add_figures(figures, selected)
        elif name in TABLES:
            tables[name] = _table_rows(name, selected, batch_id, processed_at_ms)
        else:
            tables[name] = pa.table({"row": _lines(selected)})
    return tables, figures


def _table_rows(table: str, texts: Any, batch_id: int, processed_at_ms: int) -> Any:
    """One table's rows, from their JSON texts, with the engine's columns."""
    import pyarrow as pa

    rows = _read_json(_row_schema(table), texts)
    if rows is None:  # what pyarrow's reader refuses, Python's reads, as the sink did before
        envelopes = [(table, line) for line in _lines(texts)]
        parsed, _ = split_envelopes(envelopes, batch_id, processed_at_ms)
        return pa.Table.from_pylist(parsed[table], schema=_full_schema(table))
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


def _add_figures(figures: dict[str, int], texts: Any) -> None:
    """The ``_metrics`` rows of the batch, summed into ``figures``."""
    import pyarrow.compute as pc

    metrics = _read_json(_metrics_schema(), texts)
    if metrics is None:
        _, summed = split_envelopes([(METRICS_TABLE, line) for line in _lines(texts)], 0, 0)
        figures.update(summed)
        return
    figures["keys_called"] = metrics.num_rows
    for column in ("events", "rejected", "timers_fired"):
        figures[column] = int(pc.sum(pc.fill_null(metrics.column(column), 0)).as_py())
    lateness = pc.max(pc.fill_null(metrics.column("max_timer_lateness_ms"), 0)).as_py()
    figures["max_timer_lateness_ms"] = max(0, int(lateness))


def _read_json(schema: Any, texts: Any) -> Any:
    """The rows of JSON texts (one object a line) as an Arrow table with ``schema``, keys it
    does not name dropped, missing ones null, by pyarrow's JSON reader; None when it refuses
    them."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    chunk = texts.combine_chunks() if isinstance(texts, pa.ChunkedArray) else texts
    offsets = pa.array([0, len(chunk)], pa.int32())
    joined = pc.binary_join(pa.ListArray.from_arrays(offsets, chunk), "\n")
    count = pc.count_substring(joined, "\n")[0].as_py() + 1
    data = joined[0].as_buffer()
    try:
        rows = pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(1 << 20, data.size + 1)),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
    except pa.ArrowInvalid as exc:
        log.debug("pyarrow's JSON reader refused a batch's rows (%s): read by Python", exc)
        return None
    return rows if rows.num_rows == count else None


def _lines(texts: Any) -> list[str]:
    return [line for text in texts.to_pylist() for line in text.split("\n")]


_ROW_SCHEMAS: dict[str, Any] = {}


def _row_schema(table: str) -> Any:
    """The table's columns an output row carries: all but the engine's, plus ``deleted``
    for a merged table."""
    schema = _ROW_SCHEMAS.get(table)
    if schema is None:
        import pyarrow as pa

        engine = {name for name, _ in ENGINE_COLUMNS}
        fields = [f for f in arrow_schema(TABLES[table]) if f.name not in engine]
        if table in MERGED:
            fields.append(pa.field("deleted", pa.bool_()))
        schema = _ROW_SCHEMAS[table] = pa.schema(fields)
    return schema


def _full_schema(table: str) -> Any:
    """The table's columns, plus ``deleted`` for a merged table."""
    import pyarrow as pa

    schema = arrow_schema(TABLES[table])
    return schema.append(pa.field("deleted", pa.bool_())) if table in MERGED else schema


MERGED: Final = ("groups",)  # io.sinks.MERGED_TABLES: rows that carry a ``deleted`` flag
_METRICS_COLUMNS: Final = ("events", "rejected", "timers_fired", "max_timer_lateness_ms")


def _metrics_schema() -> Any:
    import pyarrow as pa

    return pa.schema([pa.field(name, pa.int64()) for name in _METRICS_COLUMNS])


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


ANSWERED_TABLES = ("decisions", "quota_decisions")


def answer_key(table: str, row: dict[str, Any]) -> str | None:
    """What a client reads its answers by: the group for a decision, the user for a quota
    decision (its client_id when the user is null)."""
    if table == "decisions":
        return row.get("group_id")
    user = row.get("user")
    return user if user is not None else row.get("client_id")


def answer_records(rows_by_table: dict[str, Any]) -> list[AnswerRecord]:
    """One answer per decisions and quota_decisions row, in batch order, each the row as the
    Delta table holds it (its columns, nulls included, unknown keys dropped)."""
    records = []
    for table in ANSWERED_TABLES:
        rows = rows_by_table.get(table)
        if rows is not None and len(rows):
            for row in to_arrow(table, rows).to_pylist():
                records.append(AnswerRecord(answer_key(table, row), row, table))
    return records


class BatchSink:
    def __init__(
        self,
        query: str,
        tables: Sequence[str],
        location: str | TableNames,  # the tables root, or the schema of the tables by name
        checkpoint: str,
        writer_preference: str = "auto",
        answers: AnswersPublisher | None = None,
    ) -> None:
        self.query = query
        self.tables = tuple(tables)
        self.location = location
        self.checkpoint = checkpoint
        self.writer_preference = writer_preference
        self.answers = answers
        self._writer: Any = None

    def writer(self, spark: Any) -> Any:
        if self._writer is None:
            app_id = query_app_id(self.query, self.checkpoint, spark)
            self._writer = choose_writer(spark, self.location, app_id, self.writer_preference)
        return self._writer

    def __call__(self, frame: Any, batch_id: int) -> None:
        arrow = frame.toArrow()
        processed_at_ms = int(time.time() * 1000)
        tables, figures = split_batch(arrow, batch_id, processed_at_ms)
        written: dict[str, Any] = {}
        if tables:  # an idle batch opens no writer and writes nothing
            writer = self.writer(frame.sparkSession)
            for table in self.tables:  # a fixed order: a replayed batch skips the tables done
                written[table] = tables.pop(table, [])
                writer.write(table, written[table], batch_id)
        for table, rows in tables.items():
            log.error("batch %d: %d rows for unknown table %s dropped", batch_id, len(rows), table)
        if self.answers is not None:  # after Delta: a failure here replays the whole batch
            sent = self.answers.publish(answer_records(written))
            log.debug("batch %d: %d answers on %s", batch_id, sent, self.answers.topic)
        progress.stash(self.query, batch_id, figures)
