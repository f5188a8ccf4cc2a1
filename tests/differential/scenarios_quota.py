"""Controller mutation quota scenarios (KIP-599; docs/conformance.md).

Every scenario has its own SASL users and client ids (``Run.principal``): a user's bucket is the
scenario's own although the broker runs many scenarios at once. The rate is 1 partition/s, so the
burst is 11 (``controller.quota.window.num`` 11 x 1 s windows, Kafka's defaults) and a token is a
second of refill. Every strict decision is taken at least 2 tokens from the other outcome
(the comments give the tokens), more than the real clock can move it: a step runs some hundred
milliseconds later on a loaded broker than the script says, which the comparison accounts for
(docs/conformance.md, "Timing"). Where creating topics is not the point, the requests are
validate-only: charged the same (KRaft), and they spare the broker the work of creating logs.
"""

from __future__ import annotations

from differential.scenarios_group import MAIN
from differential.script import (
    CreatePartitions,
    CreateTopics,
    DeleteTopics,
    Scenario,
    SetQuota,
    Wait,
)

RATE = 1.0
# SetQuota waits until the broker shows the quota; then one more second before it is used.
APPLY_MS = 1000


def check(user: str, client: str, *topics: tuple[str, int], **options: object) -> CreateTopics:
    """A validate-only CreateTopics (v7 unless ``version`` says otherwise)."""
    return CreateTopics(user, client, topics, validate_only=True, **options)  # type: ignore[arg-type]


QUOTA_SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "quota_strict_burst_then_throttle",
        MAIN,
        (
            SetQuota("u1", None, RATE),
            Wait(APPLY_MS),
            CreateTopics("u1", "c1", (("t1", 6),)),  # 11 -> 5
            CreateTopics("u1", "c1", (("t2", 8),)),  # 5 >= 0: admitted into debt, -3; throttle 0
            CreateTopics("u1", "c1", (("t3", 1),)),  # -3 < 0: rejected, throttle 3000
            Wait(5500),
            CreateTopics("u1", "c1", (("t3", 1),)),  # -3 + 5.5 = 2.5: admitted
        ),
        "CreateTopics v7 (strict): the burst admits whole topics while tokens are >= 0, even "
        "into debt, with no throttle; the next request is rejected with the time to pay the "
        "debt back, and admitted once it is paid",
    ),
    Scenario(
        "quota_strict_rejects_the_rest_of_a_request",
        MAIN,
        (
            SetQuota("u1", None, RATE),
            Wait(APPLY_MS),
            check("u1", "c1", ("t1", 8), ("t2", 5), ("t3", 1), ("t4", 1)),  # 3, -2: rejected
        ),
        "within one strict request, topics are admitted in request order until the tokens go "
        "negative; the remaining topics are THROTTLING_QUOTA_EXCEEDED",
    ),
    Scenario(
        "quota_permissive_create_topics",
        MAIN,
        (
            SetQuota("u1", None, RATE),
            Wait(APPLY_MS),
            check("u1", "c1", ("t1", 8), ("t2", 8), version=5),  # -5: throttle 5000
            check("u1", "c1", ("t3", 1), version=5),  # -6: throttle 6000
        ),
        "CreateTopics v5 (permissive): every topic is admitted and the throttle time tells how "
        "long the debt takes to pay back",
    ),
    Scenario(
        "quota_strict_and_permissive_share_the_bucket",
        MAIN,
        (
            SetQuota("u1", None, RATE),
            Wait(APPLY_MS),
            check("u1", "c1", ("t1", 13), version=6),  # strict: 11 >= 0, admitted, -2
            check("u1", "c1", ("t2", 1), version=5),  # permissive: -3, throttle 3000
            check("u1", "c1", ("t3", 1), version=6),  # strict: -3, rejected, throttle 3000
        ),
        "the version decides the mode per request (strict from CreateTopics v6); both spend "
        "the same bucket",
    ),
    Scenario(
        "quota_validate_only_is_charged",
        MAIN,
        (
            SetQuota("u1", None, RATE),
            Wait(APPLY_MS),
            check("u1", "c1", ("t1", 8)),  # 11 -> 3
            check("u1", "c1", ("t1", 8)),  # 3 -> -5
            check("u1", "c1", ("t1", 1)),  # rejected, throttle 5000
            CreateTopics("u1", "c1", (("t2", 1),)),  # a real one is rejected too
        ),
        "a validate-only CreateTopics is charged and can be rejected (KRaft), though nothing "
        "is created",
    ),
    Scenario(
        "quota_strict_create_partitions",
        MAIN,
        (
            SetQuota("u1", None, RATE),
            Wait(APPLY_MS),
            CreatePartitions("u1", "c1", (("p1", 7),)),  # +6: 11 -> 5
            CreatePartitions("u1", "c1", (("p1", 15),)),  # +8: 5 >= 0, admitted, -3
            CreatePartitions("u1", "c1", (("p1", 16),)),  # rejected, throttle 3000
        ),
        "CreatePartitions v3 (strict) charges the partitions added",
        topics={"p1": 1},
    ),
    Scenario(
        "quota_permissive_create_partitions",
        MAIN,
        (
            SetQuota("u1", None, RATE),
            Wait(APPLY_MS),
            CreatePartitions("u1", "c1", (("p1", 13),), version=2),  # +12: -1, throttle 1000
            CreatePartitions("u1", "c1", (("p1", 15),), version=2),  # +2: -3, throttle 3000
        ),
        "CreatePartitions v2 (permissive) admits and reports the throttle",
        topics={"p1": 1},
    ),
    Scenario(
        "quota_create_partitions_not_an_increase",
        MAIN,
        (
            SetQuota("u1", None, RATE),
            Wait(APPLY_MS),
            CreatePartitions("u1", "c1", (("p1", 3),)),  # the same count: INVALID_PARTITIONS
            CreatePartitions("u1", "c1", (("p1", 2),)),  # fewer: INVALID_PARTITIONS
            CreatePartitions("u1", "c1", (("p1", 11),)),  # +8: 11 -> 3 (nothing charged before)
            CreatePartitions("u1", "c1", (("p1", 17),)),  # +6: 3 >= 0, admitted, -3
            CreatePartitions("u1", "c1", (("p1", 18),)),  # rejected
        ),
        "a CreatePartitions that is not an increase is INVALID_PARTITIONS and not charged",
        topics={"p1": 3},
    ),
    Scenario(
        "quota_strict_and_permissive_delete_topics",
        MAIN,
        (
            SetQuota("u1", None, RATE),
            Wait(APPLY_MS),
            DeleteTopics("u1", "c1", ("d1",)),  # 6 partitions: 11 -> 5
            DeleteTopics("u1", "c1", ("d2",)),  # 8: 5 >= 0, admitted, -3
            DeleteTopics("u1", "c1", ("d3",)),  # v6, strict: rejected, throttle 3000
            Wait(5500),
            DeleteTopics("u1", "c1", ("d3",), version=4),  # permissive: 2.5 -> 1.5
        ),
        "DeleteTopics charges the deleted topic's partitions: strict from v5, permissive before",
        topics={"d1": 6, "d2": 8, "d3": 1},
    ),
    Scenario(
        "quota_per_client_id_entity_is_shared_by_users",
        MAIN,
        (
            SetQuota(None, "c1", RATE),
            Wait(APPLY_MS),
            check("u1", "c1", ("t1", 6)),  # the bucket client-id=c1: 11 -> 5
            check("u2", "c1", ("t2", 8)),  # the same bucket: -3
            check("u1", "c1", ("t3", 1)),  # rejected
            check("u2", "c2", ("t4", 6)),  # no quota for client c2: unlimited
        ),
        "a client-id quota is one bucket per client id, shared by every user of that client id",
    ),
    Scenario(
        "quota_per_user_entity_is_shared_by_clients",
        MAIN,
        (
            SetQuota("u1", None, RATE),
            Wait(APPLY_MS),
            check("u1", "c1", ("t1", 6)),  # the bucket user=u1: 11 -> 5
            check("u1", "c2", ("t2", 8)),  # the same bucket: -3
            check("u1", "c3", ("t3", 1)),  # rejected
            check("u2", "c1", ("t4", 6)),  # no quota for u2: unlimited
        ),
        "a user quota is one bucket per user, shared by all of the user's client ids",
    ),
    Scenario(
        "quota_user_and_client_entity_is_per_client",
        MAIN,
        (
            SetQuota("u1", "c1", RATE),
            Wait(APPLY_MS),
            check("u1", "c1", ("t1", 14)),  # the bucket user=u1/client-id=c1: -3
            check("u1", "c1", ("t2", 1)),  # rejected
            check("u1", "c2", ("t3", 6)),  # no entity for (u1, c2): unlimited
        ),
        "a <user, client-id> quota applies to that pair only",
    ),
    Scenario(
        "quota_removed_means_unlimited",
        MAIN,
        (
            SetQuota("u1", None, RATE),
            Wait(APPLY_MS),
            check("u1", "c1", ("t1", 14)),  # -3
            check("u1", "c1", ("t2", 1)),  # rejected
            SetQuota("u1", None, None),
            Wait(APPLY_MS),
            check("u1", "c1", ("t2", 1)),  # refilled at Long.MAX_VALUE/s: admitted
        ),
        "removing a user's quota leaves the principal unlimited, whatever its debt",
    ),
    Scenario(
        "quota_raised_rate_refills_since_the_last_touch",
        MAIN,
        (
            SetQuota("u1", None, RATE),
            Wait(APPLY_MS),
            check("u1", "c1", ("t1", 14)),  # -3
            SetQuota("u1", None, 4.0),  # burst 44; the tokens are not touched
            Wait(3500),
            check("u1", "c1", ("t2", 60)),  # -3 + 4/s x >= 3.5 s >= 11: admitted, <= 44 - 60
            check("u1", "c1", ("t3", 1)),  # rejected; the debt is paid at 4/s: throttle / 4
        ),
        "a new rate applies to the time since the bucket's last touch and to the throttle "
        "(KAFKA-10458); the burst grows with it",
    ),
    Scenario(
        "quota_unlimited_principal",
        MAIN,
        (
            check("u1", "c1", ("t1", 500)),
            check("u1", "c1", ("t1", 500)),
            CreateTopics("u1", "c1", (("t2", 1),), version=5),
        ),
        "a principal no quota applies to is never throttled",
    ),
)
