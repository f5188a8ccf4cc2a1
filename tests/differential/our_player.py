"""Our side of a differential scenario: the steps as wire events (docs/reference/events.md §1, §3)
through the engine's code path, ``CoordinatorRunner`` and ``QuotaRunner`` (wire parser and
runner), one event per micro-batch with the batch's tick at the event's time, and the waits as
virtual time (a ``Wait`` is a batch with no event, ticked at the wait's end: every timer due in
it fires at its own deadline).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from controlplane.core.config import parse_settings
from controlplane.core.coordinator.runner import DECISIONS, CoordinatorRunner
from controlplane.core.quota import codec as quota_codec
from controlplane.core.quota.bucket import Bucket, burst_of
from controlplane.core.quota.runner import DECISIONS as QUOTA_DECISIONS
from controlplane.core.quota.runner import QuotaRunner
from controlplane.core.runtime import TimedEvent
from differential.observe import Answer, Played, Roles, normalize
from differential.script import (
    OFFSETS_TOPIC,
    QUOTA_WINDOW_NUM,
    QUOTA_WINDOW_SIZE_SECONDS,
    Commit,
    CreatePartitions,
    CreateTopics,
    DeleteGroup,
    DeleteTopics,
    Describe,
    Fetch,
    GroupStep,
    Heartbeat,
    Id,
    Join,
    Leave,
    MemberRef,
    QuotaRequest,
    Run,
    Scenario,
    SetQuota,
    Sync,
    Wait,
    actor_conn,
    label,
)
from support.token_bucket import measure, record

T0_MS = 1_700_000_000_000  # a real epoch time: a new bucket is full on its first touch
CLIENT_HOST = "/127.0.0.1"  # what the broker reports for a loopback client
# The first strict version of each mutation API (docs/reference/mutation-quota.md §2.1).
STRICT_SINCE = {"CreateTopics": 6, "CreatePartitions": 3, "DeleteTopics": 5}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def literals(scenario: Scenario) -> list[str]:
    """The member ids a script spells out."""
    found: list[str] = []
    for step in scenario.steps:
        refs: list[Any] = [getattr(step, "member", None)]
        refs += [m for m, _ in getattr(step, "members", None) or ()]
        refs += list(getattr(step, "assignments", {}) or {})
        found += [ref for ref in refs if isinstance(ref, str) and ref]
    return found


class Members:
    """Both players' view of their actors: ids by role and generations."""

    def __init__(self, scenario: Scenario) -> None:
        self.roles = Roles(literals(scenario))
        self.generations: dict[str, int] = {}
        self.actors = {getattr(step, "actor", "") for step in scenario.steps}

    def member(self, actor: str, ref: MemberRef) -> str:
        if ref is None:
            return self.roles.current(actor)
        if isinstance(ref, Id):
            return self.roles.nth(ref.actor, ref.nth)
        return ref

    def assignee(self, ref: str | Id) -> str:
        if isinstance(ref, Id):
            return self.roles.nth(ref.actor, ref.nth)
        return self.roles.current(ref) if ref in self.actors else ref

    def generation(self, actor: str, gen: int | None) -> int:
        return self.generations.get(actor, -1) if gen is None else gen

    def learn(self, answer: Answer) -> None:
        """A JoinGroup answer gives its actor an id (NONE, MEMBER_ID_REQUIRED) and a
        generation (NONE)."""
        if answer.kind != "Join":
            return
        fields = answer.fields
        if fields["error"] in (0, 79):
            self.roles.learn(answer.actor, fields["member_id"])
        if fields["error"] == 0:
            self.generations[answer.actor] = fields["generation"]


class OurPlayer:
    """``times``: the scenario clock (ms from its start) of each step as the broker run had it
    (the time a request was sent, the end of a wait); None: the script's own times."""

    def __init__(self, run: Run, times: Mapping[str, int] | None = None) -> None:
        scenario = run.scenario
        self.run = run
        self.scenario = scenario
        self.group_id = run.group_id
        self.times = times
        base = dict(scenario.settings.coordinator_settings())
        base["controller.quota.window.num"] = QUOTA_WINDOW_NUM
        base["controller.quota.window.size.seconds"] = QUOTA_WINDOW_SIZE_SECONDS
        self.base_settings = base
        self.coordinator = CoordinatorRunner(parse_settings(base).coordinator)
        self.quotas: dict[tuple[str | None, str | None], float | None] = {}
        self.quota_runner = QuotaRunner(parse_settings(base).quota)
        self.state: bytes | None = None
        self.quota_state: bytes | None = None
        self.now_ms = T0_MS
        self.members = Members(scenario)
        self.partitions = {run.topic(name): n for name, n in scenario.topics.items()}
        self.sent: dict[str, tuple[Any, int]] = {}  # event id -> (step, index)
        self.answers: list[Answer] = []
        # label -> for each strict decision, the seconds of refill from the other outcome
        self.margins: dict[str, list[float]] = {}

    def play(self) -> Played:
        scripted_ms = 0
        for index, step in enumerate(self.scenario.steps):
            slot = label(index, step)
            if isinstance(step, Wait):
                scripted_ms += step.ms
            clock_ms = scripted_ms if self.times is None else self.times[slot]
            self.now_ms = max(self.now_ms, T0_MS + clock_ms)
            if isinstance(step, Wait):
                self._run_group([], slot)
            elif isinstance(step, SetQuota):
                self._set_quota(step)
            elif isinstance(step, QuotaRequest):
                self._quota(index, step, slot)
            else:
                raw = self._event(index, step)
                self.sent[raw["event_id"]] = (step, index)
                self._run_group([raw], slot)
        observations = {a.label: normalize(a, self.members.roles) for a in self.answers}
        return Played(observations, margins_s=self.margins)

    # --- the group protocol ---------------------------------------------------------------

    def _run_group(self, events: list[dict[str, Any]], slot: str) -> None:
        timed = [TimedEvent(raw, self.now_ms) for raw in events]
        result = self.coordinator.run(self.state, timed, self.now_ms)
        self.state = result.state
        for row in result.outputs[DECISIONS]:
            step, index = self.sent[row["event_id"]]
            answer = Answer(
                label(index, step),
                step.actor,
                type(step).__name__,
                step.version,
                slot,
                _fields(row),
            )
            self.members.learn(answer)
            self.answers.append(answer)

    def _event(self, index: int, step: GroupStep) -> dict[str, Any]:
        m = self.members
        raw: dict[str, Any] = {
            "event_id": label(index, step),
            "event_time_ms": self.now_ms,
            "group_id": self.group_id,
            "request_version": step.version,
        }
        if isinstance(step, Join):
            raw |= {
                "type": "join",
                "member_id": m.member(step.actor, step.member),
                "group_instance_id": step.instance,
                "session_timeout_ms": step.session_ms,
                "rebalance_timeout_ms": None if step.version == 0 else step.rebalance_ms,
                "protocol_type": step.protocol_type,
                "protocols": [{"name": n, "metadata": b64(md)} for n, md in step.protocols],
                "client_id": actor_conn(step),
                "client_host": CLIENT_HOST,
            }
        elif isinstance(step, Sync):
            raw |= {
                "type": "sync",
                "member_id": m.member(step.actor, step.member),
                "group_instance_id": step.instance,
                "generation_id": m.generation(step.actor, step.gen),
                "assignments": [
                    {"member_id": m.assignee(ref), "assignment": b64(data)}
                    for ref, data in step.assignments.items()
                ],
            }
            if step.version >= 5:  # older versions do not carry them
                raw["protocol_type"] = step.protocol_type
                raw["protocol_name"] = step.protocol_name
        elif isinstance(step, Heartbeat):
            raw |= {
                "type": "heartbeat",
                "member_id": m.member(step.actor, step.member),
                "group_instance_id": step.instance,
                "generation_id": m.generation(step.actor, step.gen),
            }
        elif isinstance(step, Leave):
            raw |= {"type": "leave", "member_id": m.member(step.actor, step.member)}
            if step.members is not None:
                raw["members"] = [
                    {"member_id": m.member(step.actor, ref), "group_instance_id": instance}
                    for ref, instance in step.members
                ]
        elif isinstance(step, Commit):
            raw |= {
                "type": "offset_commit",
                "member_id": m.member(step.actor, step.member),
                "group_instance_id": step.instance,
                "generation_id": m.generation(step.actor, step.gen),
                "offsets": [
                    {"topic": OFFSETS_TOPIC, "partition": p, "offset": o, "metadata": ""}
                    for p, o in step.offsets
                ],
            }
        elif isinstance(step, Fetch):
            topics = None
            if step.partitions is not None:
                topics = [{"topic": OFFSETS_TOPIC, "partitions": list(step.partitions)}]
            raw |= {"type": "offset_fetch", "topics": topics}
        elif isinstance(step, Describe | DeleteGroup):
            kind = "describe" if isinstance(step, Describe) else "delete_group"
            raw |= {"type": kind, "group_id": self._group(step.group)}
        return raw

    def _group(self, suffix: str | None) -> str:
        return self.group_id if suffix is None else f"{self.group_id}.{suffix}"

    # --- the mutation quota ---------------------------------------------------------------

    def _set_quota(self, step: SetQuota) -> None:
        run = self.run
        user = None if step.user is None else run.principal(step.user)
        client = None if step.client is None else run.client_id(step.client)
        # a removed entry stays, rate-less: Kafka never forgets a level type once set
        self.quotas[(user, client)] = step.rate
        entries = []
        for (u, c), rate in self.quotas.items():
            entry: dict[str, Any] = {"controller_mutation_rate": rate}
            if u is not None:
                entry["user"] = u
            if c is not None:
                entry["client_id"] = c
            entries.append(entry)
        config = parse_settings({**self.base_settings, "quotas": entries}).quota
        self.quota_runner = QuotaRunner(config)

    def _quota(self, index: int, step: QuotaRequest, slot: str) -> None:
        run = self.run
        pairs = _pairs(step)
        names = [run.topic(name) for name, _ in pairs]
        if isinstance(step, CreateTopics):
            kind = "create_topics"
            counts = [n for _, n in step.topics]
        elif isinstance(step, CreatePartitions):
            kind = "create_partitions"
            counts = [
                n - self.partitions.get(name, 0) for name, (_, n) in zip(names, pairs, strict=True)
            ]
        else:  # a topic we do not know (Kafka: UNKNOWN_TOPIC_OR_PARTITION) has no partitions
            kind = "delete_topics"
            counts = [self.partitions.get(name, 0) for name in names]
        raw: dict[str, Any] = {
            "event_id": label(index, step),
            "event_time_ms": self.now_ms,
            "type": kind,
            "user": run.principal(step.actor),
            "client_id": run.client_id(step.client),
            "request_version": step.version,
            "topics": [{"name": n, "partitions": c} for n, c in zip(names, counts, strict=True)],
        }
        if not isinstance(step, DeleteTopics):
            raw["validate_only"] = step.validate_only
        timed = [TimedEvent(raw, self.now_ms)]
        before, _ = quota_codec.decode(self.quota_state)
        result = self.quota_runner.run(self.quota_state, timed, self.now_ms)
        self.quota_state = result.state
        [row] = result.outputs[QUOTA_DECISIONS]
        self.margins[slot] = self._margins(before, row, counts, step)
        topics = [(t["name"], t["error_code"]) for t in row["topics"]]
        if not getattr(step, "validate_only", False):
            for (name, code), (_, partitions) in zip(topics, pairs, strict=True):
                if code == 0:
                    self._mutated(step, name, partitions)
        fields = {
            "error": row["error_code"],
            "topics": [(run.logical_topic(name), code) for name, code in topics],
            "throttle_time_ms": row["throttle_time_ms"],
        }
        kind_name = type(step).__name__
        self.answers.append(Answer(slot, step.actor, kind_name, step.version, slot, fields))

    def _margins(
        self, before: Mapping[str, Bucket], row: Mapping[str, Any], counts: list[int], step: Any
    ) -> list[float]:
        """The strict request's decisions, as seconds of refill away from going the other way:
        the tokens each topic was checked against (after the refill to now), divided by the
        rate. Empty for a permissive request (it decides nothing) or an untracked principal."""
        key, rate = row["quota_key"], row["rate_per_s"]
        strict = (step.version or 0) >= STRICT_SINCE[type(step).__name__]
        if key is None or rate is None or not strict:
            return []
        burst = burst_of(QUOTA_WINDOW_NUM, QUOTA_WINDOW_SIZE_SECONDS, rate)
        bucket = before.get(key)
        tokens = burst if bucket is None else bucket.tokens
        if bucket is not None:
            tokens = measure(tokens, bucket.last_update_ms, self.now_ms, rate, burst)
        margins: list[float] = []
        for topic, count in zip(row["topics"], counts, strict=True):
            if topic["error_code"] not in (0, 89):  # refused before the quota
                continue
            margins.append(tokens / rate)
            if topic["error_code"] == 0:
                tokens = record(tokens, count, burst)
        return margins

    def _mutated(self, step: QuotaRequest, name: str, partitions: int | None) -> None:
        if isinstance(step, DeleteTopics):
            self.partitions.pop(name, None)
        else:
            assert partitions is not None
            self.partitions[name] = partitions


def _pairs(step: QuotaRequest) -> list[tuple[str, int | None]]:
    if isinstance(step, DeleteTopics):
        return [(name, None) for name in step.topics]
    return [(name, count) for name, count in step.topics]


def _fields(row: dict[str, Any]) -> dict[str, Any]:
    """A decision row as the raw fields ``observe.normalize`` reads."""
    kind = row["type"]
    fields: dict[str, Any] = {"error": row["error_code"]}
    if kind == "join":
        fields |= {
            "generation": row["generation_id"],
            "member_id": row["member_id"],
            "leader": row["leader_id"],
            "protocol_type": row["protocol_type"],
            "protocol_name": row["protocol_name"],
            "skip_assignment": row["skip_assignment"],
            "members": [
                (m["member_id"], m["group_instance_id"], unb64(m["metadata"]))
                for m in row["members"] or ()
            ],
        }
    elif kind == "sync":
        fields |= {
            "assignment": unb64(row["assignment"]),
            "protocol_type": row["protocol_type"],
            "protocol_name": row["protocol_name"],
        }
    elif kind == "leave":
        fields["members"] = [
            (r["member_id"], r["group_instance_id"], r["error_code"])
            for r in row["member_results"] or ()
        ]
    elif kind == "offset_commit":
        fields["partitions"] = [(o["partition"], o["error_code"]) for o in row["offsets"] or ()]
    elif kind == "offset_fetch":
        fields["partitions"] = [
            (o["partition"], o["offset"], o["metadata"] or "", o["error_code"])
            for o in row["offsets"] or ()
        ]
    elif kind == "describe":
        fields |= {
            "state": row["group_state"],
            "protocol_type": row["protocol_type"],
            "protocol_name": row["protocol_name"],
            "members": [
                (
                    m["member_id"],
                    m["group_instance_id"],
                    m["client_id"],
                    m["client_host"],
                    unb64(m["assignment"]),
                )
                for m in row["group_members"] or ()
            ],
        }
    return fields
