"""What the quota emits (docs/reference/events.md §4): one ``QuotaDecision`` per answered request
and one ``ThrottleEvent`` per request that was throttled or had a topic rejected. ``to_row`` gives
the wire's JSON object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from controlplane.core.errors import Errors
from controlplane.core.frozen import fast_constructor
from controlplane.core.quota.requests import Mode, TopicMutation


@dataclass(frozen=True, slots=True)
class QuotaDecision:
    """One answered request. ``quota_entity``/``rate_per_s`` are None when unlimited;
    ``quota_key`` is None when nothing is tracked (no quota was ever configured)."""

    event_id: str | None
    user: str | None
    client_id: str | None
    quota_entity: str | None
    quota_key: str | None
    rate_per_s: float | None
    type: str | None
    error: Errors
    error_message: str | None
    throttle_time_ms: int
    topics: tuple[TopicMutation, ...] | None  # None for a malformed request
    topic_errors: tuple[Errors, ...] | None  # one per topic, in order
    event_time_ms: int | None
    decided_at_ms: int | None

    def to_row(self) -> dict[str, Any]:
        topics = None
        if self.topics is not None and self.topic_errors is not None:
            topics = [
                {
                    "name": topic.name,
                    "partitions": topic.partitions,
                    "error_code": error.value,
                    "error": error.name,
                }
                for topic, error in zip(self.topics, self.topic_errors, strict=True)
            ]
        return {
            "event_id": self.event_id,
            "user": self.user,
            "client_id": self.client_id,
            "quota_entity": self.quota_entity,
            "quota_key": self.quota_key,
            "rate_per_s": self.rate_per_s,
            "type": self.type,
            "error_code": self.error.code,
            "error": self.error.name,
            "error_message": self.error_message,
            "throttle_time_ms": self.throttle_time_ms,
            "topics": topics,
            "event_time_ms": self.event_time_ms,
            "decided_at_ms": self.decided_at_ms,
        }


make_decision = fast_constructor(QuotaDecision)  # quick constructor (core/frozen.py)


@dataclass(frozen=True, slots=True)
class ThrottleEvent:
    """A request that was throttled (``throttle_time_ms > 0``) or had a topic rejected."""

    event_id: str
    user: str
    client_id: str
    quota_entity: str | None
    quota_key: str
    mode: Mode
    rate_per_s: float | None
    burst: float | None
    tokens_after: float
    throttle_time_ms: int
    rejected_topics: tuple[str, ...]
    admitted_partitions: int
    at_ms: int

    def to_row(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "user": self.user,
            "client_id": self.client_id,
            "quota_entity": self.quota_entity,
            "quota_key": self.quota_key,
            "mode": self.mode.value,
            "rate_per_s": self.rate_per_s,
            "burst": self.burst,
            "tokens_after": self.tokens_after,
            "throttle_time_ms": self.throttle_time_ms,
            "rejected_topics": list(self.rejected_topics),
            "admitted_partitions": self.admitted_partitions,
            "at_ms": self.at_ms,
        }


make_throttle_event = fast_constructor(ThrottleEvent)  # quick constructor (core/frozen.py)
