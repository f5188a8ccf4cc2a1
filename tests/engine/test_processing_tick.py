"""A processing-time call ticks to the latest arrival it read, not the batch time
(engine.adapter.processing_tick): after a stop or a long batch, a source's capped batches read
the waiting records a slice at a time, and a tick past the slice would expire the members whose
next heartbeats are in the slices still unread."""

from __future__ import annotations

import base64
import json
from typing import Any

import pandas as pd
import pytest

from controlplane.core.config import CoordinatorConfig
from controlplane.core.coordinator.runner import CoordinatorRunner
from controlplane.core.runtime import TimedEvent
from controlplane.engine.adapter import METRICS_TABLE, StateFunction, processing_tick
from controlplane.engine.options import TimeMode
from engine.fakes import CountingRunner, FakeGroupState

GAP_MS = 30_000  # the failover gap
SESSION_MS = 10_000
CONFIG = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=1_000)


@pytest.mark.parametrize(
    ("batch_time_ms", "times", "tick_ms"),
    [
        (100_000, (), 100_000),  # a timed-out call: nothing read, the batch time
        (100_000, (90_000, 99_000), 99_000),  # the latest arrival
        (100_000, (80_000, 10_000, 40_000), 80_000),  # in any order
        (100_000, (100_000,), 100_000),
        (100_000, (10_000, None), 10_000),  # a record without an arrival does not count
        (100_000, (None,), 100_000),
        (100_000, (120_000,), 100_000),  # never past the batch (parse_row clamps it already)
    ],
)
def test_the_tick_of_a_call(
    batch_time_ms: int, times: tuple[int | None, ...], tick_ms: int
) -> None:
    assert processing_tick(batch_time_ms, times) == tick_ms


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


def test_a_backlog_call_fires_the_timers_up_to_its_latest_arrival_and_wakes_after_the_rest() -> (
    None
):
    function = StateFunction(CountingRunner, TimeMode.PROCESSING_TIME)
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
    # Spark's timeout from the tick: the timer is 1 s ahead of the latest arrival, so the key
    # wakes 1 s after this batch, by when the source has read the key's records to 21 s
    assert later.timeout_timestamp == 101_000
    woken = later.next_call(101_500)
    woken.hasTimedOut = True
    empty = frame(counted("x", 0, 0)).iloc[0:0]
    out = out_tables(function.call(iter([empty]), woken))
    assert [e["at_ms"] for e in out["group_events"]] == [21_000]


def test_rejected_records_count_as_read() -> None:
    """A call that read only records its source refused, or texts that are not JSON, read its
    source up to them too: it ticks to their arrival, not to the batch time."""
    function = StateFunction(CountingRunner, TimeMode.PROCESSING_TIME)
    first = FakeGroupState(batch_time_ms=1_000)
    function.call(iter([frame(counted("a", 1_000, 49_000))]), first)  # a timer at 50 s
    later = first.next_call(100_000)
    rows = frame(
        {"raw": "{not json", "arrival_time_ms": 30_000, "source": "t/0/7"},
        {"raw": "x", "arrival_time_ms": 40_000, "source": "t/0/8", "reject_reason": "too big"},
    )
    out = out_tables(function.call(iter([rows]), later))
    assert len(out["rejected_events"]) == 2
    assert out[METRICS_TABLE][0]["timers_fired"] == 0
    assert later.timeout_timestamp == 110_000


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


SLICES = (65_000, 70_000, 75_000)  # the batches after the restart, each reading a slice


def catch_up_slices(member: str) -> dict[int, list[dict[str, Any]]]:
    """The member heartbeats every 3 s from 4 s to 73 s while the job is down (from 1.5 s to
    65 s); the source's cap lets the batches at 65, 70 and 75 s read the waiting heartbeats in
    three slices, to 22, 43 and 73 s."""
    beats = [
        request_row(event_line("heartbeat", f"h{t}", member_id=member, generation_id=1), t)
        for t in range(4_000, 74_000, 3_000)
    ]
    return dict(zip(SLICES, (beats[:7], beats[7:14], beats[14:]), strict=True))


def test_a_member_heartbeating_through_a_stop_survives_the_capped_catch_up() -> None:
    function = StateFunction(
        lambda: CoordinatorRunner(CONFIG, failover_gap_ms=GAP_MS), TimeMode.PROCESSING_TIME
    )
    member, state = stable_member(function)
    out: dict[str, list[dict[str, Any]]] = {}
    for batch_time_ms, rows in catch_up_slices(member).items():
        state = state.next_call(batch_time_ms)
        for table, table_rows in call(function, state, *rows).items():
            out.setdefault(table, []).extend(table_rows)
    assert [d["error"] for d in out["decisions"]] == ["NONE"] * 24
    assert [d["decided_at_ms"] for d in out["decisions"]] == list(range(4_000, 74_000, 3_000))
    assert [e for e in out.get("group_events", []) if e["kind"] == "member_removed"] == []
    assert [e for e in out.get("group_events", []) if e["reason"] == "coordinator_failover"] == []


def test_ticking_each_slice_to_its_batch_time_would_expire_the_member() -> None:
    """The contrast, on the runner: the first slice reads heartbeats to 22 s, and a tick at its
    batch time (65 s) finds the session (to 32 s) over; the member is gone, and its later
    heartbeats are refused."""
    runner = CoordinatorRunner(CONFIG, failover_gap_ms=GAP_MS)
    member, state = stable_member(StateFunction(lambda: runner, TimeMode.PROCESSING_TIME))
    blob = base64.b64decode(state.value[2]) if state.value is not None else None
    decisions, removed = [], []
    for batch_time_ms, rows in catch_up_slices(member).items():
        events = [TimedEvent(json.loads(r["raw"]), r["arrival_time_ms"]) for r in rows]
        result = runner.run(blob, events, batch_time_ms)
        blob = result.state
        decisions += [d["error"] for d in result.outputs["decisions"]]
        removed += [
            (e["reason"], e["at_ms"])
            for e in result.outputs["group_events"]
            if e["kind"] == "member_removed"
        ]
    assert removed == [("session_timeout", 32_000)]
    assert decisions == ["NONE"] * 7 + ["UNKNOWN_MEMBER_ID"] * 17


def restarted(*starts: int) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """A run started at 0 makes a stable member (10-s session, due at 11.5 s), and stops. The
    runs of ``starts`` follow: the first batch at 25 s (capped: it reads other keys' records)
    calls the key by its timeout, with no records; the next (at 27 s) reads the heartbeats the
    member sent every 3 s while the job was down, from 4 s. The output of the two batches and
    the decisions' errors."""

    def runs(*starts: int) -> StateFunction:
        return StateFunction(
            lambda: CoordinatorRunner(CONFIG, failover_gap_ms=GAP_MS, run_starts=starts),
            TimeMode.PROCESSING_TIME,
        )

    member, state = stable_member(runs(0))
    function = runs(*starts)
    woken = state.next_call(25_000)
    woken.hasTimedOut = True
    out = out_tables(function.call(iter([frame(request_row("x", 0)).iloc[0:0]]), woken))
    beats = [
        request_row(event_line("heartbeat", f"h{t}", member_id=member, generation_id=1), t)
        for t in range(4_000, 25_000, 3_000)
    ]
    for table, rows in call(function, woken.next_call(27_000), *beats).items():
        out.setdefault(table, []).extend(rows)
    return out, [d["error"] for d in out["decisions"]]


def test_a_restart_s_first_batch_loads_the_group_instead_of_expiring_its_member() -> None:
    """Down less than the failover gap: the timer is overdue by 13.5 s, yet it came due while
    no run served the key (the new run started at 20 s), so the new run loads the group as a
    new coordinator would (its sessions restart) and the heartbeats read a batch later find the
    member."""
    out, errors = restarted(0, 20_000)
    assert errors == ["NONE"] * 7
    events = [(e["kind"], e["reason"], e["at_ms"]) for e in out["group_events"]]
    assert events == [("state_changed", "coordinator_failover", 25_000)]


def test_the_same_call_within_one_run_expires_the_member() -> None:
    """The contrast: a key of the run that wrote it, called 13.5 s after its deadline (less than
    the gap), fires the timer, and the heartbeats waiting in the next batch are refused."""
    out, errors = restarted(0)
    assert errors == ["UNKNOWN_MEMBER_ID"] * 7
    removed = [
        (e["reason"], e["at_ms"]) for e in out["group_events"] if e["kind"] == "member_removed"
    ]
    assert removed == [("session_timeout", 11_500)]


def test_a_timer_of_another_group_between_the_latest_arrival_and_the_batch_time_waits() -> None:
    """One shard, two groups: g's member (synced at 1.5 s, a 10-s session) is due at 11.5 s; the
    batch at 20 s reads only a request for group h, which arrived at 10 s. Its tick is 10 s:
    g's timer waits (the heartbeat that would keep the member may be among the records still
    unread), and the key wakes when the time it is ahead of the tick has passed."""
    function = StateFunction(
        lambda: CoordinatorRunner(CONFIG, failover_gap_ms=GAP_MS), TimeMode.PROCESSING_TIME
    )
    _, state = stable_member(function)
    state = state.next_call(20_000)
    describe = {"event_id": "d1", "event_time_ms": 0, "type": "describe", "group_id": "h"}
    out = call(function, state, request_row(json.dumps(describe), 10_000))
    assert [d["event_id"] for d in out["decisions"]] == ["d1"]
    assert [e for e in out.get("group_events", []) if e["kind"] == "member_removed"] == []
    assert out[METRICS_TABLE][0]["timers_fired"] == 0
    assert state.value is not None
    assert state.value[1] == 11_500
    assert state.timeout_timestamp == 21_500  # the batch (20 s) + 1.5 s ahead of the tick
    woken = state.next_call(22_000)
    woken.hasTimedOut = True
    out = out_tables(function.call(iter([frame(request_row("x", 0)).iloc[0:0]]), woken))
    removed = [e for e in out["group_events"] if e["kind"] == "member_removed"]
    assert [(e["reason"], e["at_ms"]) for e in removed] == [("session_timeout", 11_500)]
