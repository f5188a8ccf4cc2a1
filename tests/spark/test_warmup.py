"""Python workers started ahead of a query's first batch (engine.warmup)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from controlplane.engine.warmup import MODULES, run_warmup

pytestmark = pytest.mark.spark


def _report(frames: Iterator[Any]) -> Iterator[Any]:
    """In a pandas UDF's worker: its process, what it froze, whether it holds the engine."""
    import gc
    import os
    import sys

    import pandas as pd

    for _ in frames:
        pass
    ready = all(name in sys.modules for name in MODULES)
    yield pd.DataFrame({"pid": [os.getpid()], "frozen": [gc.get_freeze_count()], "ready": [ready]})


def test_the_next_pandas_job_runs_in_the_warmed_workers_with_the_engine_ready(
    spark: Any,
) -> None:
    warmed = run_warmup(spark, 2)
    assert len(warmed) == 2
    assert all(worker.frozen > 0 for worker in warmed)
    frame = spark.range(0, 4, 1, 2).mapInPandas(_report, "pid long, frozen long, ready boolean")
    rows = frame.collect()
    assert len(rows) == 2  # one per partition, each in a worker of its own or the same one
    assert {row.pid for row in rows} <= {worker.pid for worker in warmed}
    assert all(row.ready and row.frozen > 0 for row in rows)
    assert spark.sparkContext.getLocalProperty("spark.job.description") is None
