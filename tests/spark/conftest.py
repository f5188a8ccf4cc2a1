"""ONE local SparkSession for every Spark test (session-scoped), plus helpers to drop event
files atomically and to poll Delta tables with a generous deadline.

tests/ and lib/ go on PYTHONPATH before the JVM starts, so the Python workers can import the
test runners by reference.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
POLL_DEADLINE_S = 240.0


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    paths = [str(ROOT / "lib"), str(ROOT / "tests")]
    existing = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(paths + ([existing] if existing else []))
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from controlplane.engine.session import build_local_session

    # The pinned jars (make setup) are required: the native Delta writer, Spark SQL over the
    # tables and the Kafka source are tested here, not skipped.
    # Spark's own catalog (tables by name, test_named_tables.py) keeps its managed tables in
    # the warehouse directory: a temporary one, not ./spark-warehouse.
    warehouse = {"spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("warehouse"))}
    session = build_local_session(
        "controlplane-tests", shuffle_partitions=2, require_jars=True, extra_conf=warehouse
    )
    yield session
    for query in session.streams.active:
        query.stop()
    session.stop()


def drop_events(directory: Path, events: Sequence[dict[str, Any] | str]) -> Path:
    """Write a JSON Lines file under a temporary name, then rename it into the directory."""
    directory.mkdir(parents=True, exist_ok=True)
    name = f"{time.time_ns()}-{uuid.uuid4().hex[:8]}"
    temp = directory / f".{name}.tmp"
    lines = [e if isinstance(e, str) else json.dumps(e) for e in events]
    temp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    final = directory / f"{name}.jsonl"
    os.rename(temp, final)
    return final


def read_table(path: Path) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path)):
        return []
    rows: list[dict[str, Any]] = DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    return rows


def wait_for(
    check: Callable[[], Any], query: Any, deadline_s: float = POLL_DEADLINE_S, what: str = ""
) -> Any:
    """Poll until ``check()`` is truthy; fail with the query's state if it never is."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        value = check()
        if value:
            return value
        time.sleep(1.0)
    raise AssertionError(
        f"timed out waiting for {what or check}; last progress {query.lastProgress}"
    )


def run_to_end(writer: Any) -> list[dict[str, Any]]:
    """Start an availableNow query, wait until it ends by itself, and return its progress."""
    query = writer.start()
    try:
        # Generous: a loaded 2-core machine with the native writer took over 300 s here.
        assert query.awaitTermination(900), "availableNow did not finish in event-time mode"
        assert query.exception() is None
        progress: list[dict[str, Any]] = query.recentProgress
    finally:
        query.stop()
    return progress


def assert_same_rows(spark: Any, actual: Sequence[str], expected: Sequence[str]) -> None:
    """Two collections of canonical JSON rows compared as DataFrames with chispa, in any order
    (engine tables carry no row order, docs/reference/events.md §5); chispa prints the rows that
    differ."""
    from chispa import assert_df_equality

    def frame(rows: Sequence[str]) -> Any:
        return spark.createDataFrame([(row,) for row in rows], "row string")

    assert_df_equality(frame(actual), frame(expected), ignore_row_order=True)
