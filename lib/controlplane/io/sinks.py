"""Delta sinks, exactly once per micro-batch.

Two adapters behind one interface (``BatchWriter``), tested on the same tables:

* ``NativeDeltaWriter`` (Databricks, and any session with the project's delta-spark jars):
  ``format("delta")`` appends with ``txnAppId``/``txnVersion``, which Delta deduplicates, and the
  ``groups`` MERGE with the same ids as session confs, set for the MERGE only.
* ``DeltaRsWriter`` (a session without Delta, the Spark-free CLI): delta-rs with app
  transactions. delta-rs records ``(app_id, batch_id)`` but does not skip a repeated one, so
  every write first reads ``transaction_version(app_id)`` and skips a batch at or below it. One
  query is the only writer of its ``app_id``, so check-then-commit is safe.

Both create a table with the same properties (``table_properties``) and keep to the table
features both can read and write (docs/engine.md, "Two writers, one table format"). Both run
the ``groups`` MERGE again, a bounded number of times, when a concurrent commit (a compaction)
wins the race. ``choose_writer`` picks one and logs the choice.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
from pyspark.sql.types import BooleanType, StructField, StructType

from controlplane.core.config import ConfigError
from controlplane.io.locations import NAMES_NEED_NATIVE, TableNames, TablePaths, TablesAt
from controlplane.io.schemas import TABLES, arrow_schema

log = logging.getLogger(__name__)

MERGED_TABLES = frozenset({"groups"})
# Features the native writer turns off explicitly, as Databricks may enable them by default on
# new tables: delta-rs 1.6 cannot append to a table with row tracking and does not write
# deletion vectors. (delta-rs never enables them, and refuses to be given these properties.)
NATIVE_ONLY = {"delta.enableDeletionVectors": "false", "delta.enableRowTracking": "false"}
MERGE_ATTEMPTS = 5
MERGE_RETRY_BACKOFF_S = 0.2  # times the attempt number
TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"
DELTA_TABLE_CLASS = "io.delta.tables.DeltaTable"

Row = Mapping[str, Any]


class BatchWriter(Protocol):
    kind: str
    tables_at_once: bool  # a batch's tables may be written side by side (engine.batch)

    def write(self, table: str, rows: Sequence[Row] | pa.Table, batch_id: int) -> bool:
        """Append (or MERGE, for ``groups``) one batch's rows (dicts, or an Arrow table with
        the table's columns); False when already written or when there is no row."""
        ...


def to_arrow(table: str, rows: Sequence[Row] | pa.Table) -> pa.Table:
    """Rows (JSON-like dicts, or an Arrow table: the sink's) as an Arrow table with the table's
    schema; unknown keys (columns) dropped."""
    schema = arrow_schema(TABLES[table])
    if isinstance(rows, pa.Table):
        return rows.select(schema.names).cast(schema)
    return pa.Table.from_pylist([dict(row) for row in rows], schema=schema)


# Table features both writers handle (delta-rs 1.6 and delta-spark 4.4): those of the legacy
# writer versions up to 4, which Delta lists as features of such a table. A table with any other
# feature (deletion vectors, row tracking, column mapping, ...) is refused before the first
# write, with its name: the other writer could not write it, or could not read it.
PORTABLE_FEATURES = frozenset(
    {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"}
)


class UnportableTable(RuntimeError):
    """A table uses a Delta feature that one of the two writers does not support."""


def check_portable(table: str, features: Sequence[str], min_reader_version: int) -> None:
    extra = sorted(set(features) - PORTABLE_FEATURES)
    if extra or min_reader_version > 1:
        raise UnportableTable(
            f"{table}: table features {extra or []} (reader version {min_reader_version}) are "
            f"not supported by both Delta writers; only {sorted(PORTABLE_FEATURES)} are "
            "(docs/engine.md, 'Two writers, one table format')"
        )


# The features a table of a legacy protocol (writer version 2 to 6, no feature list) has,
# by the version that introduced each (Delta's protocol, "Table Features").
LEGACY_WRITER_FEATURES = (
    (2, ("appendOnly", "invariants")),
    (3, ("checkConstraints",)),
    (4, ("changeDataFeed", "generatedColumns")),
    (5, ("columnMapping",)),
    (6, ("identityColumns",)),
)
FEATURE_PROPERTY = "delta.feature."


def table_features(writer_version: int, listed: Sequence[str]) -> list[str]:
    """A table's features: those its protocol lists (table features, writer version 7), else
    those its legacy writer version implies (delta-rs and Spark list none for such a table)."""
    if listed or writer_version >= 7:
        return sorted(listed)
    return [
        name
        for version, names in LEGACY_WRITER_FEATURES
        if writer_version >= version
        for name in names
    ]


def protocol_of(properties: Mapping[str, str]) -> tuple[list[str], int]:
    """A table's features and reader version from its ``SHOW TBLPROPERTIES``: Spark lists a
    table-features protocol's features as ``delta.feature.<name>`` and a legacy protocol by its
    versions only (``delta.minReaderVersion``, ``delta.minWriterVersion``). What ``DESCRIBE
    DETAIL`` says too, without rebuilding the table's state (a Spark job over its files)."""
    listed = [
        key.removeprefix(FEATURE_PROPERTY) for key in properties if key.startswith(FEATURE_PROPERTY)
    ]
    writer = int(properties.get("delta.minWriterVersion", "2"))
    return table_features(writer, listed), int(properties.get("delta.minReaderVersion", "1"))


def table_properties(table: str) -> dict[str, str]:
    """What both writers set when they create a table: appended tables are append-only (a
    DELETE or UPDATE on an audit table fails), ``groups`` records its changes (change data
    feed)."""
    if table in MERGED_TABLES:
        return {"delta.enableChangeDataFeed": "true"}
    return {"delta.appendOnly": "true"}


# The commit conflicts after which a MERGE runs again (Delta's names, the same in the JVM, in
# delta-spark's Python ``delta.exceptions`` and on Databricks).
MERGE_CONFLICTS = frozenset(
    {
        "ConcurrentAppendException",
        "ConcurrentDeleteReadException",
        "ConcurrentDeleteDeleteException",
        "ConcurrentTransactionException",
        "MetadataChangedException",
        "ProtocolChangedException",
    }
)
DELTA_JAVA_PACKAGES = ("io.delta.exceptions.", "org.apache.spark.sql.delta.")


def jvm_exception(exc: BaseException) -> Any:
    """The JVM exception behind a Python one (a ``Py4JJavaError``'s ``java_exception``, a
    converted ``CapturedException``'s origin), or None (Spark Connect has none)."""
    return getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)


def java_class_names(exc: BaseException) -> list[str]:
    """The class and superclasses of the JVM exception behind ``exc`` (``jvm_exception``), most
    specific first; empty when there is none or the JVM cannot be asked."""
    java = jvm_exception(exc)
    names: list[str] = []
    try:
        kind = java.getClass() if java is not None else None
        while kind is not None:
            names.append(str(kind.getName()))
            kind = kind.getSuperclass()
    except Exception:  # a closed gateway: not a conflict we can tell
        return names
    return names


def is_delta_conflict(exc: BaseException) -> bool:
    """A Delta commit conflict that a MERGE may run again after. delta-spark's Python package
    turns the JVM's exceptions into ``delta.exceptions`` classes, but not every version has that
    module (delta-spark 4.0.0's wheel lacks it, and Spark 4.0 then raises a ``Py4JJavaError``),
    so the classes are recognised by name on either side."""
    python = any(
        kind.__module__.startswith("delta.") and kind.__name__ in MERGE_CONFLICTS
        for kind in type(exc).__mro__
    )
    return python or any(
        name.startswith(DELTA_JAVA_PACKAGES) and name.rsplit(".", 1)[-1] in MERGE_CONFLICTS
        for name in java_class_names(exc)
    )


def summary(exc: BaseException) -> str:
    """One line for the log: the JVM exception's class (a Py4JJavaError's own first line only
    names the call), else the exception's first line."""
    names = java_class_names(exc)
    if names:
        return names[0]
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def merge_retrying(
    merge: Callable[[], None],
    is_conflict: Callable[[BaseException], bool],
    table: str,
    batch_id: int,
) -> None:
    """A MERGE reads the table before it commits: a compaction (the maintenance job) that
    commits in between makes the commit fail. Nothing was written then, so the MERGE runs
    again on the new snapshot, a few times, before the batch (and the query) fails."""
    for attempt in range(1, MERGE_ATTEMPTS + 1):
        try:
            merge()
            return
        except Exception as exc:
            if not is_conflict(exc) or attempt == MERGE_ATTEMPTS:
                raise
            log.warning(
                "%s: MERGE of batch %d lost a commit race (%s); attempt %d of %d",
                table,
                batch_id,
                summary(exc),
                attempt + 1,
                MERGE_ATTEMPTS,
            )
            time.sleep(MERGE_RETRY_BACKOFF_S * attempt)


def with_deleted(table: str, rows: Sequence[Row] | pa.Table) -> pa.Table:
    """A MERGE's source: the rows plus the ``deleted`` flag that says to delete the group."""
    if isinstance(rows, pa.Table):
        if "deleted" in rows.column_names:
            import pyarrow.compute as pc

            flags = pc.fill_null(rows.column("deleted"), False)
        else:
            flags = pa.array([False] * rows.num_rows, pa.bool_())
    else:
        flags = pa.array([bool(row.get("deleted")) for row in rows], pa.bool_())
    return to_arrow(table, rows).append_column("deleted", flags)


def latest_per_group(rows: Sequence[Row] | pa.Table) -> Any:
    """The last row of each group in batch order (a key may be called twice in a batch), at
    the place of the group's first row; rows as given (dicts, or an Arrow table)."""
    if isinstance(rows, pa.Table):
        ids = rows.column("group_id").to_pylist()
        last = {str(group_id): at for at, group_id in enumerate(ids)}
        return rows if len(last) == len(ids) else rows.take(list(last.values()))
    by_group: dict[str, Row] = {}
    for row in rows:
        by_group[str(row["group_id"])] = row
    return list(by_group.values())


class DeltaRsWriter:
    """Each table is opened once and kept: before every write its snapshot is brought up to
    date with the commits made since (``update_incremental``: the log entries after the
    version it holds, none when this writer made the last commit, a compaction's otherwise),
    and the write commits on it. Opening a table replays its log from the last checkpoint
    each time (19-48 ms on an idle machine, with 37 to 98 commits to replay), and a batch
    opened each of its tables twice. A table whose write failed is opened again at its next
    write."""

    kind = "delta-rs"
    # Each table has its own snapshot and commits on its own: a batch's tables may be written
    # side by side (delta-rs leaves the GIL while it writes).
    tables_at_once = True

    def __init__(self, tables_root: str | Path, app_id: str) -> None:
        self.root = Path(tables_root)
        self.app_id = app_id
        self._tables: dict[str, Any] = {}

    def path(self, table: str) -> str:
        return str(self.root / table)

    def committed_version(self, table: str) -> int | None:
        delta = self._latest(table)
        if delta is None:
            return None
        version: int | None = delta.transaction_version(self.app_id)
        return version

    def _latest(self, table: str) -> Any:
        """The table's latest snapshot, or None when it does not exist yet."""
        from deltalake import DeltaTable

        delta = self._tables.get(table)
        if delta is not None:
            delta.update_incremental()
            return delta
        if not DeltaTable.is_deltatable(self.path(table)):
            return None
        delta = DeltaTable(self.path(table))
        protocol = delta.protocol()
        listed = {*(protocol.reader_features or []), *(protocol.writer_features or [])}
        features = table_features(protocol.min_writer_version, sorted(listed))
        check_portable(table, features, protocol.min_reader_version)
        self._tables[table] = delta
        return delta

    def write(self, table: str, rows: Sequence[Row] | pa.Table, batch_id: int) -> bool:
        if not len(rows):
            return False
        try:
            return self._write(table, rows, batch_id)
        except BaseException:
            self._tables.pop(table, None)  # opened again, from its log, at its next write
            raise

    def _write(self, table: str, rows: Sequence[Row] | pa.Table, batch_id: int) -> bool:
        done = self.committed_version(table)
        if done is not None and batch_id <= done:
            log.info(
                "%s: batch %d already committed (app %s): skipped", table, batch_id, self.app_id
            )
            return False
        if table in MERGED_TABLES:
            self._merge_retrying(table, latest_per_group(rows), batch_id)
        else:
            self._append(table, rows, batch_id)
        return True

    def _commit(self, batch_id: int) -> Any:
        from deltalake import CommitProperties, Transaction

        return CommitProperties(app_transactions=[Transaction(self.app_id, batch_id)])

    def _append(self, table: str, rows: Sequence[Row] | pa.Table, batch_id: int) -> None:
        from deltalake import write_deltalake

        self.root.mkdir(parents=True, exist_ok=True)
        known = self._tables.get(table)  # brought up to date by write()
        write_deltalake(
            self.path(table) if known is None else known,
            to_arrow(table, rows),
            mode="append",
            configuration=table_properties(table),
            commit_properties=self._commit(batch_id),
        )

    def _merge_retrying(self, table: str, rows: Sequence[Row] | pa.Table, batch_id: int) -> None:
        from deltalake.exceptions import CommitFailedError

        merge_retrying(
            lambda: self._merge(table, rows, batch_id),
            lambda exc: isinstance(exc, CommitFailedError),
            table,
            batch_id,
        )

    def _open(self, table: str) -> Any:
        """The table's latest snapshot (what a MERGE reads before it commits), or None."""
        return self._latest(table)

    def _merge(self, table: str, rows: Sequence[Row] | pa.Table, batch_id: int) -> None:
        from deltalake import DeltaTable, write_deltalake

        source = with_deleted(table, rows)
        if table not in self._tables and not DeltaTable.is_deltatable(self.path(table)):
            self.root.mkdir(parents=True, exist_ok=True)
            live = source.filter(pa.compute.invert(source["deleted"])).drop_columns(["deleted"])
            write_deltalake(
                self.path(table),
                live,
                mode="append",
                configuration=table_properties(table),
                commit_properties=self._commit(batch_id),
            )
            return
        columns = [name for name in source.column_names if name != "deleted"]
        values = {name: f"s.{name}" for name in columns}
        (
            self._open(table)
            .merge(
                source,
                predicate="t.group_id = s.group_id",
                source_alias="s",
                target_alias="t",
                commit_properties=self._commit(batch_id),
            )
            .when_matched_delete(predicate="s.deleted")
            .when_matched_update(updates=values)
            .when_not_matched_insert(updates=values, predicate="NOT s.deleted")
            .execute()
        )


def local_absolute(root: str) -> str:
    """A relative local path made absolute against the working directory; a URI (``abfss://``,
    ``dbfs:/``, ``file:``) or an absolute path as given. Delta's table builder takes a relative
    ``location`` for a table name and refuses it (``out/demo/tables/decisions`` "is not a valid
    name for tables/schemas")."""
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]+:", root) or os.path.isabs(root):
        return root
    return os.path.abspath(root)


class NativeDeltaWriter:
    """``format("delta")`` with txnAppId/txnVersion; the ``groups`` MERGE with the session's txn
    confs. The writer has a session of its own (``newSession``: same SparkContext, its own SQL
    conf), so the MERGE's confs never leak into another query's writes on the same driver.

    ``tables``: a directory (tables by path) or ``TableNames`` (tables by name in a catalog's
    schema, io/locations.py); the same writes either way."""

    kind = "native"
    # One write at a time: the MERGE's transaction confs are the writer session's.
    tables_at_once = False

    def __init__(self, spark: Any, tables: str | Path | TableNames, app_id: str) -> None:
        self.spark = spark.newSession()
        self.at: TablesAt = (
            tables
            if isinstance(tables, TableNames)
            else TablePaths(local_absolute(str(tables)).rstrip("/"))
        )
        self.app_id = app_id
        self._created: set[str] = set()

    def path(self, table: str) -> str:
        """A table's path (tables by path only)."""
        if not isinstance(self.at, TablePaths):
            raise TypeError(f"{table} is a table by name ({self.at.name(table)}), not a path")
        return self.at.path(table)

    def write(self, table: str, rows: Sequence[Row] | pa.Table, batch_id: int) -> bool:
        if not len(rows):
            return False
        self.create(table)
        if table in MERGED_TABLES:
            self._merge_retrying(table, latest_per_group(rows), batch_id)
            return True
        # From Arrow, not pandas: pandas turns an integer column with a null into floats, which
        # Spark 4.0 refuses for an integer field.
        frame = self.spark.createDataFrame(to_arrow(table, rows), schema=TABLES[table])
        self.at.save(
            frame.write.format("delta")
            .mode("append")
            .option("txnAppId", self.app_id)
            .option("txnVersion", batch_id),
            table,
        )
        return True

    def create(self, table: str) -> None:
        """Create the table (once per writer) with ``table_properties``: an existing table is
        left as it is."""
        if table in self._created:
            return
        self.at.create(self.spark, table, TABLES[table], {**table_properties(table), **NATIVE_ONLY})
        rows = self.spark.sql(f"SHOW TBLPROPERTIES {self.at.sql_name(table)}").collect()
        check_portable(table, *protocol_of({row["key"]: row["value"] for row in rows}))
        self._created.add(table)

    def _merge_retrying(self, table: str, rows: Sequence[Row] | pa.Table, batch_id: int) -> None:
        source = self.spark.createDataFrame(
            with_deleted(table, rows),
            schema=StructType([*TABLES[table].fields, StructField("deleted", BooleanType(), True)]),
        )
        merge_retrying(
            lambda: self._merge(table, source, batch_id), is_delta_conflict, table, batch_id
        )

    def _merge(self, table: str, source: Any, batch_id: int) -> None:
        values: dict[str, Any] = {name: f"s.{name}" for name in TABLES[table].fieldNames()}
        # MERGE takes its idempotence id from session confs only; Delta applies them to every
        # later write of the session until they are unset, so they are unset at once.
        self.spark.conf.set(TXN_APP_ID_CONF, self.app_id)
        self.spark.conf.set(TXN_VERSION_CONF, str(batch_id))
        try:
            (
                self.at.delta_table(self.spark, table)
                .alias("t")
                .merge(source.alias("s"), "t.group_id = s.group_id")
                .whenMatchedDelete("s.deleted")
                .whenMatchedUpdate(set=values)
                .whenNotMatchedInsert(values=values, condition="NOT s.deleted")
                .execute()
            )
        finally:
            self.spark.conf.unset(TXN_APP_ID_CONF)
            self.spark.conf.unset(TXN_VERSION_CONF)


def has_native_delta(spark: Any) -> bool:
    """True when the session can write format("delta") (Databricks, or delta-spark jars). The
    class is looked up through Spark's class loader: jars added with ``spark.jars`` are not on
    the JVM's system class path, so ``Class.forName`` alone would miss them."""
    try:
        jvm = spark.sparkContext._jvm
    except Exception:  # no SparkContext (Spark Connect)
        return False
    spark_loader = jvm.org.apache.spark.util.Utils
    for lookup, extra in (
        (spark_loader.classForName, (True, False)),
        (jvm.java.lang.Class.forName, ()),
    ):
        try:
            lookup(DELTA_TABLE_CLASS, *extra)
        except Exception:
            continue
        return True
    return False


def choose_writer(
    spark: Any, tables: str | Path | TableNames, app_id: str, preference: str = "auto"
) -> Any:
    """``native`` when asked or when the session has Delta, else delta-rs; logged either way.
    Tables by name (``TableNames``) are native only: delta-rs writes paths."""
    writer: Any
    if isinstance(tables, TableNames):
        if preference == "delta-rs":
            raise ConfigError(NAMES_NEED_NATIVE)
        writer = NativeDeltaWriter(spark, tables, app_id)
    elif preference == "native" or (preference == "auto" and has_native_delta(spark)):
        writer = NativeDeltaWriter(spark, tables, app_id)
    else:
        writer = DeltaRsWriter(tables, app_id)
    log.info(
        "sink writer: %s (preference %s) for %s, app id %s",
        writer.kind,
        preference,
        tables,
        app_id,
    )
    return writer
