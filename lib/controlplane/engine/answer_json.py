"""The answers' JSON (io/answers.py), built by the state function in the Python workers: for a
call's ``decisions`` and ``quota_decisions`` rows, each answer's table, its record's key and its
JSON text less the columns the sink adds (``batch_id``, ``processed_at_ms``, last in every table)
and the closing brace, which the driver appends in Arrow.

The text must be the row Delta gets, as Spark's ``to_json`` writes it: the table's columns in
the table's order, nulls included, a double that is not finite as ``"NaN"``/``"Infinity"``. Delta
gets the call's rows as Arrow converts them (engine.envelope ``to_table``), so:

* a row of plain values (what the cores build: str, int, bool, float, lists of dicts with the
  struct's fields) is written by orjson from the row itself (0.6-0.7 µs a decision), its
  columns put in order and a missing one as null;
* any other row (a bool or a float where the table has an int, a nested element without the
  struct's fields, a value that is not finite, a value orjson refuses) is written from its row
  in the call's Arrow table: exactly what Delta stores, at the cost of a conversion back.

The key is read from the Arrow table too (io.answers.answer_keys).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructType,
)

from controlplane.io.answers import ANSWER_SCHEMA, ANSWERED_TABLES, answer_keys
from controlplane.io.schemas import ENGINE_COLUMNS, TABLES

Row = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Shape:
    """What a plain row of a struct holds: its fields in order, and those of them a value
    Arrow converts may be written otherwise by orjson: ints (a bool, a float), doubles (a bool,
    a value that is not finite), lists of structs (their elements' fields)."""

    names: tuple[str, ...]
    ints: tuple[str, ...]
    doubles: tuple[str, ...]
    structs: tuple[tuple[str, Shape], ...]


def shape_of(struct: StructType, leave_out: frozenset[str] = frozenset()) -> Shape:
    """A struct's shape; a column of another kind than these (and strings and booleans, which
    Arrow takes only as orjson writes them or as values orjson refuses) is refused, so a new
    column cannot slip past the checks."""
    fields = [f for f in struct.fields if f.name not in leave_out]
    ints, doubles, structs = [], [], []
    for field in fields:
        kind = field.dataType
        if isinstance(kind, IntegerType | LongType):
            ints.append(field.name)
        elif isinstance(kind, DoubleType):
            doubles.append(field.name)
        elif isinstance(kind, ArrayType) and isinstance(kind.elementType, StructType):
            structs.append((field.name, shape_of(kind.elementType)))
        elif not isinstance(kind, StringType | BooleanType):
            raise ValueError(f"answers: column {field.name} of type {kind} is not supported")
    return Shape(tuple(f.name for f in fields), tuple(ints), tuple(doubles), tuple(structs))


@functools.cache
def table_shape(table: str) -> Shape:
    """The shape of a table's answers: its columns less the sink's."""
    return shape_of(TABLES[table], frozenset(name for name, _ in ENGINE_COLUMNS))


def is_plain(row: Row, shape: Shape) -> bool:
    """Whether orjson writes ``row`` (with exactly ``shape.names``, in order) as Arrow stores
    it: no bool or float where an int is, no bool or non-finite float where a double is, a list
    of dicts with the struct's fields, in order, where a list of structs is."""
    return _plain_scalars(row, shape) and _plain_structs(row, shape)


def _plain_scalars(row: Row, shape: Shape) -> bool:
    for name in shape.ints:
        kind = type(row[name])
        if kind is bool or kind is float:
            return False
    for name in shape.doubles:
        value = row[name]
        if type(value) is bool or (type(value) is float and not math.isfinite(value)):
            return False
    return True


def _plain_structs(row: Row, shape: Shape) -> bool:
    for name, inner in shape.structs:
        value = row[name]
        if value is None:
            continue
        if type(value) is not list:  # Arrow reads any sequence, "" as an empty list
            return False
        for element in value:
            if element is None:
                continue
            if type(element) is not dict or tuple(element) != inner.names:
                return False
            if not is_plain(element, inner):
                return False
    return True


def answers_table(by_table: Mapping[str, Sequence[Row]], arrow: Mapping[str, pa.Table]) -> pa.Table:
    """A call's answers (``ANSWER_SCHEMA``): its ``decisions`` rows, then its
    ``quota_decisions`` rows, each with its table, its record's key and its head;
    ``arrow`` holds each table's rows as the call hands them to Delta."""
    parts = []
    for table in ANSWERED_TABLES:
        rows = by_table.get(table)
        if not rows:
            continue
        converted = arrow[table]
        parts.append(
            pa.Table.from_arrays(
                [
                    pa.array([table] * len(rows), pa.string()),
                    answer_keys(table, converted),
                    pa.array(answer_heads(table, rows, converted), pa.binary()),
                ],
                schema=ANSWER_SCHEMA,
            )
        )
    if not parts:
        return ANSWER_SCHEMA.empty_table()
    return pa.concat_tables(parts) if len(parts) > 1 else parts[0]


def answer_heads(table: str, rows: Sequence[Row], converted: pa.Table) -> list[bytes]:
    """Each row's JSON text (UTF-8) over the table's columns less the sink's, without its
    closing brace; ``converted`` is the rows as Arrow holds them, in the same order."""
    import orjson

    shape = table_shape(table)
    names = shape.names
    heads = []
    for index, row in enumerate(rows):
        if tuple(row) != names:  # in the table's order, as Spark's to_json writes a row
            row = {name: row.get(name) for name in names}
        if is_plain(row, shape):
            try:
                heads.append(orjson.dumps(row)[:-1])
                continue
            except orjson.JSONEncodeError:  # a numpy scalar, bytes, a 65-bit int...
                pass
        stored = converted.slice(index, 1).to_pylist()[0]
        heads.append(orjson.dumps(finite(stored))[:-1])
    return heads


def finite(value: Any) -> Any:
    """``value`` with each float that is not finite as the string Spark's JSON writes for it."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Mapping):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value
