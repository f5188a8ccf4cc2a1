"""A processing-time call that reads a backlog ticks to its latest arrival, not the batch time
(engine.adapter.backlog_tick): after a stop, a source's capped batches read the waiting records
a slice at a time, and a tick past the slice would expire the members whose next heartbeats
are in the slices still unread."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest

from controlplane.core.config import CoordinatorConfig
from controlplane.core.coordinator.runner import CoordinatorRunner
from controlplane.core.runtime import TimedEvent
from controlplane.engine.adapter import METRICS_TABLE, StateFunction, backlog_tick
from controlplane.engine.options import TimeMode
from engine.fakes import CountingRunner, FakeGroupState

GAP_MS = 30_000
SESSION_MS = 10_000
CONFIG = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=1_000)


def arrivals(*times: int | None) -> list[TimedEvent]:
    return [TimedEvent({"event_id": f"e{n}"}, t) for n, t in enumerate(times)]


@pytest.mark.parametrize(
    ("batch_time_ms", "times", "gap_ms", "tick_ms"),
    [
        (100_000, (), GAP_MS, 100_000),  # a timed-out call: nothing read, the batch time
        (100_000, (90_000, 99_000), GAP_MS, 100_000),  # fresh records
        (100_000, (70_000, 80_000), GAP_MS, 100_000),  # the oldest exactly the gap old
        (100_000, (69_999, 80_000), GAP_MS, 80_000),  # one ms older: a backlog
        (100_000, (80_000, 10_000, 40_000), GAP_MS, 80_000),  # the latest, in any order
        (100_000, (10_000, None), GAP_MS, 100_000),  # no arrival: read at the batch time
        (100_000, (10_000, 20_000), None, 100_000),  # no backlog age: always the batch
        (100_000, (10_000, 20_000), 0, 20_000),
        (100_000, (100_000,), 0, 100_000),
    ],
)
def test_the_tick_of_a_call(
    batch_time_ms: int, times: tuple[int | None, ...], gap_ms: int | None, tick_ms: int
) -> None:
    assert backlog_tick(batch_time_ms, arrivals(*times), gap_ms) == tick_ms


def frame(*rows: dict[str, Any]) -> pd.DataFrame:
    base = {"key": "k", "source": "t/0", "seq": None, "principal": None}
    return pd.DataFrame([{**base, **row} for row in rows])


def counted(event_id: str, arrival_ms: int, timeout_ms: int) -> dict[str, Any]:
    raw = json.dumps({"event_id": event_id, "type": "count", "timeout_ms": timeout_ms})
    return {"raw": raw, "arrival_time_ms": arrival_ms, "source": f"t/0/{arrival_ms}"}


def out_tables(envelopes: list[tuple[str, str]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for table, row in envelopes:
        out.setdefault(table, []).append(json.loads(row))
    return out


def test_a_backlog_call_fires_the_timers_up_to_its_latest_arrival_and_wakes_next_batch() -> None:
    function = StateFunction(CountingRunner, TimeMode.PROCESSING_TIME, backlog_age_ms=GAP_MS)
    first = FakeGroupState(batch_time_ms=1_000)
    function.call(iter([frame(counted("a", 1_000, 5_000))]), first)  # a timer at 6 s
    # the job was down; the next batch reads records of 10 s and 20 s: the timer at 6 s fires
    # before the one at 10 s, whose own timer (at 11 s) fires before the one at 20 s; the last
    # timer (at 21 s) is past the call's latest arrival and waits
    later = first.next_call(100_000)
    rows = frame(counted("b", 10_000, 1_000), counted("c", 20_000, 1_000))
    out = out_tables(function.call(iter([rows]), later))
    assert [e["at_ms"] for e in out["group_events"]] == [6_000, 11_000]
    assert [d["decided_at_ms"] for d in out["decisions"]] == [10_000, 20_000]
    # the stored timer fired 94 s after its deadline, by the batch's clock
    assert out[METRICS_TABLE] == [
        {"events": 2, "rejected": 0, "timers_fired": 1, "max_timer_lateness_ms": 94_000}
    ]
    assert later.value is not None
    assert later.value[1] == 21_000  # the timer still to fire
    assert later.timeout_timestamp == 100_001  # overdue: Spark calls the key at the next batch
    woken = later.next_call(101_000)
    woken.hasTimedOut = True
    empty = frame(counted("x", 0, 0)).iloc[0:0]
    out = out_tables(function.call(iter([empty]), woken))
    assert [e["at_ms"] for e in out["group_events"]] == [21_000]


def event_line(kind: str, event_id: str, **fields: Any) -> str:
    # processing time handles a request at its arrival; its own event_time_ms is only checked
    return json.dumps(
        {"event_id": event_id, "event_time_ms": 0, "type": kind, "group_id": "g", **fields}
    )


def request_row(line: str, arrival_ms: int) -> dict[str, Any]:
    return {"raw": line, "arrival_time_ms": arrival_ms, "source": f"t/0/{arrival_ms}"}


def call(
    function: StateFunction, state: FakeGroupState, *rows: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    return out_tables(function.call(iter([frame(*rows)]), state))


def stable_member(function: StateFunction) -> tuple[str, FakeGroupState]:
    """A member of group g, joined and synced at 1 s (a 10-s session); the key's last state."""
    join = event_line(
        "join",
        "j1",
        member_id="",
        client_id="c",
        request_version=3,
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=SESSION_MS,
        protocol_type="consumer",
        protocols=[{"name": "range", "metadata": ""}],
    )
    state = FakeGroupState(batch_time_ms=1_000)
    [joined] = call(function, state, request_row(join, 1_000))["decisions"]
    assert joined["error"] == "NONE"
    member = joined["member_id"]
    assignments = [{"member_id": member, "assignment": "AAE="}]
    sync = event_line("sync", "s1", member_id=member, generation_id=1, assignments=assignments)
    state = state.next_call(1_500)
    [synced] = call(function, state, request_row(sync, 1_500))["decisions"]
    assert synced["error"] == "NONE"
    return member, state


def catch_up(backlog_age_ms: int | None) -> dict[str, list[dict[str, Any]]]:
    """The job stops at 1.5 s; the member heartbeats every 3 s from 4 s to 73 s; the job is back
    at 65 s, and its source's cap lets the batches at 65, 70 and 75 s read the waiting
    heartbeats in three slices. The rows of the three batches, by table."""
    function = StateFunction(
        lambda: CoordinatorRunner(CONFIG, failover_gap_ms=GAP_MS),
        TimeMode.PROCESSING_TIME,
        backlog_age_ms=backlog_age_ms,
    )
    member, state = stable_member(function)
    beats = [
        request_row(event_line("heartbeat", f"h{t}", member_id=member, generation_id=1), t)
        for t in range(4_000, 74_000, 3_000)
    ]
    slices = {65_000: beats[:7], 70_000: beats[7:14], 75_000: beats[14:]}  # to 22, 43, 73 s
    out: dict[str, list[dict[str, Any]]] = {}
    for batch_time_ms, rows in slices.items():
        state = state.next_call(batch_time_ms)
        for table, table_rows in call(function, state, *rows).items():
            out.setdefault(table, []).extend(table_rows)
    return out


def test_a_member_heartbeating_through_a_stop_survives_the_capped_catch_up() -> None:
    out = catch_up(GAP_MS)
    assert [d["error"] for d in out["decisions"]] == ["NONE"] * 24
    assert [d["decided_at_ms"] for d in out["decisions"]] == list(range(4_000, 74_000, 3_000))
    assert [e for e in out.get("group_events", []) if e["kind"] == "member_removed"] == []
    assert [e for e in out.get("group_events", []) if e["reason"] == "coordinator_failover"] == []


def test_ticking_each_slice_to_its_batch_time_would_expire_the_member() -> None:
    """The contrast: the first slice reads heartbeats to 22 s and its tick at 65 s finds the
    session (to 32 s) over; the member is gone, and its later heartbeats are refused."""
    out = catch_up(None)
    removed = [e for e in out["group_events"] if e["kind"] == "member_removed"]
    assert [(e["reason"], e["at_ms"]) for e in removed] == [("session_timeout", 32_000)]
    assert [d["error"] for d in out["decisions"]] == ["NONE"] * 7 + ["UNKNOWN_MEMBER_ID"] * 17
