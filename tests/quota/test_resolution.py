"""Resolution (docs/reference/mutation-quota.md §4.2-§4.3): the 8 levels of precedence, which
principals share a bucket (quota_key) and which entry sets the rate (quota_entity)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from controlplane.core.config import QuotaConfig, QuotaEntry, parse_settings
from controlplane.core.quota.resolution import (
    UNRESOLVED_KEY,
    UNTRACKED_KEY,
    Resolution,
    carry_removed_quotas,
    key_of,
    resolve,
    sanitize_user,
)

D = "<default>"
LEVELS: list[tuple[str | None, str | None, float]] = [
    ("alice", "app", 1.0),  # 1 /config/users/alice/clients/app
    ("alice", D, 2.0),  # 2 /config/users/alice/clients/<default>
    ("alice", None, 3.0),  # 3 /config/users/alice
    (D, "app", 4.0),  # 4 /config/users/<default>/clients/app
    (D, D, 5.0),  # 5 /config/users/<default>/clients/<default>
    (D, None, 6.0),  # 6 /config/users/<default>
    (None, "app", 7.0),  # 7 /config/clients/app
    (None, D, 8.0),  # 8 /config/clients/<default>
]


def config_of(entries: Sequence[tuple[str | None, str | None, float | None]]) -> QuotaConfig:
    quotas: list[dict[str, Any]] = []
    for user, client, rate in entries:
        entry: dict[str, Any] = {"controller_mutation_rate": rate}
        if user is not None:
            entry["user"] = user
        if client is not None:
            entry["client_id"] = client
        quotas.append(entry)
    return parse_settings({"quotas": quotas}).quota


PRECEDENCE = [
    # (levels configured from this one down to 8, expected key, expected entity)
    (1, "user=alice/client-id=app", "user=alice/client-id=app"),  # exact pair wins
    (2, "user=alice/client-id=app", "user=alice/client-id=<default>"),  # own bucket per client
    (3, "user=alice", "user=alice"),  # shared by all of alice's clients
    (4, "user=alice/client-id=app", "user=<default>/client-id=app"),  # per (user, client)
    (5, "user=alice/client-id=app", "user=<default>/client-id=<default>"),
    (6, "user=alice", "user=<default>"),  # default user: a bucket per user
    (7, "client-id=app", "client-id=app"),  # shared by every user of client app
    (8, "client-id=app", "client-id=<default>"),
]


@pytest.mark.parametrize(("level", "key", "entity"), PRECEDENCE)
def test_precedence_levels(level: int, key: str, entity: str) -> None:
    config = config_of(LEVELS[level - 1 :])
    rate = LEVELS[level - 1][2]
    assert resolve("alice", "app", config) == Resolution(key, entity, rate)


SINGLE_TYPE = [
    # (entries, principal, expected)
    ([("alice", None, 3.0)], ("alice", "x"), Resolution("user=alice", "user=alice", 3.0)),
    ([("alice", None, 3.0)], ("bob", "x"), Resolution("user=bob", None, None)),  # unlimited
    ([(None, "x", 7.0)], ("bob", "x"), Resolution("client-id=x", "client-id=x", 7.0)),
    ([(None, "x", 7.0)], ("carol", "y"), Resolution("client-id=y", None, None)),
    (
        [("bob", "etl", 1.0)],  # only user+client: a bucket per pair
        ("bob", "etl"),
        Resolution("user=bob/client-id=etl", "user=bob/client-id=etl", 1.0),
    ),
    ([("bob", "etl", 1.0)], ("bob", "web"), Resolution("user=bob/client-id=web", None, None)),
    # An empty client id: tags (user, "") only look up <user> and <default user>.
    ([(D, D, 5.0)], ("bob", ""), Resolution("user=bob", None, None)),
    # A user literally named "<default>" is not the default entity, but the default applies.
    ([(D, None, 6.0)], (D, "x"), Resolution("user=%3Cdefault%3E", "user=<default>", 6.0)),
]


@pytest.mark.parametrize(("entries", "principal", "expected"), SINGLE_TYPE)
def test_single_level_types(
    entries: list[tuple[str | None, str | None, float]],
    principal: tuple[str, str],
    expected: Resolution,
) -> None:
    assert resolve(*principal, config_of(entries)) == expected


def test_several_types_fall_back_to_client_tags_when_no_user_level_exists() -> None:
    config = config_of([("alice", None, 3.0), (None, D, 8.0)])
    assert resolve("alice", "a", config) == Resolution("user=alice", "user=alice", 3.0)
    assert resolve("bob", "a", config) == Resolution("client-id=a", "client-id=<default>", 8.0)


def test_sharing() -> None:
    user_level = config_of([("alice", None, 3.0)])
    assert (
        resolve("alice", "a", user_level).quota_key == resolve("alice", "b", user_level).quota_key
    )
    pair_level = config_of([(D, D, 5.0)])
    assert (
        resolve("alice", "a", pair_level).quota_key != resolve("alice", "b", pair_level).quota_key
    )
    client_level = config_of([(None, D, 8.0)])
    assert (
        resolve("alice", "a", client_level).quota_key == resolve("bob", "a", client_level).quota_key
    )


def test_no_quota_configured_tracks_nothing() -> None:
    config = QuotaConfig()
    assert resolve("alice", "a", config) == Resolution(None, None, None)
    assert key_of({"user": "alice", "client_id": "a"}, config) == UNTRACKED_KEY


def test_removed_quotas_keep_tracking_on() -> None:
    before = config_of([("alice", None, 3.0)])
    after = carry_removed_quotas(before, QuotaConfig())
    assert after.quotas == (QuotaEntry("alice", None, None),)
    assert resolve("alice", "a", after) == Resolution("user=alice", None, None)
    # Carried again on the next reading, and a re-added quota takes its place.
    again = carry_removed_quotas(after, QuotaConfig())
    assert again.quotas == after.quotas
    readded = carry_removed_quotas(again, before)
    assert resolve("alice", "a", readded).rate_per_s == 3.0
    assert carry_removed_quotas(None, before) is before


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ({"user": "alice", "client_id": "a"}, "user=alice"),  # resolved
        ({"client_id": "a"}, UNRESOLVED_KEY),  # no user: answered INVALID_REQUEST
        ({"user": "alice", "client_id": 7}, UNRESOLVED_KEY),  # mistyped client id
        ({"user": "alice", "client_id": ""}, "user=alice"),  # "" is a valid client id
    ],
)
def test_key_of(event: dict[str, Any], expected: str) -> None:
    assert key_of(event, config_of([("alice", None, 3.0)])) == expected


@pytest.mark.parametrize(
    ("user", "expected"),
    [
        ("alice", "alice"),
        ("CN=alice,O=corp", "CN%3Dalice%2CO%3Dcorp"),  # '=' and ',' encoded
        ("a b*~/", "a%20b%2A%7E%2F"),  # Kafka: space %20, * %2A, ~ %7E
        ("dé", "d%C3%A9"),  # UTF-8
    ],
)
def test_sanitize_user_as_kafka(user: str, expected: str) -> None:
    assert sanitize_user(user) == expected


def test_keys_cannot_collide_across_shapes() -> None:
    pair = config_of([("u", "c", 1.0)])
    tricky = resolve("u/client-id=c", "", config_of([("u/client-id=c", None, 1.0)]))
    assert tricky.quota_key != resolve("u", "c", pair).quota_key
