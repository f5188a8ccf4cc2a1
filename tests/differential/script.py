"""A differential scenario: protocol steps written once, played against a real Kafka broker and
against our cores (docs/conformance.md).

A scenario is a list of steps. Request steps name an *actor*: for the group protocol a member
(``"A"``), which has its own connection on the broker side (a parked JoinGroup blocks what follows
it on its connection, so a member that must speak while its join is parked uses a second
connection, ``conn="A2"``); for the mutation quota a user (``"u1"``), whose every request goes on a
fresh connection (a throttled connection is muted by the broker). ``Wait(ms)`` advances the
scenario's clock: a real sleep on the broker, virtual time on our side.

Member ids differ between the two sides, so a step never spells one out: ``member=None`` is the
actor's current id (the last one a JoinGroup gave it, ``""`` before that), ``Id("A")`` is the
first id actor A was given and ``Id("A", 2)`` its second (a static member that rejoined), and a
plain string is sent as it is (``""``, ``"unknown-member-id"``). ``gen=None`` is the generation of
the actor's last successful JoinGroup (-1 before one).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from controlplane.io.broker import KAFKA_GROUP_MAX_SIZE

# Protocol lists, in preference order; the metadata bytes are fixed per list, as in
# docs/reference/group-coordinator.md §12.0 (changing the list changes the metadata).
Protocols = tuple[tuple[str, bytes], ...]
RANGE: Protocols = (("range", b"R"),)
RANGE_RR: Protocols = (("range", b"RR"), ("roundrobin", b"RR"))
RR_RANGE: Protocols = (("roundrobin", b"RRr"), ("range", b"RRr"))
ROUNDROBIN: Protocols = (("roundrobin", b"RB"),)
RANGE_V2: Protocols = (("range", b"R2"),)  # same name, other metadata

SESSION_MS = 6000
REBALANCE_MS = 4000
OFFSETS_TOPIC = "diff-offsets"  # created on the broker before any scenario (3 partitions)
OFFSETS_TOPIC_PARTITIONS = 3


@dataclass(frozen=True)
class Id:
    """The ``nth`` member id actor ``actor`` was given (1 = its first)."""

    actor: str
    nth: int = 1


MemberRef = str | Id | None


# --- group protocol steps ---------------------------------------------------------------------


@dataclass(frozen=True)
class Join:
    actor: str
    version: int
    member: MemberRef = None
    instance: str | None = None
    protocols: Protocols = RANGE
    session_ms: int = SESSION_MS
    rebalance_ms: int = REBALANCE_MS
    protocol_type: str = "consumer"
    conn: str | None = None


@dataclass(frozen=True)
class Sync:
    actor: str
    version: int = 5
    member: MemberRef = None
    gen: int | None = None
    instance: str | None = None
    # actor name (its current id), Id, or a literal member id -> assignment bytes
    assignments: Mapping[str | Id, bytes] = field(default_factory=dict)
    # v5+ only (Kafka refuses a v5 SyncGroup without them; None sends null)
    protocol_type: str | None = "consumer"
    protocol_name: str | None = "range"
    conn: str | None = None


@dataclass(frozen=True)
class Heartbeat:
    actor: str
    version: int = 4
    member: MemberRef = None
    gen: int | None = None
    instance: str | None = None
    conn: str | None = None


@dataclass(frozen=True)
class Leave:
    """LeaveGroup. v3+: ``members`` as (member, instance) pairs, default the actor itself;
    v0-2: the actor (or ``member``) alone."""

    actor: str
    version: int = 3
    members: tuple[tuple[MemberRef, str | None], ...] | None = None
    member: MemberRef = None
    conn: str | None = None


@dataclass(frozen=True)
class Commit:
    """OffsetCommit of ``offsets`` (partition, offset) on ``OFFSETS_TOPIC``."""

    actor: str
    version: int = 8
    member: MemberRef = None
    gen: int | None = None
    instance: str | None = None
    offsets: tuple[tuple[int, int], ...] = ((0, 10),)
    conn: str | None = None


@dataclass(frozen=True)
class Fetch:
    """OffsetFetch of ``partitions`` of ``OFFSETS_TOPIC`` (None: every committed offset)."""

    actor: str
    version: int = 7
    partitions: tuple[int, ...] | None = (0,)
    conn: str | None = None


@dataclass(frozen=True)
class Describe:
    actor: str
    version: int = 5
    group: str | None = None  # another group id suffix (a group that does not exist)
    conn: str | None = None


@dataclass(frozen=True)
class DeleteGroup:
    actor: str
    version: int = 2
    group: str | None = None
    conn: str | None = None


# --- mutation quota steps ---------------------------------------------------------------------


@dataclass(frozen=True)
class SetQuota:
    """AlterClientQuotas as admin: ``controller_mutation_rate`` of an entity (``user`` and/or
    ``client``, logical names of the scenario); ``rate=None`` removes it."""

    user: str | None
    client: str | None
    rate: float | None


@dataclass(frozen=True)
class CreateTopics:
    actor: str  # the user
    client: str
    topics: tuple[tuple[str, int], ...]  # (topic, partitions)
    version: int = 7
    validate_only: bool = False


@dataclass(frozen=True)
class CreatePartitions:
    actor: str
    client: str
    topics: tuple[tuple[str, int], ...]  # (topic, new total count)
    version: int = 3
    validate_only: bool = False


@dataclass(frozen=True)
class DeleteTopics:
    actor: str
    client: str
    topics: tuple[str, ...]
    version: int = 6


@dataclass(frozen=True)
class Wait:
    ms: int


GroupStep = Join | Sync | Heartbeat | Leave | Commit | Fetch | Describe | DeleteGroup
QuotaStep = SetQuota | CreateTopics | CreatePartitions | DeleteTopics
Step = GroupStep | QuotaStep | Wait
QuotaRequest = CreateTopics | CreatePartitions | DeleteTopics


@dataclass(frozen=True)
class BrokerSettings:
    """A settings group: the static broker settings its scenarios need (one broker start each),
    and the same values for our coordinator."""

    name: str
    initial_rebalance_delay_ms: int
    min_session_timeout_ms: int = 500
    max_size: int = KAFKA_GROUP_MAX_SIZE

    def coordinator_settings(self) -> dict[str, object]:
        """Kafka's setting names, for ``parse_settings``; the KIP-345 draft extensions, which
        Kafka never shipped, are off (docs/reference/group-coordinator.md §14)."""
        return {
            "group.initial.rebalance.delay.ms": self.initial_rebalance_delay_ms,
            "group.min.session.timeout.ms": self.min_session_timeout_ms,
            "group.max.size": self.max_size,
            "group.static.registration.timeout.ms": None,
            "group.static.expansion.timeout.ms": None,
        }


# The quota settings on both sides: Kafka's defaults (burst = 11 * rate).
QUOTA_WINDOW_NUM = 11
QUOTA_WINDOW_SIZE_SECONDS = 1


@dataclass(frozen=True)
class Scenario:
    """``name``: a snake_case identifier (the test id and the row of docs/conformance.md).
    ``differences``: the names of documented differences (``observe.DIFFERENCES``) the scenario
    asserts; empty = Kafka and our core must agree on every observation. ``topics``: topics the
    scenario needs before it starts (quota scenarios; created by the anonymous principal, which
    has no quota), as name -> partitions."""

    name: str
    settings: BrokerSettings
    steps: tuple[Step, ...]
    about: str
    differences: tuple[str, ...] = ()
    topics: Mapping[str, int] = field(default_factory=dict)

    @property
    def is_quota(self) -> bool:
        return any(isinstance(step, QuotaStep) for step in self.steps)

    def users(self) -> list[str]:
        """The scenario's users (logical names)."""
        names: dict[str, None] = {}
        for step in self.steps:
            if isinstance(step, QuotaRequest):
                names[step.actor] = None
            elif isinstance(step, SetQuota) and step.user is not None:
                names[step.user] = None
        return list(names)


ATTEMPTS = 3  # a run that did not test what its script says is played again, twice at most


@dataclass(frozen=True)
class Run:
    """One attempt at a scenario: its group id, and the names of its principals, client ids and
    topics on the broker, unique per scenario and attempt (a broker runs many scenarios at once,
    and a user's quota bucket outlives an attempt)."""

    scenario: Scenario
    attempt: int
    group_id: str

    @property
    def prefix(self) -> str:
        return f"{self.scenario.name}.{self.attempt}"

    def principal(self, user: str) -> str:
        return f"{self.prefix}.{user}"

    def client_id(self, client: str) -> str:
        return f"{self.prefix}.{client}"

    def topic(self, topic: str) -> str:
        return f"{self.prefix}.{topic}"

    def logical_topic(self, name: str) -> str:
        return name.removeprefix(f"{self.prefix}.")


def actor_conn(step: GroupStep) -> str:
    return step.conn or step.actor


def label(index: int, step: Step) -> str:
    """A request's name in the observations: step number, actor and request type."""
    kind = type(step).__name__
    actor = getattr(step, "actor", "")
    return f"{index:02d} {actor}.{kind}"


def check(scenario: Scenario) -> None:
    """Refuse a script that would not send what it says (a field the API version lacks)."""
    for index, step in enumerate(scenario.steps):
        where = f"{scenario.name} step {index}"
        if isinstance(step, Join):
            if step.instance is not None and step.version < 5:
                raise ValueError(f"{where}: JoinGroup v{step.version} has no group_instance_id")
            if step.version == 0 and step.rebalance_ms != step.session_ms:
                raise ValueError(f"{where}: JoinGroup v0 has no rebalance timeout")
        if isinstance(step, Sync | Heartbeat) and step.instance is not None and step.version < 3:
            raise ValueError(f"{where}: v{step.version} has no group_instance_id")
        if isinstance(step, Commit) and step.instance is not None and step.version < 7:
            raise ValueError(f"{where}: OffsetCommit v{step.version} has no group_instance_id")
        if isinstance(step, Leave) and step.version < 3 and step.members is not None:
            raise ValueError(f"{where}: LeaveGroup v{step.version} leaves one member")
