"""Engine settings: the ``engine``, ``sources`` and ``sinks`` sections of the configuration.

The cores ignore these sections (core/config.py ENGINE_SECTIONS); this module validates them
once at start, with messages naming the key, and resolves relative paths against the working
directory the job was started from. A source and a Kafka endpoint are io's types
(io/options.py): the io layer reads them and never imports the engine.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from controlplane.core.config import ConfigError, Settings
from controlplane.engine.secrets import check_credential, check_references
from controlplane.io.locations import NAMES_NEED_NATIVE, TableNames, parse_tables_schema
from controlplane.io.options import (
    MAX_RECORDS_PER_TRIGGER,
    CleanSource,
    KafkaEndpoint,
    SourceOptions,
)


class TimeMode(StrEnum):
    PROCESSING_TIME = "processing_time"
    EVENT_TIME = "event_time"


class Keying(StrEnum):
    GROUP = "group"  # one Spark key per group (or per quota key)
    SHARD = "shard"  # one Spark key per coordinator shard: crc32(key) mod shards


class AnswersOrder(StrEnum):
    """When a batch's answers go to the answers topic (docs/engine.md, "The answers topic")."""

    AFTER_DELTA = "after_delta"  # once its Delta tables are committed: an answer read is in Delta
    WITH_DELTA = "with_delta"  # while they are written: sooner, but ahead of its Delta row


@dataclass(frozen=True, slots=True)
class EngineOptions:
    mode: TimeMode = TimeMode.PROCESSING_TIME
    trigger_interval_ms: int = 1000
    progress_log_interval_ms: int = 60_000  # a log line per query per interval (0: per batch)
    # query_progress keeps a row per batch; they are committed together, one commit per query
    # per interval (0: a commit per batch). A Databricks job sets it: a commit per trigger is
    # ~86,000 Delta commits a day per query.
    progress_commit_interval_ms: int = 0
    watermark_delay_ms: int = 10_000
    keying: Keying = Keying.SHARD
    shards: int = 64
    failover_gap_ms: int = 30_000
    shuffle_partitions: int = 4
    checkpoint_root: str = "out/local/checkpoints"
    tables_root: str = "out/local/tables"
    # catalog.schema: the tables by name in that schema instead of by path under tables_root
    # (Unity Catalog on Databricks; native writer only). io/locations.py.
    tables_schema: str | None = None
    writer: str = "auto"  # "auto", "delta-rs" or "native"
    config_path: str | None = None  # re-read each micro-batch (quota entries, core settings)
    coordinator_source: SourceOptions | None = None
    quota_source: SourceOptions | None = None
    # The answers topic (docs/engine.md, "The answers topic"): None = none. Its brokers and
    # client properties default to those of the query's source when that is Kafka.
    answers_topic: str | None = None
    answers_bootstrap_servers: str | None = None
    answers_kafka_options: Mapping[str, str] | None = field(default=None, repr=False)
    answers_timeout_ms: int = 30_000
    answers_order: AnswersOrder = AnswersOrder.AFTER_DELTA

    def checkpoint(self, query: str) -> str:
        return f"{self.checkpoint_root.rstrip('/')}/{query}"

    def table(self, name: str) -> str:
        return f"{self.tables_root.rstrip('/')}/{name}"

    def tables(self) -> str | TableNames:
        """Where the writers put the tables: the root directory, or the schema's names."""
        return self.tables_root if self.tables_schema is None else TableNames(self.tables_schema)

    def tables_description(self) -> str:
        if self.tables_schema is None:
            return f"tables in {self.tables_root}"
        return f"tables by name in {self.tables_schema}"

    def answers_endpoint(self, source: SourceOptions) -> KafkaEndpoint | None:
        """Where the answers of the query reading ``source`` go; None without an answers topic."""
        if self.answers_topic is None:
            return None
        kafka = source.format == "kafka"
        servers = self.answers_bootstrap_servers or (
            source.kafka_bootstrap_servers if kafka else None
        )
        if servers is None:
            raise ConfigError(
                "engine.answers_bootstrap_servers: required when a source is not Kafka"
            )
        options = self.answers_kafka_options
        if options is None:
            options = source.kafka_options if kafka else {}
        return KafkaEndpoint(servers, dict(options))


_ENGINE_INTS = {
    "trigger_interval_ms": 1,
    "progress_log_interval_ms": 0,
    "progress_commit_interval_ms": 0,
    "watermark_delay_ms": 0,
    "shards": 1,
    "failover_gap_ms": 0,
    "shuffle_partitions": 1,
    "answers_timeout_ms": 1000,
}
_ENGINE_STRS = (
    "checkpoint_root",
    "tables_root",
    "writer",
    "answers_topic",
    "answers_bootstrap_servers",
)
_ENGINE_ENUMS: Mapping[str, type[StrEnum]] = {
    "mode": TimeMode,
    "keying": Keying,
    "answers_order": AnswersOrder,
}
_ANSWERS_EXTRAS = (
    "answers_bootstrap_servers",
    "answers_kafka_options",
    "answers_timeout_ms",
    "answers_order",
)

# Kafka client properties a source may not set: the engine sets them, or Spark's Kafka source
# refuses them (it reads bytes, never commits offsets to Kafka, starts where starting_offsets
# says).
KAFKA_RESERVED: Mapping[str, str] = {
    "bootstrap.servers": "use kafka_bootstrap_servers",
    "auto.offset.reset": "use starting_offsets",
    "enable.auto.commit": "progress lives in the checkpoint, not in Kafka",
    "key.deserializer": "the engine reads bytes",
    "value.deserializer": "the engine reads bytes",
    "key.serializer": "the engine writes bytes",
    "value.serializer": "the engine writes bytes",
    "interceptor.classes": "Spark's Kafka source refuses it",
}
KAFKA_ONLY = ("max_records_per_trigger", "starting_offsets", "max_record_bytes", "kafka_options")
FILES_ONLY = ("max_files_per_trigger", "clean_source", "archive_dir")


def _int(where: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{where}: expected an integer >= {minimum}, got {value!r}")
    return value


def _str(where: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def _enum(where: str, kind: type[StrEnum], value: object) -> Any:
    try:
        return kind(str(value))
    except ValueError:
        choices = ", ".join(member.value for member in kind)
        raise ConfigError(f"{where}: expected one of {choices}, got {value!r}") from None


def kafka_options(where: str, raw: object) -> dict[str, str]:
    """Kafka client properties by their Kafka names (``security.protocol``, not
    ``kafka.security.protocol``); values are text (numbers and booleans are written as Kafka
    reads them), secret references checked, passwords references only."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping of Kafka client properties")
    options: dict[str, str] = {}
    for key, value in raw.items():
        name = f"{where}.{key}"
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{where}: property names are non-empty strings, got {key!r}")
        if key.startswith("kafka."):
            raise ConfigError(f"{name}: write the Kafka property name {key[6:]!r} without kafka.")
        if key in KAFKA_RESERVED:
            raise ConfigError(f"{name}: not allowed here ({KAFKA_RESERVED[key]})")
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int | str):
            text = str(value)
        else:
            raise ConfigError(f"{name}: expected a string, number or boolean, got {value!r}")
        check_references(name, text)
        check_credential(name, key, text)
        options[key] = text
    return options


def _starting_offsets(where: str, raw: object) -> str:
    """``earliest`` (the default: a first start, or a reset checkpoint, reads the backlog),
    ``latest``, or Spark's per-partition offsets (a mapping, or its JSON text)."""
    if isinstance(raw, Mapping):
        return json.dumps(raw, separators=(",", ":"))
    if raw in ("earliest", "latest"):
        return str(raw)
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return raw
    raise ConfigError(
        f"{where}: expected earliest, latest or per-partition offsets "
        f'({{"topic": {{"0": 42}}}}), got {raw!r}'
    )


def with_landing_root(options: EngineOptions, root: str) -> EngineOptions:
    """The landing directories of the jsonl sources moved under ``root``: ``<root>/<query>``,
    archived to ``<root>/archive/<query>`` (a deployment's own directories, e.g. a developer's
    Volume). Kafka and Delta sources are left as they are."""
    base = root.rstrip("/")

    def moved(query: str, source: SourceOptions | None) -> SourceOptions | None:
        if source is None or source.format != "jsonl":
            return source
        return replace(source, path=f"{base}/{query}", archive_dir=f"{base}/archive/{query}")

    return replace(
        options,
        coordinator_source=moved("coordinator", options.coordinator_source),
        quota_source=moved("quota", options.quota_source),
    )


def _source(where: str, raw: object) -> SourceOptions:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected a mapping with format and path")
    known = {f for f in SourceOptions.__dataclass_fields__}
    unknown = set(raw) - known
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}")
    fmt = _str(f"{where}.format", raw.get("format", "jsonl"))
    if fmt not in ("jsonl", "kafka", "delta"):
        raise ConfigError(f"{where}.format: expected jsonl, kafka or delta, got {fmt!r}")
    misplaced = set(raw) & set(FILES_ONLY if fmt == "kafka" else KAFKA_ONLY)
    if misplaced:
        hint = "; the Kafka cap is max_records_per_trigger" if fmt == "kafka" else ""
        raise ConfigError(f"{where}: {sorted(misplaced)} do not apply to format {fmt}{hint}")
    optional = {
        key: None if raw.get(key) is None else _str(f"{where}.{key}", raw.get(key))
        for key in ("archive_dir", "kafka_bootstrap_servers")
    }
    if fmt == "kafka" and optional["kafka_bootstrap_servers"] is None:
        raise ConfigError(f"{where}.kafka_bootstrap_servers: required for format kafka")
    return SourceOptions(
        format=fmt,
        path=_str(f"{where}.path", raw.get("path")),
        max_files_per_trigger=_int(
            f"{where}.max_files_per_trigger", raw.get("max_files_per_trigger", 100), 1
        ),
        clean_source=_enum(
            f"{where}.clean_source", CleanSource, raw.get("clean_source", "archive")
        ),
        archive_dir=optional["archive_dir"],
        kafka_bootstrap_servers=optional["kafka_bootstrap_servers"],
        user_header=_str(f"{where}.user_header", raw.get("user_header", "user")),
        max_records_per_trigger=_int(
            f"{where}.max_records_per_trigger",
            raw.get("max_records_per_trigger", MAX_RECORDS_PER_TRIGGER),
            1,
        ),
        starting_offsets=_starting_offsets(
            f"{where}.starting_offsets", raw.get("starting_offsets", "earliest")
        ),
        max_record_bytes=_int(
            f"{where}.max_record_bytes", raw.get("max_record_bytes", 1_048_576), 1
        ),
        kafka_options=kafka_options(f"{where}.kafka_options", raw.get("kafka_options") or {}),
    )


def parse_engine_options(settings: Settings, config_path: str | None = None) -> EngineOptions:
    """Validate the engine's sections of ``settings``; raises ConfigError naming the key."""
    engine = dict(settings.sections.get("engine") or {})
    known = set(_ENGINE_INTS) | set(_ENGINE_STRS)
    known |= set(_ENGINE_ENUMS) | {"answers_kafka_options", "tables_schema"}
    unknown = set(engine) - known
    if unknown:
        raise ConfigError(f"engine: unknown key(s) {sorted(unknown)}")
    values: dict[str, Any] = {}
    for key, minimum in _ENGINE_INTS.items():
        if key in engine:
            values[key] = _int(f"engine.{key}", engine[key], minimum)
    for key in _ENGINE_STRS:
        if key in engine:
            values[key] = _str(f"engine.{key}", engine[key])
    for key, kind in _ENGINE_ENUMS.items():
        if key in engine:
            values[key] = _enum(f"engine.{key}", kind, engine[key])
    if values.get("writer", "auto") not in ("auto", "delta-rs", "native"):
        raise ConfigError(
            f"engine.writer: expected auto, delta-rs or native, got {values['writer']!r}"
        )
    if engine.get("tables_schema") is not None:
        if "tables_root" in engine:
            raise ConfigError(
                "engine: tables_root and tables_schema both given; the tables are either "
                "under a directory (by path) or in a catalog schema (by name)"
            )
        values["tables_schema"] = parse_tables_schema(
            "engine.tables_schema", engine["tables_schema"]
        )
    if engine.get("answers_kafka_options") is not None:
        values["answers_kafka_options"] = kafka_options(
            "engine.answers_kafka_options", engine["answers_kafka_options"]
        )
    values.update(_sources(settings))
    options = EngineOptions(config_path=config_path, **values)
    _check_answers(engine, options)
    check_tables(options)
    return options


def check_tables(options: EngineOptions) -> None:
    """Tables by name are written by the native writer only."""
    if options.tables_schema is not None and options.writer == "delta-rs":
        raise ConfigError(NAMES_NEED_NATIVE)


def with_tables(
    options: EngineOptions, *, root: str | None = None, schema: str | None = None
) -> EngineOptions:
    """The options with the command line's ``--tables-root`` or ``--tables-schema``, which
    replaces the file's choice whole (a root clears the file's schema, and the reverse)."""
    if root and schema:
        raise ConfigError("--tables-root and --tables-schema: give one (by path, or by name)")
    if root:
        return replace(options, tables_root=root, tables_schema=None)
    if schema:
        schema = parse_tables_schema("--tables-schema", schema)
        updated = replace(options, tables_schema=schema)
        check_tables(updated)
        return updated
    return options


def _sources(settings: Settings) -> dict[str, SourceOptions]:
    sources = dict(settings.sections.get("sources") or {})
    unknown = set(sources) - {"coordinator", "quota"}
    if unknown:
        raise ConfigError(f"sources: unknown key(s) {sorted(unknown)}")
    return {
        f"{name}_source": _source(f"sources.{name}", sources[name])
        for name in ("coordinator", "quota")
        if name in sources
    }


def _check_answers(engine: Mapping[str, Any], options: EngineOptions) -> None:
    if options.answers_topic is None:
        extras = sorted(set(engine) & set(_ANSWERS_EXTRAS))
        if extras:
            raise ConfigError(f"engine: {extras} need engine.answers_topic")
        return
    for source in (options.coordinator_source, options.quota_source):
        if source is not None:
            options.answers_endpoint(source)  # raises when it has no brokers to go to
