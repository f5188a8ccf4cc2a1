"""KafkaTransport: requests produced to the engine's request topics, answers consumed from its
answers topic (the Kafka deployment; docs/client.md, "Over Kafka").

The contract shared with the engine:

* Requests: one wire request (docs/reference/events.md §1/§3) a record, UTF-8 JSON, on the
  coordinator's or the quota's request topic. Key: the ``group_id`` (coordinator requests: one
  group's requests stay in one partition, in order) or the principal (quota requests; the
  ``client_id`` when there is none). Header ``user``: the principal. In production the gateway
  that authenticated the client sets it and only the gateway may write the request topics (the
  engine trusts the header, never the payload's ``user``); here the client sets it itself, from
  ``principal`` or else the request's ``user``.
* Answers: the engine produces each ``decisions`` and ``quota_decisions`` row, after its Delta
  tables are written, to the answers topic: key = the row's ``group_id`` (decisions) or ``user``
  (quota_decisions; the ``client_id`` if null), value = the row as JSON, header ``table``.
  Partition = Kafka's default partitioner on the key (murmur2), so the client computes which
  answers partition its answer will be on from the request alone (``answer_partition``).
* Positioning: before a request whose answer key is K is produced, the client is assigned K's
  answers partition and knows its end offset, and reads from there. The answer is produced after
  the request is read, so it is at or after that offset: nothing is missed, and the partition's
  history is never read.
* At least once: a replayed micro-batch produces its answers again. Answers are routed by
  ``event_id`` and a route is used once (``AnswerRoutes``): a duplicate finds no route and is
  dropped, as are answers for other clients that share the partition.

One reader thread owns the consumer (kafka-python's consumer is not thread-safe): it assigns and
positions the partitions that senders ask for, produces the requests that waited for that, and
polls. ``send`` never blocks on the network: on a partition already positioned it hands the
record to the producer (asynchronous); otherwise it queues it for the reader thread. Requests of
one key keep their order (both paths produce under one lock). A request whose caller stopped
waiting (``forget``) before it was produced is not produced.

Real clock only: the reader thread waits in the network, not in the clock.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controlplane.client.clock import Clock
from controlplane.client.transport import AnswerCallback, AnswerRoutes, Stream

log = logging.getLogger(__name__)

USER_HEADER = "user"
TABLE_HEADER = "table"
ANSWER_TABLES = {Stream.GROUP: "decisions", Stream.QUOTA: "quota_decisions"}
REMEMBERED_ANSWERS = 100_000  # event_ids delivered, kept to tell a duplicate from a stranger


def answer_key(stream: Stream, request: Mapping[str, Any], principal: str | None) -> str:
    """The key of a request's answer (and of the request itself): the ``group_id`` of a
    coordinator request; the principal of a quota request, else its ``client_id``."""
    if stream is Stream.GROUP:
        group_id = request.get("group_id")
        if not isinstance(group_id, str):
            raise ValueError("a coordinator request over Kafka needs a group_id (its record key)")
        return group_id
    return principal or str(request.get("client_id") or "")


def answer_partition(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key`` (murmur2 of its UTF-8 bytes, as
    the Java producer and kafka-python's ``DefaultPartitioner``) among ``partitions``."""
    from kafka.partitioner.default import murmur2

    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, got {partitions}")
    return int(murmur2(key.encode("utf-8")) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True, slots=True)
class _Outgoing:
    event_id: str
    topic: str
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


class KafkaTransport:
    """See the module docstring. ``security``: kafka-python settings added to both clients
    (``security_protocol``, ``sasl_mechanism``, ``sasl_plain_username``, ... ; e.g.
    ``LocalBroker.client_config(user)`` without its ``bootstrap_servers``)."""

    def __init__(
        self,
        clock: Clock,
        bootstrap_servers: str,
        request_topics: Mapping[Stream, str],
        answers_topic: str,
        *,
        principal: str | None = None,
        security: Mapping[str, Any] | None = None,
        client_id: str = "controlplane-client",
        poll_interval_ms: int = 100,
        linger_ms: int = 0,
        metadata_timeout_ms: int = 30_000,
    ) -> None:
        from kafka import KafkaConsumer, KafkaProducer

        self.clock = clock
        self.routes = AnswerRoutes()
        self.request_topics = dict(request_topics)
        self.answers_topic = answers_topic
        self.principal = principal
        self._poll_interval_ms = poll_interval_ms
        self._timeout_ms = metadata_timeout_ms
        self._bootstrap = bootstrap_servers
        common: dict[str, Any] = {
            "bootstrap_servers": bootstrap_servers,
            "client_id": client_id,
            **(security or {}),
        }
        self._producer = KafkaProducer(
            **common,
            acks="all",
            linger_ms=linger_ms,
            allow_auto_create_topics=False,
            max_block_ms=metadata_timeout_ms,
        )
        self._consumer: Any = None
        try:
            for topic in self.request_topics.values():
                self._partitions(topic)
            self.answer_partitions = len(self._partitions(answers_topic))
            self._consumer = KafkaConsumer(
                **common,
                group_id=None,
                enable_auto_commit=False,
                allow_auto_create_topics=False,
                fetch_max_wait_ms=poll_interval_ms,
            )
        except BaseException:
            self._producer.close(timeout=1)
            raise
        self._lock = threading.Lock()
        self._closed = False
        self._wanted: set[int] = set()  # answers partitions senders asked for
        self._positions: dict[int, int] = {}  # positioned partition -> its end offset then
        self._queued: dict[int, list[_Outgoing]] = {}  # waiting for their partition
        self._delivered: deque[str] = deque(maxlen=REMEMBERED_ANSWERS)
        self._delivered_ids: set[str] = set()
        self.produced = 0
        self.produce_errors = 0
        self.answers_read = 0
        self.delivered = 0
        self.duplicates = 0  # answers whose event_id was already delivered
        self.strangers = 0  # answers nobody here waits for (other clients, forgotten calls)
        self._reader = clock.spawn(self._read_loop, "kafka-answer-reader")

    # --- Transport ---------------------------------------------------------------------------

    def send(self, stream: Stream, request: Mapping[str, Any], on_answer: AnswerCallback) -> None:
        topic = self.request_topics.get(stream)
        if topic is None:
            raise ValueError(f"no request topic configured for the {stream} stream")
        user = self.principal
        if user is None and stream is Stream.QUOTA:
            user = request.get("user") or None
        key = answer_key(stream, request, user)
        partition = answer_partition(key, self.answer_partitions)
        event_id = str(request["event_id"])
        headers = ((USER_HEADER, str(user).encode("utf-8")),) if user else ()
        value = json.dumps(request, separators=(",", ":")).encode("utf-8")
        outgoing = _Outgoing(event_id, topic, key.encode("utf-8"), value, headers)
        self.routes.add(event_id, on_answer)
        with self._lock:
            if self._closed:
                self.routes.forget(event_id)
                raise RuntimeError("the transport is closed")
            if partition in self._positions:
                self._produce(outgoing)
                return
            self._queued.setdefault(partition, []).append(outgoing)
            self._wanted.add(partition)

    def forget(self, event_id: str) -> None:
        self.routes.forget(event_id)
        with self._lock:
            for partition, waiting in self._queued.items():
                self._queued[partition] = [o for o in waiting if o.event_id != event_id]

    def close(self, timeout_ms: int = 5_000) -> None:
        """Stop the reader (it closes the consumer), then flush and close the producer.
        Requests still waiting for their partition to be positioned are dropped."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queued.clear()
        self.clock.notify()
        if not self.clock.join(self._reader, timeout_ms):
            log.warning("the answers reader did not stop within %d ms", timeout_ms)
        self._producer.close(timeout=timeout_ms / 1000)

    # --- inspection --------------------------------------------------------------------------

    @property
    def reading(self) -> bool:
        """The reader thread is running (until ``close``)."""
        return self._reader.is_alive()

    def positions(self) -> dict[int, int]:
        """Answers partition -> the end offset it was positioned at (before its first request)."""
        with self._lock:
            return dict(self._positions)

    # --- internals ---------------------------------------------------------------------------

    def _partitions(self, topic: str) -> set[int]:
        """The topic's partitions, from the producer's metadata (topics are never created here)."""
        from kafka.errors import KafkaTimeoutError

        try:
            partitions = self._producer.partitions_for(topic)  # waits up to max_block_ms
        except KafkaTimeoutError:
            partitions = None
        if not partitions:
            raise ValueError(
                f"topic {topic!r} not found on {self._bootstrap} within {self._timeout_ms} ms"
                " (create the request and answers topics first)"
            )
        return set(partitions)

    def _produce(self, outgoing: _Outgoing) -> None:
        """Hand one record to the producer (called with ``_lock`` held: one order per key)."""
        future = self._producer.send(
            outgoing.topic, value=outgoing.value, key=outgoing.key, headers=list(outgoing.headers)
        )
        future.add_errback(self._produce_failed, outgoing.event_id)
        self.produced += 1

    def _produce_failed(self, event_id: str, error: BaseException) -> None:
        # The call waits for its deadline and is retried as a lost request would be.
        self.produce_errors += 1
        log.warning("producing request %s failed: %s", event_id, error)

    def _read_loop(self) -> None:
        try:
            while not self._closed:
                try:
                    self._position_wanted()
                    batches = self._consumer.poll(timeout_ms=self._poll_interval_ms)
                except Exception as error:  # the broker away, a metadata hiccup: try again
                    log.warning("reading answers from %s failed: %s", self.answers_topic, error)
                    self.clock.wait_for(lambda: self._closed, self._poll_interval_ms)
                    continue
                for records in batches.values():
                    for record in records:
                        self._route(record.value)
        finally:
            self._consumer.close(autocommit=False, timeout_ms=1_000)

    def _position_wanted(self) -> None:
        """Assign the partitions senders asked for, seek each to its end offset, then produce
        the requests that waited for it (the contract's order: positioned, then produced)."""
        from kafka import TopicPartition

        with self._lock:
            new = sorted(self._wanted - self._positions.keys())
        if not new:
            return
        fresh = [TopicPartition(self.answers_topic, p) for p in new]
        owned = [TopicPartition(self.answers_topic, p) for p in self._positions]
        self._consumer.assign(owned + fresh)
        ends = self._consumer.end_offsets(fresh, timeout_ms=self._timeout_ms)
        for tp in fresh:
            self._consumer.seek(tp, ends[tp])
        with self._lock:
            for tp in fresh:
                self._positions[tp.partition] = ends[tp]
                for outgoing in self._queued.pop(tp.partition, []):
                    self._produce(outgoing)

    def _route(self, value: bytes | None) -> None:
        self.answers_read += 1
        try:
            row = json.loads(value) if value is not None else None
        except ValueError:
            row = None
        if not isinstance(row, dict) or not isinstance(row.get("event_id"), str):
            log.warning("an answer on %s is not a JSON row with an event_id", self.answers_topic)
            return
        event_id: str = row["event_id"]
        if self.routes.deliver(row):
            self.delivered += 1
            if len(self._delivered) == self._delivered.maxlen:
                self._delivered_ids.discard(self._delivered[0])
            self._delivered.append(event_id)
            self._delivered_ids.add(event_id)
        elif event_id in self._delivered_ids:
            self.duplicates += 1
        else:
            self.strangers += 1
