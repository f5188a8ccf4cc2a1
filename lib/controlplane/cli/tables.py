"""What the read-side commands share: finding the Delta tables, running SQL over them with
delta-rs (DataFusion), or with Spark SQL when asked, and saying what went wrong in one line.
Without ``--engine spark`` there is no JVM: these commands start in a fraction of a second.

Exit status: 0 answered; 1 could not answer (no tables where the configuration points, a query
that failed); 2 the command line is wrong (arguments, a missing or invalid ``--config``, SQL
that does not parse).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controlplane.core.config import ConfigError

DEFAULT_CONFIG = "conf/local.yaml"
DEFAULT_TABLES = "out/local/tables"
EXIT_FAILED = 1
EXIT_USAGE = 2

_MISSING_TABLE = re.compile(r"table '(?:[^'.]+\.)*([^'.]+)' not found")
_PARSER_ERROR = re.compile(r"ParserError\(\"(.*)\"\)")


class CommandError(Exception):
    """What a read-side command says instead of a traceback: one line, and its exit status."""

    def __init__(self, message: str, status: int = EXIT_FAILED) -> None:
        super().__init__(" ".join(message.split()))
        self.status = status

    def report(self, prog: str) -> int:
        print(f"{prog}: {self}", file=sys.stderr)
        return self.status


@dataclass(frozen=True, slots=True)
class Tables:
    """Where the tables are, the settings file read (if any), and why: for the messages.
    ``root`` for tables by path, ``schema`` (``catalog.schema``) for tables by name, which only
    Spark reads (``--engine spark``)."""

    root: Path | None
    config: str | None
    origin: str
    schema: str | None = None

    @property
    def where(self) -> str:
        return f"schema {self.schema}" if self.schema else str(self.root)


def add_location_args(parser: argparse.ArgumentParser, *, by_name: bool = False) -> None:
    parser.add_argument(
        "--tables-root",
        help=f"Delta tables directory (default: from --config, else {DEFAULT_TABLES})",
    )
    if by_name:
        parser.add_argument(
            "--tables-schema",
            metavar="CATALOG.SCHEMA",
            help="the tables by name in that schema (--engine spark; default: from --config)",
        )
    parser.add_argument(
        "--config",
        help=f"settings file naming engine.tables_root or engine.tables_schema (default"
        f" {DEFAULT_CONFIG} if present; conf/demo.yaml for the tables `make demo` writes)",
    )


def locate(args: argparse.Namespace) -> Tables:
    """The tables ``--tables-root`` or ``--tables-schema`` names, else those of the settings
    file (``--config``, else conf/local.yaml when it exists). A missing or invalid settings
    file is a usage error."""
    schema = getattr(args, "tables_schema", None)
    if args.tables_root and schema:
        raise CommandError("--tables-root and --tables-schema: give one", EXIT_USAGE)
    if args.tables_root or schema:
        if args.config:
            _configured(args.config)  # a file named on the command line must be valid
        if schema:
            return Tables(None, args.config, "--tables-schema", _schema_argument(schema))
        return Tables(Path(args.tables_root), args.config, "--tables-root")
    config = args.config or (DEFAULT_CONFIG if Path(DEFAULT_CONFIG).is_file() else None)
    if config is None:
        origin = f"the default: no --config and no {DEFAULT_CONFIG} here"
        return Tables(Path(DEFAULT_TABLES), None, origin)
    options = _configured(config)
    if options.tables_schema is not None:
        return Tables(None, config, f"engine.tables_schema of {config}", options.tables_schema)
    return Tables(Path(options.tables_root), config, f"engine.tables_root of {config}")


def _schema_argument(schema: str) -> str:
    from controlplane.io.locations import parse_tables_schema

    try:
        return parse_tables_schema("--tables-schema", schema)
    except ConfigError as error:
        raise CommandError(str(error), EXIT_USAGE) from error


def _configured(config: str) -> Any:
    """The engine options of a settings file (EngineOptions)."""
    from controlplane.engine.options import parse_engine_options
    from controlplane.settings import load_settings

    try:
        settings = load_settings(config)  # its messages name the file
    except ConfigError as error:
        raise CommandError(str(error), EXIT_USAGE) from error
    try:
        return parse_engine_options(settings, config)
    except ConfigError as error:
        raise CommandError(f"{config}: {error}", EXIT_USAGE) from error


def root_of(tables: Tables) -> Path:
    """The directory of tables by path; tables by name are read with Spark SQL only."""
    if tables.root is None:
        raise CommandError(
            f"the tables are by name in {tables.schema} ({tables.origin}): delta-rs reads "
            "tables by path only; read them with `python -m controlplane sql --engine spark`",
            EXIT_USAGE,
        )
    return tables.root


def table_paths(root: Path) -> dict[str, Path]:
    """Every Delta table directly under ``root``, by name. Read from the directories alone, not
    with delta-rs: ``maintenance --engine spark`` lists them on a Databricks cluster, which has
    no delta-rs."""
    if not root.is_dir():
        return {}
    return {p.name: p for p in sorted(root.iterdir()) if is_delta_table(p)}


_LOG_ENTRY = re.compile(r"\d{20}\.(json|checkpoint\..+)")


def is_delta_table(path: Path) -> bool:
    """A directory whose ``_delta_log`` holds a commit (``00000000000000000000.json``) or a
    checkpoint (``...010.checkpoint.parquet``, its parts): a Delta table's log."""
    log = path / "_delta_log"
    return log.is_dir() and any(_LOG_ENTRY.fullmatch(entry.name) for entry in log.iterdir())


def no_tables(tables: Tables) -> CommandError:
    """There is nothing under the root: say where we looked, why there, and where to look."""
    elsewhere = [
        f"{root} has tables: add --config {config}"
        for config, root in _other_configured_roots(tables.root)
    ]
    engine = f"--config {tables.config}" if tables.config else "a configuration naming it"
    hint = "; ".join(elsewhere) or (
        f"run the engine with {engine} (`make demo` writes out/demo/tables, --config"
        " conf/demo.yaml), or name other tables with --config FILE or --tables-root DIR"
    )
    return CommandError(f"no Delta tables under {tables.root} ({tables.origin}); {hint}")


def _other_configured_roots(root: Path | None) -> list[tuple[str, Path]]:
    """The settings files under conf/ whose tables_root differs from ``root`` and has tables
    (files naming a schema, tables by name, are not looked into)."""
    found = []
    for config in sorted(Path("conf").glob("*.yaml")):
        try:
            options = _configured(str(config))
        except CommandError:
            continue
        if options.tables_schema is not None:
            continue
        other = Path(options.tables_root)
        if (root is None or other.resolve() != root.resolve()) and table_paths(other):
            found.append((str(config), other))
    return found


def query(tables: Tables, sql: str) -> Any:
    """Run ``sql`` with every table of the root registered under its name; a pyarrow Table.
    Raises CommandError saying which table is missing, or that the SQL does not parse."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    paths = table_paths(root_of(tables))
    builder = QueryBuilder()
    for name, path in paths.items():
        builder.register(name, DeltaTable(str(path)))
    try:
        return pa.RecordBatchReader.from_stream(builder.execute(sql)).read_all()
    except Exception as error:  # DataFusion planning/execution errors, as one line
        text = " ".join(str(error).split())
        parse = _PARSER_ERROR.search(text)
        if parse:
            raise CommandError(f"SQL syntax error: {parse.group(1)}", EXIT_USAGE) from error
        missing = _MISSING_TABLE.search(text)
        if missing and not paths:
            raise no_tables(tables) from error
        if missing:
            raise CommandError(
                f"no table {missing.group(1)!r} under {tables.root} ({tables.origin});"
                f" it has {', '.join(paths)}"
            ) from error
        raise CommandError(f"query failed: {text}") from error


def spark_twin(path: Path) -> Path:
    """The Spark SQL twin of a file under sql/ (sql/spark/<name>) when there is one."""
    twin = path.parent / "spark" / path.name
    return twin if twin.is_file() else path


def query_spark(tables: Tables, sql: str) -> Any:
    """Run ``sql`` with Spark SQL over the same tables, on a session of its own: tables by path
    each registered as a temporary view by its name, tables by name in their schema made the
    current one; a pyarrow Table. Needs the project's jars (``make setup``)."""
    from controlplane.engine.session import command_session
    from controlplane.jvm import MissingJvm

    paths = {} if tables.root is None else table_paths(tables.root)
    if tables.root is not None and not paths:
        raise no_tables(tables)
    try:
        spark = command_session("controlplane-sql", master="local[1]")
    except MissingJvm as error:
        raise CommandError(str(error)) from error
    session = spark.newSession()  # its own current schema and views
    if tables.schema is not None:
        return spark_sql(session, sql, tables, use_schema(session, tables))
    for name, path in paths.items():
        session.read.format("delta").load(str(path.resolve())).createOrReplaceTempView(name)
    return spark_sql(session, sql, tables, list(paths))


def use_schema(spark: Any, tables: Tables) -> list[str]:
    """Make the schema of tables by name the session's current one; its tables' names."""
    from controlplane.io.locations import TableNames

    names = TableNames(str(tables.schema))
    if not names.schema_exists(spark):
        raise CommandError(
            f"no schema {names} in Spark's catalogs ({tables.origin}); locally Spark's own "
            "catalog lives as long as its session (name local tables by path)"
        )
    names.use(spark)
    return names.tables(spark)


def spark_sql(spark: Any, sql: str, tables: Tables, names: list[str]) -> Any:
    from pyspark.errors import AnalysisException, ParseException

    # Spark logs the errors we report in one line: its JVM logs, and PySpark's loggers that
    # print an exception's query context when the exception is turned into text.
    from pyspark.logger import PySparkLogger

    spark.sparkContext.setLogLevel("FATAL")
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        # PySpark's own logger class: a plain Logger under that name would refuse PySpark's
        # keyword arguments when an exception is turned into text.
        PySparkLogger.getLogger(name).disabled = True
    try:
        return spark.sql(sql).toArrow()
    except ParseException as error:
        first = str(error).strip().splitlines()[0]
        raise CommandError(f"SQL syntax error: {first}", EXIT_USAGE) from error
    except AnalysisException as error:
        text = " ".join(str(error).split())
        if "TABLE_OR_VIEW_NOT_FOUND" in text:
            raise CommandError(
                f"{text.split(' SQLSTATE')[0]} under {tables.where} ({tables.origin});"
                f" it has {', '.join(names)}"
            ) from error
        raise CommandError(f"query failed: {text}") from error
    finally:
        spark.sparkContext.setLogLevel("WARN")


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
