"""Records for the member's ``poll()``: a pluggable record source and a KIP-41 fetcher.

KIP-41 rules kept here:
* ``poll`` returns at most ``max.poll.records`` records.
* Round-robin over partitions, remembering where it stopped: the partition at the front of the
  rotation is drained first; it keeps the front while it still has buffered records, and moves to
  the back once its fetched data is exhausted, so every partition gets its turn over successive
  polls and none starves.
* Prefetch: before ``poll`` returns, fetches go out only for assigned partitions that have
  nothing buffered, so the buffer stays bounded by one fetch per partition.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from controlplane.client.assignors import TopicPartition
from controlplane.client.clock import Clock


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    value: str

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class RecordSource(Protocol):
    def partitions_for(self, topic: str) -> int | None:
        """The topic's partition count, or None if the topic does not exist."""
        ...

    def end_offset(self, tp: TopicPartition) -> int: ...

    def read(self, tp: TopicPartition, offset: int, max_records: int) -> list[Record]: ...


class InMemoryLog:
    """A thread-safe in-process log of topics (the demo's and the tests' record source)."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._lock = threading.Lock()
        self._topics: dict[str, list[list[str]]] = {}
        self._clock = clock

    def create_topic(self, topic: str, partitions: int) -> None:
        if partitions <= 0:
            raise ValueError(f"{topic}: a topic needs at least one partition")
        with self._lock:
            self._topics.setdefault(topic, [[] for _ in range(partitions)])

    def append(self, topic: str, partition: int, values: Iterable[str]) -> int:
        """Append values to one partition; returns the new end offset."""
        with self._lock:
            log = self._topics[topic][partition]
            log.extend(values)
            end = len(log)
        if self._clock is not None:
            self._clock.notify()
        return end

    def partitions_for(self, topic: str) -> int | None:
        with self._lock:
            partitions = self._topics.get(topic)
            return None if partitions is None else len(partitions)

    def end_offset(self, tp: TopicPartition) -> int:
        with self._lock:
            partitions = self._topics.get(tp.topic, [])
            return len(partitions[tp.partition]) if tp.partition < len(partitions) else 0

    def read(self, tp: TopicPartition, offset: int, max_records: int) -> list[Record]:
        with self._lock:
            partitions = self._topics.get(tp.topic, [])
            if tp.partition >= len(partitions):
                return []
            values = partitions[tp.partition][offset : offset + max_records]
        return [Record(tp.topic, tp.partition, offset + i, value) for i, value in enumerate(values)]


class Fetcher:
    """Positions, buffered fetches and the KIP-41 drain of the assigned partitions."""

    def __init__(self, source: RecordSource, max_partition_fetch_records: int) -> None:
        self._source = source
        self._fetch_size = max_partition_fetch_records
        self._positions: dict[TopicPartition, int] = {}  # next offset to return
        self._fetch_positions: dict[TopicPartition, int] = {}  # next offset to fetch
        self._buffers: dict[TopicPartition, deque[Record]] = {}
        self._rotation: deque[TopicPartition] = deque()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Keep the state of partitions still assigned; new ones wait for ``seek``."""
        wanted = sorted(set(partitions))
        for tp in list(self._buffers):
            if tp not in wanted:
                self._drop(tp)
        for tp in wanted:
            if tp not in self._buffers:
                self._buffers[tp] = deque()
                self._rotation.append(tp)

    def assignment(self) -> list[TopicPartition]:
        return sorted(self._buffers)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        if tp not in self._buffers:
            raise ValueError(f"{tp} is not assigned")
        self._positions[tp] = offset
        self._fetch_positions[tp] = offset
        self._buffers[tp].clear()

    def positions(self) -> dict[TopicPartition, int]:
        return {tp: self._positions[tp] for tp in self._buffers if tp in self._positions}

    def has_data(self) -> bool:
        """Anything buffered, or anything fetchable (for waits; cheap)."""
        for tp, buffer in self._buffers.items():
            if buffer:
                return True
            position = self._fetch_positions.get(tp)
            if position is not None and self._source.end_offset(tp) > position:
                return True
        return False

    def poll(self, max_records: int) -> list[Record]:
        self._fetch_empty()
        out: list[Record] = []
        while len(out) < max_records and self._rotate_to_data():
            tp = self._rotation[0]
            buffer = self._buffers[tp]
            take = min(len(buffer), max_records - len(out))
            out.extend(buffer.popleft() for _ in range(take))
            self._positions[tp] = out[-1].offset + 1
            if not buffer:
                self._rotation.rotate(-1)  # exhausted: its turn ends, to the back
        self._fetch_empty()  # prefetch for the next poll, only where nothing is buffered
        return out

    def _rotate_to_data(self) -> bool:
        for _ in range(len(self._rotation)):
            if self._buffers[self._rotation[0]]:
                return True
            self._rotation.rotate(-1)
        return False

    def _fetch_empty(self) -> None:
        for tp in self._rotation:
            buffer = self._buffers[tp]
            position = self._fetch_positions.get(tp)
            if buffer or position is None:
                continue
            records = self._source.read(tp, position, self._fetch_size)
            if records:
                buffer.extend(records)
                self._fetch_positions[tp] = records[-1].offset + 1

    def _drop(self, tp: TopicPartition) -> None:
        del self._buffers[tp]
        self._positions.pop(tp, None)
        self._fetch_positions.pop(tp, None)
        self._rotation.remove(tp)
