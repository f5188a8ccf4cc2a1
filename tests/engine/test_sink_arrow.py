"""The state function's output rows and the foreachBatch sink's reading of them, without a JVM.

The function hands Spark one row per table per call (its rows as an Arrow stream in the
table's columns); the sink concatenates them. Whatever the input, the tables it writes must be
the ones the per-row path gives (each row as JSON text, parsed by Python's JSON reader, then
converted to the table's schema): the same rows, in the same order, with the same values.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.core.runtime import Runner
from controlplane.engine import envelope, progress
from controlplane.engine.adapter import METRICS_TABLE, StateFunction
from controlplane.engine.answer_json import answers_table, finite
from controlplane.engine.batch import BatchSink, split_batch, split_envelopes
from controlplane.engine.keying import SparkKeys
from controlplane.engine.options import Keying, TimeMode
from controlplane.engine.queries import CoordinatorRunners, QuotaKeyer, QuotaRunners
from controlplane.engine.reload import SettingsSource
from controlplane.io.answers import ANSWERED_TABLES, ANSWERS_TABLE, answer_records
from controlplane.io.schemas import TABLES
from controlplane.io.sinks import latest_per_group, to_arrow, with_deleted
from engine.fakes import BatchFrame, FakeGroupState
from engine.test_bad_input_fuzz import GROUP_EVENTS, QUOTA_EVENTS, SETTINGS, damaged_line

BATCH_TIMES = (1_700_000_000_000, 1_700_000_060_000)


def frames_of(lines: list[str], batch_time_ms: int) -> Iterator[pd.DataFrame]:
    rows = [
        {
            "key": "k",
            "raw": raw,
            "source": "f.jsonl",
            "principal": None,
            "seq": index,
            "arrival_time_ms": batch_time_ms,
        }
        for index, raw in enumerate(lines)
    ]
    return iter([pd.DataFrame(rows)] if rows else [])


def two_batches(
    lines: list[str], runners: Callable[[], Runner], mode: TimeMode, answers: bool = False
) -> tuple[list[pa.Table], list[list[tuple[str, str]]]]:
    """Each batch's output as Spark gets it from the function (``__call__``) and, from a second
    run on the same input, as envelopes (``call``)."""
    timeout = "EventTimeTimeout" if mode is TimeMode.EVENT_TIME else "ProcessingTimeTimeout"
    function = StateFunction(runners, mode, answers=answers)
    half = len(lines) // 2
    states = [
        FakeGroupState(timeout=timeout, batch_time_ms=BATCH_TIMES[0], watermark_ms=0)
        for _ in range(2)
    ]
    spark_out: list[pa.Table] = []
    envelopes: list[list[tuple[str, str]]] = []
    for number, batch in enumerate([lines[:half], lines[half:]]):
        if number:
            states = [s.next_call(BATCH_TIMES[1], watermark_ms=BATCH_TIMES[0]) for s in states]
        out = list(function(("k",), frames_of(batch, states[0].batch_time_ms), states[0]))
        spark_out.append(pa.concat_tables([pa.Table.from_pandas(f) for f in out]))
        envelopes.append(function.call(frames_of(batch, states[1].batch_time_ms), states[1]))
        assert states[0].value == states[1].value
    return spark_out, envelopes


def assert_same_tables(spark_out: pa.Table, envelopes: list[tuple[str, str]]) -> None:
    tables, figures = split_batch(spark_out, 3, 1234)
    tables.pop(ANSWERS_TABLE, None)  # a copy of decisions' rows (below)
    rows, expected_figures = split_envelopes(envelopes, 3, 1234)
    assert figures == expected_figures
    assert set(tables) == set(rows)
    for table, expected in rows.items():
        assert tables[table].num_rows == len(expected)
        assert to_arrow(table, tables[table]).equals(to_arrow(table, expected)), table
        if table == "groups":
            merged = with_deleted(table, latest_per_group(tables[table]))
            assert merged.equals(with_deleted(table, latest_per_group(expected)))


MODES = st.sampled_from([TimeMode.PROCESSING_TIME, TimeMode.EVENT_TIME])


@settings(max_examples=60)
@given(lines=st.lists(damaged_line(GROUP_EVENTS), min_size=1, max_size=14), mode=MODES)
def test_the_sink_reads_the_coordinator_s_tables_as_the_per_row_path(
    lines: list[str], mode: TimeMode
) -> None:
    runners = CoordinatorRunners(SettingsSource(path=None, initial=SETTINGS), None)
    spark_out, envelopes = two_batches(lines, runners, mode)
    for out, expected in zip(spark_out, envelopes, strict=True):
        assert_same_tables(out, expected)


@settings(max_examples=60)
@given(lines=st.lists(damaged_line(QUOTA_EVENTS), min_size=1, max_size=14), mode=MODES)
def test_the_sink_reads_the_quota_s_tables_as_the_per_row_path(
    lines: list[str], mode: TimeMode
) -> None:
    source = SettingsSource(path=None, initial=SETTINGS)
    QuotaKeyer(source, SparkKeys(Keying.GROUP, 64))  # the quota runs behind its keyer in the engine
    spark_out, envelopes = two_batches(lines, QuotaRunners(source), mode)
    for out, expected in zip(spark_out, envelopes, strict=True):
        assert_same_tables(out, expected)


def assert_answers_are_the_delta_rows(spark_out: pa.Table) -> int:
    """Each ``decisions`` and ``quota_decisions`` row of the batch has one answer, in the
    table's order, under its key and table, whose value parses to the row Delta gets; returns
    how many there are."""
    tables, _ = split_batch(spark_out, 3, 1234)
    records = answer_records(tables.pop(ANSWERS_TABLE, None), 3, 1234)
    expected = [
        (table, key_of(table, row), row)
        for table in ANSWERED_TABLES
        for row in (to_arrow(table, tables[table]).to_pylist() if table in tables else [])
    ]
    got = [] if records is None else records.to_pylist()
    assert [(r["table"], r["key"]) for r in got] == [(t, k) for t, k, _ in expected]
    for record, (table, _, row) in zip(got, expected, strict=True):
        value = json.loads(record["value"])
        assert list(value) == TABLES[table].fieldNames()
        assert_same_json(value, finite(row))
    return len(got)


def key_of(table: str, row: dict[str, Any]) -> Any:
    """The record key docs/engine.md gives an answer, from its Delta row."""
    if table == "decisions":
        return row["group_id"]
    return row["client_id"] if row["user"] is None else row["user"]


def assert_same_json(got: Any, want: Any) -> None:
    """Equal as JSON values a typed reader sees: a boolean is not a number, an int is an int, a
    double equals a number of the same value (JSON does not tell 1 from 1.0: Spark writes 1.0,
    orjson 1 for a Python int), objects have the same keys in the same order."""
    if isinstance(want, bool) or want is None or isinstance(want, str):
        assert type(got) is type(want), (got, want)
    elif isinstance(want, int):  # a column of ints: no 1.0 for 1
        assert type(got) is int, (got, want)
    elif isinstance(want, float):
        assert type(got) in (int, float), (got, want)
    elif isinstance(want, list):
        assert isinstance(got, list), (got, want)
        assert len(got) == len(want), (got, want)
        for item, expected in zip(got, want, strict=True):
            assert_same_json(item, expected)
        return
    else:
        assert isinstance(got, dict), (got, want)
        assert list(got) == list(want), (got, want)
        for name, expected in want.items():
            assert_same_json(got[name], expected)
        return
    assert got == want, (got, want)


@settings(max_examples=60)
@given(lines=st.lists(damaged_line(GROUP_EVENTS), min_size=1, max_size=14), mode=MODES)
def test_each_decision_s_answer_is_its_delta_row(lines: list[str], mode: TimeMode) -> None:
    runners = CoordinatorRunners(SettingsSource(path=None, initial=SETTINGS), None)
    spark_out, envelopes = two_batches(lines, runners, mode, answers=True)
    for out, expected in zip(spark_out, envelopes, strict=True):
        assert_same_tables(out, expected)  # the answers change no table
        decided = sum(1 for table, _ in expected if table == "decisions")
        assert assert_answers_are_the_delta_rows(out) == decided


@settings(max_examples=60)
@given(lines=st.lists(damaged_line(QUOTA_EVENTS), min_size=1, max_size=14), mode=MODES)
def test_each_quota_decision_s_answer_is_its_delta_row(lines: list[str], mode: TimeMode) -> None:
    source = SettingsSource(path=None, initial=SETTINGS)
    QuotaKeyer(source, SparkKeys(Keying.GROUP, 64))
    spark_out, envelopes = two_batches(lines, QuotaRunners(source), mode, answers=True)
    for out, expected in zip(spark_out, envelopes, strict=True):
        assert_same_tables(out, expected)
        decided = sum(1 for table, _ in expected if table == "quota_decisions")
        assert assert_answers_are_the_delta_rows(out) == decided


def test_an_answer_is_its_row_over_the_table_s_columns_in_the_batch_s_order() -> None:
    """Rows as a core might build them, right or wrong: the answer has the table's columns in
    their order, a missing one null, an unknown one left out, a value orjson does not write as
    Arrow reads it, a double that is not finite as Spark's JSON writes it; decisions
    before quota decisions, each table's in batch order, across the calls."""
    calls = [
        [
            ("quota_decisions", {"event_id": "q1", "user": "alice", "rate_per_s": float("inf")}),
            ("decisions", {"type": "join", "group_id": "orders", "event_id": "e1", "x": 1}),
            ("decisions", {"event_id": "e0", "group_id": "orders", "batch_id": 99}),
            ("group_events", {"group_id": "orders", "kind": "member_added"}),
        ],
        [
            ("decisions", {"event_id": "e2", "group_id": "payments", "member_id": Scalar()}),
            ("quota_decisions", {"event_id": "q2", "user": None, "client_id": "tf"}),
            ("quota_decisions", {"event_id": "q3", "client_id": "tf", "rate_per_s": float("nan")}),
        ],
        [("group_events", {"group_id": "audit", "kind": "member_added"})],
    ]
    batch = pa.concat_tables([envelope.envelope_table(rows, answers=True) for rows in calls])
    assert batch.column("table").to_pylist().count(ANSWERS_TABLE) == 2  # none without answers
    tables, _ = split_batch(batch, 7, 1234)
    records = answer_records(tables[ANSWERS_TABLE], 7, 1234)
    assert records is not None
    got = records.to_pylist()
    assert [(r["table"], r["key"]) for r in got] == [
        ("decisions", "orders"),
        ("decisions", "orders"),
        ("decisions", "payments"),
        ("quota_decisions", "alice"),
        ("quota_decisions", "tf"),
        ("quota_decisions", "tf"),
    ]
    values = [json.loads(r["value"]) for r in got]
    assert [v["event_id"] for v in values] == ["e1", "e0", "e2", "q1", "q2", "q3"]
    for record, value in zip(got, values, strict=True):
        assert list(value) == TABLES[record["table"]].fieldNames()
        assert (value["batch_id"], value["processed_at_ms"]) == (7, 1234)
    assert "x" not in values[0]
    assert (values[0]["type"], values[0]["member_id"], values[0]["members"]) == ("join", None, None)
    assert values[2]["member_id"] == "from item()"
    assert [v["rate_per_s"] for v in values[3:]] == ["Infinity", None, "NaN"]
    assert answer_records(None, 7, 1234) is None
    without = envelope.envelope_table(calls[0])
    assert ANSWERS_TABLE not in without.column("table").to_pylist()


def _right(kind: pa.DataType) -> st.SearchStrategy[Any]:
    """Values of the Arrow type, null included: what the cores build."""
    if pa.types.is_int32(kind) or pa.types.is_int64(kind):
        bits = 31 if pa.types.is_int32(kind) else 63
        return st.none() | st.integers(-(2**bits), 2**bits - 1)
    if pa.types.is_float64(kind):
        return st.none() | st.floats()
    if pa.types.is_boolean(kind):
        return st.none() | st.booleans()
    if pa.types.is_list(kind) and pa.types.is_struct(kind.value_type):
        inner = list(kind.value_type)
        element = st.fixed_dictionaries({f.name: _sometimes_wrong(f) for f in inner})
        odd = st.one_of(
            st.fixed_dictionaries({}, optional={f.name: _right(f.type) for f in inner}),
            st.fixed_dictionaries({**{f.name: _right(f.type) for f in inner}, "extra": st.just(1)}),
            st.tuples(*[_right(f.type) for f in inner]),
        )
        pick = st.integers(0, 4).flatmap(lambda n: odd if n == 0 else element)
        return st.none() | st.lists(pick, max_size=2)
    return st.none() | st.text(max_size=3)


def _sometimes_wrong(field: pa.Field) -> st.SearchStrategy[Any]:
    """A right value, or one time in ten a wrong one: ``_values``, bytes, ``ODD_VALUES``."""
    wrong = st.one_of(
        _values(field),
        st.binary(max_size=3),
        st.sampled_from(ODD_VALUES),
    )
    return st.integers(0, 9).flatmap(lambda n: wrong if n == 0 else _right(field.type))


# values Arrow converts that orjson writes otherwise, or refuses
ODD_VALUES = [1.0, True, frozenset(), np.int64(1), np.float64("inf"), np.float64(2.5), np.bool_(1)]


@settings(max_examples=400)
@given(data=st.data(), table=st.sampled_from(ANSWERED_TABLES))
def test_any_row_a_call_hands_delta_has_the_stored_row_as_its_answer(
    data: st.DataObject, table: str
) -> None:
    """Whatever a call's rows hold, right or wrong: when they convert (else the call fails, with
    or without answers), each answer is the row as Arrow stores it, for Delta, under the key
    read from that row, and the rows orjson writes itself are exactly those."""
    schema = envelope.row_schema(table)
    assert schema is not None
    fields = {field.name: _sometimes_wrong(field) for field in schema}
    row = st.fixed_dictionaries({}, optional={**fields, "extra": st.integers()})
    rows = data.draw(st.lists(row, min_size=1, max_size=4))
    caught = (pa.ArrowException, TypeError, ValueError, OverflowError)
    try:
        stored = envelope.to_table(table, rows)
    except caught:
        return
    records = answer_records(answers_table({table: rows}, {table: stored}), 3, 1234)
    assert records is not None
    got = records.to_pylist()
    assert len(got) == len(rows)
    for record, row in zip(got, stored.to_pylist(), strict=True):
        assert record["table"] == table
        assert record["key"] == key_of(table, row)
        want = finite({**row, "batch_id": 3, "processed_at_ms": 1234})
        assert_same_json(json.loads(record["value"]), want)


class Scalar:
    """A value Arrow does not know and the row's JSON text writes (as a numpy scalar)."""

    def item(self) -> str:
        return "from item()"


# calls of rows no core builds, with values Arrow converts and orjson would write otherwise
# (1.0 for an int, true for a double, a nested element without its struct's fields) or refuses
# (bytes, numpy, a value that is not finite); the third call's rows go through JSON (a value
# with ``item()``, as a numpy scalar has, which the direct conversion refuses)
DAMAGED = [
    (
        "decisions",
        [
            {"event_id": "int as a float", "error_code": 1.0},
            {
                "event_id": "nested float",
                "member_results": [
                    {"member_id": "m", "group_instance_id": None, "error_code": 2.0}
                ],
            },
            {"event_id": "a string for a list", "offsets": ""},
            {"event_id": "nested extra", "members": [{"member_id": "m", "metadata": "md", "x": 1}]},
        ],
    ),
    ("decisions", [{"event_id": "nested tuple", "members": [("m", None, "md")]}]),
    (
        "decisions",
        [
            {"event_id": "bytes", "error": b"abc"},
            {"event_id": "set", "offsets": set(), "member_id": Scalar()},
            {"event_id": "numpy", "generation_id": np.int64(4), "skip_assignment": np.bool_(1)},
        ],
    ),
    (
        "quota_decisions",
        [
            {"event_id": "bool as a double", "rate_per_s": True, "user": "u"},
            {
                "event_id": "not finite, numpy",
                "rate_per_s": float("inf"),
                "error_code": np.int32(0),
            },
            {"event_id": "nan", "rate_per_s": float("nan"), "client_id": "c"},
        ],
    ),
]


@pytest.mark.parametrize(("table", "rows"), DAMAGED)
def test_the_answer_of_a_row_no_core_builds_is_its_stored_row(
    table: str, rows: list[dict[str, Any]]
) -> None:
    """Each answer is the row as stored, key included, whichever way the call's rows went."""
    stored = envelope.to_table(table, rows)
    records = answer_records(answers_table({table: rows}, {table: stored}), 3, 1234)
    assert records is not None
    got = records.to_pylist()
    for record, row in zip(got, stored.to_pylist(), strict=True):
        assert record["key"] == key_of(table, row)
        want = finite({**row, "batch_id": 3, "processed_at_ms": 1234})
        assert_same_json(json.loads(record["value"]), want)
    values = {v["event_id"]: v for v in (json.loads(r["value"]) for r in got)}
    nested = [{"member_id": "m", "group_instance_id": None, "metadata": "md"}]
    if "int as a float" in values:
        assert type(values["int as a float"]["error_code"]) is int
        assert values["nested extra"]["members"] == nested
    if "nested tuple" in values:
        assert values["nested tuple"]["members"] == nested
    if "bytes" in values:
        assert values["bytes"]["error"] == "YWJj"  # base64, as the rows' JSON path stores bytes
    if "bool as a double" in values:
        assert type(values["bool as a double"]["rate_per_s"]) is float
        assert values["nan"]["rate_per_s"] == "NaN"


def test_the_function_hands_spark_one_row_per_table_of_arrow_rows() -> None:
    runners = CoordinatorRunners(SettingsSource(path=None, initial=SETTINGS), None)
    joins = [json.dumps(e) for e in GROUP_EVENTS if e["type"] == "join"][:3]
    assert len(joins) == 3
    spark_out, envelopes = two_batches([*joins, "not json", *joins], runners, TimeMode.EVENT_TIME)
    for out, expected in zip(spark_out, envelopes, strict=True):
        names = out.column("table").to_pylist()
        assert len(names) == len(set(names))  # one row per table
        unpacked = {
            name: envelope.unpack(data)
            for name, data in zip(names, out.column("rows").to_pylist(), strict=True)
        }
        for name, rows in unpacked.items():
            assert rows.schema == envelope.row_schema(name)
            per_row = [json.loads(text) for table, text in expected if table == name]
            assert rows.num_rows == len(per_row)
        decisions = unpacked["decisions"].to_pylist() if "decisions" in unpacked else []
        assert [r["event_id"] for r in decisions] == [
            json.loads(text)["event_id"] for table, text in expected if table == "decisions"
        ]
        assert set(unpacked) == {table for table, _ in expected}
    assert any(envelope.unpack(d).num_rows > 1 for o in spark_out for d in o["rows"].to_pylist())


def test_a_row_arrow_refuses_goes_through_json_as_the_per_row_path() -> None:
    """A value the direct conversion refuses is read as its JSON text would be; a table the
    engine does not know travels as JSON texts."""
    table = envelope.envelope_table(
        [
            ("rejected_events", {"raw": "a", "reason": "r"}),
            ("rejected_events", {"raw": Scalar(), "reason": "r"}),
            ("mystery", {"x": 1}),
            (METRICS_TABLE, {"events": 2, "rejected": 0, "timers_fired": 1}),
        ]
    )
    tables, figures = split_batch(table, 1, 2)
    rejected = tables["rejected_events"].to_pylist()
    assert [(r["raw"], r["batch_id"], r["processed_at_ms"]) for r in rejected] == [
        ("a", 1, 2),
        ("from item()", 1, 2),
    ]
    assert tables["mystery"].to_pylist() == [{"row": '{"x":1}'}]
    assert figures["events"] == 2
    assert figures["max_timer_lateness_ms"] == 0
    assert figures["keys_called"] == 1


def test_an_idle_batch_opens_no_writer_and_leaves_its_figures() -> None:
    sink = BatchSink("idle-test", ("decisions", "groups"), "/nowhere", "/nowhere")

    def no_writer(spark: Any) -> Any:
        raise AssertionError("an idle batch must not open a writer")

    sink.writer = no_writer  # type: ignore[method-assign]
    empty = pa.table({"table": pa.array([], pa.string()), "rows": pa.array([], pa.binary())})
    sink(BatchFrame(empty), 9)
    assert progress.take("idle-test", 9) == {
        "events": 0,
        "rejected": 0,
        "timers_fired": 0,
        "max_timer_lateness_ms": 0,
        "keys_called": 0,
    }


class RecordingWriter:
    kind = "recording"

    def __init__(self) -> None:
        self.written: list[tuple[str, int]] = []

    def write(self, table: str, rows: Any, batch_id: int) -> bool:
        self.written.append((table, len(rows)))
        return bool(len(rows))


def test_a_batch_s_timings_are_a_debug_record(caplog: pytest.LogCaptureFixture) -> None:
    """What the engine benchmark reads (bench/engine_bench.py, ``SinkTimings``): the batch's
    computation, then each table written, none for a table without rows."""
    from controlplane.engine.batch import SINK_TIMINGS

    sink = BatchSink("timed-test", ("decisions", "groups"), "/nowhere", "/nowhere")
    writer = RecordingWriter()
    sink.writer = lambda spark: writer  # type: ignore[method-assign]
    batch = envelope.envelope_table([("decisions", {"event_id": "e", "group_id": "g"})])
    with caplog.at_level("DEBUG", logger="controlplane.engine.batch"):
        sink(BatchFrame(batch), 4)
    progress.take("timed-test", 4)
    (record,) = [r for r in caplog.records if hasattr(r, SINK_TIMINGS)]
    assert record.levelname == "DEBUG"
    assert record.batch_id == 4
    timings = getattr(record, SINK_TIMINGS)
    assert sorted(timings) == ["compute", "decisions"]
    assert all(isinstance(ms, int) and ms >= 0 for ms in timings.values())
    assert writer.written == [("decisions", 1), ("groups", 0)]


def _values(field: pa.Field) -> st.SearchStrategy[Any]:
    """Values of the field's type, and of others: what a row may carry, right or wrong."""
    wrong = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False),
        st.text(max_size=3),
        st.lists(st.integers(), max_size=2),
    )
    kind = field.type
    if pa.types.is_list(kind) and pa.types.is_struct(kind.value_type):
        member = st.dictionaries(
            st.sampled_from([f.name for f in kind.value_type] + ["extra"]), wrong, max_size=4
        )
        return st.one_of(wrong, st.lists(member, max_size=2))
    return wrong


@settings(max_examples=300)
@given(data=st.data(), table=st.sampled_from(["decisions", "groups", "group_events"]))
def test_dict_rows_convert_as_from_pylist_converts_them(data: st.DataObject, table: str) -> None:
    """The struct-array conversion of dict rows gives from_pylist's table, or fails when it
    fails, with an error the JSON fallback catches."""
    schema = envelope.row_schema(table)
    assert schema is not None
    fields = {field.name: _values(field) for field in schema}
    row = st.fixed_dictionaries({}, optional={**fields, "extra": st.integers()})
    rows = data.draw(st.lists(row, max_size=4))
    caught = (pa.ArrowException, TypeError, ValueError, OverflowError)
    try:
        expected = pa.Table.from_pylist(rows, schema=schema)
    except caught:
        with pytest.raises(caught):
            envelope.direct_table(table, rows)
        return
    got = envelope.direct_table(table, rows)
    assert got.schema == expected.schema
    assert got.to_pylist() == expected.to_pylist()
