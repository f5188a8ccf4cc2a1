"""The quota of one key as a pure function: ``handle`` one request, ``fire_due`` the expiry timer
(docs/reference/mutation-quota.md §2-§4).

The same shape as the coordinator's machine (``core/coordinator/machine.py``): ``handle(bucket,
request, now_ms, config, resolution)`` and ``fire_due(bucket, now_ms, config)`` return a
``Step``: the key's bucket afterwards (None: the key has none), the rows (decisions, throttle
events) and, from the bucket, the key's next deadline. The caller (the shard, runner.py) fires
the key's due timer with ``fire_due`` before it calls ``handle``. Neither reads a clock or
mutates its input. A request's bucket and rate come from the configuration, not the request:
``resolution`` is that lookup, made once per request by the shard.

* Strict (§2.2): topic by topic, refill; tokens < 0 rejects the topic with
  THROTTLING_QUOTA_EXCEEDED (nothing deducted, throttle from the tokens before it); otherwise the
  whole topic is recorded, whatever its size.
* Permissive (§2.3): every topic is recorded, then a negative balance sets the throttle.
* The response throttle is the last violation's, less the time since (§2.4; zero here, as the
  answer is built in the same millisecond). A strict request whose topics were all admitted
  answers 0 even when it left the bucket negative.
* Duplicate topic names are answered INVALID_REQUEST per topic, and a CreateTopics or
  CreatePartitions topic of 0 partitions INVALID_PARTITIONS (numPartitions 0; count == current);
  neither is charged (Kafka checks both before the quota, §3).
* Validate-only requests are charged unless ``controller.quota.validate.only.charged`` is false;
  then they touch nothing.
* The idle expiry (§4.5) is the key's one timer, due at ``Bucket.expires_at_ms``: ``fire_due``
  forgets the bucket (a timer emits no row).

Repeated event ids are the shard's concern (``core/idempotence.py``): the shard remembers the
requests ``charged`` says were charged, and answers a repeat without calling ``handle``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from controlplane.core.config import QuotaConfig
from controlplane.core.errors import Errors
from controlplane.core.frozen import fast_constructor
from controlplane.core.quota.bucket import (
    UNLIMITED_RATE_PER_S,
    Bucket,
    burst_of,
    handled_at,
    make_bucket,
    new_bucket,
    response_throttle_ms,
    throttle_time_ms,
)
from controlplane.core.quota.records import (
    QuotaDecision,
    ThrottleEvent,
    make_decision,
    make_throttle_event,
)
from controlplane.core.quota.requests import (
    Mode,
    MutationRequest,
    MutationType,
    TopicMutation,
    mode_of,
)
from controlplane.core.quota.resolution import Resolution

NO_NAMES: Final[frozenset[str]] = frozenset()


@dataclass(frozen=True, slots=True)
class Admission:
    """What one request did to a bucket's tokens."""

    tokens: float  # after the request
    admitted: tuple[bool, ...]  # per topic, in processing order
    recorded: bool  # whether anything was recorded (keeps the sensor alive, §4.5)
    throttle_time_ms: int  # the response's throttle_time_ms


make_admission = fast_constructor(Admission)  # per request (core/frozen.py)


def admit_strict(
    tokens: float,
    last_update_ms: int,
    partitions: Sequence[int],
    rate_per_s: float,
    burst: float,
    now_ms: int,
) -> Admission:
    """``StrictControllerMutationQuota.record`` once per topic: checkQuotas, then record.

    ``min(burst, x)`` is written inline as ``x if x < burst else burst`` (the same value). Each
    violation sets the throttle and the last one's is kept, so it is computed once, at the end,
    from the tokens at the last violation."""
    admitted: list[bool] = []
    recorded = False
    violation_tokens: float | None = None  # the tokens at the last violation
    last = last_update_ms
    for count in partitions:
        # Sensor.checkQuotas -> TokenBucket.measure: refill, then tokens < 0 is a violation.
        tokens = tokens + rate_per_s * ((now_ms - last) / 1000.0)
        tokens = tokens if tokens < burst else burst
        last = now_ms
        if tokens < 0:
            admitted.append(False)
            violation_tokens = tokens
            continue
        # Sensor.record(checkQuotas=false) -> TokenBucket.record: refill (no time passed), deduct.
        tokens = tokens + rate_per_s * 0.0
        tokens = tokens if tokens < burst else burst
        tokens = tokens - count
        tokens = tokens if tokens < burst else burst
        admitted.append(True)
        recorded = True
    throttle = _response_throttle(violation_tokens, rate_per_s, now_ms)
    return make_admission(
        tokens=tokens, admitted=tuple(admitted), recorded=recorded, throttle_time_ms=throttle
    )


def admit_permissive(
    tokens: float,
    last_update_ms: int,
    partitions: Sequence[int],
    rate_per_s: float,
    burst: float,
    now_ms: int,
) -> Admission:
    """``PermissiveControllerMutationQuota.record`` once per topic: record, then checkQuotas.
    The throttle is computed once, from the tokens at the last violation (as in strict)."""
    violation_tokens: float | None = None  # the tokens at the last violation
    last = last_update_ms
    for count in partitions:
        tokens = tokens + rate_per_s * ((now_ms - last) / 1000.0)
        tokens = tokens if tokens < burst else burst
        last = now_ms
        tokens = tokens - count
        tokens = tokens if tokens < burst else burst
        tokens = tokens + rate_per_s * 0.0  # checkQuotas measures (refills) again
        tokens = tokens if tokens < burst else burst
        if tokens < 0:
            violation_tokens = tokens
    throttle = _response_throttle(violation_tokens, rate_per_s, now_ms)
    return make_admission(
        tokens=tokens,
        admitted=(True,) * len(partitions),
        recorded=bool(partitions),
        throttle_time_ms=throttle,
    )


def _response_throttle(violation_tokens: float | None, rate_per_s: float, now_ms: int) -> int:
    """The response's throttle (§2.4): the last violation's throttle (none: 0, at time 0), less
    the time since (the violation happened at ``now_ms``)."""
    if violation_tokens is None:
        return response_throttle_ms(0, 0, now_ms)
    return response_throttle_ms(throttle_time_ms(violation_tokens, rate_per_s), now_ms, now_ms)


@dataclass(frozen=True, slots=True)
class Step:
    """What one call of the machine returns: the bucket afterwards, the rows, the next deadline."""

    bucket: Bucket | None  # the key's bucket afterwards (None: the key has none, or it expired)
    decisions: tuple[QuotaDecision, ...]  # the request's answer (none for a timer)
    throttles: tuple[ThrottleEvent, ...]  # its throttle event, if it was throttled or rejected

    @property
    def next_deadline_ms(self) -> int | None:
        return next_deadline_ms(self.bucket)


make_step = fast_constructor(Step)  # per request (core/frozen.py)


def next_deadline_ms(bucket: Bucket | None) -> int | None:
    """The key's one timer: its bucket's idle expiry (none without a bucket)."""
    return None if bucket is None else bucket.expires_at_ms


def fire_due(bucket: Bucket, now_ms: int, config: QuotaConfig) -> Step:
    """The expiry timer, if due at ``now_ms``: the sensor idled out, the bucket is forgotten
    (§4.5), and its debt with it; a timer emits no row. Otherwise the bucket, unchanged."""
    if bucket.expires_at_ms <= now_ms:
        return make_step(bucket=None, decisions=(), throttles=())
    return make_step(bucket=bucket, decisions=(), throttles=())


def charged(request: MutationRequest, resolution: Resolution, config: QuotaConfig) -> bool:
    """Whether the request is charged to a bucket: it has one (a quota was configured for its
    key) and is not a validate-only that ``controller.quota.validate.only.charged: false`` lets
    through untouched."""
    return resolution.quota_key is not None and (
        config.controller_quota_validate_only_charged or not request.validate_only
    )


def duplicated_names(topics: Sequence[TopicMutation]) -> frozenset[str]:
    if len({topic.name for topic in topics}) == len(topics):
        return NO_NAMES
    seen: set[str] = set()
    twice: set[str] = set()
    for topic in topics:
        (twice if topic.name in seen else seen).add(topic.name)
    return frozenset(twice)


def refused_before_quota(request: MutationRequest) -> tuple[Errors | None, ...] | None:
    """Per topic, the error Kafka answers before any quota call (None: the topic goes on to
    the quota), or None when every topic goes on (the common case).

    * a name that occurs twice: INVALID_REQUEST, every occurrence (ControllerApis);
    * CreateTopics of 0 partitions ("an invalid non-positive value") or CreatePartitions adding
      0 ("Topic already has N partition(s)"): INVALID_PARTITIONS. DeleteTopics records the
      topic's current count, 0 included (ZK mode's ``getOrElse(0)``).
    """
    topics = request.topics
    twice = NO_NAMES if len(topics) < 2 else duplicated_names(topics)  # one topic: no repeat
    creates = request.type is not MutationType.DELETE_TOPICS
    if not twice:
        if not creates:
            return None
        # any(topic.partitions <= 0 ...), as a loop: 3x quicker for a request's few topics
        for topic in topics:
            if topic.partitions <= 0:
                break
        else:
            return None
    return tuple(
        Errors.INVALID_REQUEST
        if topic.name in twice
        else (Errors.INVALID_PARTITIONS if creates and topic.partitions <= 0 else None)
        for topic in topics
    )


def handle(
    bucket: Bucket | None,
    request: MutationRequest,
    now_ms: int,
    config: QuotaConfig,
    resolution: Resolution,
) -> Step:
    """Answer ``request`` at ``now_ms`` (the key's clock; its due timer has already fired)."""
    quota_key = resolution.quota_key
    refused = refused_before_quota(request)
    valid = (
        request.topics
        if refused is None
        else [topic for topic, error in zip(request.topics, refused, strict=True) if error is None]
    )
    if not charged(request, resolution, config):
        decision = _decision(request, resolution, [True] * len(valid), refused, 0, now_ms)
        if quota_key is None:
            # Nothing tracked: no sensor, no key, no clock.
            return make_step(bucket=bucket, decisions=(decision,), throttles=())
        # An uncharged validate-only: ZK mode creates the sensor before it looks at the flag.
        tracked = new_bucket(now_ms) if bucket is None else handled_at(bucket, now_ms)
        return make_step(bucket=tracked, decisions=(decision,), throttles=())
    rate_per_s = resolution.rate_per_s
    rate_used = UNLIMITED_RATE_PER_S if rate_per_s is None else rate_per_s
    burst = burst_of(
        config.controller_quota_window_num, config.controller_quota_window_size_seconds, rate_used
    )
    current = new_bucket(now_ms) if bucket is None else bucket
    mode = mode_of(request, permissive_allowed=config.controller_quota_permissive_allowed)
    admit = admit_strict if mode is Mode.STRICT else admit_permissive
    partitions = [topic.partitions for topic in valid]
    admission = admit(current.tokens, current.last_update_ms, partitions, rate_used, burst, now_ms)
    admitted, throttle_ms = admission.admitted, admission.throttle_time_ms
    updated = make_bucket(
        tokens=admission.tokens,
        last_update_ms=now_ms if partitions else current.last_update_ms,
        last_record_ms=now_ms if admission.recorded else current.last_record_ms,
        handled_ms=now_ms,
    )
    decision = _decision(request, resolution, admitted, refused, throttle_ms, now_ms)
    throttles: tuple[ThrottleEvent, ...] = ()
    if throttle_ms > 0 or not all(admitted):
        throttles = (
            _throttle_event(
                request,
                resolution,
                mode,
                burst,
                admission,
                valid,
                now_ms,
                unlimited=rate_per_s is None,
            ),
        )
    return make_step(bucket=updated, decisions=(decision,), throttles=throttles)


def _decision(
    request: MutationRequest,
    resolution: Resolution,
    admitted: Sequence[bool],
    refused: tuple[Errors | None, ...] | None,
    throttle_ms: int,
    now_ms: int,
) -> QuotaDecision:
    if refused is not None:
        verdicts = iter(admitted)
        errors = tuple(
            (Errors.NONE if next(verdicts) else Errors.THROTTLING_QUOTA_EXCEEDED)
            if error is None
            else error
            for error in refused
        )
    elif all(admitted):
        errors = (Errors.NONE,) * len(admitted)  # the common case, without a loop
    else:
        errors = tuple([Errors.NONE if ok else Errors.THROTTLING_QUOTA_EXCEEDED for ok in admitted])
    return make_decision(
        event_id=request.event_id,
        user=request.user,
        client_id=request.client_id,
        quota_entity=resolution.quota_entity,
        quota_key=resolution.quota_key,
        rate_per_s=resolution.rate_per_s,
        type=request.type.value,
        error=Errors.NONE,
        error_message=None,
        throttle_time_ms=throttle_ms,
        topics=request.topics,
        topic_errors=errors,
        event_time_ms=request.event_time_ms,
        decided_at_ms=now_ms,
    )


def _throttle_event(
    request: MutationRequest,
    resolution: Resolution,
    mode: Mode,
    burst: float,
    admission: Admission,
    valid: Sequence[TopicMutation],
    now_ms: int,
    *,
    unlimited: bool,
) -> ThrottleEvent:
    rejected: list[str] = []
    admitted_partitions = 0
    for topic, ok in zip(valid, admission.admitted, strict=True):
        if ok:
            admitted_partitions += topic.partitions
        else:
            rejected.append(topic.name)
    assert resolution.quota_key is not None
    return make_throttle_event(
        event_id=request.event_id,
        user=request.user,
        client_id=request.client_id,
        quota_entity=resolution.quota_entity,
        quota_key=resolution.quota_key,
        mode=mode,
        rate_per_s=resolution.rate_per_s,
        burst=None if unlimited else burst,
        tokens_after=admission.tokens,
        throttle_time_ms=admission.throttle_time_ms,
        rejected_topics=tuple(rejected),
        admitted_partitions=admitted_partitions,
        at_ms=now_ms,
    )
