"""AdminClient against the real quota core (InMemoryTransport): bursts get throttled, retried
after the throttle time, and all complete within default.api.timeout.ms."""

from __future__ import annotations

import itertools

from controlplane.client.admin import AdminClient
from controlplane.client.clock import VirtualClock
from controlplane.client.config import AdminConfig
from controlplane.client.transport_memory import InMemoryTransport
from controlplane.core.config import QuotaConfig, QuotaEntry, Settings

START_MS = 1_700_000_000_000


def _setup(rate: float) -> tuple[VirtualClock, InMemoryTransport, AdminClient]:
    clock = VirtualClock(START_MS)
    settings = Settings(quota=QuotaConfig(quotas=(QuotaEntry("alice", None, rate),)))
    transport = InMemoryTransport(clock, settings)
    admin = AdminClient(AdminConfig(user="alice", client_id="tool"), transport, clock)
    return clock, transport, admin


def test_burst_is_throttled_and_retried_until_every_topic_is_created() -> None:
    clock, transport, admin = _setup(rate=5.0)  # burst = 11 windows x 1 s x 5/s = 55
    topics = {f"t{i}": 10 for i in range(10)}
    results = admin.create_topics(topics)
    assert all(r.ok for r in results.values())
    answers = transport.rows("quota_decisions")
    assert len(answers) > 1
    assert transport.rows("throttle_events")
    for previous, retry in itertools.pairwise(answers):
        # each retry waited the throttle time of the answer before it
        assert retry["decided_at_ms"] - previous["decided_at_ms"] >= previous["throttle_time_ms"]
        assert previous["throttle_time_ms"] > 0
    assert max(r.attempts for r in results.values()) == len(answers)
    assert clock.now_ms() - START_MS < 60_000
    transport.close()


def test_without_retry_the_throttled_topics_fail_with_the_throttle_time() -> None:
    _, transport, admin = _setup(rate=5.0)
    results = admin.create_topics({f"t{i}": 10 for i in range(10)}, retry_on_quota_violation=False)
    failed = [r for r in results.values() if not r.ok]
    assert failed
    assert {r.error for r in failed} == {"THROTTLING_QUOTA_EXCEEDED"}
    assert all(r.throttle_time_ms > 0 for r in failed)
    assert len(transport.rows("quota_decisions")) == 1
    transport.close()


def test_a_throttle_rounded_to_zero_does_not_spin() -> None:
    # rate 3/s, burst 33: 34 partitions leave the bucket at -1; after the 333 ms throttle it is
    # at -0.001, answered with throttle_time_ms round(0.33) = 0. Resending at once (no time for
    # a refill) spun forever on a virtual clock; the retry waits retry.backoff.ms instead.
    clock, transport, admin = _setup(rate=3.0)
    assert admin.create_topics({"a": 34})["a"].ok
    result = admin.create_topics({"b": 1}, timeout_ms=5_000)["b"]
    assert result.ok
    throttles = [r["throttle_time_ms"] for r in transport.rows("quota_decisions")]
    assert throttles == [0, 333, 0, 0]
    assert clock.now_ms() - START_MS == 333 + admin.config.retry_backoff_ms
    transport.close()
