"""What the read-side commands share: finding the Delta tables and running SQL over them with
delta-rs (DataFusion). No Spark: these commands start in a fraction of a second."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

DEFAULT_CONFIG = "conf/local.yaml"
DEFAULT_TABLES = "out/local/tables"


def add_location_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tables-root",
        help=f"Delta tables directory (default: from --config, else {DEFAULT_TABLES})",
    )
    parser.add_argument(
        "--config",
        help=f"settings file naming engine.tables_root (default {DEFAULT_CONFIG} if present)",
    )


def tables_root(args: argparse.Namespace) -> Path:
    if args.tables_root:
        return Path(args.tables_root)
    config = args.config or (DEFAULT_CONFIG if Path(DEFAULT_CONFIG).is_file() else None)
    if config:
        from controlplane.engine.options import parse_engine_options
        from controlplane.settings import load_settings

        return Path(parse_engine_options(load_settings(config)).tables_root)
    return Path(DEFAULT_TABLES)


def table_paths(root: Path) -> dict[str, Path]:
    """Every Delta table directly under ``root``, by name."""
    from deltalake import DeltaTable

    if not root.is_dir():
        return {}
    return {
        p.name: p for p in sorted(root.iterdir()) if p.is_dir() and DeltaTable.is_deltatable(str(p))
    }


def query(root: Path, sql: str) -> Any:
    """Run ``sql`` with every table of ``root`` registered under its name; a pyarrow Table."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    builder = QueryBuilder()
    for name, path in table_paths(root).items():
        builder.register(name, DeltaTable(str(path)))
    return pa.RecordBatchReader.from_stream(builder.execute(sql)).read_all()


def render(table: Any, max_width: int = 60) -> str:
    """A plain text table, as the kafka-* tools print."""
    columns = list(table.column_names)
    rows = [[_cell(value, max_width) for value in row.values()] for row in table.to_pylist()]
    widths = [max([len(name)] + [len(row[i]) for row in rows]) for i, name in enumerate(columns)]
    lines = ["  ".join(name.upper().ljust(w) for name, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(line.rstrip() for line in lines)


def _cell(value: Any, max_width: int) -> str:
    text = "-" if value is None else str(value)
    return text if len(text) <= max_width else text[: max_width - 1] + "…"
