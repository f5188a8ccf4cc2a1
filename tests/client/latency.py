"""Transport wrappers that delay or lose traffic in virtual time: every request by a fixed
latency, as the engine does (a request is only handled at the next micro-batch), only the answers
of some request types (a slow answer path), the answers of chosen requests (a lost answer), or
chosen requests themselves (a request lost on its way). ``HeartbeatsInFlight`` counts the
heartbeats whose answers a member still listens for."""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Mapping
from typing import Any

from controlplane.client.clock import Clock
from controlplane.client.transport import AnswerCallback, Stream, Transport


class DelayedCalls:
    """Calls run in due order on a clock thread, each at or after its due time."""

    def __init__(self, clock: Clock, name: str) -> None:
        self.clock = clock
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._sequence = itertools.count()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = clock.spawn(self._run, name)

    def call_later(self, delay_ms: int, call: Callable[[], None]) -> None:
        due_ms = self.clock.now_ms() + delay_ms
        with self._lock:
            heapq.heappush(self._queue, (due_ms, next(self._sequence), call))
        self.clock.notify()

    def close(self) -> None:
        self._closed = True
        self.clock.notify()
        self.clock.join(self._thread, 5_000)

    def _changed(self, size: int) -> Callable[[], bool]:
        return lambda: self._closed or len(self._queue) != size

    def _run(self) -> None:
        while not self._closed:
            with self._lock:
                due_ms = self._queue[0][0] if self._queue else None
                size = len(self._queue)
            wait_ms = None if due_ms is None else max(0, due_ms - self.clock.now_ms())
            self.clock.wait_for(self._changed(size), wait_ms)
            ready = []
            with self._lock:
                while self._queue and self._queue[0][0] <= self.clock.now_ms():
                    ready.append(heapq.heappop(self._queue))
            for _, _, call in ready:
                call()


class LatencyTransport:
    """Hands every request (of the given types, if any) on ``latency_ms`` after it was sent."""

    def __init__(
        self, inner: Transport, clock: Clock, latency_ms: int, types: set[str] | None = None
    ) -> None:
        self.inner = inner
        self.latency_ms = latency_ms
        self.types = types
        self._calls = DelayedCalls(clock, "latency")

    def send(self, stream: Stream, request: Mapping[str, Any], on_answer: AnswerCallback) -> None:
        if self.types is not None and request.get("type") not in self.types:
            self.inner.send(stream, request, on_answer)
            return
        copy = dict(request)
        self._calls.call_later(self.latency_ms, lambda: self.inner.send(stream, copy, on_answer))

    def forget(self, event_id: str) -> None:
        self.inner.forget(event_id)

    def close(self) -> None:
        self._calls.close()
        self.inner.close()


class SlowAnswers:
    """Hands requests of the given types on at once (so the coordinator handles them in order)
    but delivers their answers ``delay_ms`` later: a slow answer path."""

    def __init__(self, inner: Transport, clock: Clock, types: set[str], delay_ms: int) -> None:
        self.inner = inner
        self.types = types
        self.delay_ms = delay_ms
        self._calls = DelayedCalls(clock, "slow-answers")

    def send(self, stream: Stream, request: Mapping[str, Any], on_answer: AnswerCallback) -> None:
        if request.get("type") not in self.types:
            self.inner.send(stream, request, on_answer)
            return

        def hold(answer: Mapping[str, Any]) -> None:
            self._calls.call_later(self.delay_ms, lambda: on_answer(answer))

        self.inner.send(stream, request, hold)

    def forget(self, event_id: str) -> None:
        self.inner.forget(event_id)

    def close(self) -> None:
        self._calls.close()
        self.inner.close()


class LostAnswers:
    """Hands every request on (the coordinator handles it) but drops the answers of the requests
    ``lose`` picks: they never come back."""

    def __init__(self, inner: Transport, lose: Callable[[Mapping[str, Any]], bool]) -> None:
        self.inner = inner
        self.lose = lose
        self.lost: list[dict[str, Any]] = []

    def send(self, stream: Stream, request: Mapping[str, Any], on_answer: AnswerCallback) -> None:
        if self.lose(request):
            self.lost.append(dict(request))
            self.inner.send(stream, request, lambda answer: None)
            return
        self.inner.send(stream, request, on_answer)

    def forget(self, event_id: str) -> None:
        self.inner.forget(event_id)

    def close(self) -> None:
        self.inner.close()


class LostRequests:
    """Drops the requests ``lose`` picks: the coordinator never sees them, so they are never
    answered (a network partition between the member and the engine)."""

    def __init__(self, inner: Transport, lose: Callable[[Mapping[str, Any]], bool]) -> None:
        self.inner = inner
        self.lose = lose
        self.lost: list[dict[str, Any]] = []

    def send(self, stream: Stream, request: Mapping[str, Any], on_answer: AnswerCallback) -> None:
        if self.lose(request):
            self.lost.append(dict(request))
            return
        self.inner.send(stream, request, on_answer)

    def forget(self, event_id: str) -> None:
        self.inner.forget(event_id)

    def close(self) -> None:
        self.inner.close()


def sent_between(kind: str, from_ms: int, until_ms: int) -> Callable[[Mapping[str, Any]], bool]:
    """Picks every request of type ``kind`` sent at or after ``from_ms`` and before ``until_ms``."""
    return lambda r: r.get("type") == kind and from_ms <= r["event_time_ms"] < until_ms


def first_of(kind: str, sent_from_ms: int) -> Callable[[Mapping[str, Any]], bool]:
    """Picks the first request of type ``kind`` sent at or after ``sent_from_ms``, once."""
    picked: list[str] = []

    def pick(request: Mapping[str, Any]) -> bool:
        if picked or request.get("type") != kind or request["event_time_ms"] < sent_from_ms:
            return False
        picked.append(str(request["event_id"]))
        return True

    return pick


class HeartbeatsInFlight:
    """Counts the heartbeats whose answers the member listens for: sent, neither answered to it
    nor forgotten (a member forgets a request it stopped listening for). ``most`` is the largest
    count seen, ``delivered`` the number of answers handed to the member."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.waiting: set[str] = set()
        self.most = 0
        self.delivered = 0
        self._lock = threading.Lock()

    def send(self, stream: Stream, request: Mapping[str, Any], on_answer: AnswerCallback) -> None:
        if request.get("type") != "heartbeat":
            self.inner.send(stream, request, on_answer)
            return
        event_id = str(request["event_id"])
        with self._lock:
            self.waiting.add(event_id)
            self.most = max(self.most, len(self.waiting))

        def answered(answer: Mapping[str, Any]) -> None:
            with self._lock:
                waited = event_id in self.waiting
                self.waiting.discard(event_id)
                if waited:
                    self.delivered += 1
            if waited:
                on_answer(answer)

        self.inner.send(stream, request, answered)

    def forget(self, event_id: str) -> None:
        with self._lock:
            self.waiting.discard(event_id)
        self.inner.forget(event_id)

    def close(self) -> None:
        self.inner.close()
