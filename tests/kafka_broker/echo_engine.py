"""A stand-in for the engine's Kafka side, written from the deployment contract (docs/client.md,
"Over Kafka"), for testing the client's KafkaTransport on a real broker without Spark.

``EchoEngine`` reads every partition of the request topics from the beginning, answers each
request with the rows of a handler, and produces each row to the answers topic as the engine
does: key = the row's ``group_id`` (decisions) or ``user`` (quota_decisions; the ``client_id``
when null), value = the row as JSON, header ``table``; the partition is the producer's default
partitioner's. A quota request needs exactly one ``user`` header, which replaces the payload's
``user`` (none or several: the request is rejected, no answer). ``duplicate`` makes it produce
chosen answers twice (at-least-once delivery). Handlers:

* ``echo``: one row per request, carrying its event_id, ``error`` NONE and ``answered`` = the
  request's ``type``;
* ``Cores``: the real coordinator and quota cores (as InMemoryTransport drives them), ticked at
  the coordinator's next deadline, so a GroupMember can join, sync, heartbeat and leave.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from controlplane.client.transport import Stream
from controlplane.core.config import Settings
from controlplane.core.coordinator.runner import DECISIONS, CoordinatorShard
from controlplane.core.quota.runner import DECISIONS as QUOTA_DECISIONS
from controlplane.core.quota.runner import QuotaShard
from controlplane.core.runtime import TimedEvent
from controlplane.io.broker import LocalBroker

Row = dict[str, Any]
Handler = Callable[[Stream, Row, int], list[Row]]
TABLES = {Stream.GROUP: DECISIONS, Stream.QUOTA: QUOTA_DECISIONS}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def echo(stream: Stream, request: Row, at_ms: int) -> list[Row]:
    row = {
        "event_id": request.get("event_id"),
        "type": request.get("type"),
        "answered": request.get("type"),
        "error": "NONE",
        "error_code": 0,
        "decided_at_ms": at_ms,
    }
    if stream is Stream.GROUP:
        row["group_id"] = request.get("group_id")
    else:
        row["user"] = request.get("user")
        row["client_id"] = request.get("client_id")
    return [row]


class Cores:
    """The real cores behind the echo: processing time = the wall clock when a request is read."""

    def __init__(self, settings: Settings) -> None:
        self._shard = CoordinatorShard(settings.coordinator)
        self._quota = QuotaShard(settings.quota)

    def __call__(self, stream: Stream, request: Row, at_ms: int) -> list[Row]:
        if stream is Stream.GROUP:
            return list(self._shard.feed(TimedEvent(request, at_ms))[DECISIONS])
        self._quota.tick(at_ms)
        return list(self._quota.feed(TimedEvent(request, at_ms), at_ms)[QUOTA_DECISIONS])

    def next_deadline_ms(self) -> int | None:
        return self._shard.next_deadline_ms()

    def tick(self, at_ms: int) -> list[Row]:
        return list(self._shard.tick(at_ms)[DECISIONS])


class EchoEngine:
    def __init__(
        self,
        broker: LocalBroker,
        request_topics: Mapping[Stream, str],
        answers_topic: str,
        handler: Handler = echo,
        *,
        duplicate: Callable[[Row], bool] = lambda row: False,
        hold: Callable[[Row], bool] = lambda request: False,
    ) -> None:
        from kafka import KafkaConsumer, KafkaProducer, TopicPartition

        self.answers_topic = answers_topic
        self.handler = handler
        self.duplicate = duplicate
        self.hold = hold  # requests read but not answered (yet): release() answers them
        self.requests: list[tuple[Stream, Row, dict[str, list[bytes]]]] = []
        self.answers: list[tuple[str, Row]] = []  # (key, row) as produced
        self.rejected: list[Row] = []
        self._held: list[tuple[Stream, Row]] = []
        self._streams = {topic: stream for stream, topic in request_topics.items()}
        self._producer = KafkaProducer(**broker.client_config(), acks="all", linger_ms=0)
        self._consumer = KafkaConsumer(
            **broker.client_config(), enable_auto_commit=False, fetch_max_wait_ms=50
        )
        partitions = [
            TopicPartition(topic, p)
            for topic in request_topics.values()
            for p in sorted(self._consumer.partitions_for_topic(topic))
        ]
        self._consumer.assign(partitions)
        self._consumer.seek_to_beginning()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="echo-engine", daemon=True)
        self._thread.start()

    def __enter__(self) -> EchoEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close(autocommit=False)
        self._producer.close(timeout=5)

    def release(self) -> None:
        """Answer the requests held so far."""
        with self._lock:
            held, self._held = self._held, []
        for stream, request in held:
            self._answer(stream, request)

    def seen(self, **match: Any) -> list[Row]:
        with self._lock:
            rows = [request for _, request, _ in self.requests]
        return [r for r in rows if all(r.get(k) == v for k, v in match.items())]

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for records in self._consumer.poll(timeout_ms=50).values():
                    for record in records:
                        self._handle(record)
                self._tick()
        except BaseException as error:  # reported by the test through .error
            self.error = error
            raise

    def _handle(self, record: Any) -> None:
        stream = self._streams[record.topic]
        request = json.loads(record.value)
        headers: dict[str, list[bytes]] = {}
        for name, value in record.headers or []:
            headers.setdefault(name, []).append(value)
        with self._lock:
            self.requests.append((stream, request, headers))
        if stream is Stream.QUOTA:
            users = headers.get("user", [])
            if len(users) != 1:
                self.rejected.append(request)
                return
            request = {**request, "user": users[0].decode("utf-8")}
        if self.hold(request):
            with self._lock:
                self._held.append((stream, request))
            return
        self._answer(stream, request)

    def _answer(self, stream: Stream, request: Row) -> None:
        for row in self.handler(stream, request, now_ms()):
            self._produce(stream, row)

    def _tick(self) -> None:
        if not isinstance(self.handler, Cores):
            return
        deadline_ms = self.handler.next_deadline_ms()
        at_ms = now_ms()
        if deadline_ms is not None and deadline_ms <= at_ms:
            for row in self.handler.tick(at_ms):
                self._produce(Stream.GROUP, row)

    def _produce(self, stream: Stream, row: Row) -> None:
        if stream is Stream.GROUP:
            key = str(row["group_id"])
        else:
            key = str(row.get("user") or row.get("client_id") or "")
        value = json.dumps(row, separators=(",", ":")).encode("utf-8")
        headers = [("table", TABLES[stream].encode("utf-8"))]
        copies = 2 if self.duplicate(row) else 1
        for _ in range(copies):
            self._producer.send(
                self.answers_topic, key=key.encode("utf-8"), value=value, headers=headers
            ).get(timeout=30)
            with self._lock:
                self.answers.append((key, row))
