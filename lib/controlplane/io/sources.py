"""Event sources. Each yields the same columns, the raw event text and where it came from:

``raw`` (the line or record value as received), ``source`` (file path, or topic/partition/offset),
``arrival_time_ms`` (file modification time, Kafka log-append time), ``seq`` (position in the
source, increasing within a file or partition) and ``principal`` (the authenticated user when
the source has authentication, else null).

Parsing happens in the adapter, in Python, so a line that is not a JSON object is kept verbatim
and lands in ``rejected_events`` instead of disappearing in a Spark JSON reader.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from controlplane.engine.options import CleanSource, SourceOptions
from controlplane.io.archive import archive_dir_of

log = logging.getLogger(__name__)


def read_events(spark: Any, options: SourceOptions, spark_cleans: bool = True) -> Any:
    """A streaming DataFrame of raw events from the configured source. ``spark_cleans``: a
    landing directory's ``clean_source`` is Spark's ``cleanSource``; False when the engine
    archives the files itself (io/archive.py, the default of the queries)."""
    if options.format == "jsonl":
        return _landing_directory(spark, options, spark_cleans)
    if options.format == "kafka":
        return _kafka(spark, options)
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
    located = frame.select(
        F.col("value").alias("raw"),
        F.col("_metadata.file_path").alias("source"),
        (F.unix_millis(F.col("_metadata.file_modification_time"))).alias("arrival_time_ms"),
        F.col("_metadata.file_block_start").alias("seq"),
        F.lit(None).cast("string").alias("principal"),
    )
    return located.mapInPandas(number_lines, RAW_SCHEMA)


RAW_SCHEMA = "raw string, source string, arrival_time_ms long, seq long, principal string"


def number_lines(frames: Iterator[Any]) -> Iterator[Any]:
    """``seq`` = the block's start byte + the line's index in the block: increasing within a
    file (a line takes at least one byte, so a later block starts past every earlier index).

    Streaming refuses monotonically_increasing_id, and text files have no row index column;
    a block's lines reach the task in file order, consecutively.
    """
    current: tuple[Any, Any] | None = None
    index = 0
    for frame in frames:
        seqs: list[int] = []
        for source, start in zip(frame["source"], frame["seq"], strict=True):
            if (source, start) != current:
                current, index = (source, start), 0
            seqs.append(int(start) + index)
            index += 1
        out = frame.copy()
        out["seq"] = seqs
        yield out


def _kafka(spark: Any, options: SourceOptions) -> Any:  # pragma: no cover - needs a cluster
    """Kafka topics (Databricks ships the connector). Unverified locally: no broker, no jars.

    The principal comes from a record header that only the authenticated gateway may set
    (docs/engine.md, "Trust model"); the ``user`` field of the payload is then overridden.
    """
    from pyspark.sql import functions as F

    if not options.kafka_bootstrap_servers:
        raise ValueError("sources.*.kafka_bootstrap_servers is required for format: kafka")
    frame = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", options.kafka_bootstrap_servers)
        .option("subscribe", options.path)
        .option("maxOffsetsPerTrigger", options.max_files_per_trigger)
        .option("includeHeaders", "true")
        .option("failOnDataLoss", "true")
        .load()
    )
    header = F.filter(F.col("headers"), lambda h: h["key"] == F.lit(options.user_header))
    return frame.select(
        F.col("value").cast("string").alias("raw"),
        F.format_string("%s/%d/%d", "topic", "partition", "offset").alias("source"),
        F.unix_millis(F.col("timestamp")).alias("arrival_time_ms"),
        (F.col("partition").cast("long") * F.lit(1 << 40) + F.col("offset")).alias("seq"),
        F.element_at(header, 1)["value"].cast("string").alias("principal"),
    )


def _delta(spark: Any, options: SourceOptions) -> Any:  # pragma: no cover - needs delta-spark
    """A Delta table of events: a ``raw`` text column, or typed columns turned back into JSON."""
    from pyspark.sql import functions as F

    frame = (
        spark.readStream.format("delta")
        .option("maxFilesPerTrigger", options.max_files_per_trigger)
        .load(options.path)
    )
    raw = F.col("raw") if "raw" in frame.columns else F.to_json(F.struct(*frame.columns))
    principal = F.col("principal") if "principal" in frame.columns else F.lit(None)
    located = frame.select(
        raw.alias("raw"),
        F.lit(options.path).alias("source"),
        F.unix_millis(F.current_timestamp()).alias("arrival_time_ms"),
        F.lit(0).cast("long").alias("seq"),
        principal.cast("string").alias("principal"),
    )
    return located.mapInPandas(number_lines, RAW_SCHEMA)
