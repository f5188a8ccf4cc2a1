"""InMemoryTransport: the real coordinator and quota cores, in process, driven by a clock.

Not a mock: every request goes through ``CoordinatorShard.feed`` or ``QuotaShard.feed`` at
the clock's time (processing-time semantics, as the engine's), and a timer thread started with
the clock ticks the coordinator at its next deadline, so sessions expire, rebalances time out
and parked requests are answered exactly as the engine would answer them, only without the
micro-batch latency. Every output row is kept in ``outputs`` (table -> rows) for inspection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from controlplane.client.clock import Clock
from controlplane.client.transport import AnswerCallback, AnswerRoutes, Stream
from controlplane.core.config import Settings
from controlplane.core.coordinator.runner import DECISIONS, CoordinatorShard
from controlplane.core.quota.runner import DECISIONS as QUOTA_DECISIONS
from controlplane.core.quota.runner import QuotaShard
from controlplane.core.runtime import TimedEvent

Row = dict[str, Any]


class InMemoryTransport:
    def __init__(self, clock: Clock, settings: Settings | None = None) -> None:
        settings = settings or Settings()
        self.clock = clock
        self.routes = AnswerRoutes()
        self.outputs: dict[str, list[Row]] = {}
        self.sent: list[tuple[Stream, Row]] = []
        self._shard = CoordinatorShard(settings.coordinator)
        self._quota = QuotaShard(settings.quota)
        self._lock = threading.Lock()  # one coordinator thread: requests are handled one at a time
        self._version = 0
        self._closed = False
        self._timers = clock.spawn(self._timer_loop, "coordinator-timers")

    def send(self, stream: Stream, request: Mapping[str, Any], on_answer: AnswerCallback) -> None:
        event_id = request.get("event_id")
        if isinstance(event_id, str):
            self.routes.add(event_id, on_answer)
        with self._lock:
            if self._closed:
                raise RuntimeError("the transport is closed")
            self.sent.append((stream, dict(request)))
            answers = self._handle(stream, dict(request))
            self._version += 1
        for row in answers:
            self.routes.deliver(row)
        self.clock.notify()

    def forget(self, event_id: str) -> None:
        self.routes.forget(event_id)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.clock.notify()
        self.clock.join(self._timers, 5_000)

    def rows(self, table: str, **match: Any) -> list[Row]:
        with self._lock:
            rows = list(self.outputs.get(table, []))
        return [r for r in rows if all(r.get(k) == v for k, v in match.items())]

    def requests(self, **match: Any) -> list[Row]:
        with self._lock:
            sent = [request for _, request in self.sent]
        return [r for r in sent if all(r.get(k) == v for k, v in match.items())]

    def _handle(self, stream: Stream, request: Row) -> list[Row]:
        now_ms = self.clock.now_ms()
        event = TimedEvent(request, now_ms)
        if stream is Stream.GROUP:
            tables = self._shard.feed(event)
            self._keep(tables)
            return list(tables[DECISIONS])
        self._quota.tick(now_ms)
        tables = self._quota.feed(event, now_ms)
        self._keep(tables)
        return list(tables[QUOTA_DECISIONS])

    def _keep(self, tables: Mapping[str, list[Row]]) -> None:
        for table, rows in tables.items():
            self.outputs.setdefault(table, []).extend(rows)

    def _changed_since(self, seen: int) -> Callable[[], bool]:
        return lambda: self._closed or self._version != seen

    def _timer_loop(self) -> None:
        while not self._closed:
            with self._lock:
                seen = self._version
                deadline_ms = self._shard.next_deadline_ms()
            wait_ms = None if deadline_ms is None else max(0, deadline_ms - self.clock.now_ms())
            self.clock.wait_for(self._changed_since(seen), wait_ms)
            now_ms = self.clock.now_ms()
            if self._closed or deadline_ms is None or now_ms < deadline_ms:
                continue
            with self._lock:
                tables = self._shard.tick(now_ms)
                self._keep(tables)
                self._version += 1
            for row in tables[DECISIONS]:
                self.routes.deliver(row)
            self.clock.notify()
