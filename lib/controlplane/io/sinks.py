"""Delta sinks, exactly once per micro-batch.

Two adapters behind one interface (``BatchWriter``):

* ``DeltaRsWriter`` (local, CI): delta-rs with app transactions. delta-rs records
  ``(app_id, batch_id)`` but does not skip a repeated one, so every write first reads
  ``transaction_version(app_id)`` and skips a batch at or below it. One query is the only writer
  of its ``app_id``, so check-then-commit is safe.
* ``NativeDeltaWriter`` (Databricks, or any session with delta-spark): ``format("delta")`` with
  ``txnAppId``/``txnVersion``, which Delta itself deduplicates. UNVERIFIED LOCALLY: this
  machine cannot fetch the delta-spark jars.

``choose_writer`` picks one automatically and logs the choice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa

from controlplane.engine.schemas import TABLES, arrow_schema

log = logging.getLogger(__name__)

APPEND_ONLY = {"delta.appendOnly": "true"}
MERGED_TABLES = frozenset({"groups"})
MERGE_ATTEMPTS = 5
MERGE_RETRY_BACKOFF_S = 0.2  # times the attempt number
TXN_APP_ID_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"

Row = Mapping[str, Any]


class BatchWriter(Protocol):
    kind: str

    def write(self, table: str, rows: Sequence[Row], batch_id: int) -> bool:
        """Append (or MERGE, for ``groups``) one batch's rows; False when already written."""
        ...


def to_arrow(table: str, rows: Sequence[Row]) -> pa.Table:
    """Rows (JSON-like dicts) as an Arrow table with the table's schema; unknown keys dropped."""
    schema = arrow_schema(TABLES[table])
    return pa.Table.from_pylist([dict(row) for row in rows], schema=schema)


def latest_per_group(rows: Sequence[Row]) -> list[Row]:
    """The last row of each group in batch order (a key may be called twice in a batch)."""
    last: dict[str, Row] = {}
    for row in rows:
        last[str(row["group_id"])] = row
    return list(last.values())


class DeltaRsWriter:
    kind = "delta-rs"

    def __init__(self, tables_root: str | Path, app_id: str) -> None:
        self.root = Path(tables_root)
        self.app_id = app_id

    def path(self, table: str) -> str:
        return str(self.root / table)

    def committed_version(self, table: str) -> int | None:
        from deltalake import DeltaTable

        if not DeltaTable.is_deltatable(self.path(table)):
            return None
        version: int | None = DeltaTable(self.path(table)).transaction_version(self.app_id)
        return version

    def write(self, table: str, rows: Sequence[Row], batch_id: int) -> bool:
        if not rows:
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

    def _append(self, table: str, rows: Sequence[Row], batch_id: int) -> None:
        from deltalake import write_deltalake

        self.root.mkdir(parents=True, exist_ok=True)
        write_deltalake(
            self.path(table),
            to_arrow(table, rows),
            mode="append",
            configuration=APPEND_ONLY,
            commit_properties=self._commit(batch_id),
        )

    def _merge_retrying(self, table: str, rows: Sequence[Row], batch_id: int) -> None:
        """A MERGE reads the table before it commits: a compaction (the maintenance job) that
        commits in between makes the commit fail. Nothing was written then, so the MERGE runs
        again on the new snapshot, a few times, before the batch (and the query) fails."""
        from deltalake.exceptions import CommitFailedError

        for attempt in range(1, MERGE_ATTEMPTS + 1):
            try:
                self._merge(table, rows, batch_id)
                return
            except CommitFailedError as exc:
                if attempt == MERGE_ATTEMPTS:
                    raise
                log.warning(
                    "%s: MERGE of batch %d lost a commit race (%s); attempt %d of %d",
                    table,
                    batch_id,
                    exc,
                    attempt + 1,
                    MERGE_ATTEMPTS,
                )
                time.sleep(MERGE_RETRY_BACKOFF_S * attempt)

    def _open(self, table: str) -> Any:
        """The table's latest snapshot (what a MERGE reads before it commits)."""
        from deltalake import DeltaTable

        return DeltaTable(self.path(table))

    def _merge(self, table: str, rows: Sequence[Row], batch_id: int) -> None:
        from deltalake import DeltaTable, write_deltalake

        source = to_arrow(table, rows).append_column(
            "deleted", pa.array([bool(row.get("deleted")) for row in rows], pa.bool_())
        )
        if not DeltaTable.is_deltatable(self.path(table)):
            self.root.mkdir(parents=True, exist_ok=True)
            live = source.filter(pa.compute.invert(source["deleted"])).drop_columns(["deleted"])
            write_deltalake(
                self.path(table),
                live,
                mode="append",
                configuration={"delta.enableChangeDataFeed": "true"},
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


class NativeDeltaWriter:  # pragma: no cover - needs delta-spark (Databricks); unverified locally
    """format("delta") with txnAppId/txnVersion; MERGE with the session's txn confs."""

    kind = "native"

    def __init__(self, spark: Any, tables_root: str, app_id: str) -> None:
        self.spark = spark
        self.root = tables_root.rstrip("/")
        self.app_id = app_id

    def write(self, table: str, rows: Sequence[Row], batch_id: int) -> bool:
        if not rows:
            return False
        if table in MERGED_TABLES:
            rows = latest_per_group(rows)
        arrow = to_arrow(table, rows)
        frame = self.spark.createDataFrame(arrow.to_pandas(), schema=TABLES[table])
        path = f"{self.root}/{table}"
        if table not in MERGED_TABLES:
            (
                frame.write.format("delta")
                .mode("append")
                .option("txnAppId", self.app_id)
                .option("txnVersion", batch_id)
                .save(path)
            )
            return True
        from delta.tables import DeltaTable

        deleted = self.spark.createDataFrame(
            [(str(r["group_id"]), bool(r.get("deleted"))) for r in rows],
            "group_id string, deleted boolean",
        )
        source = frame.join(deleted, "group_id")
        if not DeltaTable.isDeltaTable(self.spark, path):
            source.filter("NOT deleted").drop("deleted").write.format("delta").save(path)
            return True
        values: dict[str, Any] = {str(name): f"s.{name}" for name in frame.columns}
        # MERGE takes its idempotence id from session confs only; Delta applies them to every
        # later write of the session until they are unset, so they are unset at once.
        self.spark.conf.set(TXN_APP_ID_CONF, self.app_id)
        self.spark.conf.set(TXN_VERSION_CONF, str(batch_id))
        try:
            (
                DeltaTable.forPath(self.spark, path)
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
        return True


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
