"""A test context for the quota with protocol verbs and a virtual clock.

    h = QuotaHarness(quotas=[{"user": "alice", "controller_mutation_rate": 2}], window_num=10)
    d = h.create_topics("alice", {"t1": 30, "t2": 30})
    h.sleep(5000)

Every verb builds a wire event (docs/reference/events.md §3), feeds it through the real shard
(resolution, parser, machine) at the harness clock and returns the decision row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controlplane.core.config import parse_settings
from controlplane.core.quota.bucket import Bucket
from controlplane.core.quota.runner import DECISIONS, THROTTLES, QuotaShard
from controlplane.core.runtime import TimedEvent

T_MS = 1_700_000_000_000  # an epoch time: a bucket is full on first use


class QuotaHarness:
    def __init__(
        self,
        quotas: list[dict[str, Any]] | None = None,
        *,
        window_num: int = 11,
        window_size_seconds: int = 1,
        validate_only_charged: bool = True,
        permissive_allowed: bool = True,
        start_ms: int = T_MS,
    ) -> None:
        raw = {
            "controller.quota.window.num": window_num,
            "controller.quota.window.size.seconds": window_size_seconds,
            "controller.quota.validate.only.charged": validate_only_charged,
            "controller.quota.permissive.allowed": permissive_allowed,
            "quotas": quotas or [],
        }
        self.config = parse_settings(raw).quota
        self.shard = QuotaShard(self.config)
        self.now_ms = start_ms
        self.decisions: list[dict[str, Any]] = []
        self.throttles: list[dict[str, Any]] = []
        self._seq = 0

    # -- clock ---------------------------------------------------------------------------
    def sleep(self, ms: int) -> None:
        self.now_ms += ms
        self.shard.tick(self.now_ms)

    # -- verbs ---------------------------------------------------------------------------
    def send(self, event: Mapping[str, Any], time_ms: int | None = None) -> dict[str, Any] | None:
        at = self.now_ms if time_ms is None else time_ms
        fed = self.shard.feed(TimedEvent(event, at, line="test:1"))
        rows = fed[DECISIONS]
        self.decisions.extend(rows)
        self.throttles.extend(fed[THROTTLES])
        return rows[0] if rows else None

    def mutate(
        self,
        kind: str,
        user: str,
        topics: Mapping[str, int],
        *,
        client_id: str = "",
        version: int | None = None,
        validate_only: bool | None = None,
        event_id: str | None = None,
    ) -> dict[str, Any]:
        self._seq += 1
        event: dict[str, Any] = {
            "event_id": event_id or f"e{self._seq}",
            "event_time_ms": self.now_ms,
            "type": kind,
            "user": user,
            "client_id": client_id,
            "request_version": version,
            "topics": [{"name": name, "partitions": n} for name, n in topics.items()],
        }
        if validate_only is not None:
            event["validate_only"] = validate_only
        row = self.send(event)
        assert row is not None
        return row

    def create_topics(self, user: str, topics: Mapping[str, int], **kw: Any) -> dict[str, Any]:
        return self.mutate("create_topics", user, topics, **kw)

    def delete_topics(self, user: str, topics: Mapping[str, int], **kw: Any) -> dict[str, Any]:
        return self.mutate("delete_topics", user, topics, **kw)

    def create_partitions(self, user: str, topics: Mapping[str, int], **kw: Any) -> dict[str, Any]:
        return self.mutate("create_partitions", user, topics, **kw)

    def carry_state_from(self, other: QuotaHarness) -> None:
        """``other``'s buckets under this harness's configuration, through the state bytes, as
        the engine carries them across a configuration change (a new runner decodes them)."""
        self.shard = QuotaShard.decode(other.shard.encode(), self.config)

    # -- inspection ----------------------------------------------------------------------
    def bucket(self, quota_key: str) -> Bucket | None:
        return self.shard.buckets.get(quota_key)

    def tokens(self, quota_key: str) -> float:
        bucket = self.bucket(quota_key)
        assert bucket is not None, f"no bucket for {quota_key}"
        return bucket.tokens


def errors(row: Mapping[str, Any]) -> list[str]:
    """The per-topic error names of a decision row, in order."""
    return [topic["error"] for topic in row["topics"]]
