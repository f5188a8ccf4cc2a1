"""Spark schemas of docs/reference/events.md: the inputs and every output table (plus
``batch_id`` and ``processed_at_ms``); and their Arrow twins.

Spark's types module is plain Python (no JVM), so the delta-rs sinks and the no-JVM tests
use these too. The stateful operator's own schemas (its input rows, envelope and state) are
the engine's (engine/schemas.py).
"""

from __future__ import annotations

from typing import Any, Final

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

S, I, L, B, D = StringType(), IntegerType(), LongType(), BooleanType(), DoubleType()  # noqa: E741


def struct_of(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, kind, True) for name, kind in fields])


def _array(*fields: tuple[str, DataType]) -> ArrayType:
    return ArrayType(struct_of(*fields), True)


ENGINE_COLUMNS: Final = (("batch_id", L), ("processed_at_ms", L))

# --- inputs (docs/reference/events.md §1, §3) -----------------------------------------------------
COORDINATOR_REQUEST: Final = struct_of(
    ("event_id", S),
    ("event_time_ms", L),
    ("type", S),
    ("group_id", S),
    ("member_id", S),
    ("group_instance_id", S),
    ("client_id", S),
    ("client_host", S),
    ("request_version", I),
    ("session_timeout_ms", I),
    ("rebalance_timeout_ms", I),
    ("protocol_type", S),
    ("protocols", _array(("name", S), ("metadata", S))),
    ("protocol_name", S),
    ("generation_id", I),
    ("assignments", _array(("member_id", S), ("assignment", S))),
    ("members", _array(("member_id", S), ("group_instance_id", S), ("reason", S))),
    ("offsets", _array(("topic", S), ("partition", I), ("offset", L), ("metadata", S))),
    ("topics", _array(("topic", S), ("partitions", ArrayType(I, True)))),
    ("reason", S),
    ("timeout_ms", I),
    ("arrival_time_ms", L),
)

MUTATION_REQUEST: Final = struct_of(
    ("event_id", S),
    ("event_time_ms", L),
    ("type", S),
    ("user", S),
    ("client_id", S),
    ("request_version", I),
    ("validate_only", B),
    ("topics", _array(("name", S), ("partitions", I))),
)

# --- outputs (docs/reference/events.md §2, §4) ----------------------------------------------------
GROUP_MEMBERS: Final = _array(
    ("member_id", S),
    ("group_instance_id", S),
    ("client_id", S),
    ("client_host", S),
    ("assignment", S),
    ("offline", B),
)

DECISIONS: Final = struct_of(
    ("event_id", S),
    ("group_id", S),
    ("type", S),
    ("member_id", S),
    ("group_instance_id", S),
    ("error_code", I),
    ("error", S),
    ("error_message", S),
    ("generation_id", I),
    ("protocol_type", S),
    ("protocol_name", S),
    ("leader_id", S),
    ("skip_assignment", B),
    ("members", _array(("member_id", S), ("group_instance_id", S), ("metadata", S))),
    ("assignment", S),
    ("member_results", _array(("member_id", S), ("group_instance_id", S), ("error_code", I))),
    (
        "offsets",
        _array(("topic", S), ("partition", I), ("offset", L), ("metadata", S), ("error_code", I)),
    ),
    ("group_state", S),
    ("group_members", GROUP_MEMBERS),
    ("event_time_ms", L),
    ("decided_at_ms", L),
    *ENGINE_COLUMNS,
)

GROUP_EVENTS: Final = struct_of(
    ("group_id", S),
    ("at_ms", L),
    ("kind", S),
    ("member_id", S),
    ("group_instance_id", S),
    ("reason", S),
    ("state_from", S),
    ("state_to", S),
    ("generation_id", I),
    ("event_id", S),
    *ENGINE_COLUMNS,
)

GROUPS: Final = struct_of(
    ("group_id", S),
    ("group_state", S),
    ("generation_id", I),
    ("protocol_type", S),
    ("protocol_name", S),
    ("leader_id", S),
    ("members", GROUP_MEMBERS),
    ("updated_at_ms", L),
    *ENGINE_COLUMNS,
)

REJECTED_EVENTS: Final = struct_of(
    ("raw", S),
    ("reason", S),
    ("source", S),
    ("arrival_time_ms", L),
    *ENGINE_COLUMNS,
)

QUOTA_DECISIONS: Final = struct_of(
    ("event_id", S),
    ("user", S),
    ("client_id", S),
    ("quota_entity", S),
    ("quota_key", S),
    ("rate_per_s", D),
    ("type", S),
    ("error_code", I),
    ("error", S),
    ("error_message", S),
    ("throttle_time_ms", L),
    ("topics", _array(("name", S), ("partitions", I), ("error_code", I), ("error", S))),
    ("event_time_ms", L),
    ("decided_at_ms", L),
    *ENGINE_COLUMNS,
)

THROTTLE_EVENTS: Final = struct_of(
    ("event_id", S),
    ("user", S),
    ("client_id", S),
    ("quota_entity", S),
    ("quota_key", S),
    ("mode", S),
    ("rate_per_s", D),
    ("burst", D),
    ("tokens_after", D),
    ("throttle_time_ms", L),
    ("rejected_topics", ArrayType(S, True)),
    ("admitted_partitions", L),
    ("at_ms", L),
    *ENGINE_COLUMNS,
)

QUERY_PROGRESS: Final = struct_of(
    ("query", S),
    ("batch_id", L),
    ("batch_time_ms", L),
    ("processed_at_ms", L),
    ("input_rows", L),
    ("events", L),
    ("rejected", L),
    ("keys_called", L),
    ("timers_fired", L),
    ("max_timer_lateness_ms", L),
    ("state_rows", L),
    ("late_rows_dropped", L),
    ("duration_ms", L),
)

TABLES: Final[dict[str, StructType]] = {
    "decisions": DECISIONS,
    "group_events": GROUP_EVENTS,
    "groups": GROUPS,
    "rejected_events": REJECTED_EVENTS,
    "quota_decisions": QUOTA_DECISIONS,
    "throttle_events": THROTTLE_EVENTS,
    "query_progress": QUERY_PROGRESS,
}


def _arrow_type(kind: DataType) -> pa.DataType:
    if isinstance(kind, StructType):
        return pa.struct([pa.field(f.name, _arrow_type(f.dataType), True) for f in kind.fields])
    if isinstance(kind, ArrayType):
        return pa.list_(_arrow_type(kind.elementType))
    simple: dict[type[Any], pa.DataType] = {
        StringType: pa.string(),
        IntegerType: pa.int32(),
        LongType: pa.int64(),
        BooleanType: pa.bool_(),
        DoubleType: pa.float64(),
        BinaryType: pa.binary(),
    }
    return simple[type(kind)]


def arrow_schema(struct: StructType) -> pa.Schema:
    """The Arrow (delta-rs) twin of a Spark schema; every field nullable."""
    return pa.schema([pa.field(f.name, _arrow_type(f.dataType), True) for f in struct.fields])
