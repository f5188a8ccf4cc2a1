"""The GroupState adapter, without a JVM: a FakeGroupState that checks calls like Spark."""

from __future__ import annotations

import gc
import json
import weakref
from typing import Any

import pandas as pd
import pytest

from controlplane.engine.adapter import (
    METRICS_TABLE,
    STATE_VERSION,
    StateFormat,
    StateFunction,
    strays_dropped,
)
from controlplane.engine.keying import SparkKeys
from controlplane.engine.options import Keying, TimeMode
from engine.fakes import CountingRunner, FakeGroupState


def frame(*rows: dict[str, Any]) -> pd.DataFrame:
    base = {"key": "k", "source": "f.jsonl", "arrival_time_ms": 0, "seq": 0, "principal": None}
    return pd.DataFrame([{**base, **row} for row in rows])


def line(event_id: str, **fields: Any) -> str:
    return json.dumps({"event_id": event_id, "type": "count", **fields})


def tables(envelopes: list[tuple[str, str]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for table, row in envelopes:
        out.setdefault(table, []).append(json.loads(row))
    return out


def function(mode: TimeMode = TimeMode.PROCESSING_TIME) -> StateFunction:
    return StateFunction(CountingRunner, mode)


def test_rows_are_handled_in_source_order_not_frame_order() -> None:
    state = FakeGroupState(batch_time_ms=10_000)
    frames = [
        frame({"raw": line("c"), "seq": 3, "arrival_time_ms": 900}),
        frame(
            {"raw": line("a"), "seq": 1, "arrival_time_ms": 500},
            {"raw": line("b"), "seq": 2, "arrival_time_ms": 900},
        ),
    ]
    out = tables(function().call(iter(frames), state))
    assert [row["event_id"] for row in out["decisions"]] == ["a", "b", "c"]
    assert [row["decided_at_ms"] for row in out["decisions"]] == [500, 900, 900]


def test_source_order_puts_each_missing_position_after_the_known_ones() -> None:
    """(arrival time, source, seq), a null last in each; a Kafka source's offset as a number."""
    from controlplane.engine.adapter import _records

    rows = [
        ("no arrival", None, "a", 0),
        ("no source", 0, None, 0),
        ("no seq", 0, "a", None),
        ("offset 100", 0, "t/1/100", 0),
        ("offset 99", 0, "t/1/99", 0),
        ("seq 1", 0, "a", 1),
        ("seq 0", 0, "a", 0),
        ("arrival 1", 1, "a", 0),
    ]
    shuffled = pd.DataFrame(
        [{"raw": r, "arrival_time_ms": t, "source": s, "seq": q} for r, t, s, q in rows]
    )
    assert [row[0] for row in _records(iter([shuffled]))] == [
        "seq 0",
        "seq 1",
        "no seq",
        "offset 99",
        "offset 100",
        "no source",
        "arrival 1",
        "no arrival",
    ]


def test_arrival_time_is_clamped_to_the_batch_time() -> None:
    state = FakeGroupState(batch_time_ms=1_000)
    out = tables(
        function().call(iter([frame({"raw": line("a"), "arrival_time_ms": 5_000})]), state)
    )
    assert out["decisions"][0]["decided_at_ms"] == 1_000


def test_timeout_is_the_earliest_deadline_relative_to_the_tick() -> None:
    state = FakeGroupState(batch_time_ms=10_000)
    function().call(
        iter([frame({"raw": line("a", timeout_ms=3000), "arrival_time_ms": 9_000})]), state
    )
    assert state.value is not None
    assert state.value[0] == STATE_VERSION
    assert state.value[1] == 12_000  # stored deadline
    # the tick is the latest arrival, 9_000: batch 10_000 + duration 3_000
    assert state.timeout_timestamp == 13_000


@pytest.mark.parametrize("mode", [TimeMode.PROCESSING_TIME, TimeMode.EVENT_TIME])
def test_a_deadline_past_the_long_range_is_kept_as_never(mode: TimeMode) -> None:
    """The wire allows any long event time; a timer after it must not overflow Spark's longs."""
    timeout = "EventTimeTimeout" if mode is TimeMode.EVENT_TIME else "ProcessingTimeTimeout"
    state = FakeGroupState(timeout=timeout, batch_time_ms=10_000, watermark_ms=0)
    near_the_end = 2**63 - 1_000
    raw = line("a", event_time_ms=near_the_end, timeout_ms=5_000)
    out = tables(function(mode).call(iter([frame({"raw": raw, "arrival_time_ms": 9_000})]), state))
    assert [row["event_id"] for row in out["decisions"]] == ["a"]
    assert state.value is not None
    assert state.timeout_timestamp is not None
    if mode is TimeMode.EVENT_TIME:
        assert state.value[1] == 2**63 - 1  # the stored deadline, clamped
        assert state.timeout_timestamp == 2**63 - 1
    else:  # processing time ignores event time: an ordinary deadline
        assert state.value[1] == 14_000


def test_a_timeout_duration_is_at_most_a_century() -> None:
    state = FakeGroupState(batch_time_ms=10_000)
    raw = line("a", timeout_ms=2**63 - 1)
    function().call(iter([frame({"raw": raw, "arrival_time_ms": 10_000})]), state)
    assert state.value is not None
    assert state.value[1] == 2**63 - 1
    assert state.timeout_timestamp == 10_000 + 100 * 365 * 86_400_000


def test_data_after_a_missed_deadline_fires_the_timer_before_the_data() -> None:
    first = FakeGroupState(batch_time_ms=10_000)
    function().call(
        iter([frame({"raw": line("a", timeout_ms=1000), "arrival_time_ms": 10_000})]), first
    )
    later = first.next_call(20_000)  # not flagged as timed out: it carries data
    out = function().call(
        iter([frame({"raw": line("b", timeout_ms=5000), "arrival_time_ms": 19_000})]), later
    )
    figures = tables(out)
    assert figures["group_events"] == [
        {"group_id": None, "at_ms": 11_000, "kind": "timer_fired", "generation_id": 1}
    ]
    assert figures[METRICS_TABLE] == [
        {"events": 1, "rejected": 0, "timers_fired": 1, "max_timer_lateness_ms": 9_000}
    ]
    assert figures["decisions"] == [
        {"event_id": "b", "group_id": None, "generation_id": 2, "decided_at_ms": 19_000}
    ]


def test_timed_out_call_with_one_empty_frame_fires_and_clears_the_timeout() -> None:
    first = FakeGroupState(batch_time_ms=0)
    function().call(iter([frame({"raw": line("a", timeout_ms=1000)})]), first)
    timed_out = first.next_call(1_500)
    timed_out.hasTimedOut = True
    empty = frame({"raw": "x"}).iloc[0:0]
    out = tables(function().call(iter([empty]), timed_out))
    assert out["group_events"] == [
        {"group_id": None, "at_ms": 1_000, "kind": "timer_fired", "generation_id": 1}
    ]
    assert timed_out.updated
    assert timed_out.timeout_timestamp is None


def test_a_forgotten_key_is_removed() -> None:
    state = FakeGroupState(batch_time_ms=0)
    function().call(iter([frame({"raw": line("a")})]), state)
    again = state.next_call(100)
    function().call(iter([frame({"raw": line("b", type="forget")})]), again)
    assert again.removed
    assert not again.exists


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "not a JSON object: list"),
        ('"text"', "not a JSON object: str"),
        ("", "not JSON"),
        ('{"a": Infinity}', "not JSON: Infinity is not JSON"),
        ('{"group_id": "g\\ud800"}', "not JSON: a \\u escape stands for a lone"),
    ],
)
def test_unparseable_lines_become_rejected_rows_and_do_not_reach_the_core(
    raw: str, reason: str
) -> None:
    state = FakeGroupState(batch_time_ms=0)
    out = tables(
        function().call(
            iter([frame({"raw": raw, "source": "in.jsonl", "arrival_time_ms": 7})]), state
        )
    )
    assert len(out["rejected_events"]) == 1
    row = out["rejected_events"][0]
    assert row["raw"] == raw
    assert row["reason"].startswith(reason)
    assert row["source"] == "in.jsonl"
    assert row["arrival_time_ms"] == 7
    assert "decisions" not in out or out["decisions"] == []


def test_event_time_mode_uses_event_time_and_the_watermark() -> None:
    state = FakeGroupState(timeout="EventTimeTimeout", batch_time_ms=999_999, watermark_ms=100)
    out = tables(
        function(TimeMode.EVENT_TIME).call(
            iter([frame({"raw": line("a", event_time_ms=5_000, timeout_ms=1000)})]), state
        )
    )
    assert out["decisions"][0]["decided_at_ms"] == 5_000
    assert state.timeout_timestamp == 6_000
    later = state.next_call(999_999, watermark_ms=7_000)
    later.hasTimedOut = True
    fired = tables(function(TimeMode.EVENT_TIME).call(iter([]), later))
    assert fired["group_events"] == [
        {"group_id": None, "at_ms": 6_000, "kind": "timer_fired", "generation_id": 1}
    ]


def test_an_authenticated_principal_overrides_the_claimed_user() -> None:
    seen: list[Any] = []

    class Spy(CountingRunner):
        def run(self, state: bytes | None, events: Any, tick_ms: int | None) -> Any:
            seen.extend(events)
            return super().run(state, events, tick_ms)

    state = FakeGroupState(batch_time_ms=0)
    raw = json.dumps({"event_id": "a", "user": "mallory"})
    StateFunction(Spy, TimeMode.PROCESSING_TIME).call(
        iter([frame({"raw": raw, "principal": "alice"})]), state
    )
    assert seen[0].event["user"] == "alice"


def test_a_failing_core_keeps_the_state_and_rejects_the_events_with_the_reason() -> None:
    class Broken:
        def run(self, state: bytes | None, events: Any, tick_ms: int | None) -> Any:
            raise RuntimeError("boom")

    state = FakeGroupState(batch_time_ms=0, value=(STATE_VERSION, 500, b"old"))
    out = tables(
        StateFunction(Broken, TimeMode.PROCESSING_TIME, StateFormat.BINARY).call(
            iter([frame({"raw": line("a")})]), state
        )
    )
    assert out["rejected_events"][0]["reason"] == "internal error: RuntimeError: boom"
    assert state.value == (STATE_VERSION, 500, b"old")
    assert state.timeout_timestamp == 500  # the old deadline still wakes the key


def test_an_unknown_state_version_is_refused_clearly() -> None:
    state = FakeGroupState(batch_time_ms=0, value=(99, -1, b""))
    with pytest.raises(ValueError, match="state envelope version 99"):
        function().call(iter([]), state)


def test_kafka_records_sharing_a_timestamp_keep_their_offset_order() -> None:
    """The source is ``topic/partition/offset``: compared as text, offset 100 came before 99."""
    state = FakeGroupState(batch_time_ms=10_000)
    records = [
        {"raw": line(f"o{offset}"), "source": f"orders/3/{offset}", "seq": (3 << 40) + offset}
        for offset in (100, 99, 1000, 9)
    ]
    out = tables(function().call(iter([frame(*records)]), state))
    assert [row["event_id"] for row in out["decisions"]] == ["o9", "o99", "o100", "o1000"]


def test_files_sharing_a_time_are_whole_and_in_name_order() -> None:
    state = FakeGroupState(batch_time_ms=10_000)
    rows = [
        {"raw": line("b1"), "source": "in/b.jsonl", "seq": 0},
        {"raw": line("a2"), "source": "in/a.jsonl", "seq": 1},
        {"raw": line("a1"), "source": "in/a.jsonl", "seq": 0},
    ]
    out = tables(function().call(iter([frame(*rows)]), state))
    assert [row["event_id"] for row in out["decisions"]] == ["a1", "a2", "b1"]


def test_a_line_naming_group_id_twice_is_rejected() -> None:
    """Spark keys the line by the first group_id, Python reads the last: the group would get a
    second state machine in another group's key."""
    state = FakeGroupState(batch_time_ms=0)
    raw = '{"event_id":"x","type":"count","group_id":"a","group_id":"b"}'
    nested = '{"event_id":"y","type":"count","group_id":"a","x":{"group_id":"b"}}'
    out = tables(function().call(iter([frame({"raw": raw}, {"raw": nested, "seq": 1})]), state))
    assert [r["raw"] for r in out["rejected_events"]] == [raw]
    assert out["rejected_events"][0]["reason"].endswith("duplicate key group_id")
    assert [r["event_id"] for r in out["decisions"]] == ["y"]


@pytest.mark.parametrize("enabled_before", [True, False])
def test_the_cyclic_gc_is_paused_for_a_call_and_restored_after_it(enabled_before: bool) -> None:
    during: list[bool] = []

    class Spy(CountingRunner):
        def run(self, state: bytes | None, events: Any, tick_ms: int | None) -> Any:
            during.append(gc.isenabled())
            return super().run(state, events, tick_ms)

    class Broken:
        def run(self, state: bytes | None, events: Any, tick_ms: int | None) -> Any:
            during.append(gc.isenabled())
            raise RuntimeError("boom")

    was = gc.isenabled()
    try:
        (gc.enable if enabled_before else gc.disable)()
        for runner in (Spy, Broken):
            state = FakeGroupState(batch_time_ms=0)
            call = StateFunction(runner, TimeMode.PROCESSING_TIME)
            list(call(("k",), iter([frame({"raw": line("a")})]), state))
            assert gc.isenabled() is enabled_before
        assert during == [False, False]
    finally:
        (gc.enable if was else gc.disable)()


def test_a_worker_freezes_what_it_holds_at_its_first_call_once_per_process() -> None:
    """PySpark's daemon runs a full collection after every task: what the worker held at its
    first call (imports, pandas, pyarrow) is moved out of its reach once, not at every call."""
    from controlplane.engine import adapter

    def called() -> None:
        state = FakeGroupState(batch_time_ms=0)
        list(
            StateFunction(CountingRunner, TimeMode.PROCESSING_TIME)(
                ("k",), iter([frame({"raw": line("a")})]), state
            )
        )

    class Node:
        pass

    gc.unfreeze()
    adapter._FROZEN_IN.clear()
    try:
        garbage = Node()
        garbage.cycle = garbage  # type: ignore[attr-defined]
        gone = weakref.ref(garbage)
        del garbage
        called()
        assert gone() is None  # collected first, not frozen
        first = gc.get_freeze_count()
        assert first > 0
        kept = [[i] for i in range(1000)]  # tracked objects made after the first call
        called()
        assert gc.get_freeze_count() <= first  # not frozen again in the same process
        adapter._FROZEN_IN[:] = [-1]  # as a process forked after the freeze
        called()
        assert gc.get_freeze_count() >= first + len(kept)
    finally:
        gc.unfreeze()


def test_the_text_format_keeps_the_cores_bytes_as_base64_and_reads_both_formats() -> None:
    import base64

    text = StateFunction(CountingRunner, TimeMode.PROCESSING_TIME, StateFormat.TEXT)
    state = FakeGroupState(batch_time_ms=0)
    text.call(iter([frame({"raw": line("a")})]), state)
    written = state.value[2]
    assert isinstance(written, str)
    core_bytes = base64.b64decode(written, validate=True)
    # a state written as bytes (a checkpoint from before) is read the same, and written as text
    binary = FakeGroupState(batch_time_ms=0, value=(STATE_VERSION, state.value[1], core_bytes))
    text.call(iter([frame({"raw": line("b")})]), binary)
    text.call(iter([frame({"raw": line("b")})]), state)
    assert binary.value == state.value
    assert isinstance(binary.value[2], str)
    # and the binary format writes bytes, whichever format it read
    again = FakeGroupState(batch_time_ms=0, value=state.value)
    binary_function = StateFunction(CountingRunner, TimeMode.PROCESSING_TIME, StateFormat.BINARY)
    binary_function.call(iter([frame({"raw": line("c")})]), again)
    assert isinstance(again.value[2], bytes)


def test_a_failing_core_keeps_the_state_in_the_querys_format() -> None:
    class Broken:
        def run(self, state: bytes | None, events: Any, tick_ms: int | None) -> Any:
            raise RuntimeError("boom")

    state = FakeGroupState(batch_time_ms=0, value=(STATE_VERSION, 500, "b2xk"))  # b"old"
    StateFunction(Broken, TimeMode.PROCESSING_TIME, StateFormat.TEXT).call(
        iter([frame({"raw": line("a")})]), state
    )
    assert state.value == (STATE_VERSION, 500, "b2xk")


@pytest.mark.parametrize("blob", ["not base64!", "b2xk=", "b2x"])
def test_a_text_state_that_is_not_base64_is_refused_clearly(blob: str) -> None:
    state = FakeGroupState(batch_time_ms=0, value=(STATE_VERSION, -1, blob))
    with pytest.raises(ValueError, match="state blob is not base64 text"):
        function().call(iter([frame({"raw": line("a")})]), state)


def test_a_request_whose_group_id_is_another_key_s_is_rejected_as_misrouted() -> None:
    """Spark keys a line by its own reading of ``$.group_id``: a 2,000-digit number elsewhere in
    the line makes it read null (the line comes under the key of ""), while Python reads the
    group id. Handled, the group would live under a key beside its own."""
    keys = SparkKeys(Keying.SHARD, 16)
    assert keys.of("g") != keys.of("")
    misread = '{"event_id": "far", "type": "count", "group_id": "g", "x": ' + "1" * 2000 + "}"
    rows = [
        {"raw": misread, "seq": 0},
        {"raw": line("no-id"), "seq": 1},  # the runner answers it, under any key
        {"raw": line("number", group_id=7), "seq": 2},
    ]
    routed = StateFunction(CountingRunner, TimeMode.PROCESSING_TIME, route=keys.of)
    under_empty = tables(routed.call(iter([frame(*rows)]), FakeGroupState(), keys.of("")))
    assert [r["event_id"] for r in under_empty["decisions"]] == ["no-id", "number"]
    [rejected] = under_empty["rejected_events"]
    assert rejected["raw"] == misread
    assert rejected["reason"].startswith("misrouted: Spark read this line's group_id otherwise")
    under_g = tables(routed.call(iter([frame(rows[0])]), FakeGroupState(), keys.of("g")))
    assert [r["event_id"] for r in under_g["decisions"]] == ["far"]  # where Python reads it
    unrouted = tables(function().call(iter([frame(*rows)]), FakeGroupState(), keys.of("")))
    assert len(unrouted["decisions"]) == 3  # the quota is keyed in Python: nothing to check


def test_a_group_id_escaped_beside_a_plain_one_is_a_duplicate() -> None:
    """``group\\u005fid`` is ``group_id``: Spark keys the line by the first, Python reads the
    last."""
    escaped = '{"event_id": "e", "type": "count", "group_id": "a", "group\\u005fid": "b"}'
    out = tables(function().call(iter([frame({"raw": escaped})]), FakeGroupState()))
    [rejected] = out["rejected_events"]
    assert rejected["reason"] == "not a JSON object: duplicate key group_id"


def test_the_rows_of_a_stray_group_are_dropped() -> None:
    """A group an earlier build wrote under another key than its own (a misrouted line) fires
    its timers there: its rows, under its group id, would overwrite the group's own."""
    keys = SparkKeys(Keying.SHARD, 16)
    assert keys.of("orders") != keys.of("")
    rows = [
        {"group_id": "orders", "kind": "member_removed"},  # a stray under the key of ""
        {"group_id": "", "kind": "member_removed"},
        {"group_id": None, "error": "INVALID_REQUEST"},
        {"batch": 1},
    ]
    kept = strays_dropped(rows, keys.of(""), keys.of, {})
    assert kept == rows[1:]
    assert strays_dropped(rows, keys.of("orders"), keys.of, {}) == [rows[0], *rows[2:]]


def test_a_stray_an_earlier_build_wrote_fires_its_timer_without_rows() -> None:
    keys = SparkKeys(Keying.SHARD, 16)
    earlier = FakeGroupState(batch_time_ms=1_000)
    line_under_empty = {"raw": line("e", group_id="orders", timeout_ms=500), "arrival_time_ms": 900}
    function().call(iter([frame(line_under_empty)]), earlier, keys.of(""))  # no check then
    routed = StateFunction(CountingRunner, TimeMode.PROCESSING_TIME, route=keys.of)
    later = earlier.next_call(5_000)
    out = tables(routed.call(iter([]), later, keys.of("")))
    assert "group_events" not in out  # the stray's timer fired: its row is dropped
    assert later.value is not None  # its state goes on as it was (timers, then nothing)
    unchecked = tables(function().call(iter([]), earlier.next_call(5_000), keys.of("")))
    assert [r["group_id"] for r in unchecked["group_events"]] == ["orders"]
