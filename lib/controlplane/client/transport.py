"""How requests reach the coordinator and the quota, and how answers come back.

A ``Transport`` sends one wire request (docs/reference/events.md §1 or §3) on a stream and calls
back with the answer row (a ``decisions`` or ``quota_decisions`` row) carrying the same
``event_id``. The ``Requester`` of each client numbers its requests, registers each as a pending
call, sends it, and waits for it to complete (answer, reaper, or close). Adapters:
``InMemoryTransport`` (the real cores in process, driven by a clock; transport_memory.py) and
``FileTransport`` (the engine's landing directory and Delta tables; transport_files.py).
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from enum import StrEnum
from typing import Any, Protocol

from controlplane.client.clock import Clock
from controlplane.client.timeouts import CallTable, PendingCall

Answer = Mapping[str, Any]
AnswerCallback = Callable[[Answer], None]


class Stream(StrEnum):
    GROUP = "group"  # coordinator requests -> decisions
    QUOTA = "quota"  # mutation requests -> quota_decisions


class Transport(Protocol):
    def send(self, stream: Stream, request: Mapping[str, Any], on_answer: AnswerCallback) -> None:
        """Send one request; ``on_answer`` is called once, from any thread, with its answer."""
        ...

    def forget(self, event_id: str) -> None:
        """The caller stopped waiting (timed out or closed): drop the route of a late answer."""
        ...

    def close(self) -> None: ...


class AnswerRoutes:
    """event_id -> callback, shared by transports: an answer is delivered at most once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._routes: dict[str, AnswerCallback] = {}

    def add(self, event_id: str, on_answer: AnswerCallback) -> None:
        with self._lock:
            if event_id in self._routes:
                raise ValueError(f"duplicate event_id {event_id!r}")
            self._routes[event_id] = on_answer

    def forget(self, event_id: str) -> None:
        with self._lock:
            self._routes.pop(event_id, None)

    def deliver(self, row: Answer) -> bool:
        event_id = row.get("event_id")
        if not isinstance(event_id, str):
            return False
        with self._lock:
            callback = self._routes.pop(event_id, None)
        if callback is None:
            return False
        callback(row)
        return True

    def __len__(self) -> int:
        return len(self._routes)


class Requester:
    """Sends a client's requests and waits for their answers; owns the client's CallTable."""

    def __init__(self, transport: Transport, clock: Clock, client_id: str) -> None:
        self.transport = transport
        self.clock = clock
        self.calls = CallTable(clock)
        self._prefix = f"{client_id or 'client'}-{uuid.uuid4().hex[:10]}"
        self._sequence = itertools.count(1)
        self._sent_ms: dict[str, int] = {}
        self.round_trips_ms: deque[int] = deque(maxlen=10_000)  # answered calls, send to answer

    def next_event_id(self) -> str:
        return f"{self._prefix}-{next(self._sequence)}"

    def start(self, stream: Stream, body: Mapping[str, Any], wait_ms: int) -> PendingCall:
        """Send without waiting; the call's deadline is ``now + wait_ms`` (the reaper's)."""
        event_id = self.next_event_id()
        now_ms = self.clock.now_ms()
        call = self.calls.register(event_id, now_ms + max(0, wait_ms))
        if call.done:  # closed
            return call
        request = {"event_id": event_id, "event_time_ms": now_ms, **body}
        self._sent_ms[event_id] = now_ms
        self.transport.send(stream, request, lambda answer: self._answered(event_id, answer))
        return call

    def wait(self, call: PendingCall) -> PendingCall:
        self.calls.await_call(call)
        self.forget(call)
        return call

    def forget(self, call: PendingCall) -> None:
        """The caller is done with the call: drop the route of any late answer."""
        self.transport.forget(call.event_id)
        self._sent_ms.pop(call.event_id, None)

    def call(self, stream: Stream, body: Mapping[str, Any], wait_ms: int) -> PendingCall:
        """One attempt: send, then wait at most ``wait_ms`` (0 still takes a ready answer)."""
        return self.wait(self.start(stream, body, wait_ms))

    def close(self) -> None:
        for event_id in self.calls.pending():
            self.transport.forget(event_id)
        self.calls.close()

    def _answered(self, event_id: str, answer: Answer) -> None:
        sent_ms = self._sent_ms.pop(event_id, None)
        if self.calls.complete(event_id, answer) and sent_ms is not None:
            self.round_trips_ms.append(self.clock.now_ms() - sent_ms)
