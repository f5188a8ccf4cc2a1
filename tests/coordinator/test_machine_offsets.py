"""Offsets: what a valid commit stores, what a fetch returns, §8 rules the scenarios leave out,
and retention (an Empty group's offsets and the group expire)."""

from __future__ import annotations

from controlplane.core.coordinator.records import EventKind
from controlplane.core.coordinator.state import TimerKind
from controlplane.core.errors import Errors
from support.harness import (
    EMPTY,
    PREPARING,
    CoordinatorHarness,
    dyn1,
)

RETENTION_MS = 60_000  # offsets.retention.minutes = 1


def fetched(h: CoordinatorHarness, topics: dict[str, tuple[int, ...]] | None = None) -> list:
    answer = h.fetch(topics)
    assert answer.error is Errors.NONE
    return [(o.topic, o.partition, o.offset) for o in answer.offsets or ()]


def test_a_valid_commit_is_stored_and_fetched_back() -> None:
    h = CoordinatorHarness()
    a = dyn1(h)
    commit = h.commit(a, 1, offsets=[("orders", 1, 42), ("orders", 0, 7), ("audit", 3, 9)])
    answer = commit.ok()
    assert [(o.topic, o.partition, o.offset, o.error_code) for o in answer.offsets or ()] == [
        ("orders", 1, 42, 0),
        ("orders", 0, 7, 0),
        ("audit", 3, 9, 0),
    ]
    assert fetched(h) == [("audit", 3, 9), ("orders", 0, 7), ("orders", 1, 42)]
    assert fetched(h, {"orders": (0, 5)}) == [("orders", 0, 7), ("orders", 5, -1)]


def test_a_later_commit_overwrites_and_a_refused_commit_stores_nothing() -> None:
    h = CoordinatorHarness()
    a = dyn1(h)
    h.commit(a, 1, offsets=[("t", 0, 1)])
    h.commit(a, 1, offsets=[("t", 0, 5)])
    refused = h.commit(a, 7, offsets=[("t", 0, 99)])
    assert refused.error is Errors.ILLEGAL_GENERATION
    answer = refused.answer
    assert answer is not None
    assert [o.error_code for o in answer.offsets or ()] == [22]
    assert fetched(h) == [("t", 0, 5)]


def test_fetch_from_a_missing_group_answers_minus_one_and_creates_nothing() -> None:
    h = CoordinatorHarness()
    assert fetched(h, {"t": (0,)}) == [("t", 0, -1)]
    assert fetched(h) == []
    assert h.group is None


def test_an_empty_groups_offsets_and_the_group_expire_after_retention() -> None:
    h = CoordinatorHarness(offsets_retention_minutes=1)
    a = dyn1(h)
    h.commit(a, 1, offsets=[("t", 0, 5)])
    assert h.timer(TimerKind.RETENTION) is None  # a group with members keeps its offsets
    h.advance_to(4000)
    h.leave([(a, None)])
    h.assert_state(EMPTY, 2)
    assert h.timer(TimerKind.RETENTION) == 4000 + RETENTION_MS
    h.advance_to(10_000)
    assert h.commit("", -1, offsets=[("t", 1, 6)]).error is Errors.NONE  # counts from here
    h.advance_to(10_000 + RETENTION_MS - 1)
    assert fetched(h) == [("t", 0, 5), ("t", 1, 6)]
    h.advance_to(10_000 + RETENTION_MS)
    assert h.group is None
    expired = h.events_of(EventKind.OFFSETS_EXPIRED)
    deleted = h.events_of(EventKind.GROUP_DELETED)
    assert [(e.at_ms, e.reason, e.event_id) for e in expired] == [
        (10_000 + RETENTION_MS, "retention", None)
    ]
    assert [(e.at_ms, e.reason) for e in deleted] == [(10_000 + RETENTION_MS, "retention")]
    assert fetched(h) == []


def test_leaving_empty_cancels_retention() -> None:
    h = CoordinatorHarness(offsets_retention_minutes=1)
    assert h.commit("", -1).error is Errors.NONE
    assert h.timer(TimerKind.RETENTION) == RETENTION_MS
    h.join()
    h.assert_state(PREPARING, 0)
    assert h.timer(TimerKind.RETENTION) is None
    h.advance_to(RETENTION_MS)
    assert h.group is not None
    # the member never synced: removed at 3500, Empty again, retention counts from there
    h.assert_state(EMPTY, 2)
    assert h.timer(TimerKind.RETENTION) == 3500 + RETENTION_MS
