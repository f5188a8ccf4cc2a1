"""Python workers started ahead of a query's first batch (engine.warmup)."""

from __future__ import annotations

from typing import Any

import pytest

from controlplane.engine.warmup import MODULES, run_warmup

pytestmark = pytest.mark.spark


def test_each_warm_up_task_leaves_its_worker_with_the_engine_imported_and_frozen(
    spark: Any,
) -> None:
    warmed = run_warmup(spark, 2)
    assert len(warmed) == 2
    for worker in warmed:
        assert worker.imported == MODULES
        assert worker.frozen > 0  # adapter.prepare_worker ran: the first call will not freeze
    assert spark.sparkContext.getLocalProperty("spark.job.description") is None
