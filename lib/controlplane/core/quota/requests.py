"""Mutation requests (docs/reference/events.md §3) as frozen values. The wire parser builds them."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from controlplane.core.frozen import fast_constructor


class MutationType(StrEnum):
    CREATE_TOPICS = "create_topics"
    CREATE_PARTITIONS = "create_partitions"
    DELETE_TOPICS = "delete_topics"


class Mode(StrEnum):
    """``StrictControllerMutationQuota`` or ``PermissiveControllerMutationQuota`` (§2)."""

    STRICT = "strict"
    PERMISSIVE = "permissive"


# The first request version of each API that may answer THROTTLING_QUOTA_EXCEEDED (§2.1).
STRICT_SINCE_VERSION: Final = {
    MutationType.CREATE_TOPICS: 6,
    MutationType.DELETE_TOPICS: 5,
    MutationType.CREATE_PARTITIONS: 3,
}


@dataclass(frozen=True, slots=True)
class TopicMutation:
    """One topic of a request: ``partitions`` partition mutations (created or deleted)."""

    name: str
    partitions: int


@dataclass(frozen=True, slots=True)
class MutationRequest:
    event_id: str
    event_time_ms: int
    type: MutationType
    user: str
    client_id: str
    request_version: int | None  # None = the newest version (strict)
    validate_only: bool
    topics: tuple[TopicMutation, ...]  # in processing order


# Quick constructors (core/frozen.py) for the wire parser, which builds them per event.
make_topic = fast_constructor(TopicMutation)
make_request = fast_constructor(MutationRequest)


def mode_of(request: MutationRequest, *, permissive_allowed: bool) -> Mode:
    """Strict from the version of §2.1 on, and when the version is null; permissive below it,
    unless ``controller.quota.permissive.allowed`` is false."""
    version = request.request_version
    if not permissive_allowed or version is None:
        return Mode.STRICT
    return Mode.STRICT if version >= STRICT_SINCE_VERSION[request.type] else Mode.PERMISSIVE
