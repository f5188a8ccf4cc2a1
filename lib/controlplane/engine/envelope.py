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

With an answers topic (io/answers.py), a call also hands Spark its answers (``_answers``): for
each ``decisions`` and ``quota_decisions`` row, its table, its record's key and its JSON text
less the columns the sink adds and the closing brace (``head``), built here too, for the same
reason: the driver only appends ``batch_id`` and ``processed_at_ms``. The text is the row's
over the table's columns, nulls included, which is what the table's Arrow rows are read from
(tests/engine/test_sink_arrow.py checks that each answer parses to its Delta row), written by
orjson (a row with a value orjson does not write, from the row as Arrow has it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from json.encoder import (  # type: ignore[attr-defined]
    c_make_encoder,
    encode_basestring_ascii,
)
from typing import Any, Final

import orjson
import pyarrow as pa

from controlplane.io.answers import ANSWERED_TABLES, ANSWERS_TABLE, answer_key
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
    names = list(by_table)
    packed = [pack(to_table(name, table_rows)) for name, table_rows in by_table.items()]
    if answers:
        table = answers_table(by_table)
        if table.num_rows:
            names.append(ANSWERS_TABLE)
            packed.append(pack(table))
    return {"table": names, "rows": packed}


ANSWER_SCHEMA: Final = pa.schema(
    [pa.field("table", pa.string()), pa.field("key", pa.string()), pa.field("head", pa.binary())]
)


def answers_table(by_table: Mapping[str, Sequence[Row]]) -> pa.Table:
    """A call's answers (``ANSWER_SCHEMA``): its ``decisions`` rows, then its
    ``quota_decisions`` rows, each with its table, its record's key and its head
    (``answer_heads``)."""
    tables: list[str] = []
    keys: list[str | None] = []
    heads: list[bytes] = []
    for table in ANSWERED_TABLES:
        rows = by_table.get(table, ())
        tables.extend([table] * len(rows))
        keys.extend([answer_key(table, row) for row in rows])
        heads.extend(answer_heads(table, rows))
    # bytes inferred as binary: naming the type made the conversion 30 times slower (88 ms for
    # 50,000 heads against 2.6 ms, pyarrow 26)
    head = pa.array(heads) if heads else pa.array([], pa.binary())
    return pa.Table.from_arrays(
        [pa.array(tables, pa.string()), pa.array(keys, pa.string()), head], schema=ANSWER_SCHEMA
    )


_ANSWER_COLUMNS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}


def answer_heads(table: str, rows: Sequence[Row]) -> list[bytes]:
    """Each row's JSON text (UTF-8) over the table's columns less the sink's (``batch_id`` and
    ``processed_at_ms``, last in every table), without its closing brace: the columns in the
    table's order, a missing one as null, a key the table does not have left out. A double
    that is not finite is written as Spark's ``to_json`` writes it (``"NaN"``, ``"Infinity"``),
    not as null (orjson) or Python's invalid ``NaN``."""
    names, doubles = _answer_columns(table)
    heads = []
    for row in rows:
        if tuple(row) != names:  # in the table's order, as Spark's to_json writes a row
            row = {name: row.get(name) for name in names}
        for name in doubles:
            value = row[name]
            if isinstance(value, float) and not math.isfinite(value):
                row = {**row, name: _finite(value)}
        try:
            heads.append(orjson.dumps(row)[:-1])
        except orjson.JSONEncodeError:  # a numpy scalar, a set, bytes...: as Arrow has the row
            heads.append(orjson.dumps(_finite(to_table(table, [row]).to_pylist()[0]))[:-1])
    return heads


def _answer_columns(table: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The table's columns less the sink's, and those of them that are doubles."""
    columns = _ANSWER_COLUMNS.get(table)
    if columns is None:
        engine = {name for name, _ in ENGINE_COLUMNS}
        fields = [f for f in TABLES[table].fields if f.name not in engine]
        doubles = tuple(f.name for f in fields if f.dataType.typeName() == "double")
        columns = _ANSWER_COLUMNS[table] = (tuple(f.name for f in fields), doubles)
    return columns


def _finite(value: Any) -> Any:
    """``value`` with each float that is not finite as the string Spark's JSON writes for it."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


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
