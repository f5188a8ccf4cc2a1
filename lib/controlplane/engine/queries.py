"""The two streaming queries, ready to start: source -> keying -> applyInPandasWithState ->
foreachBatch Delta sink.

``build_coordinator_query(spark, settings)`` and ``build_quota_query(spark, settings)`` return
a ``DataStreamWriter``; the jobs only start it and wait. ``config_path`` (the file the settings
came from) is re-read each micro-batch by the workers (engine.reload), so quota entries and
core settings can change while the query runs; engine settings (paths, keying, trigger) are
fixed for the life of a checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

from controlplane.core.config import ConfigError, Settings
from controlplane.core.runtime import Runner
from controlplane.engine.adapter import StateFormat, StateFunction
from controlplane.engine.batch import BatchSink
from controlplane.engine.checkpoints import RoutingKeys, checkpoint_keys, existing_state_format
from controlplane.engine.keying import SparkKeys
from controlplane.engine.options import EngineOptions, Keying, TimeMode, parse_engine_options
from controlplane.engine.progress import (
    ProgressCommits,
    ProgressReport,
    after_commit,
    make_listener,
)
from controlplane.engine.reload import SettingsSource
from controlplane.engine.runs import plan_run_start, record_run_start
from controlplane.engine.schemas import ENVELOPE, KEYED_INPUT, STATE, STATE_TEXT
from controlplane.engine.secrets import SecretLookup, databricks_lookup, resolve_mapping
from controlplane.io.answers import AnswersPublisher
from controlplane.io.archive import LandingArchiver
from controlplane.io.kafka_clients import (
    check_request_topics,
    check_topic_exists,
    topic_names,
)
from controlplane.io.options import CleanSource, KafkaEndpoint, SourceOptions
from controlplane.io.sinks import choose_writer
from controlplane.io.sources import read_events

log = logging.getLogger(__name__)

COORDINATOR_TABLES = ("decisions", "group_events", "groups", "rejected_events")
QUOTA_TABLES = ("quota_decisions", "throttle_events", "rejected_events")


class CoordinatorRunners:
    """Builds the coordinator runner from the current settings (runs in the workers).
    ``run_starts``: when each run of the query started, this one last (processing time,
    engine.runs): a shard is loaded again, as by a new coordinator, when its key's tick passes
    a run's start (core.coordinator.runner; docs/engine.md, "A restart loads the groups")."""

    def __init__(
        self,
        settings: SettingsSource,
        failover_gap_ms: int | None,
        run_starts: tuple[int, ...] = (),
    ) -> None:
        self.settings = settings
        self.failover_gap_ms = failover_gap_ms
        self.run_starts = run_starts

    def __call__(self) -> Runner:
        from controlplane.core.coordinator.runner import CoordinatorRunner

        config = self.settings.current().coordinator
        return CoordinatorRunner(
            config,
            failover_gap_ms=self.failover_gap_ms,
            run_starts=self.run_starts,
        )


def coordinator_routing_keys(data: bytes) -> list[str]:
    """The group ids a coordinator shard's state holds (``checkpoints.RoutingKeys``)."""
    from controlplane.core.config import CoordinatorConfig
    from controlplane.core.coordinator.runner import CoordinatorShard

    return CoordinatorShard.decode(data, CoordinatorConfig()).group_ids


_QUOTA_RUNNERS: dict[int, tuple[Any, Runner]] = {}


class QuotaRunners:
    def __init__(self, settings: SettingsSource) -> None:
        self.settings = settings

    def __call__(self) -> Runner:
        """One runner (and its resolution index) per configuration object, per worker."""
        from controlplane.core.quota.runner import QuotaRunner

        config = self.settings.current().quota
        cached = _QUOTA_RUNNERS.get(id(config))
        if cached is None or cached[0] is not config:
            _QUOTA_RUNNERS.clear()
            cached = (config, QuotaRunner(config))
            _QUOTA_RUNNERS[id(config)] = cached
        return cached[1]


class QuotaKeyer:
    """mapInPandas: the quota key of each raw mutation event, resolved from the current quota
    configuration before keying (docs/reference/mutation-quota.md §4.2), then grouped by key or
    shard."""

    def __init__(self, settings: SettingsSource, keys: SparkKeys) -> None:
        self.settings = settings
        self.keys = keys

    def key(self, raw: Any, principal: Any, config: Any) -> tuple[str, int | None]:
        from controlplane.core.jsonwire import decode_event_text, long_or_none
        from controlplane.core.quota.resolution import key_of

        try:
            event = decode_event_text(raw) if isinstance(raw, str) else None
        except (ValueError, RecursionError):
            event = None
        if not isinstance(event, dict):
            return self.keys.of(""), None
        if isinstance(principal, str):
            event["user"] = principal
        time_ms = long_or_none(event.get("event_time_ms"))
        try:
            quota_key = key_of(event, config)
        except Exception:  # malformed: the runner answers INVALID_REQUEST under any key
            quota_key = ""
        return self.keys.of(quota_key), time_ms

    def __call__(self, frames: Iterator[Any]) -> Iterator[Any]:
        config = self.settings.current().quota
        refused_key = self.keys.of("")
        for frame in frames:
            reasons = frame["reject_reason"] if "reject_reason" in frame else [None] * len(frame)
            pairs = [
                # a record its source refused is never resolved: its payload is not trusted
                (refused_key, None) if isinstance(reason, str) else self.key(raw, principal, config)
                for raw, principal, reason in zip(
                    frame["raw"], frame["principal"], reasons, strict=True
                )
            ]
            out = frame.copy()
            out["reject_reason"] = list(reasons)
            out["key"] = [key for key, _ in pairs]
            out["event_time_ms"] = [stamp for _, stamp in pairs]
            yield out[[field.name for field in KEYED_INPUT.fields]]


def _settings_source(settings: Settings, config_path: str | None) -> SettingsSource:
    return SettingsSource(config_path, settings)


# Spark timestamps end at 9999-12-31T23:59:59.999Z; the wire allows any long.
MAX_TIMESTAMP_MS: Final = 253_402_300_799_999


def _event_time_column() -> Any:
    """The line's ``event_time_ms`` when it is a JSON integer in the long range, else null, as
    the adapter reads it (``long_or_none``). from_json, not a cast of get_json_object: that
    unquotes ``"123"`` into a time the core refuses, and under ANSI (Spark 4's default) its
    cast fails the whole query on ``[1]`` or ``"abc"``; from_json answers null for a string, a
    fraction, an overflow, NaN or a line that is not JSON."""
    from pyspark.sql import functions as F

    options = {"allowNonNumericNumbers": "false", "mode": "PERMISSIVE"}
    return F.from_json("raw", "event_time_ms BIGINT", options).getField("event_time_ms")


LATE_GUARD: Final = "late_guard"


def _with_time(frame: Any, options: EngineOptions) -> Any:
    """Event-time mode: a watermark on the event time, and no row ever dropped as late.

    The watermark is Spark's maximum ``event_ts`` minus the delay, as usual. But the stateful
    operator drops, before the function sees them, the rows whose watermark column is at or
    before the watermark (``event_ts <= watermark``: an ``event_time_ms`` of 0 in batch 0,
    whose watermark is 0, or an event exactly at a later watermark), and such a line would
    leave no row at all. So the operator's input carries the watermark's metadata on another
    column, ``late_guard``, which is null in every row: a null is never late. ``event_ts``
    still moves the watermark (its ``withWatermark`` node stays in the plan), every line
    reaches the function, and the core answers a late event at its key's clock, which never
    goes back (docs/engine.md, "Event-time mode")."""
    if options.mode is not TimeMode.EVENT_TIME:
        return frame
    from pyspark.sql import functions as F

    # A line without a usable event_time_ms (none, not a long, not JSON, or outside Spark's
    # timestamp range, where timestamp_millis would overflow and fail the query) gets a null
    # event_ts: it does not move the watermark (the maximum ignores it), and reaches the core,
    # or rejected_events, in the batch that reads it, like every other bad line.
    stamp = F.col("event_time_ms")
    usable = stamp.between(F.lit(0), F.lit(MAX_TIMESTAMP_MS))
    timed = frame.withColumn("event_ts", F.when(usable, F.timestamp_millis(stamp))).withWatermark(
        "event_ts", f"{options.watermark_delay_ms} milliseconds"
    )
    watermark = timed.schema["event_ts"].metadata  # {"spark.watermarkDelayMs": delay}
    guard = F.lit(None).cast("timestamp").alias(LATE_GUARD, metadata=watermark)
    return timed.select(*(c for c in timed.columns if c != "event_ts"), guard)


def _stateful(frame: Any, function: StateFunction, options: EngineOptions) -> Any:
    from pyspark.sql.streaming.state import GroupStateTimeout

    timeout = (
        GroupStateTimeout.EventTimeTimeout
        if options.mode is TimeMode.EVENT_TIME
        else GroupStateTimeout.ProcessingTimeTimeout
    )
    schema = STATE_TEXT if function.state_format is StateFormat.TEXT else STATE
    grouped = frame.groupBy("key")
    return grouped.applyInPandasWithState(function, ENVELOPE, schema, "append", timeout)


def _writer(
    frame: Any,
    name: str,
    tables: tuple[str, ...],
    options: EngineOptions,
    trigger: dict[str, Any],
    answers: Any = None,
) -> Any:
    checkpoint = options.checkpoint(name)
    sink = BatchSink(
        name, tables, options.tables(), checkpoint, options.writer, answers, options.answers_order
    )
    return (
        frame.writeStream.queryName(name)
        .outputMode("append")
        .option("checkpointLocation", checkpoint)
        .foreachBatch(sink)
        .trigger(**trigger)
    )


def check_table_names(spark: Any, options: EngineOptions) -> None:
    """Tables by name: at start, the session must write Delta and the schema must exist (the
    engine creates tables, never schemas: on Databricks the bundle declares it). A
    ConfigError, before the query starts."""
    from controlplane.io.locations import TableNames
    from controlplane.io.sinks import has_native_delta

    tables = options.tables()
    if not isinstance(tables, TableNames):
        return
    if not has_native_delta(spark):
        raise ConfigError(
            f"engine.tables_schema {tables}: tables by name need a session with Delta "
            "(Databricks, or the jars of `make setup`)"
        )
    if not tables.schema_exists(spark):
        raise ConfigError(
            f"engine.tables_schema: no schema {tables} in the session's catalogs; create it "
            "(the engine creates its tables, not the schema) or grant the job's principal "
            "USE CATALOG and USE SCHEMA on it"
        )


def trigger_of(options: EngineOptions, available_now: bool = False) -> dict[str, Any]:
    """Processing-time trigger (ProcessingTimeTimeout never lets availableNow end); event-time
    replays may use availableNow, which ends after the last watermark advance."""
    if available_now:
        if options.mode is not TimeMode.EVENT_TIME:
            raise ValueError("availableNow only terminates in event-time mode")
        return {"availableNow": True}
    return {"processingTime": f"{options.trigger_interval_ms} milliseconds"}


def prepare_kafka(
    options: EngineOptions, source: SourceOptions, lookup: SecretLookup | None
) -> tuple[SourceOptions, Any]:
    """At start, on the driver: the source with its secret references resolved, and the
    answers publisher (None without an answers topic). A Kafka source's topics must exist with
    LogAppendTime, and the answers topic must exist; else the query does not start."""
    if source.format == "kafka":
        resolved = resolve_mapping("kafka_options", source.kafka_options, lookup)
        source = dataclasses.replace(source, kafka_options=resolved)
        endpoint = KafkaEndpoint(str(source.kafka_bootstrap_servers), resolved)
        check_request_topics(endpoint, topic_names(source.path))
    topic = options.answers_topic
    if topic is None:
        return source, None
    if options.answers_kafka_options is not None:
        answers_options = resolve_mapping(
            "engine.answers_kafka_options", options.answers_kafka_options, lookup
        )
        options = dataclasses.replace(options, answers_kafka_options=answers_options)
    answers = options.answers_endpoint(source)
    assert answers is not None
    limit = check_topic_exists(answers, topic)
    return source, AnswersPublisher(answers, topic, options.answers_timeout_ms, limit)


def build_query(
    spark: Any,
    options: EngineOptions,
    *,
    source: SourceOptions,
    runners_for: Callable[[str], Callable[[], Runner]],
    routing_keys: RoutingKeys | None,
    tables: tuple[str, ...],
    name: str,
    keyer: Callable[[SparkKeys], QuotaKeyer] | None = None,
    available_now: bool = False,
    require_principal: bool = False,
    secret_lookup: SecretLookup | None = None,
) -> Any:
    """Any runner behind the same pipeline: keyed by ``$.group_id`` (Spark expression) or by a
    Python keyer (mapInPandas), then the adapter and the foreachBatch sink (and the answers
    topic). ``runners_for`` gives the runner factory for the query's checkpoint, once its
    source, tables and keying are checked; ``routing_keys`` reads the group ids of a key's
    state (checking a checkpoint started before the keying record; None: not checked).
    ``secret_lookup`` reads ``{{secrets/...}}`` references (Databricks' secret store when on
    Databricks)."""
    from pyspark.sql import functions as F

    check_table_names(spark, options)
    lookup = secret_lookup if secret_lookup is not None else databricks_lookup()
    source, answers = prepare_kafka(options, source, lookup)
    checkpoint = options.checkpoint(name)
    existing = existing_state_format(spark, checkpoint)  # None: no state yet
    state_format = StateFormat.TEXT if existing is None else existing
    keys = checkpoint_keys(
        spark,
        checkpoint,
        options.keying,
        options.shards,
        existing=existing,
        routing_keys=routing_keys,
    )
    archiver = LandingArchiver.for_source(source, checkpoint)
    after_commit(name, None if archiver is None else archiver.after_commit)
    raw = read_events(
        spark, source, require_principal=require_principal, spark_cleans=archiver is None
    )
    if keyer is not None:
        keyed = raw.mapInPandas(keyer(keys), KEYED_INPUT)
    else:
        # the coordinator's key: the adapter checks each request's group_id against it (route)
        key = keys.column(F.get_json_object("raw", "$.group_id"))
        # Only event-time mode reads the line's time in Spark (the watermark); processing time
        # leaves the line to the one parse the function does.
        if options.mode is TimeMode.EVENT_TIME:
            stamp = _event_time_column()
        else:
            stamp = F.lit(None).cast("long")
        keyed = raw.select(
            key.alias("key"),
            "raw",
            "source",
            "arrival_time_ms",
            stamp.alias("event_time_ms"),
            "seq",
            "principal",
            "reject_reason",
        )
    runners = runners_for(checkpoint)
    # the coordinator is keyed in Spark by its reading of the line: checked against Python's
    route = keys.of if keyer is None else None
    function = StateFunction(runners, options.mode, state_format, answers is not None, route)
    state = _stateful(_with_time(keyed, options), function, options)
    log.info(
        "%s query: %s source %s%s, %s, %s, checkpoint %s (state as %s)",
        name,
        source.format,
        source.path,
        _cleaning(source, archiver),
        _keying(keys),
        options.mode,
        checkpoint,
        state_format.value,
    )
    return _writer(state, name, tables, options, trigger_of(options, available_now), answers)


def _keying(keys: SparkKeys) -> str:
    if keys.keying is Keying.GROUP:
        return "group keying"
    spread = f" over {keys.partitions} state partitions" if keys.partitions else ""
    return f"shard keying ({keys.shards} shards, {keys.names.value} names{spread})"


def _cleaning(source: SourceOptions, archiver: Any) -> str:
    clean = CleanSource(source.clean_source)
    if source.format != "jsonl" or clean is CleanSource.OFF:
        return ""
    if archiver is None:  # a checkpoint that is not a local path: Spark's cleanSource
        return f" ({clean.value} by Spark's cleanSource)"
    if clean is CleanSource.DELETE:
        return " (files deleted once committed)"
    return f" (files archived to {archiver.archive_dir} once committed)"


def build_coordinator_query(
    spark: Any,
    settings: Settings,
    *,
    config_path: str | None = None,
    options: EngineOptions | None = None,
    name: str = "coordinator",
    available_now: bool = False,
) -> Any:
    """The coordinator query's writer. In processing time it records a new run's start in the
    checkpoint (``NewRun``): build one writer for each start."""
    options = options or parse_engine_options(settings, config_path)
    if options.coordinator_source is None:
        raise ValueError("sources.coordinator is not configured")
    settings_source = _settings_source(settings, config_path)
    run = None
    if options.mode is TimeMode.PROCESSING_TIME:
        run = NewRun(spark, settings_source, options.failover_gap_ms)
    writer = build_query(
        spark,
        options,
        source=options.coordinator_source,
        runners_for=run.runners_for if run else lambda _: CoordinatorRunners(settings_source, None),
        routing_keys=coordinator_routing_keys,
        tables=COORDINATOR_TABLES,
        name=name,
        available_now=available_now,
    )
    if run is not None:
        run.record()  # once the query is built
    return writer


class NewRun:
    """The runners of a new run of the coordinator query (processing time, engine.runs): the
    run's start is planned when the query is built, and recorded once it is built, so a query
    refused while it is built records none. A writer is for one start: build one a start."""

    def __init__(self, spark: Any, settings: SettingsSource, failover_gap_ms: int) -> None:
        self.spark = spark
        self.settings = settings
        self.failover_gap_ms = failover_gap_ms
        self.checkpoint: str | None = None
        self.starts: tuple[int, ...] = ()

    def runners_for(self, checkpoint: str) -> CoordinatorRunners:
        self.checkpoint = checkpoint
        self.starts = plan_run_start(self.spark, checkpoint, time.time_ns() // 1_000_000)
        return CoordinatorRunners(self.settings, self.failover_gap_ms, self.starts)

    def record(self) -> None:
        assert self.checkpoint is not None, "the query was not built"
        record_run_start(self.spark, self.checkpoint, self.starts[-1])


def build_quota_query(
    spark: Any,
    settings: Settings,
    *,
    config_path: str | None = None,
    options: EngineOptions | None = None,
    name: str = "quota",
    available_now: bool = False,
) -> Any:
    options = options or parse_engine_options(settings, config_path)
    if options.quota_source is None:
        raise ValueError("sources.quota is not configured")
    settings_source = _settings_source(settings, config_path)
    return build_query(
        spark,
        options,
        source=options.quota_source,
        runners_for=lambda _: QuotaRunners(settings_source),
        # not checked: a bucket under another shard is never charged again and expires within
        # the hour (as Kafka's quota state goes with a controller's failover)
        routing_keys=None,
        tables=QUOTA_TABLES,
        name=name,
        keyer=functools.partial(QuotaKeyer, settings_source),
        available_now=available_now,
        # the quota is keyed by the principal: on Kafka it comes from exactly one header
        require_principal=True,
    )


def progress_report(options: EngineOptions) -> ProgressReport:
    """The job's progress log: in processing time, a warning when timers fire later than the
    failover gap or a batch leaves records of its source unread (event time follows the
    events, so neither expires a member there)."""
    processing_time = options.mode is TimeMode.PROCESSING_TIME
    return ProgressReport(
        options.progress_log_interval_ms,
        trigger_interval_ms=options.trigger_interval_ms,
        lateness_warning_ms=options.failover_gap_ms if processing_time else None,
        unread_warning=processing_time,
    )


def register_progress_listener(spark: Any, options: EngineOptions) -> Any:
    """Append a ``query_progress`` row per batch (a commit per query per
    ``engine.progress_commit_interval_ms``), log a line per query per
    ``engine.progress_log_interval_ms``, and archive the landing files of committed batches
    (engine.progress, io.archive). In processing-time mode the line is a warning when timers
    fired later than ``engine.failover_gap_ms`` (the job is falling behind) or a batch left
    records of its source unread (its cap)."""
    writers: dict[str, Any] = {}

    def writer_for(query_id: str) -> Any:
        if query_id not in writers:
            app_id = f"controlplane-progress-{query_id}"
            writers[query_id] = choose_writer(spark, options.tables(), app_id, options.writer)
        return writers[query_id]

    listener = make_listener(
        writer_for, progress_report(options), ProgressCommits(options.progress_commit_interval_ms)
    )
    spark.streams.addListener(listener)
    return listener
