"""``python -m controlplane maintenance [--retention-hours H] [--dry-run] [--engine ENGINE]``

Compacts the small files every micro-batch leaves (``OPTIMIZE``) and removes files no longer
referenced and older than the retention (``VACUUM``), with delta-rs (no JVM, the default) or
Spark SQL (``--engine spark``: the project's delta-spark jars locally, the cluster's own Delta
on Databricks, which has no delta-rs; the bundle's maintenance job runs this).

Retention: 168 hours (7 days) by default, Delta's own default
(``delta.deletedFileRetentionDuration``). It bounds time travel: a reader or a query restarted
from an older table version needs the files of that version, so never go below the longest
expected outage plus the longest running query. Both engines refuse less than the table's
configured retention unless ``--force`` is given. Tables registered in a catalog run the same
statements as SQL (sql/spark/maintenance.sql).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from controlplane.cli.tables import CommandError, add_location_args, locate, no_tables, table_paths
from controlplane.io.maintenance import maintain_deltars, maintain_spark

PROG = "python -m controlplane maintenance"

DEFAULT_RETENTION_HOURS = 168


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[1])
    parser.add_argument("--retention-hours", type=int, default=DEFAULT_RETENTION_HOURS)
    parser.add_argument("--dry-run", action="store_true", help="list what vacuum would remove")
    parser.add_argument("--force", action="store_true", help="allow a retention below the table's")
    parser.add_argument(
        "--engine",
        choices=("delta-rs", "spark"),
        default="delta-rs",
        help="delta-rs (default, no JVM) or Spark SQL's OPTIMIZE and VACUUM",
    )
    add_location_args(parser)
    args = parser.parse_args(argv)
    try:
        location = locate(args)
        tables = table_paths(location.root)
        if not tables:
            raise no_tables(location)
        maintain = _maintainer(args.engine)
    except CommandError as error:
        return error.report(PROG)
    status = 0
    for name, path in tables.items():
        try:
            done = maintain(
                str(path.resolve()), args.retention_hours, dry_run=args.dry_run, force=args.force
            )
            print(f"{name}: {done}")
        except Exception as exc:
            print(f"{name}: failed: {' '.join(str(exc).split())}", file=sys.stderr)
            status = 1
    return status


def _maintainer(engine: str) -> Callable[..., str]:
    if engine == "delta-rs":
        return maintain_deltars
    return partial(maintain_spark, spark_session())


def spark_session() -> Any:
    """The cluster's session on Databricks (its Delta, its catalog), else a local one with the
    project's jars."""
    from controlplane.engine.launch import on_databricks

    if on_databricks():
        from pyspark.sql import SparkSession

        return SparkSession.builder.getOrCreate()
    from controlplane.engine.session import build_local_session
    from controlplane.jvm import MissingJvm

    try:
        return build_local_session("controlplane-maintenance", require_jars=True)
    except MissingJvm as error:
        raise CommandError(str(error)) from error
