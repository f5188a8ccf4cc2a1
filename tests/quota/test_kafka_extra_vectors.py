"""The vectors docs/reference/mutation-quota.md §8 keeps back for an independent check, re-read from
Kafka's tests (apache/kafka, baseline 1eb76443) and restated here through the project's public
functions.

* K-09..K-11  SensorTest.testStrictQuotaEnforcementWithTokenBucket (strict check-then-record).
* K-20..K-22  ControllerMutationQuotaManagerTest.testThrottleTime.
* K-48..K-72  ClientQuotaManagerTest.testQuotaConfigPrecedence: its 25 ``checkQuota`` calls, in
              order. Each asserts the bound (our ``rate_per_s``) and whether recording
              ``value * 11`` throttles, which is a statement about which principals share a
              sensor (our ``quota_key``).
* K-79        ControllerApisTest.testCreateTopicsMutationQuota (throttled / not throttled).
* scratch     a Python restatement of DefaultQuotaCallback (tags and limit, with the
              quotaTypesEnabled bitmask) compared with ``resolve`` over 400 random
              histories of quota sets and removals (the §8 "scratch model of §4.2").
* E-xx        further assertions of the same test classes that have no §8 number:
              ClientQuotaManagerTest.test*QuotaParsing, testSetAndRemove*Quota and
              ControllerMutationQuotaManagerTest.testNew{Strict,Permissive}QuotaFor*.

How a produce-quota ``checkQuota`` becomes a mutation-quota vector: the Kafka test never moves its
clock, uses 11 samples of 1 s, and ``Rate`` then divides the sensor's total by 10 s, so a
``checkQuota(value)`` throttles iff the sensor's total of ``value * 11`` exceeds ``10 * bound``.
A token bucket with S=10, W=1 (B = 10 * Q) fed the same totals by permissive requests at one
instant goes negative under exactly the same condition, as long as no rate was *raised* in
between: ``Rate`` compares the old total with the new bound, while the ``TokenBucket`` keeps its
debt (§4.4). That happens once (K-66), where the controller mutation quota, which only the bucket
enforces (§1.5), answers "throttled" where the produce quota answers "not throttled".
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest

from controlplane.core.config import DEFAULT_ENTITY, QuotaConfig, parse_settings
from controlplane.core.quota.bucket import burst_of, throttle_time_ms
from controlplane.core.quota.machine import admit_strict
from controlplane.core.quota.resolution import Resolution, carry_removed_quotas, resolve
from controlplane.core.quota.runner import QuotaShard
from support.quota_harness import T_MS, QuotaHarness, errors
from support.token_bucket import measure

T = T_MS
D = DEFAULT_ENTITY
Entity = tuple[str | None, str | None]  # (user, client_id); None = not part of the entity


# --- K-09..K-11: SensorTest.testStrictQuotaEnforcementWithTokenBucket -----------------------
# Q=2, S=10, W=1 -> B=20; strictRecord = checkQuotas then record(checkQuotas=false).
SENSOR_STRICT = [
    # (id, time, strict record of, admitted, tokens after)
    ("K-09", T, 30, True, -10.0),  # full bucket (20) admits 30: credits -10
    ("K-10", T + 5000, None, None, 0.0),  # "10 / 2 = 5s": measured back at exactly 0
    ("K-11", T + 5000, 30, True, -30.0),  # 0 is no violation: 30 admitted, -30
]


@pytest.mark.parametrize("index", range(len(SENSOR_STRICT)), ids=[r[0] for r in SENSOR_STRICT])
def test_sensor_strict_token_bucket(index: int) -> None:
    # Through the strict admission loop (strictRecord; a bare measure through the oracle) ...
    burst = burst_of(10, 1, 2.0)
    tokens, last = 0.0, 0
    for _, time_ms, value, admitted, _ in SENSOR_STRICT[: index + 1]:
        if value is None:
            tokens = measure(tokens, last, time_ms, 2.0, burst)
        else:
            admission = admit_strict(tokens, last, [value], 2.0, burst, time_ms)
            assert admission.admitted == (admitted,)
            tokens = admission.tokens
        last = time_ms
    assert tokens == SENSOR_STRICT[index][4]
    # ... and through the whole shard (strict CreateTopics, user quota 2/s).
    h = QuotaHarness([{"user": "u", "controller_mutation_rate": 2.0}], window_num=10)
    for _, time_ms, value, admitted, _ in SENSOR_STRICT[: index + 1]:
        h.now_ms = time_ms
        if value is not None:
            row = h.create_topics("u", {f"t{time_ms}": value})
            assert errors(row) == (["NONE"] if admitted else ["THROTTLING_QUOTA_EXCEEDED"])
            assert row["throttle_time_ms"] == 0
    bucket = h.bucket("user=u")
    assert bucket is not None
    measured = measure(bucket.tokens, bucket.last_update_ms, h.now_ms, 2.0, burst)
    assert measured == SENSOR_STRICT[index][4]


# --- K-20..K-22: ControllerMutationQuotaManagerTest.testThrottleTime -------------------------
# throttleTimeMs(QuotaViolationException(metric, value, bound)) = round(-value / bound * 1000).
THROTTLE_TIME = [
    ("K-20", 0.0, 10.0, 0),  # value 0, bound 10 -> 0 ms
    ("K-21", -5.0, 10.0, 500),  # value -5, bound 10 -> 500 ms
    ("K-22", -10.0, 10.0, 1000),  # value -10, bound 10 -> 1000 ms
]


@pytest.mark.parametrize(
    ("value", "bound", "expected"),
    [r[1:] for r in THROTTLE_TIME],
    ids=[r[0] for r in THROTTLE_TIME],
)
def test_throttle_time(value: float, bound: float, expected: int) -> None:
    assert throttle_time_ms(value, bound) == expected


# --- A cluster whose quotas change while its buckets live on (Kafka's updateQuota) ----------
@dataclass
class Cluster:
    """A harness whose quota entities can be set and removed between requests. A removal keeps
    its level type enabled (``carry_removed_quotas``), as Kafka's ``quotaTypesEnabled`` does;
    the buckets (Kafka's sensors) survive every change."""

    harness: QuotaHarness
    entities: dict[Entity, float]

    @classmethod
    def start(cls, window_num: int = 10) -> Cluster:
        return cls(QuotaHarness(window_num=window_num), {})

    @property
    def config(self) -> QuotaConfig:
        return self.harness.config

    def set(self, user: str | None, client_id: str | None, rate: float | None) -> None:
        if rate is None:
            self.entities.pop((user, client_id))
        else:
            self.entities[(user, client_id)] = rate
        quotas: list[dict[str, Any]] = []
        for (entity_user, entity_client), entity_rate in self.entities.items():
            entry: dict[str, Any] = {"controller_mutation_rate": entity_rate}
            if entity_user is not None:
                entry["user"] = entity_user
            if entity_client is not None:
                entry["client_id"] = entity_client
            quotas.append(entry)
        old = self.harness.config
        raw = {
            "controller.quota.window.num": old.controller_quota_window_num,
            "controller.quota.window.size.seconds": old.controller_quota_window_size_seconds,
            "quotas": quotas,
        }
        previous = old if old.quotas else None
        config = carry_removed_quotas(previous, parse_settings(raw).quota)
        self.harness.config = config
        self.harness.shard = QuotaShard.decode(self.harness.shard.encode(), config)

    def record(self, user: str, client_id: str, value: int) -> dict[str, Any]:
        """Kafka's ``maybeRecord(value * numQuotaSamples)``: one permissive request (DeleteTopics
        v4, which records a value of 0 too) of ``value * 11`` mutations, at the same instant as
        every other."""
        return self.harness.delete_topics(user, {"t": value * 11}, client_id=client_id, version=4)


# --- K-48..K-72: ClientQuotaManagerTest.testQuotaConfigPrecedence ---------------------------
PRECEDENCE_SETUP: list[tuple[str | None, str | None, float]] = [
    (D, None, 1000),  # <default user>
    (None, D, 2000),  # <default client-id>
    (D, D, 3000),  # <default user, default client-id>
    ("userA", None, 4000),
    ("userA", "client1", 5000),
    ("userB", None, 6000),
    ("userB", "client1", 7000),
    ("userB", D, 8000),
    ("userC", None, 10000),
    (None, "client1", 9000),
]
Change = tuple[str | None, str | None, float | None]  # (user, client_id, rate); None = removed
A, A1, A6 = "user=userA", "user=userA/client-id=client1", "user=userA/client-id=client6"
SET_A: list[Change] = [("userA", None, 8000.0), ("userA", "client1", 10000.0)]
SET_A6: list[Change] = [("userA", "client6", 11000.0)]
SWAP_A6: list[Change] = [("userA", D, 12000.0), ("userA", "client6", None)]
# fmt: off
PRECEDENCE: list[tuple[str, list[Change], str, str, float, str, int, bool]] = [
    # (id, quota changes first, user, client, bound, bucket, checkQuota value, throttled)
    # <user, client> beats <user>; <user> beats <client> and the defaults:
    ("K-48", [], "userA", "client1", 5000, A1, 4500, False),
    ("K-49", [], "userA", "client2", 4000, A, 4500, True),
    ("K-50", [], "userA", "client3", 4000, A, 0, True),  # <user> shared by the user's clients
    ("K-51", [], "userA", "client1", 5000, A1, 0, False),  # <user, client>: exclusive use
    ("K-52", [], "userB", "client1", 7000, "user=userB/client-id=client1", 8000, True),
    # <userB, default>: a bucket of its own for each of userB's client ids
    ("K-53", [], "userB", "client2", 8000, "user=userB/client-id=client2", 7000, False),
    ("K-54", [], "userB", "client3", 8000, "user=userB/client-id=client3", 7000, False),
    # <default, default>: a bucket per (user, client id)
    ("K-55", [], "userD", "client1", 3000, "user=userD/client-id=client1", 3500, True),
    ("K-56", [], "userD", "client2", 3000, "user=userD/client-id=client2", 2500, False),
    ("K-57", [], "userE", "client1", 3000, "user=userE/client-id=client1", 2500, False),
    # Remove <default, default>: back to <default user>; the tags change, so a fresh bucket.
    ("K-58", [(D, D, None)], "userD", "client1", 1000, "user=userD", 0, False),
    ("K-59", [], "userE", "client4", 1000, "user=userE", 1500, True),
    ("K-60", [], "userF", "client4", 1000, "user=userF", 800, False),  # shared per user
    ("K-61", [], "userF", "client5", 1000, "user=userF", 800, True),
    # Remove <default user>: back to <default client-id>, shared by every user of a client id.
    ("K-62", [(D, None, None)], "userF", "client4", 2000, "client-id=client4", 0, False),
    ("K-63", [], "userF", "client5", 2000, "client-id=client5", 0, False),
    ("K-64", [], "userF", "client5", 2000, "client-id=client5", 2500, True),
    ("K-65", [], "userG", "client5", 2000, "client-id=client5", 0, True),
    # Raise userA to 8000 and <userA, client1> to 10000. K-66: Kafka's Rate says "not throttled"
    # (4950/s <= 8000); the bucket keeps its -9500 debt (§4.4): throttled (see the docstring).
    ("K-66", SET_A, "userA", "client2", 8000, A, 0, True),
    ("K-67", [], "userA", "client2", 8000, A, 4500, True),  # "sum of new and earlier values"
    ("K-68", [], "userA", "client1", 10000, A1, 0, False),
    ("K-69", [], "userA", "client1", 10000, A1, 6000, True),
    # Remove <userA, client1>: client6 falls to the shared <userA> bucket.
    ("K-70", [("userA", "client1", None)], "userA", "client6", 8000, A, 0, True),
    ("K-71", SET_A6, "userA", "client6", 11000, A6, 8500, False),
    # <userA, default> 12000 and <userA, client6> removed: same tags, so the same bucket.
    ("K-72", SWAP_A6, "userA", "client6", 12000, A6, 4000, True),
]
# fmt: on


def _precedence_cluster() -> Cluster:
    cluster = Cluster.start(window_num=10)
    for user, client, rate in PRECEDENCE_SETUP:
        cluster.set(user, client, rate)
    return cluster


@pytest.mark.parametrize("index", range(len(PRECEDENCE)), ids=[r[0] for r in PRECEDENCE])
def test_quota_config_precedence(index: int) -> None:
    cluster = _precedence_cluster()
    row: dict[str, Any] = {}
    for _, changes, user, client, _, _, value, _ in PRECEDENCE[: index + 1]:
        for change in changes:
            cluster.set(*change)
        row = cluster.record(user, client, value)
    _, _, user, client, bound, key, _, throttled = PRECEDENCE[index]
    # The bound (quota(user, clientId).bound) and the bucket, by resolution alone ...
    resolution = resolve(user, client, cluster.config)
    assert resolution.rate_per_s == bound
    assert resolution.quota_key == key
    # ... and through the shard: the same answer, and the throttle of value * 11.
    assert row["rate_per_s"] == bound
    assert row["quota_key"] == key
    assert (row["throttle_time_ms"] > 0) is throttled


# --- E-01..E-17: ClientQuotaManagerTest.test{ClientId,User,UserClientId}QuotaParsing --------
# (testUserQuotaParsingWithDefaultClientIdQuota and testUserClientQuotaParsingIdWithDefault-
# ClientIdQuota run the same rows as testUserQuotaParsing/testUserClientIdQuotaParsing: the
# static client-id default they once set no longer exists.)
PARSING = {
    # variant: (client1 entity, client2 entity, default entity, principals c1, c2, random)
    "client-id": (
        (None, "p1"),
        (None, "p2"),
        (None, D),
        ("ANONYMOUS", "p1"),
        ("ANONYMOUS", "p2"),
        ("ANONYMOUS", "random-client-id"),
    ),
    "user": (
        ("User1", None),
        ("User2", None),
        (D, None),
        ("User1", "p1"),
        ("User2", "p2"),
        ("RandomUser", "random-client-id"),
    ),
    "user-client-id": (
        ("User1", "p1"),
        ("User2", "p2"),
        (D, D),
        ("User1", "p1"),
        ("User2", "p2"),
        ("RandomUser", "random-client-id"),
    ),
}
PARSING_STEPS = [
    # (id, variant, step, expected bound of (c1, c2, random); None = Long.MAX_VALUE)
    ("E-01", "client-id", "set c1 2000, c2 4000", (2000, 4000, None)),
    ("E-02", "client-id", "c1 -> 3000", (3000, 4000, None)),
    ("E-03", "client-id", "c1 -> 500", (500, 4000, None)),
    ("E-04", "client-id", "remove c1, default 4000", (4000, 4000, 4000)),
    ("E-05", "user", "set c1 2000, c2 4000", (2000, 4000, None)),
    ("E-06", "user", "c1 -> 3000", (3000, 4000, None)),
    ("E-07", "user", "c1 -> 500", (500, 4000, None)),
    ("E-08", "user", "remove c1, default 4000", (4000, 4000, 4000)),
    ("E-09", "user-client-id", "set c1 2000, c2 4000", (2000, 4000, None)),
    ("E-10", "user-client-id", "c1 -> 3000", (3000, 4000, None)),
    ("E-11", "user-client-id", "c1 -> 500", (500, 4000, None)),
    ("E-12", "user-client-id", "remove c1, default 4000", (4000, 4000, 4000)),
]


def _parsing_step(cluster: Cluster, variant: str, step: str) -> None:
    c1, c2, default, *_ = PARSING[variant]
    if step == "set c1 2000, c2 4000":
        cluster.set(*c1, 2000)
        cluster.set(*c2, 4000)
    elif step == "c1 -> 3000":
        cluster.set(*c1, 3000)
    elif step == "c1 -> 500":
        cluster.set(*c1, 500)
    else:
        cluster.set(*c1, None)
        cluster.set(*default, 4000)


@pytest.mark.parametrize("index", range(len(PARSING_STEPS)), ids=[r[0] for r in PARSING_STEPS])
def test_quota_parsing(index: int) -> None:
    _, variant, _, expected = PARSING_STEPS[index]
    cluster = Cluster.start()
    keys_before: list[str | None] = []
    for _, row_variant, step, _ in PARSING_STEPS:
        if row_variant != variant:
            continue
        _parsing_step(cluster, variant, step)
        keys = [resolve(*p, cluster.config).quota_key for p in PARSING[variant][3:]]
        # Updating or removing a quota never moves a principal to another bucket here (the
        # sensor is kept and only its bound changes: "updated within KafkaMetrics as well").
        assert not keys_before or keys == keys_before
        keys_before = keys
        if step == PARSING_STEPS[index][2]:
            break
    bounds = tuple(resolve(*p, cluster.config).rate_per_s for p in PARSING[variant][3:])
    assert bounds == expected


PARSING_EMPTY_CLIENT = [
    # Case 5 of testQuotaParsing: a principal with an empty client id, after E-04/E-08/E-12.
    # (id, variant, user quota set first, principal, expected Resolution)
    # <user> variants: User1 gets a <user> quota of 2500; tags (User1, "") find it.
    ("E-13", "user", ("User1", 2500), ("User1", ""), Resolution("user=User1", "user=User1", 2500)),
    ("E-14", "user", ("User2", 4500), ("User2", ""), Resolution("user=User2", "user=User2", 4500)),
    (
        "E-15",
        "user-client-id",
        ("User1", 2500),
        ("User1", ""),  # two level types now: the walk stops at <User1>
        Resolution("user=User1", "user=User1", 2500),
    ),
    # The client-id variant: a later version of the test expects the <default client-id> quota
    # (4000) for ("ANONYMOUS", "") and ("", ""); at the baseline (and in every version of
    # DefaultQuotaCallback.quotaLimit read, up to the Java rewrite) tags ("", "") match no
    # branch and the limit is null, i.e. Long.MAX_VALUE. We follow the baseline (§4.2).
    ("E-16", "client-id", None, ("ANONYMOUS", ""), Resolution("client-id=", None, None)),
    ("E-17", "client-id", None, ("", ""), Resolution("client-id=", None, None)),
]


@pytest.mark.parametrize(
    ("variant", "user_quota", "principal", "expected"),
    [r[1:] for r in PARSING_EMPTY_CLIENT],
    ids=[r[0] for r in PARSING_EMPTY_CLIENT],
)
def test_quota_parsing_empty_client_id(
    variant: str,
    user_quota: tuple[str, float] | None,
    principal: tuple[str, str],
    expected: Resolution,
) -> None:
    cluster = Cluster.start()
    for _, row_variant, step, _ in PARSING_STEPS:
        if row_variant == variant:
            _parsing_step(cluster, variant, step)
    if user_quota is not None:
        cluster.set(user_quota[0], None, user_quota[1])
    assert resolve(*principal, cluster.config) == expected


# --- E-18..E-20: ClientQuotaManagerTest.testSetAndRemove{DefaultUser,User,UserClient}Quota ---
SET_AND_REMOVE = [
    # (id, entity, expected (key, rate) for userA/client1: before, set 10, removed)
    # No quota at all: Kafka answers Long.MAX_VALUE and tracks nothing (quotasEnabled false).
    ("E-18", (D, None), (None, None), ("user=userA", 10), ("user=userA", None)),
    ("E-19", ("userA", None), (None, None), ("user=userA", 10), ("user=userA", None)),
    (
        "E-20",
        ("userA", "client1"),
        (None, None),
        ("user=userA/client-id=client1", 10),
        ("user=userA/client-id=client1", None),  # tracked, unlimited: the bitmask stays set
    ),
]


@pytest.mark.parametrize(
    ("entity", "before", "with_quota", "removed"),
    [r[1:] for r in SET_AND_REMOVE],
    ids=[r[0] for r in SET_AND_REMOVE],
)
def test_set_and_remove(
    entity: Entity,
    before: tuple[str | None, float | None],
    with_quota: tuple[str, float],
    removed: tuple[str, float | None],
) -> None:
    cluster = Cluster.start()
    observed = []
    for rate in (None, 10.0, None):
        if rate is not None:
            cluster.set(*entity, rate)
        elif entity in cluster.entities:
            cluster.set(*entity, None)
        resolution = resolve("userA", "client1", cluster.config)
        observed.append((resolution.quota_key, resolution.rate_per_s))
    assert observed == [before, with_quota, removed]


# --- E-21..E-24: ControllerMutationQuotaManagerTest.testNew{Strict,Permissive}QuotaFor* ------
NEW_QUOTA_FOR = [
    # (id, quota on <ANONYMOUS, test-client> set, request version, expected mode; None = the
    # UnboundedControllerMutationQuota: nothing tracked, no bucket, no throttle row)
    ("E-21", False, 7, None),  # newStrictQuotaFor, quotas disabled -> Unbounded
    ("E-22", True, 7, "strict"),  # newStrictQuotaFor, quota set -> Strict
    ("E-23", False, 5, None),  # newPermissiveQuotaFor, quotas disabled -> Unbounded
    ("E-24", True, 5, "permissive"),  # newPermissiveQuotaFor, quota set -> Permissive
]


@pytest.mark.parametrize(
    ("enabled", "version", "mode"),
    [r[1:] for r in NEW_QUOTA_FOR],
    ids=[r[0] for r in NEW_QUOTA_FOR],
)
def test_new_quota_for(enabled: bool, version: int, mode: str | None) -> None:
    quotas = (
        [{"user": "ANONYMOUS", "client_id": "test-client", "controller_mutation_rate": 10}]
        if enabled
        else []
    )
    h = QuotaHarness(quotas, window_num=10)
    # 200 mutations: over the bucket of 100 whichever quota object applies.
    row = h.create_topics("ANONYMOUS", {"a": 200, "b": 1}, client_id="test-client", version=version)
    if mode is None:
        assert row["quota_key"] is None
        assert errors(row) == ["NONE", "NONE"]
        assert row["throttle_time_ms"] == 0
        assert h.shard.buckets == {}
        assert h.throttles == []
    else:
        assert row["quota_key"] == "user=ANONYMOUS/client-id=test-client"
        assert h.throttles[-1]["mode"] == mode
        expected = ["NONE", "THROTTLING_QUOTA_EXCEEDED"] if mode == "strict" else ["NONE", "NONE"]
        assert errors(row) == expected


# --- K-79: ControllerApisTest.testCreateTopicsMutationQuota(throttle) -----------------------
# CreateTopics {foo: 1 partition, RF 1}. Throttled: foo gets THROTTLING_QUOTA_EXCEEDED and the
# response's throttle_time_ms is the quota object's throttle time; not throttled: NONE and 0.
CREATE_TOPICS_QUOTA = [
    ("K-79 throttle=true", True, "THROTTLING_QUOTA_EXCEEDED"),
    ("K-79 throttle=false", False, "NONE"),
]


@pytest.mark.parametrize(
    ("throttle", "expected"),
    [r[1:] for r in CREATE_TOPICS_QUOTA],
    ids=[r[0] for r in CREATE_TOPICS_QUOTA],
)
def test_create_topics_mutation_quota(throttle: bool, expected: str) -> None:
    h = QuotaHarness([{"user": "ANONYMOUS", "controller_mutation_rate": 10}], window_num=10)
    if throttle:
        h.create_topics("ANONYMOUS", {"big": 125})  # 100 -> -25
    row = h.create_topics("ANONYMOUS", {"foo": 1})
    assert errors(row) == [expected]
    # The quota object's throttleTime: round(25 / 10 * 1000) = 2500 when throttled, else 0.
    assert row["throttle_time_ms"] == (2500 if throttle else 0)
    assert row["error"] == "NONE"  # the request itself succeeds; the error is per topic


# --- A scratch model of DefaultQuotaCallback (§4.2), restated from Kafka's code, against resolve
def _scratch_resolve(
    entities: dict[Entity, float | None], user: str, client: str
) -> tuple[tuple[str, str] | None, float | None]:
    """(metric tags, bound) as Kafka's DefaultQuotaCallback gives them; None tags = no quota type
    ever enabled (UnboundedControllerMutationQuota). ``entities`` holds every entity ever set,
    None for a removed one (it still counts in quotaTypesEnabled, not in overriddenQuotas)."""
    bits = 0
    for entity_user, entity_client in entities:
        bits |= 1 if entity_user is None else (2 if entity_client is None else 4)
    live = {entity for entity, rate in entities.items() if rate is not None}
    if bits == 0:
        return None, None
    if bits == 1:
        tags = ("", client)
    elif bits == 2:
        tags = (user, "")
    elif bits == 4:
        tags = (user, client)
    else:  # the first existing entity of levels 1..6 decides; else levels 7/8
        walk: list[tuple[Entity, tuple[str, str]]] = [
            ((user, client), (user, client)),
            ((user, D), (user, client)),
            ((user, None), (user, "")),
            ((D, client), (user, client)),
            ((D, D), (user, client)),
            ((D, None), (user, "")),
        ]
        tags = next((t for entity, t in walk if entity in live), ("", client))
    tag_user, tag_client = tags
    if tag_user and tag_client:
        order: list[Entity] = [(tag_user, tag_client), (tag_user, D), (D, tag_client), (D, D)]
    elif tag_user:
        order = [(tag_user, None), (D, None)]
    elif tag_client:
        order = [(None, tag_client), (None, D)]
    else:
        order = []
    bound = next((entities[entity] for entity in order if entity in live), None)
    return tags, bound


_USERS = ["u1", "u2"]
_CLIENTS = ["c1", "c2"]
_ENTITIES: list[Entity] = [
    (u, c) for u in [None, D, *_USERS] for c in [None, D, *_CLIENTS] if (u, c) != (None, None)
]


@pytest.mark.parametrize("seed", range(400))
def test_resolution_matches_scratch_model(seed: int) -> None:
    rng = random.Random(seed)
    cluster = Cluster.start()
    ever: dict[Entity, float | None] = {}
    for _ in range(rng.randint(1, 8)):  # a history of sets and removals
        entity = rng.choice(_ENTITIES)
        if entity in cluster.entities and rng.random() < 0.4:
            cluster.set(*entity, None)
            ever[entity] = None
        else:
            rate = float(rng.randint(1, 9))
            cluster.set(*entity, rate)
            ever[entity] = rate
    for user in [*_USERS, "u3", ""]:
        for client in [*_CLIENTS, "c3", ""]:
            tags, bound = _scratch_resolve(ever, user, client)
            got = resolve(user, client, cluster.config)
            if tags is None:
                assert got == Resolution(None, None, None)
                continue
            tag_user, tag_client = tags
            if tag_user and tag_client:
                key = f"user={tag_user}/client-id={tag_client}"
            elif tag_user:
                key = f"user={tag_user}"
            else:
                key = f"client-id={tag_client}"
            assert (got.quota_key, got.rate_per_s) == (key, bound), (user, client, ever)
