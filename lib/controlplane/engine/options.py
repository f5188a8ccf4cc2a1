"""Engine settings: the ``engine``, ``sources`` and ``sinks`` sections of the configuration.

The cores ignore these sections (core/config.py ENGINE_SECTIONS); this module validates them
once at start, with messages naming the key, and resolves relative paths against the working
directory the job was started from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from controlplane.core.config import ConfigError, Settings


class TimeMode(StrEnum):
    PROCESSING_TIME = "processing_time"
    EVENT_TIME = "event_time"


class Keying(StrEnum):
    GROUP = "group"  # one Spark key per group (or per quota key)
    SHARD = "shard"  # one Spark key per coordinator shard: crc32(key) mod shards


class CleanSource(StrEnum):
    OFF = "off"
    ARCHIVE = "archive"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class SourceOptions:
    format: str  # "jsonl" (landing directory), "kafka" or "delta"
    path: str  # directory, topic list or table path
    max_files_per_trigger: int = 100  # the streaming max.poll.records (also Kafka offsets)
    clean_source: CleanSource = CleanSource.ARCHIVE
    archive_dir: str | None = None
    kafka_bootstrap_servers: str | None = None
    user_header: str = "user"  # Kafka header carrying the authenticated principal


@dataclass(frozen=True, slots=True)
class EngineOptions:
    mode: TimeMode = TimeMode.PROCESSING_TIME
    trigger_interval_ms: int = 1000
    progress_log_interval_ms: int = 60_000  # a log line per query per interval (0: per batch)
    watermark_delay_ms: int = 10_000
    keying: Keying = Keying.SHARD
    shards: int = 64
    failover_gap_ms: int = 30_000
    shuffle_partitions: int = 4
    checkpoint_root: str = "out/local/checkpoints"
    tables_root: str = "out/local/tables"
    writer: str = "auto"  # "auto", "delta-rs" or "native"
    config_path: str | None = None  # re-read each micro-batch (quota entries, core settings)
    coordinator_source: SourceOptions | None = None
    quota_source: SourceOptions | None = None

    def checkpoint(self, query: str) -> str:
        return f"{self.checkpoint_root.rstrip('/')}/{query}"

    def table(self, name: str) -> str:
        return f"{self.tables_root.rstrip('/')}/{name}"


_ENGINE_INTS = {
    "trigger_interval_ms": 1,
    "progress_log_interval_ms": 0,
    "watermark_delay_ms": 0,
    "shards": 1,
    "failover_gap_ms": 0,
    "shuffle_partitions": 1,
}
_ENGINE_STRS = ("checkpoint_root", "tables_root", "writer")


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
    )


def parse_engine_options(settings: Settings, config_path: str | None = None) -> EngineOptions:
    """Validate the engine's sections of ``settings``; raises ConfigError naming the key."""
    engine = dict(settings.sections.get("engine") or {})
    known = set(_ENGINE_INTS) | set(_ENGINE_STRS) | {"mode", "keying"}
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
    if "mode" in engine:
        values["mode"] = _enum("engine.mode", TimeMode, engine["mode"])
    if "keying" in engine:
        values["keying"] = _enum("engine.keying", Keying, engine["keying"])
    if values.get("writer", "auto") not in ("auto", "delta-rs", "native"):
        raise ConfigError(
            f"engine.writer: expected auto, delta-rs or native, got {values['writer']!r}"
        )
    sources = dict(settings.sections.get("sources") or {})
    unknown = set(sources) - {"coordinator", "quota"}
    if unknown:
        raise ConfigError(f"sources: unknown key(s) {sorted(unknown)}")
    if "coordinator" in sources:
        values["coordinator_source"] = _source("sources.coordinator", sources["coordinator"])
    if "quota" in sources:
        values["quota_source"] = _source("sources.quota", sources["quota"])
    return EngineOptions(config_path=config_path, **values)
