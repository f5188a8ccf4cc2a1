"""A transport wrapper that delays every request by a fixed latency (virtual time), as the engine
does: a request is only handled at the next micro-batch."""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Mapping
from typing import Any

from controlplane.client.clock import Clock
from controlplane.client.transport import AnswerCallback, Stream, Transport


class LatencyTransport:
    def __init__(self, inner: Transport, clock: Clock, latency_ms: int) -> None:
        self.inner = inner
        self.clock = clock
        self.latency_ms = latency_ms
        self._queue: list[tuple[int, int, Stream, dict[str, Any], AnswerCallback]] = []
        self._sequence = itertools.count()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = clock.spawn(self._run, "latency")

    def send(self, stream: Stream, request: Mapping[str, Any], on_answer: AnswerCallback) -> None:
        due_ms = self.clock.now_ms() + self.latency_ms
        with self._lock:
            heapq.heappush(
                self._queue, (due_ms, next(self._sequence), stream, dict(request), on_answer)
            )
        self.clock.notify()

    def forget(self, event_id: str) -> None:
        self.inner.forget(event_id)

    def close(self) -> None:
        self._closed = True
        self.clock.notify()
        self.clock.join(self._thread, 5_000)
        self.inner.close()

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
            for _, _, stream, request, on_answer in ready:
                self.inner.send(stream, request, on_answer)


class SlowAnswers:
    """A transport wrapper that hands requests of the given types on at once (so the coordinator
    handles them in order) but delivers their answers ``delay_ms`` later: a slow answer path."""

    def __init__(self, inner: Transport, clock: Clock, types: set[str], delay_ms: int) -> None:
        self.inner = inner
        self.clock = clock
        self.types = types
        self.delay_ms = delay_ms
        self._queue: list[tuple[int, int, Mapping[str, Any], AnswerCallback]] = []
        self._sequence = itertools.count()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = clock.spawn(self._run, "slow-answers")

    def send(self, stream: Stream, request: Mapping[str, Any], on_answer: AnswerCallback) -> None:
        if request.get("type") not in self.types:
            self.inner.send(stream, request, on_answer)
            return

        def hold(answer: Mapping[str, Any]) -> None:
            due_ms = self.clock.now_ms() + self.delay_ms
            with self._lock:
                heapq.heappush(self._queue, (due_ms, next(self._sequence), answer, on_answer))
            self.clock.notify()

        self.inner.send(stream, request, hold)

    def forget(self, event_id: str) -> None:
        self.inner.forget(event_id)

    def close(self) -> None:
        self._closed = True
        self.clock.notify()
        self.clock.join(self._thread, 5_000)
        self.inner.close()

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
            for _, _, answer, on_answer in ready:
                on_answer(answer)
