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

from controlplane.engine.schemas import TABLES, arrow_schema

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

Row = Mapping[str, Any]


class BatchWriter(Protocol):
    kind: str

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


def table_properties(table: str) -> dict[str, str]:
    """What both writers set when they create a table: appended tables are append-only (a
    DELETE or UPDATE on an audit table fails), ``groups`` records its changes (change data
    feed)."""
    if table in MERGED_TABLES:
        return {"delta.enableChangeDataFeed": "true"}
    return {"delta.appendOnly": "true"}


def merge_retrying(
    merge: Callable[[], None],
    conflicts: tuple[type[BaseException], ...],
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
        except conflicts as exc:
            if attempt == MERGE_ATTEMPTS:
                raise
            log.warning(
                "%s: MERGE of batch %d lost a commit race (%s); attempt %d of %d",
                table,
                batch_id,
                str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
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
    kind = "delta-rs"

    def __init__(self, tables_root: str | Path, app_id: str) -> None:
        self.root = Path(tables_root)
        self.app_id = app_id
        self._checked: set[str] = set()

    def path(self, table: str) -> str:
        return str(self.root / table)

    def committed_version(self, table: str) -> int | None:
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.path(table)):
            return None
        delta = DeltaTable(self.path(table))
        if table not in self._checked:
            protocol = delta.protocol()
            features = [*(protocol.reader_features or []), *(protocol.writer_features or [])]
            check_portable(table, features, protocol.min_reader_version)
            self._checked.add(table)
        version: int | None = delta.transaction_version(self.app_id)
        return version

    def write(self, table: str, rows: Sequence[Row] | pa.Table, batch_id: int) -> bool:
        if not len(rows):
            return False
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
        write_deltalake(
            self.path(table),
            to_arrow(table, rows),
            mode="append",
            configuration=table_properties(table),
            commit_properties=self._commit(batch_id),
        )

    def _merge_retrying(self, table: str, rows: Sequence[Row] | pa.Table, batch_id: int) -> None:
        from deltalake.exceptions import CommitFailedError

        merge_retrying(
            lambda: self._merge(table, rows, batch_id), (CommitFailedError,), table, batch_id
        )

    def _open(self, table: str) -> Any:
        """The table's latest snapshot (what a MERGE reads before it commits)."""
        from deltalake import DeltaTable

        return DeltaTable(self.path(table))

    def _merge(self, table: str, rows: Sequence[Row] | pa.Table, batch_id: int) -> None:
        from deltalake import DeltaTable, write_deltalake

        source = with_deleted(table, rows)
        if not DeltaTable.is_deltatable(self.path(table)):
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
    conf), so the MERGE's confs never leak into another query's writes on the same driver."""

    kind = "native"

    def __init__(self, spark: Any, tables_root: str, app_id: str) -> None:
        self.spark = spark.newSession()
        self.root = local_absolute(str(tables_root)).rstrip("/")
        self.app_id = app_id
        self._created: set[str] = set()

    def path(self, table: str) -> str:
        return f"{self.root}/{table}"

    def write(self, table: str, rows: Sequence[Row] | pa.Table, batch_id: int) -> bool:
        if not len(rows):
            return False
        self.create(table)
        if table in MERGED_TABLES:
            self._merge_retrying(table, latest_per_group(rows), batch_id)
            return True
        frame = self.spark.createDataFrame(to_arrow(table, rows).to_pandas(), schema=TABLES[table])
        (
            frame.write.format("delta")
            .mode("append")
            .option("txnAppId", self.app_id)
            .option("txnVersion", batch_id)
            .save(self.path(table))
        )
        return True

    def create(self, table: str) -> None:
        """Create the table (once per writer) with ``table_properties``: an existing table is
        left as it is."""
        if table in self._created:
            return
        from delta.tables import DeltaTable

        builder = (
            DeltaTable.createIfNotExists(self.spark)
            .location(self.path(table))
            .addColumns(TABLES[table])
        )
        for key, value in {**table_properties(table), **NATIVE_ONLY}.items():
            builder = builder.property(key, value)
        builder.execute()
        detail = self.spark.sql(f"DESCRIBE DETAIL delta.`{self.path(table)}`").first()
        check_portable(table, list(detail["tableFeatures"] or []), int(detail["minReaderVersion"]))
        self._created.add(table)

    def _merge_retrying(self, table: str, rows: Sequence[Row] | pa.Table, batch_id: int) -> None:
        from delta.exceptions import (
            ConcurrentAppendException,
            ConcurrentDeleteDeleteException,
            ConcurrentDeleteReadException,
            ConcurrentTransactionException,
            MetadataChangedException,
            ProtocolChangedException,
        )

        conflicts = (
            ConcurrentAppendException,
            ConcurrentDeleteReadException,
            ConcurrentDeleteDeleteException,
            ConcurrentTransactionException,
            MetadataChangedException,
            ProtocolChangedException,
        )
        source = self.spark.createDataFrame(
            with_deleted(table, rows).to_pandas(),
            schema=StructType([*TABLES[table].fields, StructField("deleted", BooleanType(), True)]),
        )
        merge_retrying(lambda: self._merge(table, source, batch_id), conflicts, table, batch_id)

    def _merge(self, table: str, source: Any, batch_id: int) -> None:
        from delta.tables import DeltaTable

        values: dict[str, Any] = {name: f"s.{name}" for name in TABLES[table].fieldNames()}
        # MERGE takes its idempotence id from session confs only; Delta applies them to every
        # later write of the session until they are unset, so they are unset at once.
        self.spark.conf.set(TXN_APP_ID_CONF, self.app_id)
        self.spark.conf.set(TXN_VERSION_CONF, str(batch_id))
        try:
            (
                DeltaTable.forPath(self.spark, self.path(table))
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


def choose_writer(spark: Any, tables_root: str, app_id: str, preference: str = "auto") -> Any:
    """``native`` when asked or when the session has Delta, else delta-rs; logged either way."""
    from controlplane.engine.session import has_native_delta

    native = preference == "native" or (preference == "auto" and has_native_delta(spark))
    writer: Any = (
        NativeDeltaWriter(spark, tables_root, app_id)
        if native
        else DeltaRsWriter(tables_root, app_id)
    )
    log.info(
        "sink writer: %s (preference %s) for %s, app id %s",
        writer.kind,
        preference,
        tables_root,
        app_id,
    )
    return writer
