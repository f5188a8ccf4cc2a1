"""Configuration (docs/reference/events.md §7): defaults, every key's type check, and clear
messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.core.config import (
    ConfigError,
    CoordinatorConfig,
    QuotaConfig,
    QuotaEntry,
    parse_settings,
)
from controlplane.settings import load_settings

INT_KEYS = [
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "group.initial.rebalance.delay.ms",
    "group.max.size",
    "group.new.member.join.timeout.ms",
    "offsets.retention.minutes",
    "controller.quota.window.num",
    "controller.quota.window.size.seconds",
]
NULLABLE_KEYS = ["group.static.registration.timeout.ms", "group.static.expansion.timeout.ms"]
BOOL_KEYS = ["controller.quota.validate.only.charged", "controller.quota.permissive.allowed"]


def test_defaults_are_kafkas() -> None:
    settings = parse_settings({})
    assert settings.coordinator == CoordinatorConfig(
        group_min_session_timeout_ms=6000,
        group_max_session_timeout_ms=1800000,
        group_initial_rebalance_delay_ms=3000,
        group_max_size=2147483647,
        group_new_member_join_timeout_ms=300000,
        group_static_registration_timeout_ms=None,
        group_static_expansion_timeout_ms=None,
        offsets_retention_minutes=10080,
    )
    assert settings.quota == QuotaConfig(11, 1, True, True, ())
    assert settings.coordinator.offsets_retention_ms == 10080 * 60_000


def test_every_key_is_read() -> None:
    raw = {key: 7 for key in INT_KEYS} | {key: 5 for key in NULLABLE_KEYS}
    raw |= {key: False for key in BOOL_KEYS}
    settings = parse_settings(raw)
    assert settings.coordinator.group_min_session_timeout_ms == 7
    assert settings.coordinator.group_static_expansion_timeout_ms == 5
    assert settings.quota.controller_quota_window_num == 7
    assert settings.quota.controller_quota_permissive_allowed is False


@pytest.mark.parametrize("key", INT_KEYS + NULLABLE_KEYS)
@pytest.mark.parametrize("bad", ["3000", 1.5, True, [1]])
def test_integer_keys_refuse_other_types(key: str, bad: object) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse_settings({key: bad})


@pytest.mark.parametrize("key", INT_KEYS)
def test_integer_keys_refuse_null(key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse_settings({key: None})


@pytest.mark.parametrize("key", NULLABLE_KEYS)
def test_opt_in_timeouts_accept_null(key: str) -> None:
    parse_settings({key: None})


@pytest.mark.parametrize("key", BOOL_KEYS)
@pytest.mark.parametrize("bad", ["true", 1, None])
def test_boolean_keys_refuse_other_types(key: str, bad: object) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        parse_settings({key: bad})


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"group.min.session.timeout": 1}, "unknown configuration key"),  # typo
        ({"group.max.size": 0}, "group.max.size: must be >= 1"),
        ({"group.max.size": 2147483648}, "at most 2147483647"),
        ({"controller.quota.window.num": 0}, "must be >= 1"),
        # Kafka's ConfigDef types both INT: a larger value is refused, not taken as a long.
        ({"controller.quota.window.num": 2147483648}, "window.num: at most 2147483647"),
        ({"controller.quota.window.size.seconds": 2**40}, "seconds: at most 2147483647"),
        ({"group.initial.rebalance.delay.ms": -1}, "must be >= 0"),
        (
            {"group.min.session.timeout.ms": 10, "group.max.session.timeout.ms": 5},
            "must not exceed group.max.session.timeout.ms",
        ),
        (
            {"group.static.expansion.timeout.ms": 400000},
            "group.new.member.join.timeout.ms",  # §14.2: names both settings
        ),
        ({"engine": [1]}, "engine: expected a mapping"),
    ],
)
def test_refusals_name_the_key(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_settings(raw)


def test_quota_entries() -> None:
    settings = parse_settings(
        {
            "quotas": [
                {"user": "alice", "controller_mutation_rate": 10},
                {"user": "<default>", "client_id": "<default>", "controller_mutation_rate": 5},
                {"client_id": "admin-tool", "controller_mutation_rate": 100.5},
                {"user": "bob", "controller_mutation_rate": None},
            ]
        }
    )
    assert settings.quota.quotas == (
        QuotaEntry("alice", None, 10.0),
        QuotaEntry("<default>", "<default>", 5.0),
        QuotaEntry(None, "admin-tool", 100.5),
        QuotaEntry("bob", None, None),
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("alice", r"quotas\[0\]: expected a mapping"),
        ({"controller_mutation_rate": 1}, r"quotas\[0\]: needs a user"),
        ({"user": 5, "controller_mutation_rate": 1}, r"quotas\[0\]\.user"),
        ({"user": "a", "controller_mutation_rate": "10"}, "expected a number"),
        ({"user": "a", "controller_mutation_rate": 0}, "positive"),
        ({"user": "a", "controller_mutation_rate": float("inf")}, "positive finite"),
        ({"user": "a", "rate": 1}, "unknown key"),
    ],
)
def test_bad_quota_entries(entry: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_settings({"quotas": [entry]})


def test_duplicate_quota_entries_are_refused() -> None:
    entry = {"user": "alice", "controller_mutation_rate": 1}
    with pytest.raises(ConfigError, match="duplicate"):
        parse_settings({"quotas": [entry, entry]})


def test_engine_sections_are_passed_through() -> None:
    settings = parse_settings({"engine": {"keying": "shard"}, "group.max.size": 5})
    assert settings.sections == {"engine": {"keying": "shard"}}


def test_load_settings_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "group.initial.rebalance.delay.ms: 50\n"
        "quotas:\n  - {user: a, controller_mutation_rate: 2}\n"
    )
    settings = load_settings(path)
    assert settings.coordinator.group_initial_rebalance_delay_ms == 50
    assert settings.quota.quotas == (QuotaEntry("a", None, 2.0),)


def test_load_settings_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("group.max.size: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_settings(bad)
    typo = tmp_path / "typo.yaml"
    typo.write_text("group.max.sise: 3\n")
    with pytest.raises(ConfigError, match=r"typo\.yaml: unknown configuration key"):
        load_settings(typo)


def test_every_shipped_config_file_is_valid() -> None:
    conf = Path(__file__).resolve().parents[1] / "conf"
    files = sorted(conf.glob("*.yaml"))
    assert files, "conf/ ships at least the embedded local default"
    for file in files:
        load_settings(file)
