"""Timeouts as Kafka's clients handle them.

* Every blocking call takes a timeout, else ``default.api.timeout.ms``; its ``Deadline`` is fixed
  when the call starts (``Deadline.start``).
* Attempt-then-check: an operation is tried once before the deadline is looked at, so a call
  with timeout 0 still sends its request and takes an answer that is already there.
* Retries only while time remains; each wait is bounded by min(remaining, request.timeout.ms).
* One place completes expired calls with a timeout error: ``CallTable.reap`` (the reaper). A
  waiter never invents its own timeout: when its wait ends it runs the reaper and reads the
  call's outcome. ``CallTable.close`` completes whatever is still pending.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from controlplane.client.clock import Clock

T = TypeVar("T")


class ClientError(Exception):
    """Base of the client library's errors."""


class ClientTimeoutError(ClientError, TimeoutError):
    """A call did not complete before its deadline (Kafka's TimeoutException)."""


class ClientClosedError(ClientError):
    """The client was closed while the call was pending."""


class RetriableError(ClientError):
    """An answer worth another attempt while time remains (e.g. COORDINATOR_NOT_AVAILABLE)."""


@dataclass(frozen=True, slots=True)
class Deadline:
    start_ms: int
    deadline_ms: int

    @staticmethod
    def start(clock: Clock, timeout_ms: int | None, default_api_timeout_ms: int) -> Deadline:
        """Fix the deadline at the start of a call: ``timeout_ms`` or the API default."""
        timeout = default_api_timeout_ms if timeout_ms is None else timeout_ms
        if timeout < 0:
            raise ValueError(f"timeout must be >= 0 ms, got {timeout}")
        now_ms = clock.now_ms()
        return Deadline(now_ms, now_ms + timeout)

    def remaining_ms(self, now_ms: int) -> int:
        return max(0, self.deadline_ms - now_ms)

    def expired(self, now_ms: int) -> bool:
        return now_ms >= self.deadline_ms

    def attempt_wait_ms(self, now_ms: int, request_timeout_ms: int) -> int:
        """How long one attempt may wait for its answer: min(remaining, request.timeout.ms)."""
        return min(self.remaining_ms(now_ms), request_timeout_ms)


class PendingCall:
    """One in-flight request: completed once, by an answer, the reaper, or close()."""

    __slots__ = ("_answer", "_error", "deadline_ms", "done", "event_id", "sent_at_ms")

    def __init__(self, event_id: str, sent_at_ms: int, deadline_ms: int) -> None:
        self.event_id = event_id
        self.sent_at_ms = sent_at_ms
        self.deadline_ms = deadline_ms
        self.done = False
        self._answer: Mapping[str, Any] | None = None
        self._error: BaseException | None = None

    def result(self) -> Mapping[str, Any]:
        """The answer, or raise the error that completed the call."""
        if not self.done:
            raise RuntimeError(f"call {self.event_id} is still pending")
        if self._error is not None:
            raise self._error
        assert self._answer is not None
        return self._answer


class CallTable:
    """The in-flight calls of one client, keyed by event_id."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._calls: dict[str, PendingCall] = {}
        self._closed = False

    def register(self, event_id: str, deadline_ms: int) -> PendingCall:
        call = PendingCall(event_id, self._clock.now_ms(), deadline_ms)
        with self._lock:
            if self._closed:
                call._error, call.done = ClientClosedError("the client is closed"), True
                return call
            self._calls[event_id] = call
        return call

    def complete(self, event_id: str, answer: Mapping[str, Any]) -> bool:
        """Complete a call with its answer; False if no such call is pending (late answer)."""
        return self._finish(event_id, answer, None)

    def reap(self, now_ms: int) -> list[PendingCall]:
        """The reaper: complete every call whose deadline passed with a timeout error."""
        with self._lock:
            expired = [c for c in self._calls.values() if c.deadline_ms <= now_ms]
        for call in expired:
            waited_ms = now_ms - call.sent_at_ms
            error = ClientTimeoutError(f"call {call.event_id} timed out after {waited_ms} ms")
            self._finish(call.event_id, None, error)
        return expired

    def close(self) -> None:
        """Complete every pending call with ClientClosedError; later calls fail at once."""
        with self._lock:
            self._closed = True
            pending = list(self._calls)
        for event_id in pending:
            self._finish(event_id, None, ClientClosedError("the client was closed"))

    def pending(self) -> list[str]:
        with self._lock:
            return list(self._calls)

    def await_call(self, call: PendingCall, poll: Callable[[], None] | None = None) -> None:
        """Wait until the call is done: answered, reaped at its deadline, or closed."""
        while not call.done:
            if poll is not None:
                poll()
            if call.done:
                break
            wait_ms = max(0, call.deadline_ms - self._clock.now_ms())
            self._clock.wait_for(lambda: call.done, wait_ms)
            self.reap(self._clock.now_ms())

    def _finish(
        self, event_id: str, answer: Mapping[str, Any] | None, error: BaseException | None
    ) -> bool:
        with self._lock:
            call = self._calls.pop(event_id, None)
            if call is None:
                return False
            call._answer, call._error, call.done = answer, error, True
        self._clock.notify()
        return True


def with_retries(
    clock: Clock,
    deadline: Deadline,
    request_timeout_ms: int,
    retry_backoff_ms: int,
    attempt: Callable[[int], T],
    what: str,
) -> T:
    """Attempt-then-check: run ``attempt(wait_ms)`` once, then retry a retriable failure only
    while the deadline leaves time, each wait bounded by min(remaining, request.timeout.ms)."""
    attempts = 0
    while True:
        attempts += 1
        try:
            return attempt(deadline.attempt_wait_ms(clock.now_ms(), request_timeout_ms))
        except (RetriableError, ClientTimeoutError) as error:
            last_error: ClientError = error
        now_ms = clock.now_ms()
        if not deadline.expired(now_ms):
            clock.sleep(min(retry_backoff_ms, deadline.remaining_ms(now_ms)))
        if deadline.expired(clock.now_ms()):
            spent_ms = clock.now_ms() - deadline.start_ms
            raise ClientTimeoutError(
                f"{what}: timed out after {spent_ms} ms and {attempts} attempt(s): {last_error}"
            ) from last_error
