"""``python -m controlplane sql FILE_OR_TEXT [--tables-root DIR] [--config FILE] [--json]``

Runs one SQL statement (a file under sql/, or the text itself) over the local Delta tables
with delta-rs (DataFusion SQL). Every table under the tables root is registered by its name
(decisions, group_events, groups, rejected_events, quota_decisions, throttle_events,
query_progress). Databricks variants of the files live in sql/databricks/.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from controlplane.cli.tables import add_location_args, query, render, tables_root


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m controlplane sql", description=__doc__.split("\n\n")[1]
    )
    parser.add_argument("sql", help="a .sql file, or SQL text")
    parser.add_argument("--json", action="store_true", help="print JSON Lines instead of a table")
    add_location_args(parser)
    args = parser.parse_args(argv)
    source = Path(args.sql)
    text = (
        source.read_text(encoding="utf-8")
        if source.suffix == ".sql" and source.is_file()
        else args.sql
    )
    if source.suffix == ".sql" and not source.is_file():
        print(f"sql: no such file: {source}", file=sys.stderr)
        return 1
    root = tables_root(args)
    try:
        result = query(root, text)
    except Exception as exc:  # DataFusion planning/execution errors: say so, no traceback
        print(f"sql: {exc}", file=sys.stderr)
        print(
            f"(tables under {root}: run the engine first, or pass --tables-root)", file=sys.stderr
        )
        return 1
    if args.json:
        for row in result.to_pylist():
            print(json.dumps(row, default=str))
    else:
        print(render(result))
    return 0
