"""Partition assignors run by the group leader (Kafka's RangeAssignor and RoundRobinAssignor).

The coordinator never looks inside protocol metadata or assignments; the members agree on this
project's encoding: subscription metadata and assignments are base64 of compact JSON
(``{"topics": [...]}`` and ``{"partitions": [[topic, partition], ...]}``), not Kafka's binary
ConsumerProtocol. Assignors are pluggable: anything with ``name`` and ``assign``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    member_id: str
    group_instance_id: str | None
    topics: tuple[str, ...]

    @property
    def sort_key(self) -> tuple[int, str, str]:
        # Kafka's MemberInfo order: static members first, by group.instance.id; then dynamic
        # members, by member id.
        if self.group_instance_id is not None:
            return (0, self.group_instance_id, self.member_id)
        return (1, self.member_id, self.member_id)


Assignment = dict[str, list[TopicPartition]]


class Assignor(Protocol):
    name: str

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment: ...


class RangeAssignor:
    """Per topic: consecutive partition ranges; the first ``n % c`` members get one more."""

    name = "range"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment:
        result: Assignment = {m.member_id: [] for m in members}
        for topic in sorted(partitions_per_topic):
            count = partitions_per_topic[topic]
            consumers = sorted((m for m in members if topic in m.topics), key=_key)
            if not consumers:
                continue
            per_member, extra = divmod(count, len(consumers))
            start = 0
            for index, member in enumerate(consumers):
                length = per_member + (1 if index < extra else 0)
                result[member.member_id].extend(
                    TopicPartition(topic, p) for p in range(start, start + length)
                )
                start += length
        return result


class RoundRobinAssignor:
    """All partitions in (topic, partition) order, dealt to members in turn, skipping members
    not subscribed to a partition's topic."""

    name = "roundrobin"

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> Assignment:
        result: Assignment = {m.member_id: [] for m in members}
        ring = sorted(members, key=_key)
        if not ring:
            return result
        position = 0
        for topic in sorted(partitions_per_topic):
            if not any(topic in m.topics for m in ring):
                continue
            for partition in range(partitions_per_topic[topic]):
                while topic not in ring[position % len(ring)].topics:
                    position += 1
                result[ring[position % len(ring)].member_id].append(
                    TopicPartition(topic, partition)
                )
                position += 1
        return result


BUILTIN_ASSIGNORS: dict[str, Assignor] = {
    RangeAssignor.name: RangeAssignor(),
    RoundRobinAssignor.name: RoundRobinAssignor(),
}


def _key(member: MemberSubscription) -> tuple[int, str, str]:
    return member.sort_key


def encode_subscription(topics: Iterable[str]) -> str:
    payload = json.dumps({"topics": sorted(set(topics))}, separators=(",", ":"))
    return base64.b64encode(payload.encode()).decode()


def decode_subscription(metadata: str | None) -> tuple[str, ...]:
    """The topics of a member's metadata; unreadable metadata subscribes to nothing."""
    data = _decode(metadata)
    topics = data.get("topics") if isinstance(data, dict) else None
    if not isinstance(topics, list):
        return ()
    return tuple(t for t in topics if isinstance(t, str))


def encode_assignment(partitions: Iterable[TopicPartition]) -> str:
    pairs = [[tp.topic, tp.partition] for tp in sorted(partitions)]
    return base64.b64encode(
        json.dumps({"partitions": pairs}, separators=(",", ":")).encode()
    ).decode()


def decode_assignment(assignment: str | None) -> tuple[TopicPartition, ...]:
    """The partitions of an assignment; empty (Kafka's empty bytes) for null or unreadable."""
    data = _decode(assignment)
    pairs = data.get("partitions") if isinstance(data, dict) else None
    if not isinstance(pairs, list):
        return ()
    result = []
    for pair in pairs:
        if (
            isinstance(pair, list)
            and len(pair) == 2
            and isinstance(pair[0], str)
            and isinstance(pair[1], int)
        ):
            result.append(TopicPartition(pair[0], pair[1]))
    return tuple(sorted(result))


def _decode(text: str | None) -> object:
    if not text:
        return None
    try:
        return json.loads(base64.b64decode(text, validate=True))
    except (binascii.Error, ValueError):
        return None
