"""Which quota applies to a principal, and which principals share a bucket (§4.2).

Kafka's ``DefaultQuotaCallback`` answers two questions, and so do we:

* the bucket (``quota_key``) is the metric tags ``(user, client-id)``, chosen from the level
  types ever configured (a bitmask that only grows) and, when several types are on, by the
  first of six entities that exists;
* the rate comes from the first configured entity of the tags' own lookup order, and that entry
  is the ``quota_entity``; none = unlimited (Kafka's ``Long.MAX_VALUE``).

No level type ever configured = nothing tracked (``quota_key`` None). An entry whose
``controller_mutation_rate`` is null is a *removed* quota: it keeps its level type enabled but
sets no rate, so tracking stays on after every quota was removed (Kafka's ``quotaTypesEnabled``
never resets). ``carry_removed_quotas`` turns a configuration change into that form.

Resolution is a pure function of the configuration. ``QuotaIndex`` precomputes dictionaries once
per configuration, so a principal resolves with a handful of dictionary lookups.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

from controlplane.core.config import DEFAULT_ENTITY, QuotaConfig, QuotaEntry
from controlplane.core.frozen import fast_constructor

# quotaTypesEnabled bits (ClientQuotaManager.QuotaTypes).
CLIENT_ID_ENABLED: Final = 1
USER_ENABLED: Final = 2
USER_CLIENT_ID_ENABLED: Final = 4

# Spark keys for events that have no bucket.
UNTRACKED_KEY: Final = ""  # no quota ever configured: admitted, nothing tracked
UNRESOLVED_KEY: Final = "<unresolved>"  # user/client_id missing or mistyped: INVALID_REQUEST


@dataclass(frozen=True, slots=True)
class Resolution:
    """The bucket and the rate the configuration gives one principal."""

    quota_key: str | None  # the bucket; None = nothing tracked
    quota_entity: str | None  # the entry that set the rate; None = unlimited
    rate_per_s: float | None  # None = unlimited


make_resolution = fast_constructor(Resolution)  # per principal the memo has not seen


_PLAIN: Final = re.compile(r"[A-Za-z0-9._-]*")
MEMO_SIZE: Final = 200_000
NOT_TRACKED: Final = Resolution(quota_key=None, quota_entity=None, rate_per_s=None)

Rated = tuple[str, float]  # (quota_entity, rate)


def sanitize_user(user: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: URL-encoding with ``%20`` for space and ``%2A`` for ``*``.

    It is how Kafka writes the user metric tag; it also keeps ``/`` and ``=`` out of our keys.
    """
    if _PLAIN.fullmatch(user):
        return user  # nothing to encode (the common case, and 10x faster)
    return quote(user, safe="-_.").replace("~", "%7E")


def key_string(user_tag: str, client_tag: str) -> str:
    """``user=U``, ``client-id=C`` or ``user=U/client-id=C`` for the tags (U, C); ("", "") is
    ``client-id=``, the tags Kafka gives it."""
    if user_tag and client_tag:
        return f"user={sanitize_user(user_tag)}/client-id={client_tag}"
    if user_tag:
        return f"user={sanitize_user(user_tag)}"
    return f"client-id={client_tag}"


def entity_string(entry: QuotaEntry) -> str:
    parts = []
    if entry.user is not None:
        user = entry.user if entry.user == DEFAULT_ENTITY else sanitize_user(entry.user)
        parts.append(f"user={user}")
    if entry.client_id is not None:
        parts.append(f"client-id={entry.client_id}")
    return "/".join(parts)


def _level_type(entry: QuotaEntry) -> int:
    if entry.user is None:
        return CLIENT_ID_ENABLED
    if entry.client_id is None:
        return USER_ENABLED
    return USER_CLIENT_ID_ENABLED


@dataclass(frozen=True, slots=True)
class QuotaIndex:
    """The configured entities, one dictionary per level shape (entries with a rate only)."""

    enabled: int = 0
    user_client: Mapping[tuple[str, str], Rated] = field(default_factory=dict)
    user_default_client: Mapping[str, Rated] = field(default_factory=dict)
    user_only: Mapping[str, Rated] = field(default_factory=dict)
    default_user_client: Mapping[str, Rated] = field(default_factory=dict)
    default_user_default_client: Rated | None = None
    default_user: Rated | None = None
    client_only: Mapping[str, Rated] = field(default_factory=dict)
    default_client: Rated | None = None
    # Answers already computed (a pure function's memo; bounded, cleared when full).
    memo: dict[tuple[str, str], Resolution] = field(default_factory=dict, compare=False)

    def resolve(self, user: str, client_id: str) -> Resolution:
        if self.enabled == 0:
            return NOT_TRACKED
        memo = self.memo
        known = memo.get((user, client_id))
        if known is not None:
            return known
        if len(memo) >= MEMO_SIZE:
            memo.clear()
        resolution = memo[(user, client_id)] = self._resolve(user, client_id)
        return resolution

    def _resolve(self, user: str, client_id: str) -> Resolution:
        user_tag, client_tag = self.tags(user, client_id)
        rated = self.limit(user_tag, client_tag)
        key = key_string(user_tag, client_tag)
        if rated is None:
            return make_resolution(quota_key=key, quota_entity=None, rate_per_s=None)
        return make_resolution(quota_key=key, quota_entity=rated[0], rate_per_s=rated[1])

    def tags(self, user: str, client_id: str) -> tuple[str, str]:
        """``quotaMetricTags``: the bucket's (user, client-id) tags."""
        enabled = self.enabled
        if enabled == CLIENT_ID_ENABLED:
            return ("", client_id)
        if enabled == USER_ENABLED:
            return (user, "")
        if enabled == USER_CLIENT_ID_ENABLED:
            return (user, client_id)
        return self._walk(user, client_id)

    def _walk(self, user: str, client_id: str) -> tuple[str, str]:
        # Levels 1-6 of the precedence; the first entity that exists decides the tags.
        if (user, client_id) in self.user_client or user in self.user_default_client:
            return (user, client_id)
        if user in self.user_only:
            return (user, "")
        if client_id in self.default_user_client or self.default_user_default_client is not None:
            return (user, client_id)
        if self.default_user is not None:
            return (user, "")
        return ("", client_id)  # levels 7 and 8 (and nothing at all) give the same tags

    def limit(self, user_tag: str, client_tag: str) -> Rated | None:
        """``quotaLimit``: the first configured entity for the tags, in their lookup order."""
        if user_tag and client_tag:
            return (
                self.user_client.get((user_tag, client_tag))
                or self.user_default_client.get(user_tag)
                or self.default_user_client.get(client_tag)
                or self.default_user_default_client
            )
        if user_tag:
            return self.user_only.get(user_tag) or self.default_user
        if client_tag:
            return self.client_only.get(client_tag) or self.default_client
        return None


def build_index(config: QuotaConfig) -> QuotaIndex:
    enabled = 0
    user_client: dict[tuple[str, str], Rated] = {}
    user_default_client: dict[str, Rated] = {}
    user_only: dict[str, Rated] = {}
    default_user_client: dict[str, Rated] = {}
    client_only: dict[str, Rated] = {}
    singles: dict[tuple[str | None, str | None], Rated] = {}
    for entry in config.quotas:
        enabled |= _level_type(entry)
        if entry.controller_mutation_rate is None:
            continue  # a removed quota: the level type stays on, the entity does not exist
        rated = (entity_string(entry), entry.controller_mutation_rate)
        user, client = entry.user, entry.client_id
        user_default = user == DEFAULT_ENTITY
        client_default = client == DEFAULT_ENTITY
        if user is None:
            assert client is not None  # config.py refuses entries with neither
            if client_default:
                singles[(None, DEFAULT_ENTITY)] = rated
            else:
                client_only[client] = rated
        elif client is None:
            if user_default:
                singles[(DEFAULT_ENTITY, None)] = rated
            else:
                user_only[user] = rated
        elif user_default and client_default:
            singles[(DEFAULT_ENTITY, DEFAULT_ENTITY)] = rated
        elif user_default:
            default_user_client[client] = rated
        elif client_default:
            user_default_client[user] = rated
        else:
            user_client[(user, client)] = rated
    return QuotaIndex(
        enabled=enabled,
        user_client=user_client,
        user_default_client=user_default_client,
        user_only=user_only,
        default_user_client=default_user_client,
        default_user_default_client=singles.get((DEFAULT_ENTITY, DEFAULT_ENTITY)),
        default_user=singles.get((DEFAULT_ENTITY, None)),
        client_only=client_only,
        default_client=singles.get((None, DEFAULT_ENTITY)),
    )


# One index per configuration object, keyed by identity (hashing 1,000 entries per call would
# cost more than resolving). The cached config is held, so its id cannot be reused meanwhile.
_CACHE: dict[int, tuple[QuotaConfig, QuotaIndex]] = {}
_CACHE_SIZE: Final = 8


def index_for(config: QuotaConfig) -> QuotaIndex:
    cached = _CACHE.get(id(config))
    if cached is not None and cached[0] is config:
        return cached[1]
    index = build_index(config)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.clear()
    _CACHE[id(config)] = (config, index)
    return index


def resolve(user: str, client_id: str, config: QuotaConfig) -> Resolution:
    """The bucket, the entity that sets its rate, and the rate, for one principal."""
    return index_for(config).resolve(user, client_id)


def key_of(event: Mapping[str, Any], config: QuotaConfig) -> str:
    """The Spark key of a raw wire event: its ``quota_key``, ``UNTRACKED_KEY`` when nothing is
    tracked, ``UNRESOLVED_KEY`` when ``user``/``client_id`` are missing or not strings (the
    runner answers those INVALID_REQUEST)."""
    if type(event) is not dict and not isinstance(event, Mapping):  # dict first: ABC checks cost
        return UNRESOLVED_KEY
    user = event.get("user")
    client_id = event.get("client_id")
    if not isinstance(user, str) or not isinstance(client_id, str):
        return UNRESOLVED_KEY
    key = index_for(config).resolve(user, client_id).quota_key
    return UNTRACKED_KEY if key is None else key


def carry_removed_quotas(previous: QuotaConfig | None, current: QuotaConfig) -> QuotaConfig:
    """``current`` plus a rate-less entry for every entity of ``previous`` it no longer has.

    The engine re-reads the configuration each micro-batch; folding each new reading over the
    last one with this function keeps Kafka's rule that enabled level types never reset, even
    when every quota is removed. Entries already rate-less in ``previous`` are carried too.
    """
    if previous is None:
        return current
    present = {(entry.user, entry.client_id) for entry in current.quotas}
    removed = tuple(
        QuotaEntry(entry.user, entry.client_id, None)
        for entry in previous.quotas
        if (entry.user, entry.client_id) not in present
    )
    if not removed:
        return current
    return QuotaConfig(
        controller_quota_window_num=current.controller_quota_window_num,
        controller_quota_window_size_seconds=current.controller_quota_window_size_seconds,
        controller_quota_validate_only_charged=current.controller_quota_validate_only_charged,
        controller_quota_permissive_allowed=current.controller_quota_permissive_allowed,
        quotas=current.quotas + removed,
    )
