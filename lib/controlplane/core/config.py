"""Settings of the state machines: Kafka's property names (docs/reference/events.md §7), validated
once.

This module is pure: it validates a mapping that the shell loaded from YAML. Unknown keys and
values of the wrong type are refused with a message naming the key. Engine and deployment
settings live in their own top-level sections (``ENGINE_SECTIONS``), which the cores ignore.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

INT32_MAX: Final = 2147483647
DEFAULT_ENTITY: Final = "<default>"

# Top-level sections that belong to the engine, the jobs, the clients or the demo.
ENGINE_SECTIONS: Final = frozenset({"engine", "sources", "sinks", "deployment", "client", "demo"})


class ConfigError(ValueError):
    """A configuration that cannot be used; the message names the key."""


@dataclass(frozen=True, slots=True)
class QuotaEntry:
    """One `kafka-configs --alter --add-config controller_mutation_rate=...` entry.

    ``user``/``client_id``: None = not part of the entity; ``"<default>"`` = the default entity.
    ``controller_mutation_rate``: None = the entry is unset (unlimited at that level).
    """

    user: str | None
    client_id: str | None
    controller_mutation_rate: float | None


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1800000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = INT32_MAX
    group_new_member_join_timeout_ms: int = 300000
    group_static_registration_timeout_ms: int | None = None
    group_static_expansion_timeout_ms: int | None = None
    offsets_retention_minutes: int = 10080

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000


@dataclass(frozen=True, slots=True)
class QuotaConfig:
    controller_quota_window_num: int = 11
    controller_quota_window_size_seconds: int = 1
    controller_quota_validate_only_charged: bool = True
    controller_quota_permissive_allowed: bool = True
    quotas: tuple[QuotaEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a configuration file holds: both cores' settings and the shell's sections."""

    coordinator: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    quota: QuotaConfig = field(default_factory=QuotaConfig)
    sections: Mapping[str, Any] = field(default_factory=dict)


# key -> (dataclass, attribute, type, nullable)
_COORDINATOR_KEYS: Final = {
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", False),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", False),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", False),
    "group.max.size": ("group_max_size", False),
    "group.new.member.join.timeout.ms": ("group_new_member_join_timeout_ms", False),
    "group.static.registration.timeout.ms": ("group_static_registration_timeout_ms", True),
    "group.static.expansion.timeout.ms": ("group_static_expansion_timeout_ms", True),
    "offsets.retention.minutes": ("offsets_retention_minutes", False),
}
_QUOTA_INT_KEYS: Final = {
    "controller.quota.window.num": "controller_quota_window_num",
    "controller.quota.window.size.seconds": "controller_quota_window_size_seconds",
}
_QUOTA_BOOL_KEYS: Final = {
    "controller.quota.validate.only.charged": "controller_quota_validate_only_charged",
    "controller.quota.permissive.allowed": "controller_quota_permissive_allowed",
}


def _int(key: str, value: object, *, nullable: bool, minimum: int) -> int | None:
    if value is None and nullable:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        kind = "an integer or null" if nullable else "an integer"
        raise ConfigError(f"{key}: expected {kind}, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{key}: must be >= {minimum}, got {value}")
    if value > 2**63 - 1:
        raise ConfigError(f"{key}: out of range: {value}")
    return value


def _quota_entry(index: int, raw: object) -> QuotaEntry:
    where = f"quotas[{index}]"
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{where}: expected a mapping with user/client_id/controller_mutation_rate"
        )
    unknown = set(raw) - {"user", "client_id", "controller_mutation_rate"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}")
    names: dict[str, str | None] = {}
    for key in ("user", "client_id"):
        value = raw.get(key)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f'{where}.{key}: expected a string or "<default>", got {value!r}')
        names[key] = value
    if names["user"] is None and names["client_id"] is None:
        raise ConfigError(f"{where}: needs a user, a client_id, or both")
    rate = raw.get("controller_mutation_rate")
    if rate is not None:
        if isinstance(rate, bool) or not isinstance(rate, int | float):
            raise ConfigError(f"{where}.controller_mutation_rate: expected a number, got {rate!r}")
        if not rate > 0 or rate != rate or rate == float("inf"):
            raise ConfigError(f"{where}.controller_mutation_rate: must be a positive finite number")
    return QuotaEntry(names["user"], names["client_id"], None if rate is None else float(rate))


def _coordinator(raw: Mapping[str, Any]) -> CoordinatorConfig:
    values: dict[str, int | None] = {}
    for key, (attr, nullable) in _COORDINATOR_KEYS.items():
        if key in raw:
            minimum = 1 if key == "group.max.size" else 0
            values[attr] = _int(key, raw[key], nullable=nullable, minimum=minimum)
    config = CoordinatorConfig(**values)  # type: ignore[arg-type]
    if config.group_min_session_timeout_ms > config.group_max_session_timeout_ms:
        raise ConfigError(
            "group.min.session.timeout.ms must not exceed group.max.session.timeout.ms "
            f"({config.group_min_session_timeout_ms} > {config.group_max_session_timeout_ms})"
        )
    if config.group_max_size > INT32_MAX:
        raise ConfigError(f"group.max.size: at most {INT32_MAX}")
    expansion = config.group_static_expansion_timeout_ms
    if expansion is not None and expansion > config.group_new_member_join_timeout_ms:
        raise ConfigError(
            f"group.static.expansion.timeout.ms ({expansion}) must not exceed "
            f"group.new.member.join.timeout.ms ({config.group_new_member_join_timeout_ms}): "
            "a member parked by the countdown would outlive its join timer"
        )
    return config


def _quota(raw: Mapping[str, Any]) -> QuotaConfig:
    values: dict[str, Any] = {}
    for key, attr in _QUOTA_INT_KEYS.items():
        if key in raw:
            values[attr] = _int(key, raw[key], nullable=False, minimum=1)
            if values[attr] > INT32_MAX:  # Kafka's ConfigDef type INT
                raise ConfigError(f"{key}: at most {INT32_MAX}")
    for key, attr in _QUOTA_BOOL_KEYS.items():
        if key in raw:
            if not isinstance(raw[key], bool):
                raise ConfigError(f"{key}: expected true or false, got {raw[key]!r}")
            values[attr] = raw[key]
    quotas = raw.get("quotas", [])
    if quotas is None:
        quotas = []
    if not isinstance(quotas, list):
        raise ConfigError(f"quotas: expected a list of entries, got {quotas!r}")
    entries = tuple(_quota_entry(i, entry) for i, entry in enumerate(quotas))
    seen: set[tuple[str | None, str | None]] = set()
    for entry in entries:
        ident = (entry.user, entry.client_id)
        if ident in seen:
            raise ConfigError(
                f"quotas: duplicate entry for user={entry.user} client_id={entry.client_id}"
            )
        seen.add(ident)
    return QuotaConfig(quotas=entries, **values)


def parse_settings(raw: Mapping[str, Any] | None) -> Settings:
    """Validate a configuration mapping (docs/reference/events.md §7). Raises ConfigError naming the
    key."""
    raw = {} if raw is None else raw
    if not isinstance(raw, Mapping):
        raise ConfigError("the configuration must be a mapping of Kafka property names")
    known = set(_COORDINATOR_KEYS) | set(_QUOTA_INT_KEYS) | set(_QUOTA_BOOL_KEYS) | {"quotas"}
    for key in raw:
        if not isinstance(key, str):
            raise ConfigError(f"configuration keys must be strings, got {key!r}")
        if key not in known and key not in ENGINE_SECTIONS:
            raise ConfigError(f"unknown configuration key: {key!r}")
    sections = {key: raw[key] for key in ENGINE_SECTIONS if key in raw}
    for key, value in sections.items():
        if value is not None and not isinstance(value, Mapping):
            raise ConfigError(f"{key}: expected a mapping (a section of engine settings)")
    return Settings(coordinator=_coordinator(raw), quota=_quota(raw), sections=sections)
