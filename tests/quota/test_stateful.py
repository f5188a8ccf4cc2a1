"""A Hypothesis state machine over the shard: requests from a few principals in both modes,
clock jumps (past the idle expiry too) and rate changes, with invariants after every step."""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from controlplane.core.config import parse_settings
from controlplane.core.idempotence import WINDOW_BYTES
from controlplane.core.quota.bucket import INACTIVE_EXPIRATION_MS, burst_of
from controlplane.core.quota.runner import DECISIONS, THROTTLES, QuotaShard
from controlplane.core.runtime import TimedEvent

T = 1_700_000_000_000


def config_for(rate: float) -> Any:
    return parse_settings(
        {
            "controller.quota.window.num": 4,
            "quotas": [
                {"user": "<default>", "controller_mutation_rate": rate},
                {"user": "<default>", "client_id": "<default>", "controller_mutation_rate": None},
            ],
        }
    ).quota


class QuotaMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.rate = 2.0
        self.shard = QuotaShard(config_for(self.rate))
        self.now_ms = T
        self.seq = 0
        self.last_answered: dict[str, int] = {}

    @rule(
        user=st.sampled_from(["ann", "ben"]),
        parts=st.lists(st.integers(0, 25), max_size=4),
        version=st.sampled_from([None, 2, 5, 7]),
        repeat=st.booleans(),
    )
    def request(self, user: str, parts: list[int], version: int | None, repeat: bool) -> None:
        if not repeat:
            self.seq += 1
        event = {
            "event_id": f"e{self.seq}",
            "event_time_ms": self.now_ms,
            "type": "create_topics",
            "user": user,
            "client_id": "c",
            "request_version": version,
            "topics": [{"name": f"t{i}", "partitions": n} for i, n in enumerate(parts)],
        }
        rows = self.shard.feed(TimedEvent(event, self.now_ms))
        decisions = rows[DECISIONS]
        for decision in decisions:
            assert decision["decided_at_ms"] is not None
            assert decision["decided_at_ms"] >= self.last_answered.get(user, 0)  # never back
            self.last_answered[user] = decision["decided_at_ms"]
            assert decision["throttle_time_ms"] >= 0
        for throttle in rows[THROTTLES]:
            assert throttle["throttle_time_ms"] > 0 or throttle["rejected_topics"]
        bucket = self.shard.buckets.get(f"user={user}")
        if decisions and any(n > 0 for n in parts):
            # a topic that passes the checks before the quota touches the bucket at the current
            # rate (a request whose every topic is refused before it, e.g. 0 partitions, does not)
            assert bucket is not None
            assert bucket.tokens <= burst_of(4, 1, self.rate)

    @rule(ms=st.sampled_from([0, 1, 999, 5000, INACTIVE_EXPIRATION_MS, INACTIVE_EXPIRATION_MS + 1]))
    def sleep(self, ms: int) -> None:
        self.now_ms += ms
        self.shard.tick(self.now_ms)

    @rule(rate=st.sampled_from([0.5, 1.0, 2.0, 10.0]))
    def change_rate(self, rate: float) -> None:
        self.rate = rate
        self.shard = QuotaShard.decode(self.shard.encode(), config_for(rate))

    @invariant()
    def tokens_never_exceed_the_burst(self) -> None:
        for bucket in self.shard.buckets.values():
            # A lower rate caps at the next touch; until then the old burst may still hold.
            assert bucket.tokens <= burst_of(4, 1, 10.0)

    @invariant()
    def deadlines_are_ahead_of_the_clock(self) -> None:
        deadline = self.shard.next_deadline_ms()
        if deadline is not None:
            assert deadline > self.now_ms
        assert self.shard.windows.keys() == self.shard.buckets.keys()  # they go together
        for key, bucket in self.shard.buckets.items():
            assert len(self.shard.windows[key]) <= WINDOW_BYTES
            assert bucket.clock_ms <= self.now_ms


QuotaMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestQuotaMachine = QuotaMachine.TestCase
