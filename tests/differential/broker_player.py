"""Kafka's side of a differential scenario: the steps as raw protocol requests at explicit API
versions (kafka-python's ``kafka.protocol`` classes, generated from Kafka's message schemas) to a
real broker, the waits as real sleeps.

Connections: one per group actor (``conn``), each driven by its own thread, since a parked
JoinGroup blocks what follows it on its connection; one fresh connection per quota request (the
broker mutes a throttled connection, which would delay the next request); all opened before the
scenario's clock starts. Admin requests (AlterClientQuotas) go on a connection of their own as
the ``admin`` principal.

Slots. Every answer is put in the slot of the step (or wait) during which it arrived: the last
step sent, or wait begun, before the answer. Waiting for an answer is bounded by what our side
did with the same step (``Expectations``): a request we answered at once is awaited up to
``OWN_WAIT_S``, one we parked only ``SETTLE_S`` (many loopback round trips); answers
we released in a slot are awaited up to ``RELEASE_WAIT_S`` before the next step is sent. The
expectations only bound the waiting: an answer Kafka gives in another slot still lands in that
slot, and an answer to the step itself that took longer than ``SLOW_S`` is marked slow, so a
broker that parks what we answer at once cannot pass for immediate.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from controlplane.io.broker import ADMIN_USER, LocalBroker
from differential.observe import Answer, Played, normalize
from differential.our_player import Members
from differential.script import (
    OFFSETS_TOPIC,
    Commit,
    CreatePartitions,
    CreateTopics,
    DeleteGroup,
    DeleteTopics,
    Describe,
    Fetch,
    GroupStep,
    Heartbeat,
    Join,
    Leave,
    QuotaRequest,
    Run,
    SetQuota,
    Step,
    Sync,
    Wait,
    actor_conn,
    label,
)

OWN_WAIT_S = 5.0
SETTLE_S = 0.3
RELEASE_WAIT_S = 3.0
SLOW_S = 1.0
QUIET_S = 0.02  # after each step: answers it released arrive before the next step is sent
REQUEST_TIMEOUT_MS = 120_000
QUOTA_APPLY_TIMEOUT_S = 30.0
QUOTA_SETTLE_S = 0.2


@dataclass(frozen=True)
class Expectations:
    """What our side did: the labels it answered in each slot."""

    by_slot: Mapping[str, frozenset[str]]

    @classmethod
    def of(cls, played: Played) -> Expectations:
        slots: dict[str, set[str]] = {}
        for name, fields in played.observations.items():
            slots.setdefault(fields["slot"], set()).add(name)
        return cls({slot: frozenset(names) for slot, names in slots.items()})

    def immediate(self, name: str) -> bool:
        return name in self.by_slot.get(name, frozenset())

    def released(self, slot: str) -> frozenset[str]:
        return self.by_slot.get(slot, frozenset()) - {slot}


@dataclass
class Sent:
    label: str
    step: Step
    sent_at: float
    done: threading.Event = field(default_factory=threading.Event)
    done_at: float | None = None
    response: Any = None
    error: BaseException | None = None
    handled: bool = False


class Connection:
    """A kafka-python client on one broker connection, driven by its own thread: requests on it
    go out in order and each waits for its answer (as a member's connection does)."""

    def __init__(self, broker: LocalBroker, client_id: str, user: str | None = None) -> None:
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"conn-{client_id}")
        self._closing = False
        self._client: Any = None
        self._node: Any = None
        self._executor.submit(self._open, broker, client_id, user).result(timeout=60)

    def _open(self, broker: LocalBroker, client_id: str, user: str | None) -> None:
        from kafka.net.compat import KafkaNetClient

        config = broker.client_config(user)
        self._client = KafkaNetClient(
            **config, client_id=client_id, request_timeout_ms=REQUEST_TIMEOUT_MS
        )
        self._client.check_version(timeout_ms=30_000)
        self._node = self._client.least_loaded_node()
        self._client.await_ready(self._node, timeout_ms=30_000)

    def send(self, sent: Sent, request: Any) -> None:
        self._executor.submit(self._call, sent, request)

    def call(self, request: Any, timeout_s: float = 30.0) -> Any:
        """Send and wait for the answer (setup requests)."""
        sent = Sent("setup", Wait(0), time.monotonic())
        self.send(sent, request)
        if not sent.done.wait(timeout_s):
            raise TimeoutError(f"no answer to {type(request).__name__} in {timeout_s} s")
        if sent.error is not None:
            raise sent.error
        return sent.response

    def _call(self, sent: Sent, request: Any) -> None:
        try:
            future = self._client.send(self._node, request)
            while not future.is_done:
                if self._closing:
                    return
                self._client.poll(timeout_ms=50, future=future)
            if future.failed():
                sent.error = future.exception
            else:
                sent.response = future.value
        except BaseException as exc:  # reported with the scenario, never lost in the thread
            sent.error = exc
        sent.done_at = time.monotonic()
        sent.done.set()

    def close(self) -> None:
        self._closing = True
        try:
            self._executor.submit(self._client.close).result(timeout=30)
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)


class BrokerPlayer:
    def __init__(self, broker: LocalBroker, run: Run, expected: Expectations) -> None:
        self.broker = broker
        self.run = run
        self.scenario = run.scenario
        self.group_id = run.group_id
        self.expected = expected
        self.members = Members(run.scenario)
        self.connections: dict[str, Connection] = {}
        self.sent: list[Sent] = []
        self.boundaries: list[tuple[float, str]] = []
        self.times_s: dict[str, float] = {}  # label -> when it was sent / the wait ended
        self.answers: list[Answer] = []
        self.late_ms = 0

    # --- connections ----------------------------------------------------------------------

    def _open(self) -> None:
        run = self.run
        names: dict[str, tuple[str | None, str]] = {}  # name -> (user, client id)
        for index, step in enumerate(run.scenario.steps):
            if isinstance(step, GroupStep):
                conn = actor_conn(step)
                names[conn] = (None, conn)
            elif isinstance(step, QuotaRequest):
                names[label(index, step)] = (run.principal(step.actor), run.client_id(step.client))
            elif isinstance(step, SetQuota):
                names["admin"] = (ADMIN_USER, run.client_id("admin"))
        with ThreadPoolExecutor(8) as pool:
            opened = {
                name: pool.submit(Connection, self.broker, client, user)
                for name, (user, client) in names.items()
            }
            for name, future in opened.items():
                self.connections[name] = future.result()

    def close(self) -> None:
        for connection in self.connections.values():
            connection.close()

    # --- the run --------------------------------------------------------------------------

    def play(self) -> Played:
        self._open()
        try:
            start = self._run()
        finally:
            self.close()
        self._collect()
        return Played(
            {a.label: normalize(a, self.members.roles) for a in self.answers},
            self._throttle_tolerances(),
            self.late_ms,
            times_ms={name: round((t - start) * 1000) for name, t in self.times_s.items()},
            round_trips_ms={
                s.label: round(((s.done_at or s.sent_at) - s.sent_at) * 1000) for s in self.sent
            },
        )

    def _run(self) -> float:
        start = time.monotonic()
        anchor = start  # a wait ends its length after the last request was sent
        due = start  # when the current burst of steps (those between two waits) was due
        waiting: str | None = None  # the wait whose end is the next step's start
        for index, step in enumerate(self.scenario.steps):
            name = label(index, step)
            if isinstance(step, Wait):
                self.boundaries.append((time.monotonic(), name))
                anchor += step.ms / 1000
                due = anchor
                _sleep_until(anchor)
                self._await(self.expected.released(name), RELEASE_WAIT_S)
                self.times_s[name] = time.monotonic()
                waiting = name
                continue
            self.late_ms = max(self.late_ms, int((time.monotonic() - due) * 1000))
            self._collect()
            if isinstance(step, SetQuota):
                self.times_s[name] = time.monotonic()
                self._set_quota(step)
                anchor = time.monotonic()  # the quota is in force from now
                continue
            connection = self.connections[
                name if isinstance(step, QuotaRequest) else actor_conn(step)  # type: ignore[arg-type]
            ]
            request = self._request(step)
            sent = Sent(name, step, time.monotonic())
            if waiting is not None:  # the wait ended as this step began
                self.times_s[waiting] = sent.sent_at
                waiting = None
            self.times_s[name] = anchor = sent.sent_at
            self.boundaries.append((sent.sent_at, name))
            self.sent.append(sent)
            connection.send(sent, request)
            sent.done.wait(OWN_WAIT_S if self.expected.immediate(name) else SETTLE_S)
            self._await(self.expected.released(name), RELEASE_WAIT_S)
            time.sleep(QUIET_S)
        time.sleep(SETTLE_S)  # stray answers to the last step
        return start

    def _await(self, names: Iterable[str], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for sent in self.sent:
            if sent.label in names:
                sent.done.wait(max(0.0, deadline - time.monotonic()))

    def _collect(self) -> None:
        """Turn every arrived answer into an ``Answer`` in arrival order, learning ids."""
        arrived = [s for s in self.sent if s.done.is_set() and not s.handled]
        for sent in sorted(arrived, key=lambda s: s.done_at or 0.0):
            sent.handled = True
            if sent.error is not None:
                raise RuntimeError(f"{self.scenario.name} {sent.label}: {sent.error!r}")
            assert sent.done_at is not None
            slot = self._slot(sent.done_at)
            slow = sent.done_at - sent.sent_at > SLOW_S
            if slot == sent.label and slow and isinstance(sent.step, GroupStep):
                slot = f"{slot} (slow: {sent.done_at - sent.sent_at:.1f} s)"
            step = sent.step
            answer = Answer(
                sent.label,
                getattr(step, "actor", ""),
                type(step).__name__,
                getattr(step, "version", 0),
                slot,
                self._fields(step, sent.response),
            )
            self.members.learn(answer)
            self.answers.append(answer)

    def _slot(self, at: float) -> str:
        slot = self.boundaries[0][1]
        for when, name in self.boundaries:
            if when <= at:
                slot = name
        return slot

    def _throttle_tolerances(self) -> dict[str, int]:
        """The bound the real clock puts on each throttle time. Our side handles request k at
        the time it was sent (``times_ms``); the broker handled it somewhere between that and
        its answer. The bucket refilled for the time since an earlier request j, which the
        broker saw as between (sent_k - answered_j) and (answered_k - sent_j), and we as
        (sent_k - sent_j): off by at most the longer of the two round trips, in whole ms (1 ms
        more for the rounding of the throttle time)."""
        quota = [s for s in self.sent if isinstance(s.step, QuotaRequest) and s.done_at]
        tolerances: dict[str, int] = {}
        longest = 0.0
        for sent in quota:
            assert sent.done_at is not None
            longest = max(longest, sent.done_at - sent.sent_at)
            tolerances[sent.label] = math.ceil(round(longest * 1000, 3)) + 1
        return tolerances

    # --- requests -------------------------------------------------------------------------

    def _request(self, step: Step) -> Any:
        if isinstance(step, QuotaRequest):
            return self._quota_request(step)
        assert isinstance(step, GroupStep)
        return self._group_request(step)

    def _group_request(self, step: GroupStep) -> Any:
        from kafka.protocol.admin import DeleteGroupsRequest, DescribeGroupsRequest
        from kafka.protocol.consumer import (
            HeartbeatRequest,
            JoinGroupRequest,
            LeaveGroupRequest,
            OffsetCommitRequest,
            OffsetFetchRequest,
            SyncGroupRequest,
        )

        m, v, group = self.members, step.version, self.group_id
        if isinstance(step, Join):
            protocol = JoinGroupRequest.JoinGroupRequestProtocol
            fields: dict[str, Any] = {
                "group_id": group,
                "session_timeout_ms": step.session_ms,
                "member_id": m.member(step.actor, step.member),
                "protocol_type": step.protocol_type,
                "protocols": [protocol(name=n, metadata=md) for n, md in step.protocols],
            }
            if v >= 1:
                fields["rebalance_timeout_ms"] = step.rebalance_ms
            if v >= 5:
                fields["group_instance_id"] = step.instance
            return JoinGroupRequest(version=v, **fields)
        if isinstance(step, Sync):
            assignment = SyncGroupRequest.SyncGroupRequestAssignment
            fields = {
                "group_id": group,
                "generation_id": m.generation(step.actor, step.gen),
                "member_id": m.member(step.actor, step.member),
                "assignments": [
                    assignment(member_id=m.assignee(ref), assignment=data)
                    for ref, data in step.assignments.items()
                ],
            }
            if v >= 3:
                fields["group_instance_id"] = step.instance
            if v >= 5:
                fields["protocol_type"] = step.protocol_type
                fields["protocol_name"] = step.protocol_name
            return SyncGroupRequest(version=v, **fields)
        if isinstance(step, Heartbeat):
            fields = {
                "group_id": group,
                "generation_id": m.generation(step.actor, step.gen),
                "member_id": m.member(step.actor, step.member),
            }
            if v >= 3:
                fields["group_instance_id"] = step.instance
            return HeartbeatRequest(version=v, **fields)
        if isinstance(step, Leave):
            if v < 3:
                return LeaveGroupRequest(
                    version=v, group_id=group, member_id=m.member(step.actor, step.member)
                )
            identity = LeaveGroupRequest.MemberIdentity
            pairs = step.members or ((step.member, None),)
            return LeaveGroupRequest(
                version=v,
                group_id=group,
                members=[
                    identity(member_id=m.member(step.actor, ref), group_instance_id=instance)
                    for ref, instance in pairs
                ],
            )
        if isinstance(step, Commit):
            topic = OffsetCommitRequest.OffsetCommitRequestTopic
            partition = topic.OffsetCommitRequestPartition
            fields = {
                "group_id": group,
                "generation_id_or_member_epoch": m.generation(step.actor, step.gen),
                "member_id": m.member(step.actor, step.member),
                "retention_time_ms": -1,
                "topics": [
                    topic(
                        name=OFFSETS_TOPIC,
                        partitions=[
                            partition(
                                partition_index=p,
                                committed_offset=o,
                                committed_leader_epoch=-1,
                                committed_metadata="",
                            )
                            for p, o in step.offsets
                        ],
                    )
                ],
            }
            if v >= 7:
                fields["group_instance_id"] = step.instance
            return OffsetCommitRequest(version=v, **fields)
        if isinstance(step, Fetch):
            topics = None
            if step.partitions is not None:
                topics = [
                    OffsetFetchRequest.OffsetFetchRequestTopic(
                        name=OFFSETS_TOPIC, partition_indexes=list(step.partitions)
                    )
                ]
            return OffsetFetchRequest(
                version=v, group_id=group, topics=topics, require_stable=False
            )
        if isinstance(step, Describe):
            name = group if step.group is None else f"{group}.{step.group}"
            return DescribeGroupsRequest(
                version=v, groups=[name], include_authorized_operations=False
            )
        name = group if step.group is None else f"{group}.{step.group}"
        return DeleteGroupsRequest(version=v, groups_names=[name])

    def _quota_request(self, step: QuotaRequest) -> Any:
        from kafka.protocol.admin import (
            CreatePartitionsRequest,
            CreateTopicsRequest,
            DeleteTopicsRequest,
        )

        if isinstance(step, CreateTopics):
            topic = CreateTopicsRequest.CreatableTopic
            return CreateTopicsRequest(
                version=step.version,
                topics=[
                    topic(
                        name=self.run.topic(name),
                        num_partitions=partitions,
                        replication_factor=1,
                        assignments=[],
                        configs=[],
                    )
                    for name, partitions in step.topics
                ],
                timeout_ms=30_000,
                validate_only=step.validate_only,
            )
        if isinstance(step, CreatePartitions):
            topic = CreatePartitionsRequest.CreatePartitionsTopic
            return CreatePartitionsRequest(
                version=step.version,
                topics=[
                    topic(name=self.run.topic(name), count=count, assignments=None)
                    for name, count in step.topics
                ],
                timeout_ms=30_000,
                validate_only=step.validate_only,
            )
        names = [self.run.topic(name) for name in step.topics]
        if step.version >= 6:
            state = DeleteTopicsRequest.DeleteTopicState
            return DeleteTopicsRequest(
                version=step.version,
                topics=[state(name=name) for name in names],
                timeout_ms=30_000,
            )
        return DeleteTopicsRequest(version=step.version, topic_names=names, timeout_ms=30_000)

    def _set_quota(self, step: SetQuota) -> None:
        """AlterClientQuotas as admin, then wait until the broker describes the new value.

        The quota reaches the controller's quota manager asynchronously, through the metadata
        loader that the broker and the controller share in a combined node; under load (the
        broker creating the logs of new topics) that takes seconds. The broker's own view comes
        through the same loader, so once DescribeClientQuotas shows the value, the controller
        has it too, or is about to (``QUOTA_SETTLE_S`` more)."""
        from kafka.protocol.admin import AlterClientQuotasRequest

        entry = AlterClientQuotasRequest.EntryData
        entity = [
            entry.EntityData(entity_type=kind, entity_name=name)
            for kind, name in self._entity(step)
        ]
        request = AlterClientQuotasRequest(
            version=1,
            entries=[
                entry(
                    entity=entity,
                    ops=[
                        entry.OpData(
                            key="controller_mutation_rate",
                            value=step.rate or 0.0,
                            remove=step.rate is None,
                        )
                    ],
                )
            ],
            validate_only=False,
        )
        admin = self.connections["admin"]
        response = admin.call(request)
        codes = [e.error_code for e in response.entries]
        if codes != [0]:
            raise RuntimeError(f"{self.scenario.name}: AlterClientQuotas answered {codes}")
        deadline = time.monotonic() + QUOTA_APPLY_TIMEOUT_S
        while self._described_rate(step) != step.rate:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.scenario.name}: the broker never showed {step}")
            time.sleep(0.05)
        time.sleep(QUOTA_SETTLE_S)

    def _entity(self, step: SetQuota) -> list[tuple[str, str]]:
        entity = []
        if step.user is not None:
            entity.append(("user", self.run.principal(step.user)))
        if step.client is not None:
            entity.append(("client-id", self.run.client_id(step.client)))
        return entity

    def _described_rate(self, step: SetQuota) -> float | None:
        from kafka.protocol.admin import DescribeClientQuotasRequest

        component = DescribeClientQuotasRequest.ComponentData
        entity = self._entity(step)
        request = DescribeClientQuotasRequest(
            version=1,
            components=[
                component(entity_type=kind, match_type=0, match=name) for kind, name in entity
            ],
            strict=True,
        )
        response = self.connections["admin"].call(request)
        for found in response.entries or ():
            if sorted((e.entity_type, e.entity_name) for e in found.entity) == sorted(entity):
                for value in found.values:
                    if value.key == "controller_mutation_rate":
                        return float(value.value)
        return None

    # --- responses ------------------------------------------------------------------------

    def _fields(self, step: Step, r: Any) -> dict[str, Any]:
        """A Kafka response as the raw fields ``observe.normalize`` reads."""
        if isinstance(step, Join):
            return {
                "error": r.error_code,
                "generation": r.generation_id,
                "member_id": r.member_id,
                "leader": r.leader,
                "protocol_type": getattr(r, "protocol_type", None),
                "protocol_name": r.protocol_name,
                "skip_assignment": getattr(r, "skip_assignment", False),
                "members": [
                    (m.member_id, getattr(m, "group_instance_id", None), bytes(m.metadata))
                    for m in r.members
                ],
            }
        if isinstance(step, Sync):
            return {
                "error": r.error_code,
                "assignment": bytes(r.assignment),
                "protocol_type": getattr(r, "protocol_type", None),
                "protocol_name": getattr(r, "protocol_name", None),
            }
        if isinstance(step, Heartbeat):
            return {"error": r.error_code}
        if isinstance(step, Leave):
            members = getattr(r, "members", None) or []
            return {
                "error": r.error_code,
                "members": [(m.member_id, m.group_instance_id, m.error_code) for m in members],
            }
        if isinstance(step, Commit):
            [topic] = r.topics
            return {
                "error": 0,
                "partitions": [(p.partition_index, p.error_code) for p in topic.partitions],
            }
        if isinstance(step, Fetch):
            return {
                "error": r.error_code,
                "partitions": [
                    (p.partition_index, p.committed_offset, p.metadata or "", p.error_code)
                    for t in r.topics
                    for p in t.partitions
                ],
            }
        if isinstance(step, Describe):
            [g] = r.groups
            return {
                "error": g.error_code,
                "state": g.group_state,
                "protocol_type": g.protocol_type,
                "protocol_name": g.protocol_data,
                "members": [
                    (
                        m.member_id,
                        getattr(m, "group_instance_id", None),
                        m.client_id,
                        m.client_host,
                        bytes(m.member_assignment),
                    )
                    for m in g.members
                ],
            }
        if isinstance(step, DeleteGroup):
            [result] = r.results
            return {"error": result.error_code}
        assert isinstance(step, QuotaRequest)
        results = {
            CreateTopics: lambda: r.topics,
            CreatePartitions: lambda: r.results,
            DeleteTopics: lambda: r.responses,
        }[type(step)]()
        return {
            "error": 0,
            "topics": [(self.run.logical_topic(t.name), t.error_code) for t in results],
            "throttle_time_ms": r.throttle_time_ms,
        }


def _sleep_until(deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining > 0:
        time.sleep(remaining)
