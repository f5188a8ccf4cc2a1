"""Many buckets behind one key: the quota's runner (core.runtime.Runner) and its shard.

A :class:`QuotaShard` holds the buckets of one Spark key (one ``quota_key``, many under shard
keying, every one in a replay) and feeds wire events to the one-bucket state machine
(``machine``), as the coordinator's ``CoordinatorShard`` feeds its groups: same methods
(``feed``, ``tick``, ``next_deadline_ms``, ``encode``, ``decode``), same clock rules
(docs/reference/events.md §6), same idempotence window. Each bucket keeps its own clock
(``now_ms = max(bucket clock, event time)``) and its own idle expiry timer, so results do not
depend on how quota keys are grouped into Spark keys:

* before an event is handled, its own bucket's expiry timer fires if due (``machine.fire_due``:
  the bucket, its clock and its window are forgotten; a timer emits no row);
* a ``tick`` (after the batch's events) fires every due timer of the Spark key;
* idempotence (``core/idempotence.py``, the coordinator's design too): a request whose
  ``event_id`` is among the bucket's last 64 charged requests is not charged again and gets no
  row; it moves the bucket's clock. The window lives and expires with its bucket;
* ``next_deadline_ms`` is the earliest expiry of the key's buckets; no bucket = no state.

Events that resolve to no bucket (no quota ever configured) are admitted and decided at their
own time. A line that is not a JSON object or an event with a bad field gets an INVALID_REQUEST
row decided at its handling time (the tick when it has none), or at its key's clock when later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from controlplane.core.config import QuotaConfig
from controlplane.core.errors import Errors
from controlplane.core.idempotence import digest, remembered, seen
from controlplane.core.jsonwire import long_or_none
from controlplane.core.quota import codec, machine
from controlplane.core.quota.bucket import Bucket, handled_at
from controlplane.core.quota.records import QuotaDecision
from controlplane.core.quota.resolution import QuotaIndex, index_for
from controlplane.core.quota.wire import Invalid, parse_request
from controlplane.core.runtime import RunResult, TimedEvent

Row = dict[str, Any]
Rows = dict[str, list[Row]]

DECISIONS: Final = "quota_decisions"
THROTTLES: Final = "throttle_events"
OUTPUTS: Final = (DECISIONS, THROTTLES)


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


class QuotaShard:
    """The mutable, in-memory holder of a Spark key's buckets; ``run`` and the replay build on
    it. ``buckets`` and ``windows`` (each bucket's idempotence window) share their keys."""

    def __init__(self, config: QuotaConfig) -> None:
        self.config = config
        self.index: QuotaIndex = index_for(config)  # cached per configuration object
        self.buckets: dict[str, Bucket] = {}
        self.windows: dict[str, bytes] = {}

    # --- events --------------------------------------------------------------------------------

    def feed(self, event: TimedEvent, tick_ms: int | None = None) -> Rows:
        """Handle one wire event; returns its quota_decisions and throttle_events rows.
        ``tick_ms`` decides an invalid event that has no time of its own."""
        rows: Rows = {DECISIONS: [], THROTTLES: []}
        self.feed_into(event, rows, tick_ms)
        return rows

    def feed_into(self, event: TimedEvent, rows: Rows, tick_ms: int | None = None) -> None:
        """``feed``, appending the rows to ``rows`` (a decisions and a throttles list)."""
        if event.error is not None:
            where = f" (line {event.line})" if event.line else ""
            message = f"the event is not a JSON object: {event.error}{where}"
            rows[DECISIONS].append(_invalid(event, message, tick_ms).to_row())
            return
        parsed = parse_request(event.event)
        if isinstance(parsed, Invalid):
            message = parsed.message(event.line)
            clock_ms = self._clock_of(event.event)
            rows[DECISIONS].append(_invalid(event, message, tick_ms, clock_ms).to_row())
            return
        time_ms = parsed.event_time_ms if event.time_ms is None else event.time_ms
        resolution = self.index.resolve(parsed.user, parsed.client_id)
        key = resolution.quota_key
        if key is None:  # nothing tracked: no bucket, no clock, no window
            _emit(machine.handle(None, parsed, time_ms, self.config, resolution), rows)
            return
        bucket = self.buckets.get(key)
        now_ms = time_ms
        if bucket is not None:
            now_ms = max(bucket.clock_ms, time_ms)
            if bucket.expires_at_ms <= now_ms:  # its timer is due: it fires first
                bucket = self._fire_due(key, bucket, now_ms)
                if bucket is None:  # it expired: its clock went with it
                    now_ms = time_ms
        event_digest = digest(parsed.event_id)
        if bucket is not None and seen(self.windows[key], event_digest):
            self.buckets[key] = handled_at(bucket, now_ms)  # answered before: no row
            return
        step = machine.handle(bucket, parsed, now_ms, self.config, resolution)
        _emit(step, rows)
        assert step.bucket is not None  # a request with a key always leaves it a bucket
        self.buckets[key] = step.bucket
        window = self.windows.get(key, b"")
        if machine.charged(parsed, resolution, self.config):
            window = remembered(window, event_digest)
        self.windows[key] = window

    def tick(self, now_ms: int) -> Rows:
        """Fire every timer due at ``now_ms`` (the expiries emit no rows)."""
        rows: Rows = {DECISIONS: [], THROTTLES: []}
        self.tick_into(now_ms, rows)
        return rows

    def tick_into(self, now_ms: int, rows: Rows) -> None:
        """``tick``; ``rows`` is there for the shape of ``feed_into`` (a timer emits none).
        A bucket's clock does not move with a tick: only an event of its own moves it."""
        buckets = self.buckets  # as in feed_into, only a bucket whose timer is due is fired
        due = [key for key, bucket in buckets.items() if bucket.expires_at_ms <= now_ms]
        for key in due:
            self._fire_due(key, buckets[key], now_ms)

    def next_deadline_ms(self) -> int | None:
        deadlines = [machine.next_deadline_ms(bucket) for bucket in self.buckets.values()]
        return min([d for d in deadlines if d is not None], default=None)

    def _fire_due(self, key: str, bucket: Bucket, now_ms: int) -> Bucket | None:
        """The key's timer, if due; returns its bucket afterwards (None: forgotten, with its
        window)."""
        step = machine.fire_due(bucket, now_ms, self.config)
        if step.bucket is None:
            del self.buckets[key]
            del self.windows[key]
        return step.bucket

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

    # --- the envelope --------------------------------------------------------------------------

    def encode(self) -> bytes | None:
        """The shard's state bytes (``codec``); None when no bucket is left (the key can be
        forgotten)."""
        return codec.encode(self.buckets, self.windows) if self.buckets else None

    @classmethod
    def decode(cls, data: bytes | None, config: QuotaConfig) -> QuotaShard:
        """A shard from its state bytes (None: an empty shard). Raises ``StateCodecError`` (a
        ValueError) if they cannot be read."""
        shard = cls(config)
        shard.buckets, shard.windows = codec.decode(data)
        return shard


class QuotaRunner:
    """core.runtime.Runner for the quota: decode, feed the batch, tick, encode."""

    def __init__(self, config: QuotaConfig) -> None:
        self.config = config

    def run(
        self, state: bytes | None, events: Sequence[TimedEvent], tick_ms: int | None
    ) -> RunResult:
        shard = QuotaShard.decode(state, self.config)
        outputs: Rows = {DECISIONS: [], THROTTLES: []}
        for event in events:
            shard.feed_into(event, outputs, tick_ms)
        if tick_ms is not None:
            shard.tick_into(tick_ms, outputs)
        return RunResult(shard.encode(), outputs, shard.next_deadline_ms())


def _emit(step: machine.Step, rows: Rows) -> None:
    if step.decisions:
        rows[DECISIONS] += [decision.to_row() for decision in step.decisions]
    if step.throttles:
        rows[THROTTLES] += [throttle.to_row() for throttle in step.throttles]
