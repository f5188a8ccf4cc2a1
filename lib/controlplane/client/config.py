"""Client settings with Kafka's names and defaults (ConsumerConfig, AdminClientConfig).

Every value is settable: build the dataclass directly, or from a mapping of Kafka property
names with ``consumer_config`` / ``admin_config`` (unknown names are refused, naming the key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final

DEFAULT_SESSION_TIMEOUT_MS: Final = 45_000
DEFAULT_HEARTBEAT_INTERVAL_MS: Final = 3_000
DEFAULT_MAX_POLL_INTERVAL_MS: Final = 300_000
DEFAULT_MAX_POLL_RECORDS: Final = 500
DEFAULT_REQUEST_TIMEOUT_MS: Final = 30_000
DEFAULT_API_TIMEOUT_MS: Final = 60_000
DEFAULT_RETRY_BACKOFF_MS: Final = 100
JOIN_GROUP_TIMEOUT_LAPSE_MS: Final = 5_000  # Kafka: a JoinGroup may wait rebalance timeout + 5 s


class ClientConfigError(ValueError):
    """A client setting that cannot be used; the message names the key."""


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    group_id: str
    topics: tuple[str, ...] = ()
    client_id: str = "consumer"
    client_host: str = "localhost"
    group_instance_id: str | None = None  # static membership (KIP-345)
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    max_poll_interval_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS
    max_poll_records: int = DEFAULT_MAX_POLL_RECORDS
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    default_api_timeout_ms: int = DEFAULT_API_TIMEOUT_MS
    retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS
    partition_assignment_strategy: tuple[str, ...] = ("range", "roundrobin")
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    max_partition_fetch_records: int = 100  # the fetch size of one partition (records, not bytes)
    protocol_type: str = "consumer"

    def __post_init__(self) -> None:
        _check_positive(self, ("heartbeat_interval_ms", "max_poll_records", "session_timeout_ms"))
        _check_positive(self, ("max_poll_interval_ms", "max_partition_fetch_records"))
        _check_non_negative(self, ("request_timeout_ms", "default_api_timeout_ms"))
        _check_non_negative(self, ("retry_backoff_ms", "auto_commit_interval_ms"))
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ClientConfigError(
                "heartbeat.interval.ms must be lower than session.timeout.ms "
                f"({self.heartbeat_interval_ms} >= {self.session_timeout_ms})"
            )
        if not self.group_id:
            raise ClientConfigError("group.id: must not be empty for a group member")
        if not self.partition_assignment_strategy:
            raise ClientConfigError("partition.assignment.strategy: needs at least one assignor")

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def join_request_timeout_ms(self) -> int:
        """How long one JoinGroup may wait: it is parked until the rebalance completes."""
        return max(self.request_timeout_ms, self.max_poll_interval_ms + JOIN_GROUP_TIMEOUT_LAPSE_MS)


@dataclass(frozen=True, slots=True)
class AdminConfig:
    user: str
    client_id: str = "adminclient"
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS
    default_api_timeout_ms: int = DEFAULT_API_TIMEOUT_MS
    retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS

    def __post_init__(self) -> None:
        _check_non_negative(self, ("request_timeout_ms", "default_api_timeout_ms"))
        _check_non_negative(self, ("retry_backoff_ms",))
        if not self.user:
            raise ClientConfigError("user: the admin client needs its principal")


def _property_name(attribute: str) -> str:
    return attribute.replace("_", ".")


def _check_positive(config: object, names: tuple[str, ...]) -> None:
    for name in names:
        if getattr(config, name) <= 0:
            raise ClientConfigError(f"{_property_name(name)}: must be > 0")


def _check_non_negative(config: object, names: tuple[str, ...]) -> None:
    for name in names:
        if getattr(config, name) < 0:
            raise ClientConfigError(f"{_property_name(name)}: must be >= 0")


def _coerce(key: str, value: Any, default: Any) -> Any:
    if isinstance(default, tuple):
        if isinstance(value, str):
            return tuple(item.strip() for item in value.split(",") if item.strip())
        if isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
            return tuple(value)
        raise ClientConfigError(f"{key}: expected a list of strings, got {value!r}")
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ClientConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ClientConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if value is not None and not isinstance(value, str):
        raise ClientConfigError(f"{key}: expected a string, got {value!r}")
    return value


def _from_properties(base: Any, properties: Mapping[str, Any]) -> Any:
    by_name = {_property_name(f.name): f.name for f in fields(base)}
    changes: dict[str, Any] = {}
    for key, value in properties.items():
        if key not in by_name:
            raise ClientConfigError(f"unknown client setting: {key!r}")
        attribute = by_name[key]
        changes[attribute] = _coerce(key, value, getattr(base, attribute))
    return replace(base, **changes)


def consumer_config(group_id: str, properties: Mapping[str, Any] | None = None) -> ConsumerConfig:
    """A ConsumerConfig from Kafka property names (``session.timeout.ms: 10000`` ...)."""
    result: ConsumerConfig = _from_properties(ConsumerConfig(group_id), properties or {})
    return result


def admin_config(user: str, properties: Mapping[str, Any] | None = None) -> AdminConfig:
    result: AdminConfig = _from_properties(AdminConfig(user), properties or {})
    return result


__all__ = [
    "AdminConfig",
    "ClientConfigError",
    "ConsumerConfig",
    "admin_config",
    "consumer_config",
]
