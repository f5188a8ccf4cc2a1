"""The demo's fleet: consumer applications (a GroupMember and its poll loop), a producer that
keeps the topics growing, and an admin tool creating topics in bursts."""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from controlplane.client.admin import AdminClient, TopicResult
from controlplane.client.assignors import TopicPartition
from controlplane.client.clock import Clock
from controlplane.client.config import ConsumerConfig
from controlplane.client.member import GroupMember, MemberState
from controlplane.client.records import InMemoryLog
from controlplane.client.timeouts import ClientError
from controlplane.client.transport import Transport


class MemberApp:
    """One consumer process: poll, process, repeat, in its own thread."""

    def __init__(
        self,
        name: str,
        config: ConsumerConfig,
        transport: Transport,
        clock: Clock,
        log: InMemoryLog,
    ) -> None:
        self.name = name
        self.clock = clock
        self.member = GroupMember(config, transport, clock, log, auto_offset_reset="earliest")
        self.consumed = 0
        self.first_offsets: dict[TopicPartition, int] = {}
        self.error: str | None = None
        self._stall_ms = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> MemberApp:
        self._thread = self.clock.spawn(self._run, f"app-{self.name}")
        return self

    def stall(self, duration_ms: int) -> None:
        """The application gets stuck processing (no poll) for ``duration_ms``."""
        self._stall_ms = duration_ms

    def crash(self) -> None:
        self._stop.set()
        self.member.abandon()

    def close(self, timeout_ms: int = 30_000) -> None:
        self._stop.set()
        if self._thread is not None:
            self.clock.join(self._thread, timeout_ms)
        if self.member.state is not MemberState.CLOSED:
            self.member.close(timeout_ms)

    @property
    def stable(self) -> bool:
        return self.member.state is MemberState.STABLE

    def _run(self) -> None:
        while not self._stop.is_set():
            if self._stall_ms:
                stall_ms, self._stall_ms = self._stall_ms, 0
                self.clock.sleep(stall_ms)
            try:
                records = self.member.poll(1_000)
            except ClientError as error:
                if not self._stop.is_set():
                    self.error = str(error)
                return
            for record in records:
                self.first_offsets.setdefault(record.topic_partition, record.offset)
            self.consumed += len(records)
            if records:
                self.clock.sleep(20)  # the "processing"


class Producer:
    """Appends records to every partition of the demo topics until stopped."""

    def __init__(self, clock: Clock, log: InMemoryLog, topics: Mapping[str, int]) -> None:
        self.clock = clock
        self.log = log
        self.topics = dict(topics)
        self.produced = 0
        self._stop = threading.Event()
        self._random = random.Random(7)
        self._thread = clock.spawn(self._run, "producer")

    def stop(self) -> None:
        self._stop.set()
        self.clock.join(self._thread, 5_000)

    def _run(self) -> None:
        while not self._stop.is_set():
            for topic, partitions in self.topics.items():
                partition = self._random.randrange(partitions)
                self.log.append(topic, partition, [f"{topic}-{i}" for i in range(10)])
                self.produced += 10
            self.clock.sleep(200)


@dataclass(slots=True)
class AdminTotals:
    requested: int = 0
    created: int = 0
    failed: int = 0
    retried_topics: int = 0  # topics that needed more than one request (throttled, then retried)
    failures: list[str] = field(default_factory=list)


class AdminTool:
    """Creates topics in bursts; throttled topics are retried by the AdminClient."""

    def __init__(
        self,
        clock: Clock,
        admin: AdminClient,
        *,
        bursts: int,
        topics_per_burst: int,
        partitions: int,
        interval_ms: int,
    ) -> None:
        self.clock = clock
        self.admin = admin
        self.totals = AdminTotals()
        self._bursts = bursts
        self._topics_per_burst = topics_per_burst
        self._partitions = partitions
        self._interval_ms = interval_ms
        self._stop = threading.Event()
        self._thread = clock.spawn(self._run, "admin-tool")

    def stop(self, timeout_ms: int) -> None:
        self._stop.set()
        self.clock.notify()  # it may be waiting out the interval before its next burst
        self.clock.join(self._thread, timeout_ms)

    def _run(self) -> None:
        for burst in range(self._bursts):
            if self._stop.is_set():
                return
            names = {f"demo-b{burst}-t{i}": self._partitions for i in range(self._topics_per_burst)}
            self.totals.requested += len(names)
            try:
                results = self.admin.create_topics(names)
            except ClientError as error:
                self.totals.failures.append(str(error))
                return
            self._count(results)
            self.clock.wait_for(self._stop.is_set, self._interval_ms)

    def _count(self, results: Mapping[str, TopicResult]) -> None:
        for result in results.values():
            if result.ok:
                self.totals.created += 1
            else:
                self.totals.failed += 1
                self.totals.failures.append(f"{result.name}: {result.error}")
            if result.attempts > 1:
                self.totals.retried_topics += 1
