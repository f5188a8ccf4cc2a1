"""Spark schemas of the stateful operator: its input rows, its output envelope and the state of
one key. The tables' schemas (inputs and outputs of docs/reference/events.md) are io's
(io/schemas.py), as the sinks write them.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType

from controlplane.io.schemas import struct_of

S, I, L = StringType(), IntegerType(), LongType()  # noqa: E741

# Input rows handed to the adapter: the raw line, its key, its source position, the
# authenticated principal and why the source refused it (null: it did not).
KEYED_INPUT: Final = struct_of(
    ("key", S),
    ("raw", S),
    ("source", S),
    ("arrival_time_ms", L),
    ("event_time_ms", L),
    ("seq", L),
    ("principal", S),
    ("reject_reason", S),
)
# One output row per table per call: the table name and the call's rows of it as one Arrow
# IPC stream (engine.envelope).
ENVELOPE: Final = struct_of(("table", S), ("rows", BinaryType()))
# The state of one key: our envelope version, the key's next deadline, the core's bytes, as
# base64 text (STATE_TEXT, new checkpoints) or as bytes (STATE, checkpoints written before):
# engine.adapter.StateFormat.
STATE: Final = struct_of(("version", I), ("deadline_ms", L), ("blob", BinaryType()))
STATE_TEXT: Final = struct_of(("version", I), ("deadline_ms", L), ("blob", S))
