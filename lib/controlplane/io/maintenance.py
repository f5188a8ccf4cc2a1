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
    spark: Any, table: str, retention_hours: int, *, dry_run: bool, force: bool
) -> str:
    """``OPTIMIZE`` and ``VACUUM ... RETAIN n HOURS`` through Spark SQL on ``table``, a SQL name:
    ``delta.`path``` or a table by name (``catalog.schema.table``). ``force`` lifts Delta's
    check against a retention below the table's (as delta-rs's ``enforce_retention_duration``),
    for this session only. The files removed are counted from the table's history (Delta
    records ``VACUUM END`` with ``numDeletedFiles``), not by listing its directory, which a
    Unity Catalog managed table does not let a job do."""
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
        before = _latest_version(spark, table)
        spark.sql(statement).collect()
        return f"{compacted}; vacuum removed {_vacuumed_since(spark, table, before)} files"
    finally:
        spark.conf.unset(RETENTION_CHECK_CONF)


def _latest_version(spark: Any, table: str) -> int:
    return int(spark.sql(f"DESCRIBE HISTORY {table} LIMIT 1").first()["version"])


def _vacuumed_since(spark: Any, table: str, version: int) -> int:
    """Files deleted by the VACUUMs committed after ``version`` (0 when none was recorded)."""
    rows = (
        spark.sql(f"DESCRIBE HISTORY {table}")
        .where(f"version > {int(version)} AND operation = 'VACUUM END'")
        .select("operationMetrics")
        .collect()
    )
    return sum(int((row["operationMetrics"] or {}).get("numDeletedFiles", 0)) for row in rows)
