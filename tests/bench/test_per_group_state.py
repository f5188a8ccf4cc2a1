"""The per-group state benchmark's functions (bench/per_group_state_bench.py): the Spark runs
are by hand, but the state each keeps must be the size it claims and change at every call, and
only the batches after the warm-up may be measured."""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from engine.fakes import FakeGroupState

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import per_group_state_bench as bench


class FakeMapState:
    """A map state as the processor uses it: keys and values are tuples."""

    def __init__(self) -> None:
        self.values: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self.reads: list[tuple[Any, ...]] = []

    def getValue(self, key: tuple[Any, ...]) -> tuple[Any, ...] | None:
        self.reads.append(key)
        return self.values.get(key)

    def updateValue(self, key: tuple[Any, ...], value: tuple[Any, ...]) -> None:
        self.values[key] = value


class FakeHandle:
    def __init__(self) -> None:
        self.maps: dict[str, FakeMapState] = {}

    def getMapState(self, name: str, key_schema: str, value_schema: str) -> FakeMapState:
        assert (key_schema, value_schema) == ("group long", "body binary")
        return self.maps.setdefault(name, FakeMapState())


def test_the_blob_is_the_shards_state_as_base64_text_rotated_each_call() -> None:
    function = bench.keeps_a_blob(999)
    state = FakeGroupState(timeout="NoTimeout")
    frames = [pd.DataFrame({"group": [1, 65]}), pd.DataFrame({"group": [129]})]
    (out,) = list(function(("1",), iter(frames), state))
    assert out.to_dict("records") == [{"key": "1", "rows": 3}]
    first = base64.b64decode(state.value[0], validate=True)
    assert len(first) == 999
    list(function(("1",), iter([pd.DataFrame({"group": [1]})]), state))
    assert base64.b64decode(state.value[0], validate=True) == first[1:] + first[:1]


def test_the_map_reads_and_replaces_only_the_groups_its_rows_reach() -> None:
    processor = bench.keeps_a_map()
    handle = FakeHandle()
    processor.init(handle)
    bodies = handle.maps["bodies"]
    frames = [pd.DataFrame({"group": [3, 67, 3]}), pd.DataFrame({"group": [131]})]
    (out,) = list(processor.handleInputRows(("3",), iter(frames), None))
    assert out.to_dict("records") == [{"key": "3", "rows": 4}]
    assert bodies.reads == [(3,), (67,), (131,)]  # one request a group, not a row
    assert sorted(bodies.values) == [(3,), (67,), (131,)]
    assert all(len(value[0]) == bench.GROUP_BYTES for value in bodies.values.values())
    before = dict(bodies.values)
    bodies.reads.clear()
    list(processor.handleInputRows(("3",), iter([pd.DataFrame({"group": [67]})]), None))
    assert bodies.reads == [(67,)]
    body = before[(67,)][0]
    assert bodies.values[(67,)] == (body[1:] + body[:1],)
    assert bodies.values[(3,)] == before[(3,)]


def progress(rows: int) -> dict[str, Any]:
    return {"numInputRows": rows}


@pytest.mark.parametrize(
    ("rows", "groups", "measured"),
    [
        # the first three batches are never measured
        ([10, 10, 10, 10, 10], 5, [3, 4]),
        # nor a batch that starts before the rows have reached every group
        ([10, 10, 10, 10, 10, 10], 45, [5]),
        ([100, 1, 1, 1, 1], 100, [3, 4]),
        ([10, 10, 10, 10, 10], 30, [3, 4]),  # the rows before it reached the last group
        ([1, 1, 1, 1], 100, []),
    ],
)
def test_only_the_batches_after_the_warm_up_are_measured(
    rows: list[int], groups: int, measured: list[int]
) -> None:
    batches = [progress(count) | {"number": n} for n, count in enumerate(rows)]
    assert [p["number"] for p in bench.warmed(batches, groups)] == measured


@pytest.mark.parametrize(
    ("add_batch_ms", "rows", "groups", "per_group_us"),
    [
        (500.0, 10_000.0, 34_000, 50.0),  # each row reaches a group of its own
        (12_000.0, 120_000.0, 34_000, 12_000_000 / 34_000),  # every group, some more than once
    ],
)
def test_a_batch_is_divided_by_the_groups_it_reached(
    add_batch_ms: float, rows: float, groups: int, per_group_us: float
) -> None:
    figures = bench.Figures(add_batch_ms, add_batch_ms, rows, 1, None)
    assert figures.per_group_us(groups) == pytest.approx(per_group_us)
