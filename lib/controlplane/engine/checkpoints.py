"""What a query's checkpoint already holds, read before the query starts.

A stateful query's state schema is fixed in its checkpoint: Spark refuses to restart it with
another. The key's state keeps the core's bytes in one of two formats
(``engine.adapter.StateFormat``): a new checkpoint gets ``TEXT``, and a checkpoint written
before keeps the ``BINARY`` it was started with. Which one a checkpoint holds is read from its
state schema: for a checkpoint on this machine from the schema file Spark keeps in it
(io.checkpoint, one small file), else with Spark's state data source (``statestore``, Spark 4.0
and later), which reads any file system Spark reads, on Databricks too, and takes 1-2 s in a
fresh session.

The keying is fixed in a checkpoint too: a group's state lives under its Spark key, so a query
restarted with another keying, another number of shards or other shard names would look for
its groups under keys that hold none (and find them again under the old ones when their
timers fire). Spark cannot see that. So the engine records the keying a checkpoint's state is
under, in a file of its own beside Spark's (``io.checkpoint.KEYING_RECORD``), when the query
first starts, and refuses to start it with another (``checkpoint_keys``). A new checkpoint
gets balanced shard names over its state partitions (engine.keying); a checkpoint whose state
was written before the engine kept the record keeps the plain names, and its record is written
from the configuration it is restarted with.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Final

from controlplane.core.config import ConfigError
from controlplane.engine.adapter import StateFormat
from controlplane.engine.keying import ShardNames, SparkKeys
from controlplane.engine.options import Keying
from controlplane.io.checkpoint import (
    RecordError,
    local_state_schema,
    read_record,
    write_record,
)

log = logging.getLogger(__name__)

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
    found = existing_state_format(spark, checkpoint)
    return StateFormat.TEXT if found is None else found


def existing_state_format(spark: Any, checkpoint: str) -> StateFormat | None:
    """``state_format_of``, None when the checkpoint has no state schema yet."""
    local = local_state_schema(checkpoint, STATEFUL_OPERATOR_ID)
    if local is None:
        return _format_from_spark(spark, checkpoint)
    if not local:
        return None
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
    found = _format_from_spark(spark, checkpoint)
    return StateFormat.TEXT if found is None else found


def _format_from_spark(spark: Any, checkpoint: str) -> StateFormat | None:
    try:
        schema = spark.read.format("statestore").load(checkpoint).schema
    except Exception as exc:  # Spark's errors, through py4j or Spark Connect
        if NO_COMMITTED_BATCH in str(exc):
            return None
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


def checkpoint_keys(
    spark: Any, checkpoint: str, keying: Keying, shards: int, *, has_state: bool
) -> SparkKeys:
    """The Spark keys the checkpoint's state is under, for a query configured with ``keying``
    and ``shards``, written to its record before the query starts when it has none.

    A checkpoint with no state yet (``has_state``: a state schema, ``existing_state_format``)
    holds no group under any key: it gets balanced shard names over the session's state
    partitions, whatever an earlier start that never committed a batch recorded. One with
    state: its record's keys, which must agree with ``keying`` and ``shards`` (else a
    ConfigError); without a record (started before the record was kept) the plain names, once
    its state's keys are found to be among them."""
    try:
        if not has_state:
            keys = _fresh_keys(spark, keying, shards)
            write_record(spark, checkpoint, record_text(keys), replace=True)
            return keys
        text = read_record(spark, checkpoint)
        if text is not None:
            keys = parse_record(text, checkpoint)
            _check_unchanged(keys, keying, shards, checkpoint)
            return keys
        keys = _keys_before_the_record(spark, checkpoint, keying, shards)
        write_record(spark, checkpoint, record_text(keys), replace=False)
        return keys
    except RecordError as exc:
        raise ConfigError(f"checkpoint {checkpoint}: its keying record: {exc}") from exc


def _fresh_keys(spark: Any, keying: Keying, shards: int) -> SparkKeys:
    if keying is Keying.GROUP:
        return SparkKeys(keying, shards)
    return SparkKeys(keying, shards, ShardNames.BALANCED, state_partitions(spark))


def _keys_before_the_record(spark: Any, checkpoint: str, keying: Keying, shards: int) -> SparkKeys:
    """A checkpoint started before the record: its shards are under the plain names, and its
    keying and shard count can only be assumed to be the configured ones. Its state's keys
    must be among those names (a record lost or unread would otherwise be replaced by a wrong
    one)."""
    keys = SparkKeys(keying, shards, ShardNames.PLAIN)
    if keying is Keying.SHARD:
        strangers = sorted(set(existing_state_keys(spark, checkpoint)) - set(keys.shard_names))
        if strangers:
            raise ConfigError(
                f"checkpoint {checkpoint} has no keying record, and its state is not under the"
                f" plain names of {shards} shards (it holds {', '.join(strangers[:3])}): its"
                " record is missing or the shard count changed; a new checkpoint is needed"
            )
    log.warning(
        "checkpoint %s has state but no keying record (started by an earlier version):"
        " assuming it was started with %s keying and %d shards, as configured now, under the"
        " plain shard names; recorded",
        checkpoint,
        keying,
        shards,
    )
    return keys


def existing_state_keys(spark: Any, checkpoint: str) -> list[str]:
    """The Spark keys the checkpoint's committed state holds (the state data source: a Spark
    job over the whole state, run once, for a checkpoint started before the record); none
    before its first batch is committed."""
    try:
        frame = spark.read.format("statestore").load(checkpoint)
        rows = frame.select(F_KEY).distinct().collect()
    except Exception as exc:  # Spark's errors, through py4j or Spark Connect
        if NO_COMMITTED_BATCH in str(exc):
            return []
        raise ConfigError(
            f"checkpoint {checkpoint}: its state's keys cannot be read: {_first_line(exc)}"
        ) from exc
    return [str(row[0]) for row in rows]


F_KEY: Final = "key.key"  # the state data source's key struct holds the grouping column "key"


def state_partitions(spark: Any) -> int:
    """The session's ``spark.sql.shuffle.partitions``: a new stateful query's state partitions
    (Spark then keeps the number in the checkpoint)."""
    value = spark.conf.get("spark.sql.shuffle.partitions")
    try:
        partitions = int(value)
    except (TypeError, ValueError):
        partitions = 0
    if partitions < 1:
        raise ConfigError(
            f"spark.sql.shuffle.partitions is {value!r}: a stateful query needs a number"
            " (engine.shuffle_partitions)"
        )
    return partitions


RECORD_VERSION: Final = 1


def record_text(keys: SparkKeys) -> str:
    """One line of JSON: the keying, the shard count, how the names were made (and over how
    many partitions), and the names themselves under shard keying."""
    record: dict[str, Any] = {
        "version": RECORD_VERSION,
        "keying": keys.keying.value,
        "shards": keys.shards,
        "shard_names": keys.names.value,
        "partitions": keys.partitions,
    }
    if keys.keying is Keying.SHARD:
        record["names"] = list(keys.shard_names)
    return json.dumps(record, sort_keys=True)


def parse_record(text: str, checkpoint: str) -> SparkKeys:
    """The keys a record says, its names as written; a ConfigError for one this build cannot
    read."""
    try:
        record = json.loads(text)
        if record.get("version") != RECORD_VERSION:
            found = record.get("version")
            raise ValueError(f"version {found!r}, this build reads {RECORD_VERSION}")
        keying = Keying(record["keying"])
        partitions = record.get("partitions")
        names = record["names"] if keying is Keying.SHARD else []
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError("its names are not a list of texts")
        if keying is Keying.SHARD and len(names) != record["shards"]:
            raise ValueError(f"{len(names)} names for {record['shards']} shards")
        return SparkKeys(
            keying,
            _whole(record["shards"]),
            ShardNames(record["shard_names"]),
            None if partitions is None else _whole(partitions),
            tuple(names),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"checkpoint {checkpoint}: its keying record is unreadable: {exc}"
        ) from None


def _whole(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not a whole number")
    return value


def _check_unchanged(keys: SparkKeys, keying: Keying, shards: int, checkpoint: str) -> None:
    recorded = f"{keys.keying} keying" + (
        f" with {keys.shards} shards" if keys.keying is Keying.SHARD else ""
    )
    if keys.keying is not keying or (keying is Keying.SHARD and keys.shards != shards):
        configured = f"{keying} keying" + (
            f" with {shards} shards" if keying is Keying.SHARD else ""
        )
        raise ConfigError(
            f"checkpoint {checkpoint} holds state under {recorded}; the configuration says"
            f" {configured}. A group's state stays under the key it was written under, so a"
            " change of engine.keying or engine.shards needs a new checkpoint (docs/engine.md,"
            ' "Keying")'
        )


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
