"""AdminClient: per-topic results, KIP-599 retries after throttle_time_ms, deadlines."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from client.scripted import ScriptedTransport
from controlplane.client.admin import TIMED_OUT, AdminClient
from controlplane.client.clock import VirtualClock
from controlplane.client.config import AdminConfig
from controlplane.client.transport import Stream

START_MS = 1_000_000
THROTTLED = {"error": "THROTTLING_QUOTA_EXCEEDED", "error_code": 89}
OK = {"error": "NONE", "error_code": 0}


def _answer(request: Mapping[str, Any], throttle_ms: int, throttled: set[str]) -> dict[str, Any]:
    topics = [
        {
            "name": t["name"],
            "partitions": t["partitions"],
            **(THROTTLED if t["name"] in throttled else OK),
        }
        for t in request["topics"]
    ]
    return {"error": "NONE", "error_code": 0, "throttle_time_ms": throttle_ms, "topics": topics}


def _admin(clock: VirtualClock, transport: ScriptedTransport, **kw: int) -> AdminClient:
    return AdminClient(AdminConfig(user="alice", client_id="tool", **kw), transport, clock)


def test_throttled_topics_are_retried_after_throttle_time_others_complete() -> None:
    clock = VirtualClock(START_MS)

    def responder(stream: Stream, request: Mapping[str, Any]) -> dict[str, Any]:
        assert stream is Stream.QUOTA
        first = len(transport.sent) == 1
        return _answer(request, 2_500 if first else 0, {"b"} if first else set())

    transport = ScriptedTransport(clock, responder)
    results = _admin(clock, transport).create_topics({"a": 3, "b": 4})
    assert results["a"].ok
    assert results["a"].attempts == 1
    assert results["b"].ok
    assert results["b"].attempts == 2
    first, second = transport.requests("create_topics")
    assert second["event_time_ms"] - first["event_time_ms"] == 2_500
    assert [t["name"] for t in second["topics"]] == ["b"]
    assert first["user"] == "alice"
    assert first["client_id"] == "tool"


def test_retry_disabled_returns_the_throttle_at_once() -> None:
    clock = VirtualClock(START_MS)
    transport = ScriptedTransport(clock, lambda s, r: _answer(r, 2_500, {"b"}))
    results = _admin(clock, transport).create_topics(
        {"a": 1, "b": 1}, retry_on_quota_violation=False
    )
    assert results["a"].ok
    assert results["b"].error == "THROTTLING_QUOTA_EXCEEDED"
    assert results["b"].throttle_time_ms == 2_500
    assert len(transport.sent) == 1
    assert clock.now_ms() == START_MS


def test_retries_stop_at_the_deadline_with_the_throttle_left() -> None:
    clock = VirtualClock(START_MS)
    transport = ScriptedTransport(clock, lambda s, r: _answer(r, 4_000, {"t"}))
    results = _admin(clock, transport).delete_topics({"t": 2}, timeout_ms=10_000)
    times = [r["event_time_ms"] - START_MS for r in transport.requests("delete_topics")]
    assert times == [0, 4_000, 8_000]
    assert results["t"].error == "THROTTLING_QUOTA_EXCEEDED"
    assert results["t"].throttle_time_ms == 2_000  # 4 000 ms asked at 8 000, deadline at 10 000
    assert results["t"].attempts == 3
    assert clock.now_ms() == START_MS + 10_000


def test_default_api_timeout_bounds_the_retries() -> None:
    clock = VirtualClock(START_MS)
    transport = ScriptedTransport(clock, lambda s, r: _answer(r, 25_000, {"t"}))
    results = _admin(clock, transport, default_api_timeout_ms=60_000).create_partitions({"t": 1})
    assert len(transport.sent) == 3  # at 0, 25 000, 50 000
    assert results["t"].error == "THROTTLING_QUOTA_EXCEEDED"
    assert clock.now_ms() == START_MS + 60_000


def test_timeout_zero_still_sends_once_and_takes_a_ready_answer() -> None:
    clock = VirtualClock(START_MS)
    transport = ScriptedTransport(clock, lambda s, r: _answer(r, 0, set()))
    assert _admin(clock, transport).create_topics({"a": 1}, timeout_ms=0)["a"].ok
    silent = ScriptedTransport(clock, lambda s, r: None)
    result = _admin(clock, silent).create_topics({"a": 1}, timeout_ms=0)["a"]
    assert result.error == TIMED_OUT
    assert result.attempts == 1
    assert len(silent.sent) == 1


def test_unanswered_request_is_resent_while_time_remains() -> None:
    clock = VirtualClock(START_MS)
    transport = ScriptedTransport(clock, lambda s, r: None)
    admin = _admin(clock, transport, request_timeout_ms=1_000, retry_backoff_ms=100)
    result = admin.create_topics({"a": 1}, timeout_ms=2_500)["a"]
    times = [r["event_time_ms"] - START_MS for r in transport.requests()]
    assert times == [0, 1_100, 2_200]
    assert result.error == TIMED_OUT
    assert result.attempts == 3
    assert len(transport.routes) == 0  # no route kept for a late answer


def test_invalid_request_fails_every_topic() -> None:
    clock = VirtualClock(START_MS)
    row = {"error": "INVALID_REQUEST", "error_code": 42, "error_message": "topics[0].partitions"}
    transport = ScriptedTransport(clock, lambda s, r: row)
    results = _admin(clock, transport).create_topics({"a": 1, "b": 2})
    assert {r.error for r in results.values()} == {"INVALID_REQUEST"}
    assert results["a"].message == "topics[0].partitions"


def test_bad_arguments_are_refused_before_sending() -> None:
    clock = VirtualClock(START_MS)
    transport = ScriptedTransport(clock, lambda s, r: None)
    admin = _admin(clock, transport)
    with pytest.raises(ValueError, match="partitions"):
        admin.create_topics({"a": -1})
    with pytest.raises(ValueError):
        admin.create_topics({})
    assert transport.sent == []


def test_close_fails_later_calls_cleanly() -> None:
    clock = VirtualClock(START_MS)
    transport = ScriptedTransport(clock, lambda s, r: None)
    admin = _admin(clock, transport)
    admin.close()
    assert admin.create_topics({"a": 1})["a"].error == "CLIENT_CLOSED"


def test_a_throttle_of_zero_ms_is_retried_after_the_retry_backoff() -> None:
    # The quota rounds a tiny deficit to throttle_time_ms 0 (Math.round); resending at once
    # would spin on an unrefilled bucket, so the retry waits retry.backoff.ms.
    clock = VirtualClock(START_MS)

    def responder(stream: Stream, request: Mapping[str, Any]) -> dict[str, Any]:
        throttled = {"t"} if len(transport.sent) < 3 else set()
        return _answer(request, 0, throttled)

    transport = ScriptedTransport(clock, responder)
    result = _admin(clock, transport, retry_backoff_ms=100).create_topics({"t": 1})["t"]
    assert result.ok
    times = [r["event_time_ms"] - START_MS for r in transport.requests()]
    assert times == [0, 100, 200]
