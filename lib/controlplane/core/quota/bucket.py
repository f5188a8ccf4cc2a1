"""Kafka's ``TokenBucket`` stat (KIP-599) as pure functions on IEEE doubles.

Every operation is written in the order Kafka evaluates it (docs/reference/mutation-quota.md §1), so
results match bit for bit, including at the boundaries where floating point makes the outcome depend
on how many touches happened (§1.7):

* burst  ``B = (S * (W * 1000 / 1000.0)) * Q``;
* refill ``tokens = min(B, tokens + Q * ((now_ms - last_update_ms) / 1000.0))``;
* record ``tokens = min(B, tokens - value)`` after a refill;
* throttle ``jround(-tokens / Q * 1000)`` with Java's ``Math.round`` (ties towards +infinity).

Refill and record are applied inline, per topic, by the admission loops (machine.py,
``admit_strict`` and ``admit_permissive``): a function call per touch cost the request path a
tenth of its throughput (bench/quota_bench.py, session).

A new bucket holds ``tokens = 0`` and ``last_update_ms = 0`` (the Unix epoch), so its first touch
at a real epoch time fills it to the burst: a bucket is full on first use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from controlplane.core.frozen import fast_constructor

# Kafka answers "no quota" with Long.MAX_VALUE as a double (ClientQuotaManager.scala:324-326).
UNLIMITED_RATE_PER_S: Final = float(2**63 - 1)
LONG_MAX: Final = 2**63 - 1
LONG_MIN: Final = -(2**63)
INT32_MAX: Final = 2**31 - 1
# Sensor.hasExpired(): now - lastRecordTime > InactiveSensorExpirationTimeSeconds * 1000.
INACTIVE_EXPIRATION_MS: Final = 3_600_000


@dataclass(frozen=True, slots=True)
class Bucket:
    """One quota key's token bucket and the sensor facts kept beside it.

    ``last_update_ms`` is the bucket's own time (every touch refills and moves it to now);
    ``last_record_ms`` is the sensor's last recorded mutation (idle expiry, §4.5);
    ``handled_ms`` is when the key's last event was handled, whether or not it touched the
    tokens (a request with no topic to check, an uncharged validate-only, a repeated id).
    The key's idempotence window is kept beside the bucket, by the shard (runner.py).
    """

    tokens: float
    last_update_ms: int
    last_record_ms: int
    handled_ms: int = 0

    @property
    def clock_ms(self) -> int:
        """The key's clock (docs/reference/events.md §6): the latest time any event of the key was
        handled at.

        ``handled_ms`` alone is that time; the maximum also covers states written before it was
        kept (0 there), whose last touch or creation was the latest handling time they knew."""
        return max(self.last_update_ms, self.last_record_ms, self.handled_ms)

    @property
    def expires_at_ms(self) -> int:
        """The first millisecond at which the sensor counts as expired (strictly > 1 h idle)."""
        return self.last_record_ms + INACTIVE_EXPIRATION_MS + 1


make_bucket = fast_constructor(Bucket)  # quick constructor (core/frozen.py), per request


def new_bucket(created_at_ms: int) -> Bucket:
    """A fresh sensor: empty bucket at the epoch, so the first touch fills it."""
    return make_bucket(
        tokens=0.0, last_update_ms=0, last_record_ms=created_at_ms, handled_ms=created_at_ms
    )


def handled_at(bucket: Bucket, now_ms: int) -> Bucket:
    """``bucket`` with an event handled at ``now_ms`` that did not touch its tokens."""
    if bucket.handled_ms == now_ms:
        return bucket
    return make_bucket(
        tokens=bucket.tokens,
        last_update_ms=bucket.last_update_ms,
        last_record_ms=bucket.last_record_ms,
        handled_ms=now_ms,
    )


def burst_of(samples: int, window_size_seconds: int, rate_per_s: float) -> float:
    """``samples * convert(timeWindowMs, SECONDS) * quota`` in Java's left-to-right order."""
    time_window_ms = window_size_seconds * 1000
    return (samples * (time_window_ms / 1000.0)) * rate_per_s


def java_round(value: float) -> int:
    """Java's ``Math.round(double)``: nearest long, ties towards +infinity, clamped, NaN -> 0.

    Exact for every double, including 0.49999999999999994 (-> 0), where ``floor(x + 0.5)``
    would give 1. ``x - floor(x)`` is exact for doubles, so the comparison with 0.5 is too.
    """
    if math.isnan(value):
        return 0
    if math.isinf(value):
        return LONG_MAX if value > 0 else LONG_MIN
    whole = math.floor(value)
    result = whole + 1 if value - whole >= 0.5 else whole
    return max(LONG_MIN, min(LONG_MAX, result))


def throttle_time_ms(tokens: float, rate_per_s: float) -> int:
    """``ControllerMutationQuotaManager.throttleTimeMs``: ``Math.round(-value / bound * 1000)``."""
    return java_round(-tokens / rate_per_s * 1000)


def response_throttle_ms(last_throttle_ms: int, violation_at_ms: int, response_at_ms: int) -> int:
    """§2.4: ``max(0, lastThrottle - (now - lastRecorded))`` as an int.

    Kafka's ``.toInt`` would wrap a throttle beyond 2^31-1 ms (24.8 days); we clamp instead.
    """
    remaining = last_throttle_ms - (response_at_ms - violation_at_ms)
    if remaining <= 0:  # max(0, min(INT32_MAX, remaining)) without the two builtin calls
        return 0
    return remaining if remaining < INT32_MAX else INT32_MAX
