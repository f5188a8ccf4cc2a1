"""``python -m controlplane maintenance [--retention-hours H] [--dry-run] [--engine ENGINE]``

Compacts the small files every micro-batch leaves (``OPTIMIZE``) and removes files no longer
referenced and older than the retention (``VACUUM``), with delta-rs (no JVM, the default) or
Spark SQL (``--engine spark``: the project's delta-spark jars locally, the cluster's own Delta
on Databricks, which has no delta-rs; the bundle's maintenance job runs this). Every Delta table
under the tables root, or with ``--engine spark`` the engine's tables by name in a schema
(``--tables-schema CATALOG.SCHEMA``, or the settings' ``engine.tables_schema``).

Retention: 168 hours (7 days) by default, Delta's own default
(``delta.deletedFileRetentionDuration``). It bounds time travel: a reader or a query restarted
from an older table version needs the files of that version, so never go below the longest
expected outage plus the longest running query. Both engines refuse less than the table's
configured retention unless ``--force`` is given. sql/spark/maintenance.sql has the same
statements as SQL.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from typing import Any

from controlplane.cli.tables import (
    EXIT_USAGE,
    CommandError,
    Tables,
    add_location_args,
    locate,
    no_tables,
    table_paths,
    use_schema,
)
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
    add_location_args(parser, by_name=True)
    args = parser.parse_args(argv)
    try:
        targets, maintain = _targets(locate(args), args.engine)
    except CommandError as error:
        return error.report(PROG)
    status = 0
    for name, target in targets.items():
        try:
            done = maintain(target, args.retention_hours, dry_run=args.dry_run, force=args.force)
            print(f"{name}: {done}")
        except Exception as exc:
            print(f"{name}: failed: {' '.join(str(exc).split())}", file=sys.stderr)
            status = 1
    return status


def _targets(location: Tables, engine: str) -> tuple[dict[str, str], Callable[..., str]]:
    """Each table to maintain by name, with what the maintainer takes (a path for delta-rs, a
    SQL name for Spark), and the maintainer. Tables by name: the engine's tables found in the
    schema, with Spark only."""
    if engine == "delta-rs":
        if location.root is None:
            raise CommandError(
                f"the tables are by name in {location.schema} ({location.origin}): "
                "maintain them with --engine spark",
                EXIT_USAGE,
            )
        paths = table_paths(location.root)
        if not paths:
            raise no_tables(location)
        return {name: str(path.resolve()) for name, path in paths.items()}, maintain_deltars
    if location.root is not None:
        paths = table_paths(location.root)
        if not paths:
            raise no_tables(location)
    spark = _spark()
    if location.root is not None:
        targets = {name: f"delta.`{path.resolve()}`" for name, path in paths.items()}
        return targets, partial(maintain_spark, spark)
    from controlplane.io.locations import TableNames
    from controlplane.io.schemas import TABLES

    names = TableNames(str(location.schema))
    found = [name for name in use_schema(spark, location) if name in TABLES]
    if not found:
        raise CommandError(
            f"none of the engine's tables is in {names} ({location.origin}); "
            f"expected some of {', '.join(TABLES)}"
        )
    return {name: names.sql_name(name) for name in found}, partial(maintain_spark, spark)


def _spark() -> Any:
    from controlplane.engine.session import command_session
    from controlplane.jvm import MissingJvm

    try:  # a session of its own: its current schema and confs
        return command_session("controlplane-maintenance").newSession()
    except MissingJvm as error:
        raise CommandError(str(error)) from error
