"""What the state function hands Spark, and the sink reads back: one row per table per call.

A call's output rows are grouped by table; each table becomes one envelope row, ``table`` (its
name) and ``rows`` (its rows as one Arrow IPC stream, in the table's columns). The rows are
converted to Arrow in the Python worker that produced them, where the calls of a batch run side
by side on the executors' cores, so the driver, which runs alone after the stateful stage, only
reads the streams and concatenates them (docs/benchmarks/engine.md, issue 14).

The columns of a table's stream are the table's own, less the ones the sink adds
(``batch_id``, ``processed_at_ms``), plus ``deleted`` for a merged table (``groups``); the
``_metrics`` row of a call has its figures' columns. The conversion is the one the per-row path
gives (``batch.split_envelopes``: each row through JSON, then into the table's schema) for rows
of JSON values, which is what the cores build: a value the direct conversion refuses and JSON
writes (a numpy scalar, a set) sends the table's rows through JSON first, as that path would
(tests/engine/test_sink_arrow.py compares the two on damaged input). A table this engine does
not know is carried as its rows' JSON texts (column ``row``), for the sink to report.

With an answers topic (io/answers.py), a call also hands Spark its answers (``_answers``,
engine.answer_json): for each ``decisions`` and ``quota_decisions`` row, its table, its record's
key and its JSON text less the columns the sink adds and the closing brace, built here too, for
the same reason: the driver only appends ``batch_id`` and ``processed_at_ms``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from json.encoder import (  # type: ignore[attr-defined]
    c_make_encoder,
    encode_basestring_ascii,
)
from typing import Any, Final

import pyarrow as pa

from controlplane.engine.answer_json import answers_table
from controlplane.io.answers import ANSWERS_TABLE
from controlplane.io.schemas import ENGINE_COLUMNS, TABLES, arrow_schema
from controlplane.io.sinks import MERGED_TABLES

METRICS_TABLE: Final = "_metrics"
METRICS_COLUMNS: Final = ("events", "rejected", "timers_fired", "max_timer_lateness_ms")
UNKNOWN_COLUMN: Final = "row"

Row = Mapping[str, Any]

_SCHEMAS: dict[str, pa.Schema] = {}


def row_schema(table: str) -> pa.Schema | None:
    """The columns a call's rows of ``table`` carry; None for a table the engine does not know."""
    schema = _SCHEMAS.get(table)
    if schema is None:
        if table == METRICS_TABLE:
            schema = pa.schema([pa.field(name, pa.int64()) for name in METRICS_COLUMNS])
        elif table in TABLES:
            engine = {name for name, _ in ENGINE_COLUMNS}
            fields = [f for f in arrow_schema(TABLES[table]) if f.name not in engine]
            if table in MERGED_TABLES:  # rows that carry a ``deleted`` flag
                fields.append(pa.field("deleted", pa.bool_()))
            schema = pa.schema(fields)
        else:
            return None
        _SCHEMAS[table] = schema
    return schema


def to_table(table: str, rows: Sequence[Row]) -> pa.Table:
    """A call's rows of ``table`` as Arrow."""
    schema = row_schema(table)
    if schema is None:
        return pa.table({UNKNOWN_COLUMN: pa.array([row_text(row) for row in rows], pa.string())})
    try:
        return direct_table(table, rows)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        # a value JSON changes first (a numpy scalar, a set, ...): read as the per-row path
        # reads it; a row that fits neither fails here, as it fails there
        return pa.Table.from_pylist([json.loads(row_text(row)) for row in rows], schema=schema)


def direct_table(table: str, rows: Sequence[Row]) -> pa.Table:
    """``pa.Table.from_pylist(rows, schema=row_schema(table))`` for a table the engine knows,
    raising what it raises. Rows that are all dicts (what the cores build) are converted as one
    struct array, in C++: the same columns and values (tests/engine/test_sink_arrow.py) at about
    two thirds of the cost. For rows of JSON objects: a row with a key that is not a string
    (which JSON refuses) may be read differently (Arrow matches ``bytes`` keys to the columns;
    from_pylist ignores them)."""
    if all(type(row) is dict for row in rows):
        return pa.Table.from_struct_array(pa.array(rows, type=_row_struct(table)))
    return pa.Table.from_pylist(list(rows), schema=row_schema(table))


_STRUCTS: dict[str, pa.StructType] = {}


def _row_struct(table: str) -> pa.StructType:
    """``row_schema(table)``'s columns as one struct type, built once per table."""
    struct = _STRUCTS.get(table)
    if struct is None:
        schema = row_schema(table)
        if schema is None:
            raise ValueError(f"{table}: not a table the engine knows")
        struct = _STRUCTS[table] = pa.struct(list(schema))
    return struct


def pack(table: pa.Table) -> bytes:
    """One table's rows as an Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


def unpack(data: Any) -> pa.Table:
    """An envelope's rows (bytes or an Arrow buffer) as the table they were packed from."""
    return pa.ipc.open_stream(data).read_all()


def columns(rows: Iterable[tuple[str, Row]], answers: bool = False) -> dict[str, list[Any]]:
    """A call's ``(table, row)`` pairs as the columns of the frame handed to Spark: one
    envelope per table, in first-seen order, then (``answers``) one of the call's answers when
    it has some."""
    by_table: dict[str, list[Row]] = {}
    for name, row in rows:
        by_table.setdefault(name, []).append(row)
    arrow = {name: to_table(name, table_rows) for name, table_rows in by_table.items()}
    names = list(arrow)
    packed = [pack(table) for table in arrow.values()]
    if answers:
        table = answers_table(by_table, arrow)
        if table.num_rows:
            names.append(ANSWERS_TABLE)
            packed.append(pack(table))
    return {"table": names, "rows": packed}


def envelope_table(rows: Iterable[tuple[str, Row]], answers: bool = False) -> pa.Table:
    """``columns`` as the Arrow table the sink's ``toArrow`` returns for them."""
    out = columns(rows, answers)
    return pa.table(
        {"table": pa.array(out["table"], pa.string()), "rows": pa.array(out["rows"], pa.binary())}
    )


def row_text(row: Row) -> str:
    """A row's JSON text: ``json.dumps(row, separators=(",", ":"), default=_jsonable)``, with
    the encoder built once (``json.dumps`` with arguments builds one per call). Without the
    check for circular containers: a row is a tree of dicts, lists and scalars."""
    return "".join(_ENCODE(row, 0))


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        import base64

        return base64.b64encode(value).decode("ascii")
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, tuple | frozenset | set):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _encoder() -> Callable[[Any, int], Any]:
    if c_make_encoder is not None:
        return c_make_encoder(  # type: ignore[no-any-return]
            None, _jsonable, encode_basestring_ascii, None, ":", ",", False, False, True
        )
    encoder = json.JSONEncoder(separators=(",", ":"), default=_jsonable)
    return lambda row, _: encoder.iterencode(row)


_ENCODE = _encoder()
