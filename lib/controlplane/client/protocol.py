"""The member's side of the classic group protocol, as pure functions: request bodies
(docs/reference/events.md §1), the leader's assignment, and what an answer's error means for the
client."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

from controlplane.client.assignors import (
    Assignor,
    MemberSubscription,
    TopicPartition,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from controlplane.client.config import ConsumerConfig
from controlplane.client.records import RecordSource
from controlplane.core.errors import Errors


@dataclass(frozen=True, slots=True)
class Generation:
    generation_id: int
    member_id: str
    protocol_name: str | None

    @property
    def valid(self) -> bool:
        return self.generation_id >= 0 and bool(self.member_id)


NO_GENERATION: Final = Generation(-1, "", None)


class Action(Enum):
    """What the client does about an answer's error (Kafka's AbstractCoordinator handlers)."""

    OK = "ok"
    RETRY = "retry"  # transient: back off, send again while time remains
    REJOIN = "rejoin"  # the group is rebalancing: rejoin with the same member id
    RESET_GENERATION = "reset_generation"  # stale generation: rejoin, keep the member id
    RESET_MEMBER = "reset_member"  # unknown member: rejoin as a new member
    FENCED = "fenced"  # another instance took our group.instance.id: fatal
    FATAL = "fatal"  # configuration or protocol error: raise to the application


_ACTIONS: Final = {
    Errors.NONE.name: Action.OK,
    Errors.COORDINATOR_NOT_AVAILABLE.name: Action.RETRY,
    Errors.NOT_COORDINATOR.name: Action.RETRY,
    Errors.COORDINATOR_LOAD_IN_PROGRESS.name: Action.RETRY,
    Errors.REBALANCE_IN_PROGRESS.name: Action.REJOIN,
    Errors.ILLEGAL_GENERATION.name: Action.RESET_GENERATION,
    Errors.UNKNOWN_MEMBER_ID.name: Action.RESET_MEMBER,
    Errors.FENCED_INSTANCE_ID.name: Action.FENCED,
}


def error_of(answer: Mapping[str, Any]) -> str:
    """The answer's error name; a per-partition offset error counts when the top is NONE."""
    top = str(answer.get("error") or "UNKNOWN_SERVER_ERROR")
    if top != Errors.NONE.name:
        return top
    for entry in answer.get("offsets") or []:
        code = entry.get("error_code") if isinstance(entry, Mapping) else None
        if isinstance(code, int) and code != 0:
            try:
                return Errors(code).name
            except ValueError:
                return "UNKNOWN_SERVER_ERROR"
    return top


def action_for(error: str) -> Action:
    return _ACTIONS.get(error, Action.FATAL)


def _identity(config: ConsumerConfig, member_id: str) -> dict[str, Any]:
    return {
        "group_id": config.group_id,
        "member_id": member_id,
        "group_instance_id": config.group_instance_id,
    }


def join_body(config: ConsumerConfig, member_id: str, reason: str | None) -> dict[str, Any]:
    metadata = encode_subscription(config.topics)
    return {
        "type": "join",
        **_identity(config, member_id),
        "client_id": config.client_id,
        "client_host": config.client_host,
        "session_timeout_ms": config.session_timeout_ms,
        "rebalance_timeout_ms": config.max_poll_interval_ms,  # KIP-62
        "protocol_type": config.protocol_type,
        "protocols": [
            {"name": name, "metadata": metadata} for name in config.partition_assignment_strategy
        ],
        "reason": reason,
    }


def sync_body(
    config: ConsumerConfig, generation: Generation, assignments: Sequence[Mapping[str, str]]
) -> dict[str, Any]:
    return {
        "type": "sync",
        **_identity(config, generation.member_id),
        "generation_id": generation.generation_id,
        "protocol_type": config.protocol_type,
        "protocol_name": generation.protocol_name,
        "assignments": list(assignments),
    }


def heartbeat_body(config: ConsumerConfig, generation: Generation) -> dict[str, Any]:
    return {
        "type": "heartbeat",
        **_identity(config, generation.member_id),
        "generation_id": generation.generation_id,
    }


def leave_body(config: ConsumerConfig, member_id: str, reason: str) -> dict[str, Any]:
    return {"type": "leave", **_identity(config, member_id), "reason": reason}


def commit_body(
    config: ConsumerConfig, generation: Generation, offsets: Mapping[TopicPartition, int]
) -> dict[str, Any]:
    return {
        "type": "offset_commit",
        **_identity(config, generation.member_id),
        "generation_id": generation.generation_id,
        "offsets": [
            {"topic": tp.topic, "partition": tp.partition, "offset": offset, "metadata": ""}
            for tp, offset in sorted(offsets.items())
        ],
    }


def fetch_body(
    config: ConsumerConfig, member_id: str, partitions: Iterable[TopicPartition]
) -> dict[str, Any]:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return {
        "type": "offset_fetch",
        **_identity(config, member_id),
        "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
    }


def committed_offsets(answer: Mapping[str, Any]) -> dict[TopicPartition, int]:
    """The committed offsets in an offset_fetch answer (entries without one are left out)."""
    result: dict[TopicPartition, int] = {}
    for entry in answer.get("offsets") or []:
        if not isinstance(entry, Mapping):
            continue
        topic, partition, offset = entry.get("topic"), entry.get("partition"), entry.get("offset")
        code = entry.get("error_code") or 0
        if not (isinstance(topic, str) and isinstance(partition, int)):
            continue
        if isinstance(offset, int) and code == 0 and offset >= 0:
            result[TopicPartition(topic, partition)] = offset
    return result


def leader_assignments(
    members: Sequence[Mapping[str, Any]], assignor: Assignor, source: RecordSource
) -> list[dict[str, str]]:
    """The leader's SyncGroup assignments over the group's subscribed topic partitions."""
    subscriptions = [
        MemberSubscription(
            str(m.get("member_id")),
            m.get("group_instance_id"),
            decode_subscription(m.get("metadata")),
        )
        for m in members
    ]
    topics = sorted({t for s in subscriptions for t in s.topics})
    counts = {t: n for t in topics if (n := source.partitions_for(t))}
    plan = assignor.assign(counts, subscriptions)
    return [
        {"member_id": s.member_id, "assignment": encode_assignment(plan.get(s.member_id, []))}
        for s in subscriptions
    ]
