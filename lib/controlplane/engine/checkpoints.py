"""What a query's checkpoint already holds, read before the query starts.

A stateful query's state schema is fixed in its checkpoint: Spark refuses to restart it with
another. The key's state keeps the core's bytes in one of two formats
(``engine.adapter.StateFormat``): a new checkpoint gets ``TEXT``, and a checkpoint written
before keeps the ``BINARY`` it was started with. Which one a checkpoint holds is read from its
state schema: for a checkpoint on this machine from the schema file Spark keeps in it
(io.checkpoint, one small file), else with Spark's state data source (``statestore``, Spark 4.0
and later), which reads any file system Spark reads, on Databricks too, and takes 1-2 s in a
fresh session.
"""

from __future__ import annotations

from typing import Any, Final

from controlplane.core.config import ConfigError
from controlplane.engine.adapter import StateFormat
from controlplane.io.checkpoint import local_state_schema

# Spark's error when the checkpoint has no committed batch: a new query, or one stopped before
# its first batch ended (whose schema file, if its first batch was planned, Spark checks at the
# next start: the data source cannot see it, a local checkpoint's file can).
NO_COMMITTED_BATCH: Final = "STDS_COMMITTED_BATCH_UNAVAILABLE"
# The engine's queries have one stateful operator, applyInPandasWithState: Spark's operator 0.
STATEFUL_OPERATOR_ID: Final = 0
_FORMATS: Final = {"binary": StateFormat.BINARY, "string": StateFormat.TEXT}


def state_format_of(spark: Any, checkpoint: str) -> StateFormat:
    """The state format of the query whose checkpoint is ``checkpoint``: ``TEXT`` when it has
    no state schema yet, else the one its state schema says. A ConfigError for a checkpoint
    whose state cannot be read, or is not this engine's."""
    local = local_state_schema(checkpoint, STATEFUL_OPERATOR_ID)
    if local is None:
        return state_format_from_spark(spark, checkpoint)
    if not local:
        return StateFormat.TEXT
    text = local.decode("utf-8", errors="replace")
    found = [name for name in _FORMATS if f'"name":"blob","type":"{name}"' in text]
    if len(found) != 1:
        raise ConfigError(f"checkpoint {checkpoint}: its state is not this engine's")
    return _FORMATS[found[0]]


def state_format_from_spark(spark: Any, checkpoint: str) -> StateFormat:
    """``state_format_of`` through Spark's state data source, for a checkpoint on any file
    system: ``TEXT`` when it has no committed batch. (A checkpoint whose first batch was
    planned but not committed has a schema already, which this cannot see; a local one is
    read from its file, which can.)"""
    try:
        schema = spark.read.format("statestore").load(checkpoint).schema
    except Exception as exc:  # Spark's errors, through py4j or Spark Connect
        if NO_COMMITTED_BATCH in str(exc):
            return StateFormat.TEXT
        raise ConfigError(
            f"checkpoint {checkpoint}: its state schema cannot be read: {_first_line(exc)}"
        ) from exc
    found = blob_type_name(schema.jsonValue())
    state_format = None if found is None else _FORMATS.get(found)
    if state_format is None:
        raise ConfigError(
            f"checkpoint {checkpoint}: its state is not this engine's"
            f" (value schema {_value_schema(schema.jsonValue())})"
        )
    return state_format


def blob_type_name(schema: dict[str, Any]) -> str | None:
    """The type name of ``value.groupState.blob`` in the state data source's schema (as
    JSON): "binary" or "string" for this engine's state, None when there is no such field."""
    node: Any = schema
    for name in ("value", "groupState", "blob"):
        fields = node.get("fields") if isinstance(node, dict) else None
        match = [f for f in fields or () if isinstance(f, dict) and f.get("name") == name]
        if not match:
            return None
        node = match[0].get("type")
    return node if isinstance(node, str) else None


def _value_schema(schema: dict[str, Any]) -> Any:
    for field in schema.get("fields", ()):
        if field.get("name") == "value":
            return field.get("type")
    return None


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
