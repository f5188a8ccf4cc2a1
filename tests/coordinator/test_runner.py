"""The coordinator runner and shard: clocks, ticks, idempotence, failover, invalid rows, the
state envelope, and batch independence (any cut into batches gives the rows of one run)."""

from __future__ import annotations

import marshal
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.core.config import CoordinatorConfig
from controlplane.core.coordinator import codec, machine
from controlplane.core.coordinator.runner import (
    DECISIONS,
    EPOCH_STATE_VERSION,
    GROUP_EVENTS,
    GROUPS,
    STATE_VERSION,
    CoordinatorRunner,
    CoordinatorShard,
    epoch_at,
)
from controlplane.core.coordinator.state import TimerKind
from controlplane.core.idempotence import DIGEST_BYTES, WINDOW
from controlplane.core.runtime import TimedEvent

# No initial delay: a first join completes at the first tick at or after it.
CONFIG = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=1_000)
SESSION_MS = 10_000

Row = dict[str, Any]


def event(raw: dict[str, Any]) -> TimedEvent:
    return TimedEvent(raw, raw.get("event_time_ms"))


def join(eid: str, group: str, t: int, member: str = "", **extra: Any) -> TimedEvent:
    raw = {
        "event_id": eid,
        "event_time_ms": t,
        "type": "join",
        "group_id": group,
        "member_id": member,
        "request_version": 3,
        "session_timeout_ms": SESSION_MS,
        "rebalance_timeout_ms": SESSION_MS,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": ""}],
        "client_id": "c",
    }
    raw.update(extra)
    return event(raw)


def sync(
    eid: str, group: str, t: int, member: str, generation: int, members: Sequence[str] = ()
) -> TimedEvent:
    assignments = [{"member_id": m, "assignment": "AAE="} for m in members]
    return event(
        {
            "event_id": eid,
            "event_time_ms": t,
            "type": "sync",
            "group_id": group,
            "member_id": member,
            "generation_id": generation,
            "assignments": assignments,
        }
    )


def heartbeat(eid: str, group: str, t: int, member: str, generation: int) -> TimedEvent:
    return event(
        {
            "event_id": eid,
            "event_time_ms": t,
            "type": "heartbeat",
            "group_id": group,
            "member_id": member,
            "generation_id": generation,
        }
    )


def leave(eid: str, group: str, t: int, member: str) -> TimedEvent:
    return event(
        {
            "event_id": eid,
            "event_time_ms": t,
            "type": "leave",
            "group_id": group,
            "member_id": member,
        }
    )


def delete_group(eid: str, group: str, t: int) -> TimedEvent:
    return event({"event_id": eid, "event_time_ms": t, "type": "delete_group", "group_id": group})


def describe(eid: str, group: str, t: int) -> TimedEvent:
    return event({"event_id": eid, "event_time_ms": t, "type": "describe", "group_id": group})


def tick(eid: str, t: int, group: str | None = None) -> TimedEvent:
    raw: dict[str, Any] = {"event_id": eid, "event_time_ms": t, "type": "tick"}
    if group is not None:
        raw["group_id"] = group
    return event(raw)


def feed_all(shard: CoordinatorShard, events: Sequence[TimedEvent]) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = {DECISIONS: [], GROUP_EVENTS: []}
    for item in events:
        for table, rows in shard.feed(item).items():
            out[table].extend(rows)
    return out


def stable_member(shard: CoordinatorShard, group: str, t: int, eid: str = "j1") -> str:
    """One member joins ``group`` at ``t`` and syncs; returns its member id (generation 1)."""
    rows = feed_all(shard, [join(eid, group, t), tick(f"{eid}-t", t, group)])
    answer = next(r for r in rows[DECISIONS] if r["event_id"] == eid)
    assert answer["error"] == "NONE", answer
    member = str(answer["member_id"])
    rows = feed_all(shard, [sync(f"{eid}-s", group, t, member, 1, [member])])
    assert rows[DECISIONS][-1]["error"] == "NONE"
    return member


def answers(rows: dict[str, list[Row]], event_id: str) -> list[Row]:
    return [r for r in rows[DECISIONS] if r["event_id"] == event_id]


# --- clocks ----------------------------------------------------------------------------------


def test_a_group_clock_never_goes_back() -> None:
    shard = CoordinatorShard(CONFIG)
    member = stable_member(shard, "g", 50_000)
    rows = feed_all(shard, [heartbeat("late", "g", 1_000, member, 1)])
    (answer,) = answers(rows, "late")
    assert answer["error"] == "NONE"
    assert answer["event_time_ms"] == 1_000
    assert answer["decided_at_ms"] == 50_000


def test_each_group_has_its_own_clock() -> None:
    shard = CoordinatorShard(CONFIG)
    stable_member(shard, "a", 900_000)
    rows = feed_all(shard, [describe("d", "b", 1_000), join("jb", "b", 2_000)])
    assert answers(rows, "d")[0]["decided_at_ms"] == 1_000
    added = [r for r in rows[GROUP_EVENTS] if r["kind"] == "member_added"]
    assert [r["at_ms"] for r in added] == [2_000]


def test_due_timers_fire_at_their_deadline_before_the_event() -> None:
    shard = CoordinatorShard(CONFIG)
    member = stable_member(shard, "g", 0)
    rows = feed_all(shard, [heartbeat("hb", "g", 25_000, member, 1)])
    removed = [r for r in rows[GROUP_EVENTS] if r["kind"] == "member_removed"]
    assert [(r["member_id"], r["reason"], r["at_ms"]) for r in removed] == [
        (member, "session_timeout", SESSION_MS)
    ]
    (answer,) = answers(rows, "hb")
    assert answer["error"] == "UNKNOWN_MEMBER_ID"
    assert answer["decided_at_ms"] == 25_000


def test_tick_with_group_id_ticks_only_that_group() -> None:
    shard = CoordinatorShard(CONFIG)
    a = stable_member(shard, "a", 0)
    b = stable_member(shard, "b", 0)
    rows = feed_all(shard, [tick("t", 60_000, "a")])
    assert {r["group_id"] for r in rows[GROUP_EVENTS]} == {"a"}
    assert shard.group("a") is not None
    assert not any(m.member_id == a for m in shard.group("a").members)  # type: ignore[union-attr]
    assert any(m.member_id == b for m in shard.group("b").members)  # type: ignore[union-attr]


def test_tick_without_group_id_ticks_every_group() -> None:
    shard = CoordinatorShard(CONFIG)
    stable_member(shard, "a", 0)
    stable_member(shard, "b", 0)
    rows = feed_all(shard, [tick("t", 60_000)])
    removed = [r for r in rows[GROUP_EVENTS] if r["kind"] == "member_removed"]
    assert [r["group_id"] for r in removed] == ["a", "b"]
    assert all(r["at_ms"] == SESSION_MS for r in removed)


def test_tick_of_unknown_group_is_silent() -> None:
    shard = CoordinatorShard(CONFIG)
    assert feed_all(shard, [tick("t", 5, "nobody")]) == {DECISIONS: [], GROUP_EVENTS: []}
    assert shard.encode() is None


def test_run_tick_ms_ticks_every_group_at_the_end() -> None:
    runner = CoordinatorRunner(CONFIG)
    first = runner.run(None, [join("j", "g", 0)], tick_ms=0)
    assert [r["error"] for r in first.outputs[DECISIONS]] == ["NONE"]
    assert first.next_deadline_ms == SESSION_MS
    member = first.outputs[DECISIONS][0]["member_id"]
    second = runner.run(first.state, [sync("s", "g", 5, member, 1, [member])], tick_ms=None)
    assert second.outputs[DECISIONS][0]["error"] == "NONE"
    third = runner.run(second.state, [], tick_ms=SESSION_MS + 5)
    kinds = [r["kind"] for r in third.outputs[GROUP_EVENTS]]
    assert "member_removed" in kinds


# --- idempotence ------------------------------------------------------------------------------


def test_a_repeated_event_id_is_not_answered_again() -> None:
    shard = CoordinatorShard(CONFIG)
    member = stable_member(shard, "g", 0)
    once = feed_all(shard, [heartbeat("hb", "g", 100, member, 1)])
    again = feed_all(shard, [heartbeat("hb", "g", 200, member, 1)])
    assert len(answers(once, "hb")) == 1
    assert again[DECISIONS] == []
    (dup,) = again[GROUP_EVENTS]
    assert dup["kind"] == "duplicate_request"
    assert (dup["event_id"], dup["member_id"], dup["at_ms"]) == ("hb", member, 200)


def test_the_window_holds_the_last_64_requests() -> None:
    shard = CoordinatorShard(CONFIG)
    member = stable_member(shard, "g", 0)
    feed_all(shard, [heartbeat("first", "g", 1, member, 1)])
    others = [heartbeat(f"h{i}", "g", 2 + i, member, 1) for i in range(WINDOW - 1)]
    feed_all(shard, others)
    still = feed_all(shard, [heartbeat("first", "g", 100, member, 1)])
    assert still[DECISIONS] == []  # 64th most recent: still remembered
    feed_all(shard, [heartbeat("push", "g", 101, member, 1)])
    answered = feed_all(shard, [heartbeat("first", "g", 102, member, 1)])
    assert len(answers(answered, "first")) == 1


def test_the_window_survives_encoding() -> None:
    runner = CoordinatorRunner(CONFIG)
    shard = CoordinatorShard(CONFIG)
    member = stable_member(shard, "g", 0)
    result = runner.run(shard.encode(), [heartbeat("j1", "g", 5, member, 1)], None)
    assert result.outputs[DECISIONS] == []
    assert [r["kind"] for r in result.outputs[GROUP_EVENTS]] == ["duplicate_request"]


def test_the_window_does_not_grow_with_the_length_of_event_ids() -> None:
    sizes = []
    for width in (4, 200):
        shard = CoordinatorShard(CONFIG)
        member = stable_member(shard, "g", 0)
        feed_all(shard, [heartbeat(f"{i:0{width}d}", "g", 1 + i, member, 1) for i in range(100)])
        state = shard.encode()
        assert state is not None
        sizes.append(len(state))
    assert sizes[0] == sizes[1]


# --- failover ---------------------------------------------------------------------------------


def test_failover_resets_sessions_before_timers_fire() -> None:
    shard = CoordinatorShard(CONFIG)
    member = stable_member(shard, "g", 0)
    state = shard.encode()
    late = 3_600_000
    runner = CoordinatorRunner(CONFIG, failover_gap_ms=60_000)
    result = runner.run(state, [heartbeat("hb", "g", late, member, 1)], None)
    assert result.outputs[DECISIONS][0]["error"] == "NONE"
    assert not [r for r in result.outputs[GROUP_EVENTS] if r["kind"] == "member_removed"]
    reasons = [(r["reason"], r["at_ms"]) for r in result.outputs[GROUP_EVENTS]]
    assert ("coordinator_failover", late) in reasons
    assert result.next_deadline_ms == late + SESSION_MS
    # only the first touch of a batch: a second event in the same batch far later is normal
    again = runner.run(
        state,
        [heartbeat("a", "g", late, member, 1), heartbeat("b", "g", late * 2, member, 1)],
        None,
    )
    assert [r["error"] for r in again.outputs[DECISIONS]] == ["NONE", "UNKNOWN_MEMBER_ID"]


def test_a_tick_of_every_group_is_the_batch_s_first_touch_of_each() -> None:
    """A tick without a group id reaches every group: for a group whose timer is not due yet
    that is still the batch's first touch, so an event later in the batch that finds its timer
    overdue beyond the gap is handled after the timer fires, not after a failover."""
    shard = CoordinatorShard(CONFIG)
    member = stable_member(shard, "g", 0)
    stable_member(shard, "h", 0, eid="j2")
    runner = CoordinatorRunner(CONFIG, failover_gap_ms=1_000)
    late = SESSION_MS + 5_000
    result = runner.run(
        shard.encode(), [tick("t", SESSION_MS // 2), heartbeat("hb", "g", late, member, 1)], None
    )
    assert [r["error"] for r in result.outputs[DECISIONS]] == ["UNKNOWN_MEMBER_ID"]
    assert not any(r["reason"] == "coordinator_failover" for r in result.outputs[GROUP_EVENTS])
    untouched = runner.run(shard.encode(), [heartbeat("hb", "g", late, member, 1)], None)
    assert [r["error"] for r in untouched.outputs[DECISIONS]] == ["NONE"]


def test_without_failover_the_same_gap_expires_the_member() -> None:
    shard = CoordinatorShard(CONFIG)
    member = stable_member(shard, "g", 0)
    result = CoordinatorRunner(CONFIG).run(
        shard.encode(), [heartbeat("hb", "g", 3_600_000, member, 1)], None
    )
    assert result.outputs[DECISIONS][0]["error"] == "UNKNOWN_MEMBER_ID"


def test_a_long_batch_expires_no_member_whose_heartbeats_the_next_batch_reads() -> None:
    """The runner given each heartbeat at its arrival, then a tick at the batch's time (as the
    engine ran processing time before it ticked a call to its latest arrival). After 15 s
    without a batch (longer than the 10-s session), a batch that reads every heartbeat that
    arrived meanwhile keeps the member; one that reads only those of the first 4 s (a source's
    cap leaving the rest unread) expires it at that tick, and the heartbeats read later find
    it gone: why the engine's tick is the latest arrival read (docs/engine.md, "The tick of a
    call that read records"; tests/engine/test_processing_tick.py)."""
    runner = CoordinatorRunner(CONFIG)
    shard = CoordinatorShard(CONFIG)
    member = stable_member(shard, "g", 0)
    beats = [heartbeat(f"h{n}", "g", 500 + n * 3_000, member, 1) for n in range(5)]  # to 12.5 s
    read_all = runner.run(shard.encode(), beats, tick_ms=15_000)
    assert [r["error"] for r in read_all.outputs[DECISIONS]] == ["NONE"] * 5
    assert read_all.outputs[GROUP_EVENTS] == []
    capped = runner.run(shard.encode(), beats[:2], tick_ms=15_000)
    assert [r["error"] for r in capped.outputs[DECISIONS]] == ["NONE"] * 2
    assert next(e["kind"] for e in capped.outputs[GROUP_EVENTS]) == "member_removed"
    rest = runner.run(capped.state, beats[2:], tick_ms=16_000)
    assert [r["error"] for r in rest.outputs[DECISIONS]] == ["UNKNOWN_MEMBER_ID"] * 3


def test_failover_applies_on_tick_ms_only_when_a_timer_is_overdue_beyond_the_gap() -> None:
    shard = CoordinatorShard(CONFIG)
    stable_member(shard, "g", 0)
    deadline = shard.next_deadline_ms()
    assert deadline is not None
    runner = CoordinatorRunner(CONFIG, failover_gap_ms=60_000)
    within = runner.run(shard.encode(), [], tick_ms=deadline + 59_000)
    assert any(r["kind"] == "member_removed" for r in within.outputs[GROUP_EVENTS])
    beyond = runner.run(shard.encode(), [], tick_ms=deadline + 61_000)
    assert not any(r["kind"] == "member_removed" for r in beyond.outputs[GROUP_EVENTS])
    assert beyond.next_deadline_ms == deadline + 61_000 + SESSION_MS


def test_a_crashed_member_expires_even_when_its_group_was_idle_longer_than_the_gap() -> None:
    """The gap measures how late a timer fires (the engine was down), not how long the group
    was quiet: with a gap shorter than the session timeout, a member that stopped heartbeating
    is still removed when a running engine reaches its deadline."""
    shard = CoordinatorShard(CONFIG)
    stable_member(shard, "g", 0)
    deadline = shard.next_deadline_ms()
    assert deadline is not None
    runner = CoordinatorRunner(CONFIG, failover_gap_ms=SESSION_MS // 2)
    result = runner.run(shard.encode(), [], tick_ms=deadline + 1_000)
    removed = [r for r in result.outputs[GROUP_EVENTS] if r["kind"] == "member_removed"]
    assert [r["reason"] for r in removed] == ["session_timeout"]
    assert not any(r["reason"] == "coordinator_failover" for r in result.outputs[GROUP_EVENTS])


# --- loading by a new run (a restart of the engine) ----------------------------------------------

RUN_1 = -60_000  # the run that wrote the shards below started a minute before them


def written_by(start: int | None) -> tuple[bytes, str, int]:
    """A shard with a stable member of ``g`` (synced at 0), as the run started at ``start``
    leaves it (None: a run before runs were recorded); the member's session deadline."""
    shard = CoordinatorShard(CONFIG, coordinator_epoch=start)
    member = stable_member(shard, "g", 0)
    state, deadline = shard.encode(), shard.next_deadline_ms()
    assert state is not None
    assert deadline is not None
    return state, member, deadline


def runs(*starts: int) -> CoordinatorRunner:
    return CoordinatorRunner(CONFIG, failover_gap_ms=60_000, run_starts=starts)


def resets_and_removals(result: Any) -> list[tuple[str, str, int]]:
    return [
        (r["group_id"], r["reason"], r["at_ms"])
        for r in result.outputs[GROUP_EVENTS]
        if r["reason"] == "coordinator_failover" or r["kind"] == "member_removed"
    ]


@pytest.mark.parametrize(
    ("starts", "tick_ms", "epoch"),
    [
        ((), 5, None),
        ((10,), 5, None),  # before the first run
        ((10,), 10, 10),
        ((10, 20, 30), 25, 20),
        ((10, 20, 30), 30, 30),
        ((10, 20, 30), 99, 30),
        ((10, 20), None, None),  # no tick (a replay's call)
    ],
)
def test_a_call_s_epoch_is_the_latest_run_start_at_or_before_its_tick(
    starts: tuple[int, ...], tick_ms: int | None, epoch: int | None
) -> None:
    assert epoch_at(starts, tick_ms) == epoch


@pytest.mark.parametrize("written", [RUN_1, None])  # by an earlier run, or before runs
def test_a_new_run_loads_a_group_whose_timer_came_due_while_no_run_served_it(
    written: int | None,
) -> None:
    """Overdue by less than the gap, the timer is still a failover's: the key's tick passed the
    start of a run after the one that wrote the shard, so the timer came due while no run
    served it, and the heartbeats that kept the member may wait in records not read yet (a
    restart's first batch, a capped catch-up)."""
    state, member, deadline = written_by(written)
    restart, tick_ms = deadline + 2_000, deadline + 5_000
    loaded = runs(RUN_1, restart).run(state, [], tick_ms)
    assert resets_and_removals(loaded) == [("g", "coordinator_failover", tick_ms)]
    assert loaded.next_deadline_ms == tick_ms + SESSION_MS
    beat = heartbeat("h", "g", deadline + 1_000, member, 1)  # read by the next batch
    later = runs(RUN_1, restart).run(loaded.state, [beat], tick_ms + 1_000)
    assert [r["error"] for r in later.outputs[DECISIONS]] == ["NONE"]


def test_the_run_that_wrote_the_shard_fires_the_same_timer() -> None:
    state, _, deadline = written_by(RUN_1)
    result = runs(RUN_1).run(state, [], deadline + 5_000)
    assert resets_and_removals(result) == [("g", "session_timeout", deadline)]


def test_only_the_first_call_past_a_new_run_s_start_loads() -> None:
    """The reset records the new epoch: the session it gave runs out in the same run, and the
    member is removed then, as by a running coordinator."""
    state, _, deadline = written_by(RUN_1)
    runner = runs(RUN_1, deadline)
    loaded = runner.run(state, [], deadline + 5_000)
    assert loaded.next_deadline_ms == deadline + 5_000 + SESSION_MS
    expired = runner.run(loaded.state, [], deadline + 5_000 + SESSION_MS + 1_000)
    assert resets_and_removals(expired) == [("g", "session_timeout", deadline + 5_000 + SESSION_MS)]


def test_a_timer_not_due_at_the_loading_call_fires_at_its_deadline() -> None:
    """A crashed member of a group whose key the new run loads before its deadline is removed
    at that deadline: its timer comes due while the run serves the shard."""
    state, _, deadline = written_by(RUN_1)
    runner = runs(RUN_1, deadline - 2_000)
    first = runner.run(state, [], deadline - 1_000)
    assert first.outputs[GROUP_EVENTS] == []
    due = runner.run(first.state, [], deadline + 2_000)
    assert resets_and_removals(due) == [("g", "session_timeout", deadline)]


def test_a_timer_due_before_the_key_s_tick_passes_the_start_is_reset_when_it_does() -> None:
    """The first call after the restart ticks before the new run's start (a batch of the old
    run's, run again): nothing is due and nothing is loaded. The next call passes the start and
    loads the group, whose timer came due meanwhile: its member gets a new session."""
    state, _, deadline = written_by(RUN_1)
    runner = runs(RUN_1, deadline - 500)
    replayed = runner.run(state, [], deadline - 1_000)
    assert replayed.outputs[GROUP_EVENTS] == []
    loaded = runner.run(replayed.state, [], deadline + 2_000)
    assert resets_and_removals(loaded) == [("g", "coordinator_failover", deadline + 2_000)]


def test_a_rebalance_a_new_run_loads_takes_in_the_join_that_waited_in_the_backlog() -> None:
    """Loaded mid-rebalance, the group gets a whole rebalance timeout again (Kafka loads it
    Stable and its members join again), so the old member's JoinGroup, sent before the old
    deadline and read after it, joins the rebalance instead of finding its member removed."""
    shard = CoordinatorShard(CONFIG, coordinator_epoch=RUN_1)
    old = stable_member(shard, "g", 0)
    newcomer = answers(feed_all(shard, [join("j2", "g", 1_000)]), "j2")
    assert newcomer == []  # parked: the rebalance waits for the old member until 11_000
    state = shard.encode()
    assert state is not None
    restart, tick_ms = 11_500, 12_000
    runner = runs(RUN_1, restart)
    loaded = runner.run(state, [], tick_ms)
    assert resets_and_removals(loaded) == [("g", "coordinator_failover", tick_ms)]
    assert loaded.next_deadline_ms == tick_ms + SESSION_MS
    rejoined = runner.run(loaded.state, [join("j3", "g", 9_500, old)], tick_ms + 500)
    joins = {r["event_id"]: (r["error"], r["generation_id"]) for r in rejoined.outputs[DECISIONS]}
    assert joins == {"j2": ("NONE", 2), "j3": ("NONE", 2)}


@settings(max_examples=60, deadline=None)
@given(
    beats=st.lists(st.integers(0, 40_000), max_size=4),
    tick_ms=st.integers(0, 40_000),
    starts=st.lists(st.integers(-10_000, 40_000), max_size=3, unique=True),
    later=st.integers(1, 30_000),
)
def test_a_start_after_a_call_s_tick_changes_nothing_in_it(
    beats: list[int], tick_ms: int, starts: list[int], later: int
) -> None:
    """What a batch run again by a later run sees: the same state, events and tick, and more
    starts, all after its tick. Its rows, state and deadline are the same."""
    state, member, _ = written_by(RUN_1)
    events = [heartbeat(f"h{n}", "g", t, member, 1) for n, t in enumerate(sorted(beats))]
    known = tuple(sorted({RUN_1, *(s for s in starts if s <= tick_ms)}))
    first = runs(*known).run(state, events, tick_ms)
    again = runs(*known, tick_ms + later).run(state, events, tick_ms)
    assert again.outputs == first.outputs
    assert (again.state, again.next_deadline_ms) == (first.state, first.next_deadline_ms)


def test_only_the_groups_with_a_timer_due_are_loaded() -> None:
    shard = CoordinatorShard(CONFIG, coordinator_epoch=RUN_1)
    stable_member(shard, "g", 0)
    stable_member(shard, "h", 8_000, eid="j2")  # due at 18 s
    loaded = runs(RUN_1, 11_000).run(shard.encode(), [], 12_000)
    assert resets_and_removals(loaded) == [("g", "coordinator_failover", 12_000)]
    removed = runs(RUN_1, 11_000).run(loaded.state, [], 19_000)
    assert resets_and_removals(removed) == [("h", "session_timeout", 18_000)]


def test_a_group_first_reached_by_a_request_in_the_loading_call() -> None:
    state, member, deadline = written_by(RUN_1)
    beat = heartbeat("h", "g", deadline + 3_000, member, 1)  # arrived after the restart
    result = runs(RUN_1, deadline + 1_000).run(state, [beat], deadline + 3_000)
    assert resets_and_removals(result) == [("g", "coordinator_failover", deadline + 3_000)]
    assert [r["error"] for r in result.outputs[DECISIONS]] == ["NONE"]


def test_a_batch_run_again_by_a_later_run_decides_as_it_did() -> None:
    """An interrupted batch is run again by the next run with its batch time and records, so
    with its ticks: its epoch is the same, and so are its rows, whichever run executes it."""
    state, member, deadline = written_by(RUN_1)
    beat = heartbeat("h", "g", deadline + 3_000, member, 1)
    first = runs(RUN_1, deadline + 1_000).run(state, [beat], deadline + 3_000)
    again = runs(RUN_1, deadline + 1_000, deadline + 60_000).run(state, [beat], deadline + 3_000)
    assert again.outputs == first.outputs
    assert again.next_deadline_ms == first.next_deadline_ms
    assert again.state == first.state


def test_a_call_with_an_earlier_tick_does_not_use_up_the_load() -> None:
    """A batch the stopped run planned, run again by the new one, ticks before the new run's
    start: it is the old run's batch (its epoch), and the new run's first batch still loads."""
    state, member, deadline = written_by(RUN_1)
    restart = deadline + 20_000
    runner = runs(RUN_1, restart)
    describe = event(
        {"event_id": "d", "event_time_ms": deadline - 5_000, "type": "describe", "group_id": "g"}
    )
    replayed = runner.run(state, [describe], deadline - 5_000)
    assert resets_and_removals(replayed) == []
    assert replayed.state is not None
    assert CoordinatorShard.decode(replayed.state, CONFIG).epoch == RUN_1
    loaded = runner.run(replayed.state, [], restart + 12_000)
    assert resets_and_removals(loaded) == [("g", "coordinator_failover", restart + 12_000)]
    # and a call with a tick before the shard's latest epoch neither loads nor forgets it
    old = runner.run(loaded.state, [heartbeat("h", "g", 1, member, 1)], 1)
    assert old.state is not None
    assert CoordinatorShard.decode(old.state, CONFIG).epoch == restart


def test_without_run_starts_a_shard_is_never_loaded() -> None:
    """Replays and event time have no runs: the shard keeps the epoch it had."""
    state, _, deadline = written_by(RUN_1)
    result = CoordinatorRunner(CONFIG, failover_gap_ms=60_000).run(state, [], deadline + 5_000)
    assert resets_and_removals(result) == [("g", "session_timeout", deadline)]
    assert result.state is not None
    assert CoordinatorShard.decode(result.state, CONFIG).epoch == RUN_1


def test_the_epoch_s_state_version() -> None:
    with_epoch, _, _ = written_by(7)
    without, _, _ = written_by(None)
    assert (with_epoch[0], without[0]) == (EPOCH_STATE_VERSION, STATE_VERSION) == (3, 2)
    again = CoordinatorShard.decode(with_epoch, CONFIG, coordinator_epoch=7)
    assert again.epoch == 7
    copied = again.encode()
    assert copied is not None
    assert copied[0] == EPOCH_STATE_VERSION
    assert CoordinatorShard.decode(copied, CONFIG).epoch == 7
    assert bodies_of(copied) == bodies_of(with_epoch)
    plain = CoordinatorShard.decode(without, CONFIG).encode()
    assert plain is not None
    assert plain[0] == STATE_VERSION
    record_size = int.from_bytes(with_epoch[1:5], "little")
    record = marshal.loads(with_epoch[5 : 5 + record_size])
    for bad_epoch in ("7", 7.0, None, True):
        bad = marshal.dumps((*record[:5], bad_epoch), 4)
        data = bytes((3,)) + len(bad).to_bytes(4, "little") + bad + with_epoch[5 + record_size :]
        with pytest.raises(ValueError, match="malformed version 3 record"):
            CoordinatorShard.decode(data, CONFIG)
    five = marshal.dumps(record[:5], 4)  # a version 3 without its epoch
    data = bytes((3,)) + len(five).to_bytes(4, "little") + five + with_epoch[5 + record_size :]
    with pytest.raises(ValueError, match="malformed version 3 record"):
        CoordinatorShard.decode(data, CONFIG)


# --- invalid events ---------------------------------------------------------------------------


def test_invalid_events_in_the_middle_do_not_stop_the_stream() -> None:
    shard = CoordinatorShard(CONFIG)
    member = stable_member(shard, "g", 1_000)
    bad_json = TimedEvent({}, None, line="f:9", error="not valid JSON: x", raw="{")
    bad_field = heartbeat("bad", "g", 2_000, member, 1)
    bad_field = TimedEvent(dict(bad_field.event, generation_id="1"), 2_000, line="f:10")
    rows = feed_all(shard, [bad_json, bad_field, heartbeat("ok", "g", 3_000, member, 1), bad_json])
    codes = [(r["event_id"], r["error_code"], r["decided_at_ms"]) for r in rows[DECISIONS]]
    assert codes == [(None, 42, 1_000), ("bad", 42, 2_000), ("ok", 0, 3_000), (None, 42, 3_000)]
    assert rows[DECISIONS][1]["error_message"].startswith("f:10: generation_id: ")


def test_an_invalid_event_changes_no_state() -> None:
    shard = CoordinatorShard(CONFIG)
    member = stable_member(shard, "g", 0)
    before = shard.group("g")
    rows = feed_all(shard, [TimedEvent({"type": "heartbeat", "group_id": "g"}, 99_000)])
    assert rows[DECISIONS][0]["decided_at_ms"] == 99_000
    assert shard.group("g") == before
    assert shard.next_deadline_ms() == SESSION_MS
    later = feed_all(shard, [heartbeat("hb", "g", 5, member, 1)])  # the group's clock is still 0
    assert (later[DECISIONS][0]["error"], later[DECISIONS][0]["decided_at_ms"]) == ("NONE", 5)


@pytest.mark.parametrize("odd", [2**63, -(2**63) - 1, 10**30])
def test_an_event_time_past_the_long_range_is_not_echoed_nor_used_as_a_time(odd: int) -> None:
    """The decision's columns are longs: an integer past them would fail the table write."""
    shard = CoordinatorShard(CONFIG)
    member = stable_member(shard, "g", 1_000)
    raw = dict(heartbeat("odd", "g", 0, member, 1).event, event_time_ms=odd)
    rows = feed_all(shard, [TimedEvent(raw, None, line="f:3")])
    (row,) = rows[DECISIONS]
    assert (row["error"], row["event_time_ms"], row["decided_at_ms"]) == (
        "INVALID_REQUEST",
        None,
        1_000,
    )
    assert row["error_message"] == f"f:3: event_time_ms: out of range for a long: {odd}"


# --- the envelope and the groups table ---------------------------------------------------------


def test_envelope_round_trip_and_untouched_groups_copied() -> None:
    shard = CoordinatorShard(CONFIG)
    stable_member(shard, "a", 0)
    stable_member(shard, "b", 0)
    state = shard.encode()
    assert state is not None
    assert state[0] == STATE_VERSION == 2
    again = CoordinatorShard.decode(state, CONFIG)
    copied = again.encode()
    assert copied is not None
    assert bodies_of(copied) == bodies_of(state)  # the bodies as they were, byte for byte
    assert again.group_ids == CoordinatorShard.decode(copied, CONFIG).group_ids == ["a", "b"]
    assert again.group("a") == shard.group("a")
    assert again.clock_ms == shard.clock_ms
    assert again.next_deadline_ms() == shard.next_deadline_ms() == SESSION_MS


def bodies_of(state: bytes) -> bytes:
    """The groups' bodies in a version 2 state: what follows the record (runner.py's layout)."""
    return state[5 + int.from_bytes(state[1:5], "little") :]


def test_a_group_near_the_end_of_time_encodes_and_keeps_its_timers() -> None:
    """The wire allows any long event time: a member that joins just before the end of the
    long range has a session deadline past it. The state keeps it exactly (the engine clamps
    the Spark timeout, not the core), the group keeps its exact timers, and the state
    round-trips."""
    end = 2**63 - 1
    shard = CoordinatorShard(CONFIG)
    member = stable_member(shard, "g", end - 1_000)
    state = shard.encode()
    assert state is not None
    again = CoordinatorShard.decode(state, CONFIG)
    assert again.group("g") == shard.group("g")
    assert CoordinatorShard.decode(again.encode(), CONFIG).group("g") == shard.group("g")
    assert shard.next_deadline_ms() == again.next_deadline_ms() == end - 1_000 + SESSION_MS
    rows = feed_all(again, [heartbeat("hb", "g", end, member, 1), tick("t", end)])
    assert [r["error"] for r in answers(rows, "hb")] == ["NONE"]
    assert rows[GROUP_EVENTS] == []  # nothing fires: the deadline is past the end of time


@pytest.mark.parametrize(
    ("data", "message"),
    [(b"\x09", "unsupported version 9"), (b"", "unsupported version"), (b"\x01\x05\x01", "trunc")],
)
def test_a_corrupt_state_is_a_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CoordinatorShard.decode(data, CONFIG)


def test_every_truncation_or_extension_of_a_state_is_refused() -> None:
    shard = CoordinatorShard(CONFIG)
    stable_member(shard, "g", 0)
    state = shard.encode()
    assert state is not None
    for size in range(len(state)):
        with pytest.raises(ValueError, match="coordinator state"):
            CoordinatorShard.decode(state[:size], CONFIG)
    with pytest.raises(ValueError, match="trailing bytes"):
        CoordinatorShard.decode(state + b"\x00", CONFIG)


def test_a_damaged_window_is_a_clear_error_when_the_group_is_used() -> None:
    shard = CoordinatorShard(CONFIG)
    member = stable_member(shard, "g", 0)
    stable_member(shard, "h", 0, eid="j2")
    state = shard.encode()
    assert state is not None
    record = int.from_bytes(state[1:5], "little")  # runner.py's layout: then the bodies
    first = 5 + record
    assert marshal.loads(state[5:first])[1] == ["g", "h"]
    damaged = state[:first] + (65).to_bytes(2, "little") + state[first + 2 :]  # 65 digests
    loaded = CoordinatorShard.decode(damaged, CONFIG)  # untouched groups are not read
    assert loaded.feed(tick("t", 1))[GROUP_EVENTS] == []  # nothing due: "g" is not read
    with pytest.raises(ValueError, match="idempotence window is unreadable"):
        loaded.feed(heartbeat("hb", "g", 5, member, 1))


# A version 1 state (a struct header per group), written by the build before version 2: groups
# "a" (joined and synced at 1000, one heartbeat "hb-a" at 3000) and "b" (joined and synced at
# 2000 as "j2"), built as in ``test_a_version_1_state_is_read_and_written_as_version_2``.
V1_STATE = bytes.fromhex(
    "01b80b0000000000000200000001000000b80b000000000000c832000000000000ed0000006103008e7f5aab"
    "ac0782aa93b843161ac135eda9b953a454f15b7801db11000000da0161e903000000e902000000e901000000"
    "da08636f6e73756d6572da0572616e6765fa26632d64383864343936352d363362662d353236362d38353537"
    "2d3062373739613033653134375b010000005b0d00000072070000004eda0163da00e910270000720a000000"
    "72050000005b010000005b0200000072060000007209000000fa044141453d4e4e464e5b000000005b000000"
    "00465b010000005b0600000072040000007207000000e9c8320000e9060000004e4ee9070000005b00000000"
    "e9e80300004e5b0000000001000000d007000000000000e02e000000000000e5000000620200e1169ad41f4f"
    "5904241ba17abbb6278601db11000000da0162e903000000e902000000e901000000da08636f6e73756d6572"
    "da0572616e6765fa26632d36336565633563632d343832302d356135342d383336382d3339643033623335"
    "376637635b010000005b0d00000072070000004eda0163da00e910270000720a00000072050000005b010000"
    "005b0200000072060000007209000000fa044141453d4e4e464e5b000000005b00000000465b010000005b06"
    "00000072040000007207000000e9e02e0000e9050000004e4ee9060000005b00000000e9d00700004e5b0000"
    "0000"
)


def test_a_version_1_state_is_read_and_written_as_version_2() -> None:
    """A checkpoint written before the version 2 layout goes on: same groups, clocks, timers
    and idempotence windows; the next state is version 2."""
    fresh = CoordinatorShard(CONFIG)
    a = stable_member(fresh, "a", 1_000)
    stable_member(fresh, "b", 2_000, eid="j2")
    feed_all(fresh, [heartbeat("hb-a", "a", 3_000, a, 1)])
    old = CoordinatorShard.decode(V1_STATE, CONFIG)
    assert old.group_ids == ["a", "b"]
    assert old.group("a") == fresh.group("a")
    assert old.group("b") == fresh.group("b")
    assert old.clock_ms == fresh.clock_ms == 3_000
    assert old.next_deadline_ms() == fresh.next_deadline_ms() == 12_000
    later = [heartbeat("hb-a", "a", 4_000, a, 1), heartbeat("hb-a2", "a", 4_000, a, 1)]
    assert feed_all(old, later) == feed_all(fresh, later)
    assert [r["kind"] for r in feed_all(old, later[:1])[GROUP_EVENTS]] == ["duplicate_request"]
    state = old.encode()
    assert state is not None
    assert state[0] == 2
    again, fresh_again = (CoordinatorShard.decode(s, CONFIG) for s in (state, fresh.encode()))
    assert again.group_ids == fresh_again.group_ids == ["a", "b"]
    assert [again.group(g) for g in "ab"] == [fresh_again.group(g) for g in "ab"]
    assert again.clock_ms == fresh_again.clock_ms == 4_000
    with pytest.raises(ValueError, match="coordinator state: trunc"):
        CoordinatorShard.decode(V1_STATE[:-1], CONFIG)
    with pytest.raises(ValueError, match="trailing bytes"):
        CoordinatorShard.decode(V1_STATE + b"\x00", CONFIG)


def test_groups_rows_of_touched_groups_with_deleted_flag() -> None:
    runner = CoordinatorRunner(CONFIG)
    first = runner.run(None, [join("j", "a", 0), join("k", "b", 0)], tick_ms=0)
    assert [(r["group_id"], r["deleted"]) for r in first.outputs[GROUPS]] == [
        ("a", False),
        ("b", False),
    ]
    leave = event(
        {
            "event_id": "l",
            "event_time_ms": 10,
            "type": "leave",
            "group_id": "a",
            "member_id": first.outputs[DECISIONS][0]["member_id"],
        }
    )
    delete = event({"event_id": "d", "event_time_ms": 11, "type": "delete_group", "group_id": "a"})
    second = runner.run(first.state, [leave, delete, describe("x", "zzz", 12)], tick_ms=None)
    assert [(r["group_id"], r["deleted"]) for r in second.outputs[GROUPS]] == [("a", True)]
    assert second.outputs[GROUPS][0]["updated_at_ms"] == 11
    assert set(second.outputs[GROUPS][0]) == set(first.outputs[GROUPS][0])  # one schema
    assert CoordinatorShard.decode(second.state, CONFIG).group_ids == ["b"]
    quiet = runner.run(second.state, [], tick_ms=20)  # nothing due: no row rewritten
    assert quiet.outputs[GROUPS] == []
    expired = runner.run(second.state, [], tick_ms=SESSION_MS + 20)
    assert [(r["group_id"], r["deleted"]) for r in expired.outputs[GROUPS]] == [("b", False)]


def test_no_groups_left_means_no_state() -> None:
    result = CoordinatorRunner(CONFIG).run(None, [describe("d", "g", 0)], tick_ms=5)
    assert result.state is None
    assert result.next_deadline_ms is None
    assert result.outputs[GROUPS] == []


# --- heartbeats on groups carried in the state (the fast path on their encoding, fields.py) ---


def carried_stable_group() -> tuple[CoordinatorRunner, bytes, str]:
    """A runner and the state of one Stable group ``g`` (generation 1) of one member, at 100."""
    shard = CoordinatorShard(CONFIG)
    member = stable_member(shard, "g", 100)
    state = shard.encode()
    assert state is not None
    return CoordinatorRunner(CONFIG), state, member


def test_a_heartbeat_on_a_carried_group_moves_its_session_and_the_shards_deadline() -> None:
    runner, state, member = carried_stable_group()
    result = runner.run(state, [heartbeat("h1", "g", 4_000, member, 1)], tick_ms=None)
    assert [r["error"] for r in result.outputs[DECISIONS]] == ["NONE"]
    assert result.next_deadline_ms == 4_000 + SESSION_MS
    carried = CoordinatorShard.decode(result.state, CONFIG)
    assert carried.next_deadline_ms() == 4_000 + SESSION_MS
    before = CoordinatorShard.decode(state, CONFIG).group("g")
    assert before is not None
    rescheduled = before.rescheduled(TimerKind.HEARTBEAT, member, 4_000 + SESSION_MS)
    assert carried.group("g") == rescheduled
    # the session runs from the heartbeat: nothing expires at the old deadline
    quiet = runner.run(result.state, [], tick_ms=100 + SESSION_MS + 1)
    assert quiet.outputs[GROUP_EVENTS] == []


def test_a_heartbeat_on_a_carried_group_writes_its_row_at_the_groups_clock() -> None:
    runner, state, member = carried_stable_group()
    result = runner.run(state, [heartbeat("h1", "g", 4_000, member, 1)], tick_ms=None)
    group = CoordinatorShard.decode(result.state, CONFIG).group("g")
    assert group is not None
    assert result.outputs[GROUPS] == [{**machine.group_row(group, 4_000), "deleted": False}]


def test_a_heartbeat_repeated_in_a_later_batch_is_not_answered_again() -> None:
    runner, state, member = carried_stable_group()
    beat = heartbeat("h1", "g", 4_000, member, 1)
    first = runner.run(state, [beat], tick_ms=None)
    again = runner.run(first.state, [beat], tick_ms=None)
    assert again.outputs[DECISIONS] == []
    assert [r["kind"] for r in again.outputs[GROUP_EVENTS]] == ["duplicate_request"]


def test_heartbeats_then_a_rejoin_in_one_batch_on_a_carried_group() -> None:
    """Two heartbeats on the encoding, then a join that needs the group itself: the rows of the
    same events fed to one shard that never encoded the group."""
    runner, state, member = carried_stable_group()
    batch = [
        heartbeat("h1", "g", 4_000, member, 1),
        heartbeat("h2", "g", 5_000, member, 1),
        join("j2", "g", 6_000, member=member),
        heartbeat("h3", "g", 7_000, member, 1),
    ]
    reference = CoordinatorShard(CONFIG)
    stable_member(reference, "g", 100)
    expected = feed_all(reference, batch)
    result = runner.run(state, batch, tick_ms=None)
    assert {t: result.outputs[t] for t in (DECISIONS, GROUP_EVENTS)} == expected
    assert [r["error"] for r in expected[DECISIONS]][:2] == ["NONE", "NONE"]
    assert CoordinatorShard.decode(result.state, CONFIG).group("g") == reference.group("g")


def damaged(state: bytes, position: int, value: Any) -> bytes:
    """``state`` with one field of its one group's encoding replaced."""
    shard = CoordinatorShard.decode(state, CONFIG)
    group = shard.group("g")
    assert group is not None
    lists = codec.read_fields(codec.encode_group(group))
    lists[position] = value
    window = shard._entry(0).window
    count = (len(window) // DIGEST_BYTES).to_bytes(2, "little")
    body = count + window + codec.encode_fields(lists)
    record = marshal.dumps((shard.clock_ms, ["g"], shard._clocks, shard._deadlines, [len(body)]))
    return bytes((STATE_VERSION,)) + len(record).to_bytes(4, "little") + record + body


def test_a_damaged_group_is_refused_when_it_is_next_built() -> None:
    """What fields.py chose: a heartbeat reads only its fields, and carries a body damaged
    elsewhere over as it found it; the group is refused the next time it is built."""
    runner, state, member = carried_stable_group()
    bad = damaged(state, codec.G_OFFSETS, 5)
    beat = runner.run(bad, [heartbeat("h1", "g", 4_000, member, 1)], tick_ms=None)
    assert [r["error"] for r in beat.outputs[DECISIONS]] == ["NONE"]
    with pytest.raises(ValueError, match="malformed"):
        runner.run(beat.state, [join("j2", "g", 5_000, member=member)], tick_ms=None)


def test_a_damaged_field_that_the_heartbeat_reads_is_refused_at_once() -> None:
    runner, state, member = carried_stable_group()
    bad = damaged(state, codec.G_TIMERS, [["not", "a", "timer"]])
    with pytest.raises(ValueError, match="malformed"):
        runner.run(bad, [heartbeat("h1", "g", 4_000, member, 1)], tick_ms=None)


# --- batch independence ------------------------------------------------------------------------

GROUP_IDS = ("g1", "g2", "g3")


@st.composite
def streams(
    draw: st.DrawFn, group_ids: Sequence[str] = GROUP_IDS, churn: bool = False
) -> list[TimedEvent]:
    """A realistic stream, built against a reference shard so requests use live member ids.
    ``churn`` adds leaves and group deletions (groups that cease, and come back)."""
    reference = CoordinatorShard(CONFIG)
    events: list[TimedEvent] = []
    time_ms = 0
    for index in range(draw(st.integers(1, 60))):
        time_ms += draw(st.sampled_from([0, 1, 500, 2_000, 4_000, 20_000]))
        group_id = draw(st.sampled_from(group_ids))
        group = reference.group(group_id)
        known = [] if group is None else [m.member_id for m in group.members]
        generation = 0 if group is None else group.generation_id
        choice = draw(st.integers(0, 11 if churn else 9))
        eid = f"e{index}"
        if choice == 10 and known:
            item = leave(eid, group_id, time_ms, draw(st.sampled_from(known)))
        elif choice >= 10:
            item = delete_group(eid, group_id, time_ms)
        elif choice == 9 and events:  # a duplicate of an earlier event, sent again later
            item = draw(st.sampled_from(events))
        elif choice == 8:
            item = draw(st.sampled_from([tick(eid, time_ms), tick(eid, time_ms, group_id)]))
        elif choice == 7:
            item = TimedEvent({"event_id": eid, "type": "sync"}, None, line=f"x:{index}")
        elif not known or choice == 0:
            static = draw(st.sampled_from([None, "i1", "i2"]))
            item = join(eid, group_id, time_ms, group_instance_id=static)
        else:
            member = draw(st.sampled_from(known))
            if choice in (1, 2):
                item = sync(eid, group_id, time_ms, member, generation, known)
            elif choice == 3:
                item = join(eid, group_id, time_ms, member=member)
            else:
                item = heartbeat(eid, group_id, time_ms, member, generation)
        events.append(item)
        reference.feed(item)
    return events


def rows_of_one_run(events: list[TimedEvent]) -> dict[str, list[Row]]:
    result = CoordinatorRunner(CONFIG).run(None, events, tick_ms=None)
    return {table: list(result.outputs[table]) for table in (DECISIONS, GROUP_EVENTS)}


@given(data=st.data(), events=streams())
def test_any_cut_into_batches_gives_the_rows_of_one_run(
    data: st.DataObject, events: list[TimedEvent]
) -> None:
    expected = rows_of_one_run(events)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(events)), max_size=8)))
    runner = CoordinatorRunner(CONFIG)
    state: bytes | None = None
    got: dict[str, list[Row]] = {DECISIONS: [], GROUP_EVENTS: []}
    for start, end in zip([0, *cuts], [*cuts, len(events)], strict=True):
        result = runner.run(state, events[start:end], tick_ms=None)
        state = result.state
        for table in got:
            got[table].extend(result.outputs[table])
    assert got == expected


@given(data=st.data(), events=streams())
def test_tick_ms_at_each_batch_end_equals_a_global_tick_there(
    data: st.DataObject, events: list[TimedEvent]
) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(1, len(events)), min_size=1, max_size=5)))
    runner = CoordinatorRunner(CONFIG)
    reference: list[TimedEvent] = []
    state: bytes | None = None
    got: dict[str, list[Row]] = {DECISIONS: [], GROUP_EVENTS: []}
    for start, end in zip([0, *cuts[:-1]], cuts, strict=True):
        batch = events[start:end]
        tick_ms = max((e.time_ms for e in events[:end] if e.time_ms is not None), default=0)
        reference.extend([*batch, tick(f"batch-end-{end}", tick_ms)])
        result = runner.run(state, batch, tick_ms=tick_ms)
        state = result.state
        for table in got:
            got[table].extend(result.outputs[table])
    assert got == rows_of_one_run(reference)


@given(
    data=st.data(),
    events=streams(group_ids=tuple(f"g{n}" for n in range(8)), churn=True),
)
def test_a_state_carried_across_batches_holds_the_groups_of_one_run(
    data: st.DataObject, events: list[TimedEvent]
) -> None:
    """The state between batches keeps the groups a batch did not touch as they were, and
    those it changed, created, deleted or deleted and created again as they are: decoded after
    the last batch it holds the groups, in the same order, of one shard fed everything."""
    cuts = sorted(data.draw(st.sets(st.integers(1, len(events)), min_size=1, max_size=8)))
    runner = CoordinatorRunner(CONFIG)
    reference = CoordinatorShard(CONFIG)
    state: bytes | None = None
    for start, end in zip([0, *cuts[:-1]], cuts, strict=True):
        batch = events[start:end]
        tick_ms = max((e.time_ms for e in events[:end] if e.time_ms is not None), default=0)
        state = runner.run(state, batch, tick_ms=tick_ms).state
        for item in batch:
            reference.feed(item)
        reference.tick(tick_ms)
    carried = CoordinatorShard.decode(state, CONFIG)
    assert carried.group_ids == reference.group_ids
    assert [carried.group(g) for g in carried.group_ids] == [
        reference.group(g) for g in reference.group_ids
    ]
    assert carried.next_deadline_ms() == reference.next_deadline_ms()
    assert CoordinatorShard.decode(carried.encode(), CONFIG).group_ids == reference.group_ids
