"""``python -m controlplane maintenance [--retention-hours H] [--dry-run] [--tables-root DIR]``

Compacts the small files every micro-batch leaves (``OPTIMIZE``: delta-rs ``optimize.compact``)
and removes files no longer referenced and older than the retention (``VACUUM``).

Retention: 168 hours (7 days) by default, Delta's own default
(``delta.deletedFileRetentionDuration``). It bounds time travel: a reader or a query restarted
from an older table version needs the files of that version, so never go below the longest
expected outage plus the longest running query. delta-rs refuses less than the table's
configured retention unless ``--force`` is given. On Databricks the scheduled maintenance job
runs the same operations as SQL (``OPTIMIZE`` / ``VACUUM ... RETAIN 168 HOURS``;
conf/bundle/resources/maintenance.job.yml, sql/databricks/maintenance.sql).
"""

from __future__ import annotations

import argparse
import sys

from controlplane.cli.tables import CommandError, add_location_args, locate, no_tables, table_paths

PROG = "python -m controlplane maintenance"

DEFAULT_RETENTION_HOURS = 168


def maintain(path: str, retention_hours: int, *, dry_run: bool, force: bool) -> str:
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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[1])
    parser.add_argument("--retention-hours", type=int, default=DEFAULT_RETENTION_HOURS)
    parser.add_argument("--dry-run", action="store_true", help="list what vacuum would remove")
    parser.add_argument("--force", action="store_true", help="allow a retention below the table's")
    add_location_args(parser)
    args = parser.parse_args(argv)
    try:
        location = locate(args)
        tables = table_paths(location.root)
        if not tables:
            raise no_tables(location)
    except CommandError as error:
        return error.report(PROG)
    status = 0
    for name, path in tables.items():
        try:
            done = maintain(str(path), args.retention_hours, dry_run=args.dry_run, force=args.force)
            print(f"{name}: {done}")
        except Exception as exc:
            print(f"{name}: failed: {' '.join(str(exc).split())}", file=sys.stderr)
            status = 1
    return status
