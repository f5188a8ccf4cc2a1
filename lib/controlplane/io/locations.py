"""Where the engine's Delta tables are: under a directory, each by its path
(``engine.tables_root``), or in a catalog's schema, each by its name (``engine.tables_schema``,
``catalog.schema``: Unity Catalog on Databricks, Spark's own ``spark_catalog`` locally).

The native writer, Spark SQL and the Spark maintenance take either (``TablePaths`` or
``TableNames``, the same operations); delta-rs writes and reads paths only. A table by name is
created, appended to (``saveAsTable`` with ``txnAppId``/``txnVersion``), merged into
(``DeltaTable.forName``) and read by that name, so the catalog knows it: SQL by name, grants,
lineage, and the maintenance the platform runs on managed tables.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.core.config import ConfigError

log = logging.getLogger(__name__)

# Delta's error condition for a table it cannot find where it looked.
TABLE_NOT_FOUND = "DELTA_TABLE_NOT_FOUND"

# A catalog or schema name as the engine accepts it: letters, digits, ``_`` and ``-`` (quoted
# with backticks in every statement, which Unity Catalog needs for ``-``).
_PART = r"[A-Za-z0-9_-]+"
SCHEMA_NAME = re.compile(rf"^({_PART})\.({_PART})$")


NAMES_NEED_NATIVE = (
    "engine.tables_schema: tables by name need the native writer (engine.writer: native or "
    "auto); delta-rs writes tables by path only (engine.tables_root)"
)


def parse_tables_schema(where: str, value: object) -> str:
    """``catalog.schema``, two names; a one-line ConfigError naming ``where`` otherwise."""
    if not isinstance(value, str) or not SCHEMA_NAME.match(value):
        raise ConfigError(
            f"{where}: expected catalog.schema (two names of letters, digits, _ or -), "
            f"got {value!r}"
        )
    return value


@dataclass(frozen=True, slots=True)
class TablePaths:
    """Tables under a directory (a local path or a URI), each by its path."""

    root: str

    def path(self, table: str) -> str:
        return f"{self.root.rstrip('/')}/{table}"

    def sql_name(self, table: str) -> str:
        return f"delta.`{self.path(table)}`"

    def create(self, spark: Any, table: str, columns: Any, properties: Mapping[str, str]) -> None:
        """Create the table with ``properties`` unless it exists (then left as it is).

        A directory that holds a Delta log with no commit in it is a create that was stopped
        or killed between making the log and committing the table's first version. Delta's
        ``createIfNotExists`` takes any non-empty directory for a table, skips the create, and
        then fails to read it (``DELTA_TABLE_NOT_FOUND``), at every start. There the table's
        first version is committed by an empty append that carries the properties, as a
        create would set them, but only when the directory holds nothing else (no data file,
        no commit, no checkpoint: ``holds_only_an_empty_log``); any other such table is left
        for a person to look at, with Delta's error. A table another writer created meanwhile
        fails that append with a commit conflict, and is then there."""
        from delta.tables import DeltaTable

        builder = DeltaTable.createIfNotExists(spark).location(self.path(table)).addColumns(columns)
        for key, value in properties.items():
            builder = builder.property(key, value)
        try:
            builder.execute()
        except Exception as exc:
            if not (
                has_condition(exc, TABLE_NOT_FOUND)
                and holds_only_an_empty_log(spark, self.path(table))
            ):
                raise
            log.warning(
                "%s: a Delta log without a commit; committing the table's first version",
                self.path(table),
            )
            self._commit_first_version(spark, table, columns, properties, builder)

    def _commit_first_version(
        self, spark: Any, table: str, columns: Any, properties: Mapping[str, str], builder: Any
    ) -> None:
        writer = spark.createDataFrame([], columns).write.format("delta").mode("append")
        try:
            self.save(writer.options(**properties), table)
        except Exception as append_error:
            try:
                builder.execute()  # another writer created it meanwhile
            except Exception:
                raise append_error from None

    def save(self, writer: Any, table: str) -> None:
        """Run a ``DataFrameWriter`` (format, mode and options set) into the table."""
        writer.save(self.path(table))

    def delta_table(self, spark: Any, table: str) -> Any:
        from delta.tables import DeltaTable

        return DeltaTable.forPath(spark, self.path(table))

    def __str__(self) -> str:
        return self.root


@dataclass(frozen=True, slots=True)
class TableNames:
    """Tables in a catalog's schema, each by its name: ``catalog.schema.table``."""

    schema: str  # catalog.schema

    def __post_init__(self) -> None:
        parse_tables_schema("tables schema", self.schema)

    @property
    def catalog_name(self) -> str:
        return self.schema.split(".")[0]

    @property
    def schema_name(self) -> str:
        return self.schema.split(".")[1]

    @property
    def sql_schema(self) -> str:
        return f"`{self.catalog_name}`.`{self.schema_name}`"

    def name(self, table: str) -> str:
        return f"{self.schema}.{table}"

    def sql_name(self, table: str) -> str:
        return f"{self.sql_schema}.`{table}`"

    def create(self, spark: Any, table: str, columns: Any, properties: Mapping[str, str]) -> None:
        """Create the table with ``properties`` unless it exists (then left as it is), in SQL:
        Delta's table builder takes two-part names only (``schema.table``) outside Databricks,
        and ``writeTo(...).create()`` of an empty frame commits an empty data file."""
        settings = ", ".join(f"'{key}' = '{value}'" for key, value in properties.items())
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {self.sql_name(table)} ({columns_ddl(columns)}) "
            f"USING delta TBLPROPERTIES ({settings})"
        )

    def save(self, writer: Any, table: str) -> None:
        writer.saveAsTable(self.sql_name(table))

    def delta_table(self, spark: Any, table: str) -> Any:
        from delta.tables import DeltaTable

        return DeltaTable.forName(spark, self.sql_name(table))

    def schema_exists(self, spark: Any) -> bool:
        return bool(spark.catalog.databaseExists(self.sql_schema))

    def tables(self, spark: Any) -> list[str]:
        """The names of the tables in the schema."""
        return sorted(str(t.name) for t in spark.catalog.listTables(self.sql_schema))

    def use(self, spark: Any) -> None:
        """Make the schema the session's current one: unqualified names resolve in it."""
        spark.catalog.setCurrentCatalog(self.catalog_name)
        spark.catalog.setCurrentDatabase(self.schema_name)

    def __str__(self) -> str:
        return self.schema


TablesAt = TablePaths | TableNames


def columns_ddl(struct: Any) -> str:
    """A Spark schema (StructType) as the column list of a CREATE TABLE, every name quoted."""
    return ", ".join(
        f"`{field.name}` {_type_ddl(field.dataType)}{'' if field.nullable else ' NOT NULL'}"
        for field in struct.fields
    )


def _type_ddl(kind: Any) -> str:
    from pyspark.sql.types import ArrayType, StructType

    if isinstance(kind, StructType):
        fields = ", ".join(f"`{f.name}`: {_type_ddl(f.dataType)}" for f in kind.fields)
        return f"STRUCT<{fields}>"
    if isinstance(kind, ArrayType):
        return f"ARRAY<{_type_ddl(kind.elementType)}>"
    return str(kind.simpleString())


def has_condition(exc: BaseException, condition: str) -> bool:
    """Whether Spark's error ``exc`` has the error condition ``condition``: asked of the
    exception where PySpark converted it, read from its ``[CONDITION]`` message otherwise (a
    ``Py4JJavaError``)."""
    get = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    try:
        if get is not None and get() == condition:
            return True
    except Exception:  # a closed gateway: the message says it or nothing does
        pass
    return f"[{condition}]" in str(exc)


def holds_only_an_empty_log(spark: Any, path: str) -> bool:
    """Whether the directory ``path`` holds a ``_delta_log`` and nothing else, and the log
    holds no entry but hidden temporary files (a commit is written to one, then renamed).
    Listed through Hadoop's FileSystem, as Delta lists it, so any URI Spark writes to; False
    when it cannot be listed (Spark Connect has no JVM to ask)."""
    try:
        jvm = spark.sparkContext._jvm
        hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()
        root = jvm.org.apache.hadoop.fs.Path(path)
        fs = root.getFileSystem(hadoop_conf)
        if [status.getPath().getName() for status in fs.listStatus(root)] != ["_delta_log"]:
            return False
        entries = fs.listStatus(jvm.org.apache.hadoop.fs.Path(root, "_delta_log"))
        return all(status.getPath().getName().startswith(".") for status in entries)
    except Exception:  # no JVM, or the listing failed: not known to be empty
        return False
