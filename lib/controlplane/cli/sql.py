"""``python -m controlplane sql FILE_OR_TEXT [--engine datafusion|spark] [--json] [--config FILE]``

Runs one SQL statement (a file under sql/, or the text itself) over the local Delta tables,
with delta-rs (DataFusion SQL, no JVM, the default) or with Spark SQL (``--engine spark``, a
local session with the project's delta-spark jars). Every table under the tables root is
registered by its name (decisions, group_events, groups, rejected_events, quota_decisions,
throttle_events, query_progress). The files under sql/ run in both; where Spark's dialect
differs, ``--engine spark`` reads the twin in sql/spark/ instead. Tables by name in a catalog's
schema (``--tables-schema CATALOG.SCHEMA``, or the settings' ``engine.tables_schema``) are read
with ``--engine spark`` only, the schema being the session's current one.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from controlplane.cli.tables import (
    EXIT_USAGE,
    CommandError,
    add_location_args,
    locate,
    query,
    query_spark,
    render,
    spark_twin,
)

PROG = "python -m controlplane sql"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[1])
    parser.add_argument("sql", help="a .sql file, or SQL text")
    parser.add_argument("--json", action="store_true", help="print JSON Lines instead of a table")
    parser.add_argument(
        "--engine",
        choices=("datafusion", "spark"),
        default="datafusion",
        help="DataFusion through delta-rs (default, starts at once) or Spark SQL",
    )
    add_location_args(parser, by_name=True)
    args = parser.parse_args(argv)
    try:
        if args.engine == "spark":
            result = query_spark(locate(args), _text(args.sql, spark=True))
        else:
            result = query(locate(args), _text(args.sql))
    except CommandError as error:
        return error.report(PROG)
    if args.json:
        for row in result.to_pylist():
            print(json.dumps(row, default=str))
    else:
        print(render(result))
    return 0


def _text(argument: str, *, spark: bool = False) -> str:
    """The statement: the file's text for an existing .sql file (its Spark twin for Spark SQL
    when it has one), else the argument itself."""
    source = Path(argument)
    if source.suffix != ".sql":
        return argument
    if not source.is_file():
        raise CommandError(f"no such file: {source}", EXIT_USAGE)
    return (spark_twin(source) if spark else source).read_text(encoding="utf-8")
