"""Derived behaviour at the edges (docs/reference/mutation-quota.md §1.6-§1.7, §4.3-§4.5): rounding,
float path dependence, rate changes, quota removal, idle expiry, the clock. Each row says why."""

from __future__ import annotations

import pytest

from controlplane.core.quota.bucket import (
    INACTIVE_EXPIRATION_MS,
    java_round,
    throttle_time_ms,
)
from controlplane.core.quota.machine import admit_strict
from support.quota_harness import T_MS, QuotaHarness, errors

T = T_MS


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (2.5, 3),  # ties go up; Python's round(2.5) would give 2
        (-2.5, -2),  # ties towards +infinity, also below zero
        (0.49999999999999994, 0),  # floor(x + 0.5) would give 1; Java gives 0
        (0.5, 1),  # the smallest value that rounds to 1
        (1e300, 2**63 - 1),  # clamped to Long.MAX_VALUE like Java
        (float("nan"), 0),  # Java: NaN -> 0
    ],
)
def test_java_round(value: float, expected: int) -> None:
    assert java_round(value) == expected


@pytest.mark.parametrize(
    ("tokens", "rate", "expected"),
    [
        (-0.25, 100.0, 3),  # 0.25 / 100 * 1000 = 2.5 -> 3
        (-0.0004, 1.0, 0),  # rejected, yet the throttle rounds to 0
        (-40.0, 2.0, 20000),  # K-38's permissive throttle
    ],
)
def test_throttle_formula(tokens: float, rate: float, expected: int) -> None:
    assert throttle_time_ms(tokens, rate) == expected


def test_x19_extra_touch_changes_the_outcome_at_the_boundary() -> None:
    """X-19: after -40 at T (Q=2), a check at T+19 999 leaves -2.44e-15 at T+20 000 (rejected,
    throttle 0); without that touch T+20 000 is exactly 0.0 (admitted)."""
    quotas = [{"user": "u", "controller_mutation_rate": 2.0}]
    touched = QuotaHarness(quotas, window_num=10)
    touched.create_topics("u", {"a": 30, "b": 30}, version=5)  # permissive: 20 -> -40
    touched.now_ms = T + 19_999
    first = touched.create_topics("u", {"c": 1})
    assert errors(first) == ["THROTTLING_QUOTA_EXCEEDED"]
    assert first["throttle_time_ms"] == 1
    touched.now_ms = T + 20_000
    second = touched.create_topics("u", {"c": 1})
    assert errors(second) == ["THROTTLING_QUOTA_EXCEEDED"]
    assert second["throttle_time_ms"] == 0
    assert touched.tokens("user=u") == -2.444225377651321e-15

    direct = QuotaHarness(quotas, window_num=10)
    direct.create_topics("u", {"a": 30, "b": 30}, version=5)
    direct.now_ms = T + 20_000
    assert errors(direct.create_topics("u", {"c": 1})) == ["NONE"]


def test_refill_is_kafkas_expression() -> None:
    """-40 + 2.0 * (19999 / 1000.0), in that order: not the -0.002 of exact arithmetic."""
    admission = admit_strict(-40.0, 0, [1], 2.0, 20.0, 19_999)
    assert admission.admitted == (False,)  # still negative: rejected, the refill kept
    assert admission.tokens == -0.0020000000000024443


def test_x04b_new_rate_is_credited_retroactively() -> None:
    """Rate 1 -> 10 after the bucket emptied: the 10 s since the last touch refill at 10/s."""
    slow = QuotaHarness([{"user": "u", "controller_mutation_rate": 1.0}])
    slow.create_topics("u", {"a": 11})  # 11 -> 0
    fast = QuotaHarness([{"user": "u", "controller_mutation_rate": 10.0}])
    fast.carry_state_from(slow)
    fast.now_ms = T + 10_000
    fast.create_topics("u", {"b": 1}, event_id="later")
    assert fast.tokens("user=u") == 99.0  # 0 + 10 * 10 = 100, minus 1


def test_x05_lower_rate_shrinks_a_full_bucket() -> None:
    fast = QuotaHarness([{"user": "u", "controller_mutation_rate": 10.0}])
    fast.delete_topics("u", {"a": 0})  # a touch that records 0: full, 110
    assert fast.tokens("user=u") == 110.0
    slow = QuotaHarness([{"user": "u", "controller_mutation_rate": 1.0}])
    slow.carry_state_from(fast)
    slow.create_topics("u", {"b": 1}, event_id="later")
    assert slow.tokens("user=u") == 10.0  # capped at the new burst 11, minus 1


def test_x07_a_clock_near_zero_starts_nearly_empty() -> None:
    h = QuotaHarness([{"user": "u", "controller_mutation_rate": 10.0}], start_ms=1000)
    h.delete_topics("u", {"a": 0})  # a touch that records 0
    assert h.tokens("user=u") == 10.0  # 1 s since the epoch at 10/s, not the burst 110


def test_x12_removed_quota_rejects_only_in_the_same_millisecond() -> None:
    limited = QuotaHarness([{"user": "u", "controller_mutation_rate": 1.0}])
    limited.create_topics("u", {"a": 20})  # 11 -> -9
    removed = QuotaHarness([{"user": "u", "controller_mutation_rate": None}])
    removed.carry_state_from(limited)
    same_ms = removed.create_topics("u", {"b": 1}, event_id="same")
    assert errors(same_ms) == ["THROTTLING_QUOTA_EXCEEDED"]
    assert same_ms["throttle_time_ms"] == 0  # 9 tokens at 9.2e18/s
    removed.now_ms += 1
    assert errors(removed.create_topics("u", {"b": 1}, event_id="next")) == ["NONE"]


def test_x14_idle_bucket_is_forgotten_and_debt_forgiven() -> None:
    quotas = [{"user": "u", "controller_mutation_rate": 0.001}]
    h = QuotaHarness(quotas)
    h.create_topics("u", {"a": 100})  # 0.011 -> -99.989
    h.now_ms = T + INACTIVE_EXPIRATION_MS  # not yet expired (strictly more than an hour)
    assert errors(h.create_topics("u", {"b": 1})) == ["THROTTLING_QUOTA_EXCEEDED"]
    h.now_ms = T + INACTIVE_EXPIRATION_MS + 1  # rejections do not keep the sensor alive
    assert errors(h.create_topics("u", {"c": 1})) == ["NONE"]  # fresh full bucket
    assert h.tokens("user=u") == pytest.approx(0.011 - 1)


def test_expiry_is_a_timer_fired_by_the_tick() -> None:
    h = QuotaHarness([{"user": "u", "controller_mutation_rate": 1.0}])
    h.create_topics("u", {"a": 1})
    assert h.shard.next_deadline_ms() == T + INACTIVE_EXPIRATION_MS + 1
    h.sleep(INACTIVE_EXPIRATION_MS)
    assert h.bucket("user=u") is not None
    h.sleep(1)
    assert h.bucket("user=u") is None
    assert h.shard.next_deadline_ms() is None


def test_x20_the_clock_never_goes_back() -> None:
    """Kafka would refill backwards; each key's clock here is max(clock, event time)."""
    h = QuotaHarness([{"user": "u", "controller_mutation_rate": 1.0}])
    h.create_topics("u", {"a": 5})  # 11 -> 6 at T
    h.now_ms = T - 3000
    row = h.create_topics("u", {"b": 1})
    assert row["decided_at_ms"] == T
    assert row["event_time_ms"] == T - 3000
    assert h.tokens("user=u") == 5.0


def test_strict_all_admitted_answers_zero_even_when_negative() -> None:
    h = QuotaHarness([{"user": "u", "controller_mutation_rate": 1.0}])
    row = h.create_topics("u", {"huge": 10_000})  # admitted: tokens >= 0 before it
    assert errors(row) == ["NONE"]
    assert row["throttle_time_ms"] == 0
    assert h.throttles == []  # neither throttled nor rejected: no throttle event
    nxt = h.create_topics("u", {"small": 1})  # the next request pays
    assert nxt["throttle_time_ms"] == java_round(9989 / 1.0 * 1000)


def test_rejection_then_refill_within_one_request_keeps_the_last_throttle() -> None:
    """Rejected topics cost nothing: a 0-partition topic after a rejection is rejected too
    (DeleteTopics: CreateTopics refuses 0 partitions before the quota)."""
    h = QuotaHarness([{"user": "u", "controller_mutation_rate": 1.0}])
    row = h.delete_topics("u", {"a": 12, "b": 1, "c": 0})
    assert errors(row) == ["NONE", "THROTTLING_QUOTA_EXCEEDED", "THROTTLING_QUOTA_EXCEEDED"]
    assert row["throttle_time_ms"] == 1000
    event = h.throttles[-1]
    assert event["rejected_topics"] == ["b", "c"]
    assert event["admitted_partitions"] == 12
    assert event["tokens_after"] == -1.0
    assert event["burst"] == 11.0
    assert event["mode"] == "strict"


# --- docs/reference/events.md §6: the key's clock moves with every event of the key, touch or no to
def _touch_later_then_go_back(first: str) -> QuotaHarness:
    """A touch at T (11 -> 10), then at T+5000 an event that does not touch the tokens, then one
    whose event time is T+1000: it is handled at the key's clock, T+5000."""
    h = QuotaHarness([{"user": "u", "controller_mutation_rate": 1.0}], validate_only_charged=False)
    h.create_topics("u", {"a": 1}, event_id="touch")
    h.now_ms = T + 5000
    if first == "no topics":
        h.create_topics("u", {})
    elif first == "uncharged validate_only":
        h.create_topics("u", {"b": 3}, validate_only=True)
    elif first == "refused topics only":
        h.create_partitions("u", {"b": 0})
    else:
        assert h.send({**_event("touch", T + 5000)}) is None  # a repeat: no row
    h.now_ms = T + 1000
    row = h.create_topics("u", {"c": 1}, event_id="late")
    assert row["event_time_ms"] == T + 1000
    assert row["decided_at_ms"] == T + 5000
    return h


def _event(event_id: str, time_ms: int) -> dict[str, object]:
    return {
        "event_id": event_id,
        "event_time_ms": time_ms,
        "type": "create_topics",
        "user": "u",
        "client_id": "",
        "topics": [{"name": "a", "partitions": 1}],
    }


@pytest.mark.parametrize(
    "first", ["no topics", "uncharged validate_only", "refused topics only", "repeated event id"]
)
def test_an_event_that_does_not_touch_the_tokens_still_moves_the_clock(first: str) -> None:
    h = _touch_later_then_go_back(first)
    assert h.tokens("user=u") == 10.0  # 10 at T, refilled 5 s to 11 (the burst), minus 1
    bucket = h.bucket("user=u")
    assert bucket is not None
    assert bucket.last_update_ms == T + 5000


def test_an_uncharged_validate_only_creates_the_sensor() -> None:
    """ZK mode builds the quota object (and its sensor) before it looks at validateOnly: the
    key exists from then on, with its clock, and idles out an hour later."""
    h = QuotaHarness([{"user": "u", "controller_mutation_rate": 1.0}], validate_only_charged=False)
    h.create_topics("u", {"a": 3}, validate_only=True)
    bucket = h.bucket("user=u")
    assert bucket is not None
    assert (bucket.tokens, bucket.last_update_ms, bucket.last_record_ms) == (0.0, 0, T)
    assert h.shard.next_deadline_ms() == T + INACTIVE_EXPIRATION_MS + 1
    h.now_ms = T - 1000
    assert h.create_topics("u", {"b": 1})["decided_at_ms"] == T


def test_an_invalid_event_of_a_known_key_is_decided_at_the_key_clock() -> None:
    """A bad field elsewhere than user/client_id leaves the event's key known (the engine keys
    it there): its INVALID_REQUEST row is decided at max(key clock, event time), as the
    coordinator does for a known group; it charges nothing and does not move the clock."""
    h = QuotaHarness([{"user": "u", "controller_mutation_rate": 1.0}])
    h.now_ms = T + 5000
    h.create_topics("u", {"a": 1})
    bad = {**_event("bad", T + 1000), "user": "u", "topics": [{"name": "a", "partitions": "1"}]}
    row = h.send(bad, time_ms=T + 1000)
    assert row is not None
    assert row["error"] == "INVALID_REQUEST"
    assert row["decided_at_ms"] == T + 5000
    bucket = h.bucket("user=u")
    assert bucket is not None
    assert bucket.clock_ms == T + 5000
    unknown = {**bad, "event_id": "bad2", "user": "nobody-yet"}  # no bucket: its own time
    assert h.send(unknown, time_ms=T + 1000)["decided_at_ms"] == T + 1000  # type: ignore[index]
