"""Table maintenance, with either Delta implementation: ``OPTIMIZE`` (compact the small files
every micro-batch leaves) and ``VACUUM`` (remove files no longer referenced and older than the
retention). Both return one line saying what was done.

delta-rs runs without a JVM; the Spark form is what a cluster (or ``--engine spark`` locally)
runs, the same statements as sql/spark/maintenance.sql.
"""

from __future__ import annotations

from typing import Any

RETENTION_CHECK_CONF = "spark.databricks.delta.retentionDurationCheck.enabled"


def maintain_deltars(path: str, retention_hours: int, *, dry_run: bool, force: bool) -> str:
    from deltalake import DeltaTable

    table = DeltaTable(path)
    if dry_run:
        compacted = "compaction skipped (dry run)"
    else:
        metrics = table.optimize.compact()
        compacted = (
            f"{metrics.get('numFilesRemoved', 0)} files compacted into "
            f"{metrics.get('numFilesAdded', 0)}"
        )
    removed = table.vacuum(
        retention_hours=retention_hours, dry_run=dry_run, enforce_retention_duration=not force
    )
    verb = "would remove" if dry_run else "removed"
    return f"{compacted}; vacuum {verb} {len(removed)} files"


def maintain_spark(
    spark: Any, path: str, retention_hours: int, *, dry_run: bool, force: bool
) -> str:
    """``OPTIMIZE`` and ``VACUUM ... RETAIN n HOURS`` through Spark SQL. ``force`` lifts Delta's
    check against a retention below the table's (as delta-rs's ``enforce_retention_duration``),
    for this session only."""
    table = f"delta.`{path}`"
    if dry_run:
        compacted = "compaction skipped (dry run)"
    else:
        metrics = spark.sql(f"OPTIMIZE {table}").first()["metrics"]
        compacted = f"{metrics['numFilesRemoved']} files compacted into {metrics['numFilesAdded']}"
    spark.conf.set(RETENTION_CHECK_CONF, "false" if force else "true")
    try:
        statement = f"VACUUM {table} RETAIN {int(retention_hours)} HOURS"
        if dry_run:
            listed = spark.sql(f"{statement} DRY RUN").count()
            return f"{compacted}; vacuum would remove {listed} files"
        before = _file_count(spark, path)
        spark.sql(statement).collect()
        return f"{compacted}; vacuum removed {before - _file_count(spark, path)} files"
    finally:
        spark.conf.unset(RETENTION_CHECK_CONF)


def _file_count(spark: Any, path: str) -> int:
    """Data files in the table's directory, referenced or not (what VACUUM may remove)."""
    jvm = spark.sparkContext._jvm
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    files = fs.listFiles(hadoop_path, True)
    count = 0
    while files.hasNext():
        name = files.next().getPath().getName()
        if name.endswith(".parquet"):
            count += 1
    return count
