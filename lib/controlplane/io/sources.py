"""Event sources. Each yields the same columns, the raw event text and where it came from:

``raw`` (the line or record value as received), ``source`` (file path, or topic/partition/offset),
``arrival_time_ms`` (file modification time, Kafka log-append time), ``seq`` (position in the
file, increasing within it; null for Kafka, whose ``source`` names the record), ``principal``
(the authenticated user when the source has authentication, else null) and ``reject_reason``
(why the source itself refuses the record, else null: the adapter sends it to
``rejected_events`` with that reason).

Parsing happens in the adapter, in Python, so a line that is not a JSON object is kept verbatim
and lands in ``rejected_events`` instead of disappearing in a Spark JSON reader.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from controlplane.io.archive import archive_dir_of
from controlplane.io.options import CleanSource, SourceOptions

log = logging.getLogger(__name__)


def read_events(
    spark: Any,
    options: SourceOptions,
    *,
    require_principal: bool = False,
    spark_cleans: bool = True,
) -> Any:
    """A streaming DataFrame of raw events from the configured source. ``require_principal``:
    a Kafka record must carry exactly one principal header (the quota's requests).
    ``spark_cleans``: a landing directory's ``clean_source`` is Spark's ``cleanSource``; False
    when the engine archives the files itself (io/archive.py, the default of the queries)."""
    if options.format == "jsonl":
        return _landing_directory(spark, options, spark_cleans)
    if options.format == "kafka":
        return _kafka(spark, options, require_principal)
    if options.format == "delta":
        return _delta(spark, options)
    raise ValueError(f"unknown source format {options.format!r}")


def _landing_directory(spark: Any, options: SourceOptions, spark_cleans: bool) -> Any:
    """JSON Lines files dropped (atomically: write, then rename) into a directory."""
    from pyspark.sql import functions as F

    Path(options.path).mkdir(parents=True, exist_ok=True)
    reader = (
        spark.readStream.format("text")
        .option("maxFilesPerTrigger", options.max_files_per_trigger)
        .option("pathGlobFilter", "*.jsonl")
    )
    if spark_cleans and options.clean_source is CleanSource.ARCHIVE:
        archive = archive_dir_of(options)
        archive.mkdir(parents=True, exist_ok=True)
        reader = reader.option("cleanSource", "archive").option(
            "sourceArchiveDir", str(archive.resolve())
        )
    elif spark_cleans and options.clean_source is CleanSource.DELETE:
        reader = reader.option("cleanSource", "delete")
    frame = reader.load(str(Path(options.path).resolve()))
    path, block = F.col("_metadata.file_path"), F.col("_metadata.file_block_start")
    return frame.select(
        F.col("value").alias("raw"),
        path.alias("source"),
        (F.unix_millis(F.col("_metadata.file_modification_time"))).alias("arrival_time_ms"),
        _line_numbers_udf()(path, block).alias("seq"),
        F.lit(None).cast("string").alias("principal"),
        F.lit(None).cast("string").alias("reject_reason"),
    )


def line_numbers(blocks: Iterator[tuple[Any, Any]]) -> Iterator[Any]:
    """``seq`` = the block's start byte + the line's index in the block: increasing within a
    file (a line takes at least one byte, so a later block starts past every earlier index).

    Streaming refuses monotonically_increasing_id, and text files have no row index column;
    a block's lines reach the task in file order, consecutively. A scalar iterator UDF over
    the file path and the block start only: the lines themselves stay in the JVM (a
    ``mapInPandas`` over whole rows sent every line through Python and back, ~35 % more time
    for the source's stage in bench/engine_bench.py's workload).
    """
    import pandas as pd

    current: tuple[Any, Any] | None = None
    index = 0
    for sources, starts in blocks:
        seqs: list[int] = []
        for source, start in zip(sources.tolist(), starts.tolist(), strict=True):
            if (source, start) != current:
                current, index = (source, start), 0
            seqs.append(int(start) + index)
            index += 1
        yield pd.Series(seqs, dtype="int64")


def _line_numbers_udf() -> Any:
    """``line_numbers`` as a scalar iterator pandas UDF: pyspark tells the kind from the type
    hints, given here as objects (pandas is imported only where a query is built)."""
    import pandas as pd
    from pyspark.sql.pandas.functions import pandas_udf
    from pyspark.sql.types import LongType

    def numbered(blocks: Iterator[tuple[Any, Any]]) -> Iterator[Any]:
        yield from line_numbers(blocks)

    numbered.__annotations__ = {
        "blocks": Iterator[tuple[pd.Series, pd.Series]],
        "return": Iterator[pd.Series],
    }
    return pandas_udf(numbered, LongType())  # type: ignore[call-overload]


def _kafka(spark: Any, options: SourceOptions, require_principal: bool) -> Any:
    """Kafka topics through Spark's Kafka source (``spark-sql-kafka-0-10``; Databricks ships
    it, ``make setup`` pins it locally). ``path`` is the topic list; ``kafka_options`` go to
    the source as ``kafka.<name>``, already resolved (engine/secrets.py)."""
    reader = spark.readStream.format("kafka").options(**kafka_reader_options(options))
    return kafka_rows(reader.load(), options, require_principal)


# How long the source's consumer lets the broker hold a fetch that finds no new record (Kafka's
# default is 500 ms). When a poll returns records, the Java consumer sends the next fetch ahead;
# at the end of a batch's offset range that fetch finds nothing and waits at the broker, and
# the next batch's first poll, on the same cached consumer, cannot fetch until it returns. With
# Kafka's default a batch's source stage waited about 0.35 s a partition for it
# (docs/benchmarks/engine.md, issue 14, fourteenth session). ``kafka_options`` may set another.
FETCH_MAX_WAIT_MS = 10


def kafka_reader_options(options: SourceOptions) -> dict[str, str]:
    """The options of Spark's Kafka source: the engine's, then ``kafka_options`` as
    ``kafka.<name>``, which win over the engine's consumer defaults (``fetch.max.wait.ms``)."""
    if not options.kafka_bootstrap_servers:
        raise ValueError("sources.*.kafka_bootstrap_servers is required for format: kafka")
    values = {
        "kafka.bootstrap.servers": options.kafka_bootstrap_servers,
        "subscribe": options.path,
        "startingOffsets": options.starting_offsets,
        "maxOffsetsPerTrigger": str(options.max_records_per_trigger),
        "includeHeaders": "true",
        "failOnDataLoss": "true",
        "kafka.fetch.max.wait.ms": str(FETCH_MAX_WAIT_MS),
    }
    values.update({f"kafka.{key}": value for key, value in options.kafka_options.items()})
    return values


LOG_APPEND_TIME = 1  # Kafka's timestampType: 0 CreateTime, 1 LogAppendTime
TIMESTAMP_TYPES = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}
PREVIEW_CHARS = 4096  # what rejected_events keeps of a record over max_record_bytes


def kafka_rows(frame: Any, options: SourceOptions, require_principal: bool) -> Any:
    """Kafka's columns (value, topic, partition, offset, timestamp, timestampType, headers) as
    the raw event columns. The source refuses (``reject_reason``), before any parsing:

    * a value over ``max_record_bytes`` (``raw`` keeps its first PREVIEW_CHARS characters),
      a null value, a value that is not UTF-8 (kept with U+FFFD for the bad bytes);
    * a record whose timestamp is not LogAppendTime (the key's order rests on it);
    * with ``require_principal``, a record without exactly one ``user_header`` header with a
      UTF-8 value: none would let the payload's ``user`` through, several would make the
      choice arbitrary. The payload's ``user`` never stands in for the header.
    """
    from pyspark.sql import functions as F

    value = F.col("value")
    size = F.octet_length(value)
    text = value.cast("string")
    limit = options.max_record_bytes
    name = options.user_header
    headers = F.filter(F.col("headers"), lambda h: h["key"] == F.lit(name))
    # a record without any header has a null array, whose size is -1 or null (ANSI off or on)
    count = F.when(F.col("headers").isNull(), F.lit(0)).otherwise(F.size(headers))
    header = F.try_element_at(headers, F.lit(1))["value"].cast("string")
    single = F.when(count == 1, header)
    type_name = F.coalesce(
        F.try_element_at(
            F.create_map(*[F.lit(x) for pair in TIMESTAMP_TYPES.items() for x in pair]),
            F.col("timestampType"),
        ),
        F.col("timestampType").cast("string"),
    )
    reason = (
        F.when(value.isNull(), F.lit("no value (a null record)"))
        .when(
            size > limit,
            F.format_string(f"too large: %d bytes, over max_record_bytes ({limit})", size),
        )
        .when(~F.is_valid_utf8(text), F.lit("not UTF-8"))
        .when(
            F.col("timestampType") != LOG_APPEND_TIME,
            F.format_string(
                "timestamp type %s: the topic must use message.timestamp.type=LogAppendTime",
                type_name,
            ),
        )
    )
    if require_principal:
        reason = (
            reason.when(
                count == 0,
                F.lit(f"no {name!r} header: a quota request needs exactly one, set by the gateway"),
            )
            .when(
                count > 1,
                F.format_string(f"%d {name!r} headers: a quota request needs exactly one", count),
            )
            .when(
                header.isNull() | (header == "") | ~F.is_valid_utf8(header),
                F.lit(f"the {name!r} header has no UTF-8 value"),
            )
        )
    raw = (
        F.when(size > limit, F.substring(F.make_valid_utf8(text), 1, PREVIEW_CHARS))
        .when(~F.is_valid_utf8(text), F.make_valid_utf8(text))
        .otherwise(text)
    )
    return frame.select(
        raw.alias("raw"),
        F.format_string("%s/%d/%d", "topic", "partition", "offset").alias("source"),
        F.unix_millis(F.col("timestamp")).alias("arrival_time_ms"),
        F.lit(None).cast("long").alias("seq"),
        F.when(F.is_valid_utf8(single), single).alias("principal"),
        reason.alias("reject_reason"),
    )


CDF_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")
COMMIT_SHIFT = 1 << 32  # seq = commit version * 2^32 + the row's index in its commit's file


def _delta(spark: Any, options: SourceOptions) -> Any:
    """A Delta table of events, read as its change data feed: a ``raw`` text column, or typed
    columns turned back into JSON.

    A table has no row order and Delta's streaming source says nothing of where a row came
    from, but its change feed gives each row's commit: a key's events are ordered by commit
    (``seq`` = commit version, then position), so a producer that appends one key's events
    commit after commit gets them in that order. Within one commit, rows of different files
    have no defined order. The table needs ``delta.enableChangeDataFeed = true`` from its first
    version (Delta refuses to start otherwise, naming the setting).
    """
    from pyspark.sql import functions as F

    frame = (
        spark.readStream.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .option("maxFilesPerTrigger", options.max_files_per_trigger)
        .load(options.path)
        .where(F.col("_change_type") == F.lit("insert"))
    )
    columns = [name for name in frame.columns if name not in CDF_COLUMNS]
    raw = F.col("raw") if "raw" in columns else F.to_json(F.struct(*columns))
    principal = F.col("principal") if "principal" in columns else F.lit(None)
    source, commit = F.lit(options.path), F.col("_commit_version") * F.lit(COMMIT_SHIFT)
    return frame.select(
        raw.alias("raw"),
        source.alias("source"),
        F.unix_millis(F.col("_commit_timestamp")).alias("arrival_time_ms"),
        _line_numbers_udf()(source, commit).alias("seq"),
        principal.cast("string").alias("principal"),
        F.lit(None).cast("string").alias("reject_reason"),
    )
