"""Kafka's error codes and names (clients/.../protocol/Errors.java), as the wire carries them."""

from __future__ import annotations

from enum import IntEnum


class Errors(IntEnum):
    """The subset of Kafka's error codes the coordinator and quota answer with."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    GROUP_AUTHORIZATION_FAILED = 30
    INVALID_PARTITIONS = 37
    INVALID_REQUEST = 42
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    THROTTLING_QUOTA_EXCEEDED = 89

    @property
    def code(self) -> int:
        return int(self)
