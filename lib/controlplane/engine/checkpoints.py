"""What a query's checkpoint already holds, read before the query starts.

A stateful query's state schema is fixed in its checkpoint: Spark refuses to restart it with
another. The key's state keeps the core's bytes in one of two formats
(``engine.adapter.StateFormat``): a new checkpoint gets ``TEXT``, and a checkpoint written
before keeps the ``BINARY`` it was started with. Which one a checkpoint holds is read from its
state schema: for a checkpoint on this machine (``io.checkpoint.here``: in a session whose
default file system is the machine's) from the schema file Spark keeps in it (one small
file), else with Spark's state data source (``statestore``, Spark 4.0
and later), which reads any file system Spark reads, on Databricks too, and takes 1-2 s in a
fresh session.

The keying is fixed in a checkpoint too: a group's state lives under its Spark key, so a query
restarted with another keying, another number of shards or other shard names would look for
its groups under keys that hold none (and find them again under the old ones when their
timers fire). Spark cannot see that. So the engine records the keying a checkpoint's state is
under, in a file of its own beside Spark's (``io.checkpoint.KEYING_RECORD``), when the query
first starts, and refuses to start it with another (``checkpoint_keys``). A new checkpoint
gets balanced shard names over its state partitions (engine.keying); a checkpoint whose state
was written before the engine kept the record keeps the plain names, once its state's keys are
found among them, and its record is written from the configuration it is restarted with.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from controlplane.core.config import ConfigError
from controlplane.engine.adapter import StateFormat, blob_bytes
from controlplane.engine.keying import SHARD_PREFIX, ShardNames, SparkKeys
from controlplane.engine.options import Keying
from controlplane.io.checkpoint import (
    RecordError,
    first_line,
    has_commits,
    here,
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

# The group ids a coordinator shard's state bytes hold, each routed by ``SparkKeys.of``
# (engine.queries.coordinator_routing_keys). ValueError for bytes it cannot read.
RoutingKeys = Callable[[bytes], Iterable[str]]


def state_format_of(spark: Any, checkpoint: str) -> StateFormat:
    """The state format of the query whose checkpoint is ``checkpoint``: ``TEXT`` when it has
    no state schema yet, else the one its state schema says. A ConfigError for a checkpoint
    whose state cannot be read, or is not this engine's."""
    found = existing_state_format(spark, checkpoint)
    return StateFormat.TEXT if found is None else found


def existing_state_format(spark: Any, checkpoint: str) -> StateFormat | None:
    """``state_format_of``, None when the checkpoint has no state schema yet (through Spark:
    no committed batch)."""
    root = here(spark, checkpoint)
    local = None if root is None else local_state_schema(root, STATEFUL_OPERATOR_ID)
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


@contextmanager
def _reading_state(checkpoint: str, what: str) -> Iterator[None]:
    """Around a read of the checkpoint's state through Spark's state data source: Spark's error
    for a checkpoint with no committed batch ends the block with nothing read (the caller's
    default stands); any other is a ConfigError that says ``what`` could not be read."""
    try:
        yield
    except Exception as exc:  # Spark's errors, through py4j or Spark Connect
        if NO_COMMITTED_BATCH not in str(exc):
            raise ConfigError(
                f"checkpoint {checkpoint}: {what} cannot be read: {first_line(exc)}"
            ) from exc


def _format_from_spark(spark: Any, checkpoint: str) -> StateFormat | None:
    schema = None
    with _reading_state(checkpoint, "its state schema"):
        schema = spark.read.format("statestore").load(checkpoint).schema
    if schema is None:
        return None
    found = blob_type_name(schema.jsonValue())
    state_format = None if found is None else _FORMATS.get(found)
    if state_format is None:
        raise ConfigError(
            f"checkpoint {checkpoint}: its state is not this engine's"
            f" (value schema {_value_schema(schema.jsonValue())})"
        )
    return state_format


def checkpoint_keys(
    spark: Any,
    checkpoint: str,
    keying: Keying,
    shards: int,
    *,
    existing: StateFormat | None,
    routing_keys: RoutingKeys | None = None,
) -> SparkKeys:
    """The Spark keys the checkpoint's state is under, for a query configured with ``keying``
    and ``shards``; recorded before the query starts when the checkpoint has no record.
    ``existing``: ``existing_state_format``'s answer for the checkpoint.

    A checkpoint without a committed batch holds no group under any key: it keeps a record
    that agrees with the configuration (its names were made for the partitions Spark recorded
    when it planned its first batch), else it is recorded afresh, balanced over the session's
    state partitions. One with a committed batch: its record's keys, which must agree with
    ``keying`` and ``shards`` (else a ConfigError); without a record (started before the
    record was kept) the plain names, once its state is found under them (each group too, read
    with ``routing_keys``: the coordinator)."""
    try:
        text = read_record(spark, checkpoint)
        if not _has_committed_batch(spark, checkpoint, existing):
            recorded = _agreeing(text, keying, shards)
            if recorded is not None:
                return recorded
            keys = _fresh_keys(spark, keying, shards)
            write_record(spark, checkpoint, record_text(keys), replace=True)
            return keys
        if text is not None:
            keys = parse_record(text, checkpoint)
            _check_unchanged(keys, keying, shards, checkpoint)
            return keys
        keys = _keys_before_the_record(spark, checkpoint, keying, shards, routing_keys)
        write_record(spark, checkpoint, record_text(keys), replace=False)
        return keys
    except RecordError as exc:
        raise ConfigError(f"checkpoint {checkpoint}: its keying record: {exc}") from exc


def _has_committed_batch(spark: Any, checkpoint: str, existing: StateFormat | None) -> bool:
    """From the commit log here; elsewhere the state data source's answer, which has a
    schema only once a batch is committed."""
    root = here(spark, checkpoint)
    return has_commits(root) if root is not None else existing is not None


def _agreeing(text: str | None, keying: Keying, shards: int) -> SparkKeys | None:
    """The record's keys when it is readable and says this keying and shard count."""
    if text is None:
        return None
    try:
        keys = parse_record(text, "")
    except ConfigError:
        return None  # no state under it: recorded afresh
    same = keys.keying is keying and (keying is Keying.GROUP or keys.shards == shards)
    return keys if same else None


def _fresh_keys(spark: Any, keying: Keying, shards: int) -> SparkKeys:
    if keying is Keying.GROUP:
        return SparkKeys(keying, shards)
    return SparkKeys(keying, shards, ShardNames.BALANCED, state_partitions(spark))


SHARD_NAME: Final = r"^shard-[0-9]+(\.[0-9]+)?$"  # a plain or a balanced shard name


def _keys_before_the_record(
    spark: Any,
    checkpoint: str,
    keying: Keying,
    shards: int,
    routing_keys: RoutingKeys | None,
) -> SparkKeys:
    """A checkpoint started before the record: its shards are under the plain names, and its
    keying and shard count can only be assumed to be the configured ones. What its state holds
    is checked first (Spark jobs over the state): under shard keying no key outside the plain
    names of ``shards`` shards, and (with ``routing_keys``: the coordinator) every group under
    the shard ``shards`` puts it in (``check_routed``, which keeps strays); under group keying
    not only shard names. A record that was lost, or a shard count other than the
    checkpoint's, is refused, but for a quota checkpoint's higher count, and a coordinator's
    whose moved groups are few and all in shard-0."""
    keys = SparkKeys(keying, shards, ShardNames.PLAIN)
    if keying is Keying.SHARD:
        strangers = state_keys(spark, checkpoint, outside=keys.shard_names)
        if strangers:
            raise ConfigError(
                f"checkpoint {checkpoint} has no keying record, and its state is not under the"
                f" plain names of {shards} shards: it holds {', '.join(strangers)}. Its shard"
                " count was higher (64 was the default before local checkpoints started with"
                " 16), its keying was group, or its record is lost; configure the keying and"
                " shard count it was started with, or start a new checkpoint"
            )
        if routing_keys is not None:
            check_routed(checkpoint, keys, state_blobs(spark, checkpoint), routing_keys)
    elif state_keys(spark, checkpoint, not_matching=SHARD_NAME) == [] and state_keys(
        spark, checkpoint
    ):
        raise ConfigError(
            f"checkpoint {checkpoint} has no keying record, and its state holds only shard"
            " names: it was started with shard keying (engine.keying: shard, and its shard"
            " count), or start a new checkpoint"
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


def state_keys(
    spark: Any,
    checkpoint: str,
    *,
    outside: tuple[str, ...] = (),
    not_matching: str | None = None,
    limit: int = 3,
) -> list[str]:
    """Up to ``limit`` of the Spark keys the checkpoint's committed state holds, those not
    among ``outside`` and not matching the regular expression ``not_matching``; none before a
    batch is committed (the state data source: a Spark job over the state)."""
    from pyspark.sql import functions as F

    rows: list[Any] = []
    with _reading_state(checkpoint, "its state's keys"):
        state = spark.read.format("statestore").load(checkpoint)
        frame = state.select(F.col(F_KEY).alias("k"))
        if outside:
            frame = frame.where(~F.col("k").isin(list(outside)))
        if not_matching is not None:
            frame = frame.where(~F.col("k").rlike(not_matching))
        rows = frame.distinct().limit(limit).collect()
    return sorted(str(row[0]) for row in rows)


F_KEY: Final = "key.key"  # the state data source's key struct holds the grouping column "key"
F_BLOB: Final = "value.groupState.blob"  # and its value struct the state's bytes


def state_blobs(spark: Any, checkpoint: str) -> Iterator[tuple[str, Any]]:
    """Each Spark key of the checkpoint's committed state with its state's ``blob`` as Spark
    gives it (``adapter.blob_bytes`` reads either format), a state partition at a time (the
    state data source: a Spark job over the state); none before a batch is committed."""
    from pyspark.sql import functions as F

    with _reading_state(checkpoint, "its state"):
        state = spark.read.format("statestore").load(checkpoint)
        for row in state.select(F.col(F_KEY), F.col(F_BLOB)).toLocalIterator():
            yield str(row[0]), row[1]


def _routed(
    blobs: Iterable[tuple[str, Any]], routing_keys: RoutingKeys
) -> Iterator[tuple[str, str]]:
    """(Spark key, group id) for every group each state holds. A state this build
    cannot read is left out, with a warning."""
    for spark_key, blob in blobs:
        try:
            data = blob_bytes(blob)
            held = [] if data is None else list(routing_keys(data))
            for key in held:
                if not isinstance(key, str):
                    raise ValueError(f"a key that is not a text: {key!r}")
                key.encode("utf-8")  # a lone surrogate cannot be routed
        except ValueError as exc:
            log.warning("the state under %s cannot be read (%s): not checked", spark_key, exc)
            continue
        for key in held:
            yield spark_key, key


MAX_SHARDS_TRIED: Final = 4096
# A shard count m other than the checkpoint's n leaves about 1 - gcd(n, m) / m of its groups
# elsewhere: at least half of them when m is higher. Strays (below) are few.
STRAYS_TOLERATED: Final = 0.25


def _all_counts() -> list[int]:
    return list(range(1, MAX_SHARDS_TRIED + 1))


def _fit(counts: list[int], shard: int, hashed: int) -> list[int]:
    """The shard counts of ``counts`` whose plain names put a key hashed ``hashed`` in ``shard``."""
    return [n for n in counts if n > shard and hashed % n == shard]


@dataclass
class Routing:
    """What a state's groups say of the shard count it was written with, against ``keys`` (the
    configured one's plain names): how many groups, how many are not under the shard it puts
    them in (and one of them: the group, its shard, and where the count puts it), how many of
    those are elsewhere than under the key of "" (where Spark puts a line it read no group id
    from: where strays are); the counts up to ``MAX_SHARDS_TRIED`` that put every group where
    it is (``fitting``), and every group but the misplaced ones under the key of ""
    (``counts``), smallest first."""

    keys: SparkKeys
    groups: int = 0
    misplaced: int = 0
    elsewhere: int = 0
    example: tuple[str, str, str] | None = None
    counts: list[int] = field(default_factory=_all_counts)
    fitting: list[int] = field(default_factory=_all_counts)
    misread: str = field(init=False)

    def __post_init__(self) -> None:
        self.misread = self.keys.of("")

    def add(self, under: str, group_id: str) -> None:
        self.groups += 1
        shard = int(under.removeprefix(SHARD_PREFIX))
        hashed = zlib.crc32(group_id.encode("utf-8"))
        self.fitting = _fit(self.fitting, shard, hashed)
        routed = self.keys.of(group_id)
        if routed != under:
            self.misplaced += 1
            if self.example is None:
                self.example = (group_id, under, routed)
            if under == self.misread:
                return
            self.elsewhere += 1
        self.counts = _fit(self.counts, shard, hashed)


def tally_routing(keys: SparkKeys, placed: Iterable[tuple[str, str]]) -> Routing:
    """``Routing`` of the (plain shard name, group id) pairs, against ``keys``; one pass, a few
    numbers kept, whatever the number of groups."""
    routing = Routing(keys)
    for under, group_id in placed:
        routing.add(under, group_id)
    return routing


def check_routed(
    checkpoint: str,
    keys: SparkKeys,
    blobs: Iterable[tuple[str, Any]],
    routing_keys: RoutingKeys,
) -> None:
    """Whether the groups in the states ``blobs`` (``state_blobs``) are under the shard ``keys``
    puts them in. A ConfigError when the checkpoint was started with another shard count (a
    higher configured count passes the check of the Spark keys when the state holds only
    shards below the old count): groups elsewhere than where strays are that another count
    explains, or many of them; or, all under the key of "", many that another count explains.
    Strays are kept, with a warning: groups a build before the ``misrouted`` check wrote under
    the key of a line Spark read no group id from (the key of ""), and a few elsewhere that no
    count explains."""
    routing = tally_routing(keys, _routed(blobs, routing_keys))
    if routing.example is None:
        return
    group_id, under, routed = routing.example
    many = STRAYS_TOLERATED * routing.groups
    if routing.elsewhere and (routing.counts or routing.elsewhere >= many):
        counts = routing.counts[:5]
    elif not routing.elsewhere and routing.fitting and routing.misplaced >= many:
        counts = routing.fitting[:5]
    else:
        _warn_strays(checkpoint, keys, routing)
        return
    found = (
        f"it was started with {' or '.join(str(n) for n in counts)} shards (every group is where"
        " that count puts it): configure that count (engine.shards) to restart it"
        if counts
        else f"no shard count up to {MAX_SHARDS_TRIED} puts them all where they are: configure"
        " the keying and shard count it was started with (engine.keying, engine.shards) to"
        " restart it"
    )
    raise ConfigError(
        f"checkpoint {checkpoint} has no keying record, and {routing.misplaced} of the"
        f" {routing.groups} groups in its state are not under the shard {keys.shards} shards"
        f" put them in ({group_id!r} is under {under}, not {routed}): {found}, or start a new"
        " checkpoint"
    )


def _warn_strays(checkpoint: str, keys: SparkKeys, routing: Routing) -> None:
    assert routing.example is not None
    group_id, under, routed = routing.example
    fitting = routing.fitting[:5]
    counts = (
        f"shard counts {', '.join(str(n) for n in fitting)} put them all where they are (if the"
        " checkpoint was started with one of them, configure it: engine.shards)"
        if fitting
        else "no shard count puts them all where they are"
    )
    log.warning(
        "checkpoint %s: %d of the %d groups in its state are not under the shard %d shards put"
        " them in (%r is under %s, not %s), and %s: strays an earlier build wrote under another"
        " key than their own, kept (their requests reach the group under its own key; a"
        " stray's rows are dropped, and it goes when its timers do: docs/engine.md, \"The"
        ' adapter")',
        checkpoint,
        routing.misplaced,
        routing.groups,
        keys.shards,
        group_id,
        under,
        routed,
        counts,
    )


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
            f" {configured}. A group's state stays under the key it was written under: configure"
            f" {recorded} to restart this checkpoint (engine.keying, engine.shards), or start a"
            ' new one for the change (docs/engine.md, "Keying")'
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
    for entry in schema.get("fields", ()):
        if entry.get("name") == "value":
            return entry.get("type")
    return None
