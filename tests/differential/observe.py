"""Observations: what each side answered, normalized so that Kafka's responses and our decision
rows compare field by field (docs/conformance.md, "What is compared").

Both players turn every answer into an ``Answer``: the request's label, the *slot* it came in
(the step, or the wait, during which it was answered: a parked JoinGroup answered by a later step
has that step's slot), the API version, and the fields with raw member ids. ``normalize`` then
names member ids by role (``A``, ``A#2`` for A's second id, ``""``, a literal the script sent, or
``<unknown id>``), since the ids themselves differ: Kafka makes ``clientId-UUID``, we make
``prefix-uuid5`` (docs/reference/events.md §5).

A documented difference (``DIFFERENCES``) is a rule that rewrites Kafka's observation into what
our core does on purpose; a scenario that names one asserts that the rewrite changes something
(the difference is real) and that the rewritten observations equal ours.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from controlplane.core.errors import Errors

Fields = dict[str, Any]


def error_name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        from kafka.errors import for_code

        return str(for_code(code).message)


@dataclass(frozen=True)
class Answer:
    label: str  # "03 A.Join"
    actor: str
    kind: str  # Join, Sync, Heartbeat, ... (the step's class name)
    version: int
    slot: str  # the label of the step or wait during which it was answered
    fields: Fields  # raw: member ids as sent by the side that answered


class Roles:
    """Member ids by role: the ids each actor was given, in order, and the literals a script
    sent."""

    def __init__(self, literals: Sequence[str] = ()) -> None:
        self._ids: dict[str, list[str]] = {}
        self._names: dict[str, str] = {}
        self.literals = set(literals)

    def learn(self, actor: str, member_id: str) -> None:
        if not member_id or member_id in self._names:
            return
        ids = self._ids.setdefault(actor, [])
        ids.append(member_id)
        self._names[member_id] = actor if len(ids) == 1 else f"{actor}#{len(ids)}"

    def current(self, actor: str) -> str:
        ids = self._ids.get(actor)
        return ids[-1] if ids else ""

    def nth(self, actor: str, nth: int) -> str:
        ids = self._ids.get(actor, [])
        if not 1 <= nth <= len(ids):
            raise LookupError(f"actor {actor} has no id number {nth} (it has {len(ids)})")
        return ids[nth - 1]

    def name(self, member_id: str | None) -> str | None:
        if member_id is None or member_id == "":
            return member_id
        if member_id in self._names:
            return self._names[member_id]
        if member_id in self.literals:
            return member_id
        return "<unknown id>"


def _blank(value: str | None) -> str | None:
    """Kafka writes "" where a nullable field did not exist yet (JoinGroup < v7): one form."""
    return value or None


def normalize(answer: Answer, roles: Roles) -> Fields:
    """The comparable form of one answer (see the module docstring)."""
    raw = answer.fields
    out: Fields = {"slot": answer.slot, "error": error_name(raw["error"])}
    kind, version, name = answer.kind, answer.version, roles.name
    if kind == "Join":
        out["generation"] = raw["generation"]
        out["member"] = name(raw["member_id"])
        out["leader"] = name(raw["leader"])
        out["protocol_name"] = _blank(raw["protocol_name"])
        if version >= 7:
            out["protocol_type"] = _blank(raw["protocol_type"])
        if version >= 9:
            out["skip_assignment"] = bool(raw["skip_assignment"])
        members = [
            (name(m), instance if version >= 5 else None, metadata)
            for m, instance, metadata in raw["members"]
        ]
        out["members"] = sorted(members, key=repr)
    elif kind == "Sync":
        out["assignment"] = raw["assignment"]
        if version >= 5:
            out["protocol_type"] = _blank(raw["protocol_type"])
            out["protocol_name"] = _blank(raw["protocol_name"])
    elif kind == "Leave":
        if version >= 3:
            out["members"] = [
                (name(m), instance, error_name(code)) for m, instance, code in raw["members"]
            ]
    elif kind == "Commit":
        out["partitions"] = [(p, error_name(code)) for p, code in sorted(raw["partitions"])]
        del out["error"]  # OffsetCommit has per-partition errors only
    elif kind == "Fetch":
        out["partitions"] = sorted(raw["partitions"])
    elif kind == "Describe":
        out["state"] = raw["state"]
        out["protocol_type"] = raw["protocol_type"]
        out["protocol_name"] = raw["protocol_name"]
        out["members"] = sorted(
            (
                (name(m), instance if version >= 4 else None, client, host, assignment)
                for m, instance, client, host, assignment in raw["members"]
            ),
            key=repr,
        )
    elif kind in ("CreateTopics", "CreatePartitions", "DeleteTopics"):
        del out["error"]  # per-topic errors only
        out["topics"] = [(topic, error_name(code)) for topic, code in raw["topics"]]
        out["throttle_time_ms"] = raw["throttle_time_ms"]
    return out


# --- comparison -------------------------------------------------------------------------------


@dataclass
class Played:
    """One side's run of a scenario: normalized observations by label, and for the broker the
    tolerance of each throttle time (ms) and how late its steps ran."""

    observations: dict[str, Fields]
    throttle_tolerance_ms: dict[str, int] = field(default_factory=dict)
    late_ms: int = 0  # how far the broker run fell behind the script's clock
    times_ms: dict[str, int] = field(default_factory=dict)  # label -> the run's clock (ms)
    round_trips_ms: dict[str, int] = field(default_factory=dict)  # label -> sent to answered
    # ours: label -> each strict quota decision's distance from the other outcome, in seconds
    # of refill (the tokens it was taken on, divided by the rate)
    margins_s: dict[str, list[float]] = field(default_factory=dict)


@dataclass(frozen=True)
class Difference:
    """A documented difference: ``rewrite(step, kafka, ours)`` gives Kafka's observation of
    ``step`` as our core answers it by the documented rule, or None where the rule does not
    apply (the observation must then be equal as it is)."""

    name: str
    summary: str
    rewrite: Callable[[Any, Fields, Fields | None], Fields | None]


def _describe_missing_group_v6(step: Any, kafka: Fields, ours: Fields | None) -> Fields | None:
    """Kafka: GROUP_ID_NOT_FOUND (KIP-1043); ours: Dead with NONE, whatever the version."""
    if type(step).__name__ != "Describe" or step.version < 6:
        return None
    if kafka.get("error") != "GROUP_ID_NOT_FOUND" or kafka.get("state") != "Dead":
        return None
    return {**kafka, "error": "NONE"}


def _describe_protocol_in_completing_rebalance(
    step: Any, kafka: Fields, ours: Fields | None
) -> Fields | None:
    """Kafka names the protocol in Stable only; docs/reference/events.md §2 names it in
    CompletingRebalance too (it is chosen: the JoinGroup answers carried it)."""
    if type(step).__name__ != "Describe" or kafka.get("state") != "CompletingRebalance":
        return None
    if kafka.get("protocol_name") != "" or ours is None or not ours.get("protocol_name"):
        return None
    return {**kafka, "protocol_name": ours["protocol_name"]}


def _sync_v5_protocol_optional(step: Any, kafka: Fields, ours: Fields | None) -> Fields | None:
    """Kafka's request check: SyncGroup v5+ must name the protocol type and name, or it is
    INCONSISTENT_GROUP_PROTOCOL before the group is looked at. Ours: null means not checked
    (docs/reference/events.md §1), so the group answers as for an older version."""
    if type(step).__name__ != "Sync" or step.version < 5:
        return None
    if step.protocol_type is not None and step.protocol_name is not None:
        return None
    refused = {"error": "INCONSISTENT_GROUP_PROTOCOL", "assignment": b""}
    if ours is None or any(kafka.get(k) != v for k, v in refused.items()):
        return None
    return ours


DIFFERENCES: Mapping[str, Difference] = {
    difference.name: difference
    for difference in (
        Difference(
            "describe_missing_group_v6",
            "DescribeGroups v6 of a group that does not exist: Kafka answers GROUP_ID_NOT_FOUND "
            "(KIP-1043); docs/reference/events.md §2 fixes Dead with NONE for every version.",
            _describe_missing_group_v6,
        ),
        Difference(
            "describe_protocol_in_completing_rebalance",
            "DescribeGroups in CompletingRebalance: Kafka leaves the protocol name empty (it "
            "names it in Stable only); docs/reference/events.md §2 names it in Stable and "
            "CompletingRebalance, where it is already chosen.",
            _describe_protocol_in_completing_rebalance,
        ),
        Difference(
            "sync_v5_protocol_optional",
            "SyncGroup v5+ without protocol type or name: Kafka refuses it "
            "(INCONSISTENT_GROUP_PROTOCOL, a check of the request before the coordinator); "
            "docs/reference/events.md §1 makes both optional, checked when not null.",
            _sync_v5_protocol_optional,
        ),
    )
}


@dataclass
class Comparison:
    matched: bool
    lines: list[str]
    throttle_deviation_ms: dict[str, int]


def compare(
    kafka: Played,
    ours: Played,
    differences: Sequence[str] = (),
    steps: Mapping[str, Any] | None = None,
) -> Comparison:
    """Kafka's observations, rewritten by the scenario's documented differences, against ours.

    ``steps`` maps each label to its step (what a difference's rule looks at). Throttle times
    agree when they differ by at most the tolerance the broker's real clock forces on that
    request (``Played.throttle_tolerance_ms``). Every named difference must rewrite at least one
    observation: one that never applies is not a difference of this scenario."""
    steps = steps or {}
    lines: list[str] = []
    expected = {label: dict(fields) for label, fields in kafka.observations.items()}
    for name in differences:
        difference = DIFFERENCES[name]
        applied = False
        for label, fields in expected.items():
            mine = ours.observations.get(label)
            rewritten = difference.rewrite(steps.get(label), fields, mine)
            if rewritten is not None and rewritten != fields:
                expected[label] = rewritten
                applied = True
        if not applied:
            lines.append(f"documented difference {name!r} did not occur: Kafka agrees with us")
    deviations: dict[str, int] = {}
    for label in sorted(set(expected) | set(ours.observations)):
        theirs = expected.get(label)
        mine = ours.observations.get(label)
        if theirs is not None and mine is not None and "throttle_time_ms" in theirs:
            deviation = abs(theirs["throttle_time_ms"] - mine["throttle_time_ms"])
            deviations[label] = deviation
            if deviation <= kafka.throttle_tolerance_ms.get(label, 0):
                theirs = {**theirs, "throttle_time_ms": mine["throttle_time_ms"]}
        if theirs != mine:
            lines.append(f"{label}:\n    kafka: {theirs}\n    ours:  {mine}")
    return Comparison(not lines, lines, deviations)
