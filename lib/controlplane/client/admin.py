"""AdminClient: create_topics, create_partitions, delete_topics as KIP-599 mutation requests.

As Kafka's admin client (KafkaAdminClient + NetworkClient throttling):
* the call's deadline is fixed at its start: ``timeout_ms`` or ``default.api.timeout.ms``;
* each topic gets its own result; topics answered THROTTLING_QUOTA_EXCEEDED are collected into a
  new request (same deadline) that goes out once the response's ``throttle_time_ms`` has passed
  (``retry.backoff.ms`` when it is 0: a tiny deficit rounds to 0, the bucket needs time);
* when the deadline passes while throttled topics wait, they fail with
  THROTTLING_QUOTA_EXCEEDED and the throttle time still left (not with a timeout); other pending
  topics fail with a timeout;
* ``retry_on_quota_violation=False`` returns the throttled topics' errors at once;
* a request that got no answer within min(remaining, request.timeout.ms) is sent again while
  time remains (a new event_id).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.client.clock import Clock
from controlplane.client.config import AdminConfig
from controlplane.client.timeouts import ClientClosedError, ClientTimeoutError, Deadline
from controlplane.client.transport import Requester, Stream, Transport
from controlplane.core.errors import Errors

TIMED_OUT = "TIMED_OUT"  # the client's TimeoutException; not a wire error code
CLOSED = "CLIENT_CLOSED"


@dataclass(frozen=True, slots=True)
class TopicResult:
    name: str
    error: str  # Kafka's error name, TIMED_OUT or CLIENT_CLOSED
    error_code: int | None  # None for client-side outcomes
    throttle_time_ms: int  # for THROTTLING_QUOTA_EXCEEDED: the throttle still left
    attempts: int  # requests that carried this topic
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error == Errors.NONE.name


@dataclass(slots=True)
class _Progress:
    """The mutable bookkeeping of one admin call."""

    pending: dict[str, int]  # name -> partition mutations, in request order
    attempts: dict[str, int]
    results: dict[str, TopicResult]
    throttle_time_ms: int = 0  # the last response's throttle, when topics wait for a retry
    throttled_at_ms: int | None = None

    def finish(
        self, name: str, error: str, code: int | None, throttle_ms: int, message: str | None
    ) -> None:
        self.results[name] = TopicResult(
            name, error, code, throttle_ms, self.attempts.get(name, 0), message
        )
        self.pending.pop(name, None)


class AdminClient:
    def __init__(self, config: AdminConfig, transport: Transport, clock: Clock) -> None:
        self.config = config
        self._clock = clock
        self._requester = Requester(transport, clock, config.client_id)

    def create_topics(
        self,
        topics: Mapping[str, int],
        *,
        timeout_ms: int | None = None,
        retry_on_quota_violation: bool = True,
        validate_only: bool = False,
        request_version: int | None = None,
    ) -> dict[str, TopicResult]:
        """``topics``: name -> partition count (the partition mutations of creating it)."""
        return self._mutate(
            "create_topics", topics, timeout_ms, retry_on_quota_violation, validate_only,
            request_version,
        )  # fmt: skip

    def create_partitions(
        self,
        partitions_added: Mapping[str, int],
        *,
        timeout_ms: int | None = None,
        retry_on_quota_violation: bool = True,
        validate_only: bool = False,
        request_version: int | None = None,
    ) -> dict[str, TopicResult]:
        """``partitions_added``: name -> partitions to add (the mutations the quota charges)."""
        return self._mutate(
            "create_partitions", partitions_added, timeout_ms, retry_on_quota_violation,
            validate_only, request_version,
        )  # fmt: skip

    def delete_topics(
        self,
        topics: Mapping[str, int],
        *,
        timeout_ms: int | None = None,
        retry_on_quota_violation: bool = True,
        request_version: int | None = None,
    ) -> dict[str, TopicResult]:
        """``topics``: name -> the topic's partition count (deleting charges each partition)."""
        return self._mutate(
            "delete_topics", topics, timeout_ms, retry_on_quota_violation, False, request_version
        )

    def close(self) -> None:
        self._requester.close()

    def round_trips_ms(self) -> list[int]:
        return list(self._requester.round_trips_ms)

    def _mutate(
        self,
        kind: str,
        topics: Mapping[str, int],
        timeout_ms: int | None,
        retry: bool,
        validate_only: bool,
        request_version: int | None,
    ) -> dict[str, TopicResult]:
        _check_topics(topics)
        deadline = Deadline.start(self._clock, timeout_ms, self.config.default_api_timeout_ms)
        progress = _Progress(dict(topics), {name: 0 for name in topics}, {})
        first = True
        while progress.pending:
            if not first and deadline.expired(self._clock.now_ms()):
                self._fail_on_deadline(progress)
                break
            first = False
            body = self._body(kind, progress.pending, validate_only, request_version)
            for name in progress.pending:
                progress.attempts[name] += 1
            wait_ms = deadline.attempt_wait_ms(self._clock.now_ms(), self.config.request_timeout_ms)
            call = self._requester.call(Stream.QUOTA, body, wait_ms)
            try:
                answer = call.result()
            except ClientClosedError as error:
                for name in list(progress.pending):
                    progress.finish(name, CLOSED, None, 0, str(error))
                break
            except ClientTimeoutError:
                self._backoff(deadline)
                continue
            self._apply(answer, progress, retry, deadline)
            if progress.pending and progress.throttled_at_ms is not None:
                # throttle_time_ms may round to 0 for a tiny deficit: then retry.backoff.ms, so
                # the retry never spins on a bucket that had no time to refill
                wait = progress.throttle_time_ms or self.config.retry_backoff_ms
                self._clock.sleep(min(wait, deadline.remaining_ms(self._clock.now_ms())))
        return {name: progress.results[name] for name in topics}

    def _body(
        self, kind: str, pending: Mapping[str, int], validate_only: bool, version: int | None
    ) -> dict[str, Any]:
        return {
            "type": kind,
            "user": self.config.user,
            "client_id": self.config.client_id,
            "request_version": version,
            "validate_only": validate_only,
            "topics": [{"name": name, "partitions": n} for name, n in pending.items()],
        }

    def _apply(
        self, answer: Mapping[str, Any], progress: _Progress, retry: bool, deadline: Deadline
    ) -> None:
        top_error = str(answer.get("error") or "UNKNOWN_SERVER_ERROR")
        throttle_ms = int(answer.get("throttle_time_ms") or 0)
        if top_error != Errors.NONE.name:
            message = answer.get("error_message")
            for name in list(progress.pending):
                progress.finish(name, top_error, answer.get("error_code"), throttle_ms, message)
            return
        by_name = {t.get("name"): t for t in answer.get("topics") or [] if isinstance(t, Mapping)}
        progress.throttled_at_ms = None
        for name in list(progress.pending):
            row = by_name.get(name)
            if row is None:
                progress.finish(name, "UNKNOWN_SERVER_ERROR", -1, 0, "topic missing from answer")
                continue
            error = str(row.get("error") or "UNKNOWN_SERVER_ERROR")
            throttled = error == Errors.THROTTLING_QUOTA_EXCEEDED.name
            if throttled and retry and not deadline.expired(self._clock.now_ms()):
                progress.throttle_time_ms = throttle_ms
                progress.throttled_at_ms = self._clock.now_ms()
                continue
            message = "The throttling quota has been exceeded." if throttled else None
            progress.finish(
                name, error, row.get("error_code"), throttle_ms if throttled else 0, message
            )

    def _fail_on_deadline(self, progress: _Progress) -> None:
        now_ms = self._clock.now_ms()
        for name in list(progress.pending):
            if progress.throttled_at_ms is not None:
                left = max(0, progress.throttle_time_ms - (now_ms - progress.throttled_at_ms))
                progress.finish(
                    name, Errors.THROTTLING_QUOTA_EXCEEDED.name,
                    Errors.THROTTLING_QUOTA_EXCEEDED.code, left,
                    "The throttling quota has been exceeded.",
                )  # fmt: skip
            else:
                progress.finish(name, TIMED_OUT, None, 0, "the call timed out")

    def _backoff(self, deadline: Deadline) -> None:
        remaining = deadline.remaining_ms(self._clock.now_ms())
        self._clock.sleep(min(self.config.retry_backoff_ms, remaining))


def _check_topics(topics: Mapping[str, int] | Iterable[Any]) -> None:
    if not isinstance(topics, Mapping):
        raise TypeError("topics: expected a mapping of topic name -> partitions")
    if not topics:
        raise ValueError("topics: at least one topic")
    for name, partitions in topics.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"topic name must be a non-empty string, got {name!r}")
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 0:
            raise ValueError(f"{name}: partitions must be an integer >= 0, got {partitions!r}")
