"""The quota's shell contract (``controlplane.core.runtime.Runner``) and its in-memory session.

A Spark key holds every bucket of its events: one ``quota_key``, or many under shard keying.
Each bucket keeps its own clock (``now_ms = max(bucket clock, event time)``) and its own idle
expiry timer, so results do not depend on how quota keys are grouped into Spark keys:

* before an event is handled, its own bucket's expiry timer fires if due (the bucket and its
  clock are forgotten; a timer emits no row);
* after the batch's events, the tick fires every due timer of the Spark key;
* ``next_deadline_ms`` is the earliest expiry of the key's buckets; no bucket = no state.

Events that resolve to no bucket (no quota ever configured) are admitted and decided at their
own time. A line that is not a JSON object or an event with a bad field gets an INVALID_REQUEST
row decided at its handling time (the tick when it has none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from controlplane.core.config import QuotaConfig
from controlplane.core.errors import Errors
from controlplane.core.jsonwire import long_or_none
from controlplane.core.quota import codec
from controlplane.core.quota.bucket import Bucket
from controlplane.core.quota.machine import handle
from controlplane.core.quota.records import QuotaDecision, ThrottleEvent
from controlplane.core.quota.resolution import QuotaIndex, index_for
from controlplane.core.quota.wire import Invalid, parse_request
from controlplane.core.runtime import RunResult, TimedEvent

DECISIONS: Final = "quota_decisions"
THROTTLES: Final = "throttle_events"
OUTPUTS: Final = (DECISIONS, THROTTLES)

Records = tuple[list[QuotaDecision], list[ThrottleEvent]]


def _echo(event: Mapping[str, Any], name: str) -> str | None:
    value = event.get(name) if isinstance(event, Mapping) else None
    return value if isinstance(value, str) else None


def _invalid(
    event: TimedEvent, message: str, tick_ms: int | None, clock_ms: int | None = None
) -> QuotaDecision:
    """The INVALID_REQUEST row, decided at the handling time (else ``event_time_ms``, else the
    tick), or at ``clock_ms``, the clock of the event's key, when that is later."""
    raw = event.event if isinstance(event.event, Mapping) else {}
    event_time = long_or_none(raw.get("event_time_ms"))
    decided_at = event.time_ms
    if decided_at is None:
        decided_at = event_time if event_time is not None else tick_ms
    if clock_ms is not None:
        decided_at = clock_ms if decided_at is None else max(decided_at, clock_ms)
    return QuotaDecision(
        event_id=_echo(raw, "event_id"),
        user=_echo(raw, "user"),
        client_id=_echo(raw, "client_id"),
        quota_entity=None,
        quota_key=None,
        rate_per_s=None,
        type=_echo(raw, "type"),
        error=Errors.INVALID_REQUEST,
        error_message=message,
        throttle_time_ms=0,
        topics=None,
        topic_errors=None,
        event_time_ms=event_time,
        decided_at_ms=decided_at,
    )


class QuotaSession:
    """The buckets of one Spark key (or of a whole replay), fed one event at a time."""

    def __init__(
        self,
        config: QuotaConfig,
        buckets: dict[str, Bucket] | None = None,
        index: QuotaIndex | None = None,
    ) -> None:
        self.config = config
        self.index: QuotaIndex = index_for(config) if index is None else index
        self.buckets: dict[str, Bucket] = {} if buckets is None else buckets

    def feed(self, event: TimedEvent, tick_ms: int | None = None) -> Records:
        if event.error is not None:
            where = f" (line {event.line})" if event.line else ""
            message = f"the event is not a JSON object: {event.error}{where}"
            return [_invalid(event, message, tick_ms)], []
        parsed = parse_request(event.event)
        if isinstance(parsed, Invalid):
            message = parsed.message(event.line)
            return [_invalid(event, message, tick_ms, self._clock_of(event.event))], []
        time_ms = parsed.event_time_ms if event.time_ms is None else event.time_ms
        resolution = self.index.resolve(parsed.user, parsed.client_id)
        key = resolution.quota_key
        if key is None:
            step = handle(None, parsed, resolution, self.config, time_ms)
        else:
            bucket = self.buckets.get(key)
            now_ms = time_ms
            if bucket is not None:
                now_ms = max(bucket.clock_ms, time_ms)
                if now_ms >= bucket.expires_at_ms:  # the expiry timer fires first
                    bucket = None
                    del self.buckets[key]
                    now_ms = time_ms
            step = handle(bucket, parsed, resolution, self.config, now_ms)
            if step.bucket is not None:
                self.buckets[key] = step.bucket
        decisions = [] if step.decision is None else [step.decision]
        throttles = [] if step.throttle is None else [step.throttle]
        return decisions, throttles

    def _clock_of(self, raw: Mapping[str, Any]) -> int | None:
        """The clock of a malformed event's key, when its user and client_id name one that has
        a bucket (the engine keys the event there, docs/reference/events.md §6)."""
        if not isinstance(raw, Mapping):
            return None
        user, client_id = raw.get("user"), raw.get("client_id")
        if not isinstance(user, str) or not isinstance(client_id, str):
            return None
        key = self.index.resolve(user, client_id).quota_key
        bucket = None if key is None else self.buckets.get(key)
        return None if bucket is None else bucket.clock_ms

    def tick(self, tick_ms: int) -> None:
        """Fire every expiry timer due at ``tick_ms`` (they emit no rows)."""
        due = [key for key, bucket in self.buckets.items() if bucket.expires_at_ms <= tick_ms]
        for key in due:
            del self.buckets[key]

    def next_deadline_ms(self) -> int | None:
        if not self.buckets:
            return None
        return min(bucket.expires_at_ms for bucket in self.buckets.values())


class QuotaRunner:
    """``Runner`` for the quota: decode the key's buckets, feed the events, tick, encode."""

    def __init__(self, config: QuotaConfig) -> None:
        self.config = config
        self.index = index_for(config)  # once per configuration object, shared by every key

    def session(self, state: bytes | None = None) -> QuotaSession:
        return QuotaSession(self.config, codec.decode(state), self.index)

    def run(
        self,
        state: bytes | None,
        events: Sequence[TimedEvent],
        tick_ms: int | None,
    ) -> RunResult:
        session = self.session(state)
        decisions: list[dict[str, Any]] = []
        throttles: list[dict[str, Any]] = []
        for event in events:
            fed_decisions, fed_throttles = session.feed(event, tick_ms)
            decisions.extend(decision.to_row() for decision in fed_decisions)
            throttles.extend(throttle.to_row() for throttle in fed_throttles)
        if tick_ms is not None:
            session.tick(tick_ms)
        encoded = codec.encode(session.buckets) if session.buckets else None
        return RunResult(
            state=encoded,
            outputs={DECISIONS: decisions, THROTTLES: throttles},
            next_deadline_ms=session.next_deadline_ms(),
        )
