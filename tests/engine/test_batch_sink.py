"""The foreachBatch sink's idempotence id: one per checkpoint, never a shared constant."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from controlplane.engine.batch import query_app_id


class FakeContext:
    def __init__(self, properties: dict[str, str]) -> None:
        self.properties = properties

    def getLocalProperty(self, key: str) -> str | None:
        return self.properties.get(key)


class FakeSession:
    def __init__(self, properties: dict[str, str]) -> None:
        self.sparkContext = FakeContext(properties)


def test_the_query_id_comes_from_spark_on_the_foreach_batch_thread() -> None:
    spark: Any = FakeSession({"sql.streaming.queryId": "4f1c"})
    assert query_app_id("coordinator", "dbfs:/checkpoints/coordinator", spark) == (
        "controlplane-coordinator-4f1c"
    )


def test_else_the_checkpoint_metadata_is_read(tmp_path: Path) -> None:
    (tmp_path / "metadata").write_text(json.dumps({"id": "abc"}))
    assert query_app_id("quota", str(tmp_path), FakeSession({})) == "controlplane-quota-abc"
    assert query_app_id("quota", str(tmp_path)) == "controlplane-quota-abc"


@pytest.mark.parametrize("checkpoint", ["file:///nowhere/coordinator", "s3://bucket/cp"])
def test_an_unreadable_query_id_refuses_to_write_instead_of_sharing_one(checkpoint: str) -> None:
    """It used to be "controlplane-<query>-unknown" for every checkpoint it could not read: a
    reset checkpoint (batch ids from 0 again) then skipped every batch the old one had written."""
    with pytest.raises(RuntimeError, match="cannot read the query id"):
        query_app_id("coordinator", checkpoint, FakeSession({}))
