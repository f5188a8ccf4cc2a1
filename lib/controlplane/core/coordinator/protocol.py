"""Protocol compatibility and the protocol vote (docs/reference/group-coordinator.md §2, CG:1017,
CG:1121)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from controlplane.core.coordinator.requests import Protocol
from controlplane.core.coordinator.state import (
    GroupPhase,
    Member,
)


def supports_protocols(
    phase: GroupPhase,
    group_protocol_type: str | None,
    members: Collection[Member],
    protocol_type: str,
    protocols: Sequence[Protocol],
) -> bool:
    """An Empty group takes any non-empty type and protocol list; otherwise the type must be the
    group's and some name of ``protocols`` must be listed by every current member (with no
    member, any name will do)."""
    if phase is GroupPhase.EMPTY:
        return protocol_type != "" and bool(protocols)
    if protocol_type != group_protocol_type:
        return False
    for protocol in protocols:  # noqa: SIM110 (a plain loop: quicker than any())
        if _listed_by_every_member(protocol.name, members):
            return True
    return False


def _listed_by_every_member(name: str, members: Collection[Member]) -> bool:
    # Plain loops: a few times quicker than building a set per member for these short lists.
    for member in members:
        for protocol in member.protocols:
            if protocol.name == name:
                break
        else:
            return False  # this member does not list the name
    return True


def select_protocol(members: Sequence[Member], leader_id: str | None) -> str | None:
    """Each member votes for its first protocol that every member lists; most votes wins.

    Kafka breaks ties by HashMap order; the model breaks them by the leader's preference order,
    then by name, so the result is deterministic.
    """
    if not members:
        return None
    candidates = {p.name for p in members[0].protocols if _listed_by_every_member(p.name, members)}
    if len(candidates) < 2:
        return next(iter(candidates), None)  # no vote to count: one candidate, or none
    votes: dict[str, int] = dict.fromkeys(candidates, 0)
    for member in members:
        for protocol in member.protocols:
            if protocol.name in votes:  # the member's first candidate: its vote
                votes[protocol.name] += 1
                break
    leader = next((m for m in members if m.member_id == leader_id), members[0])
    preference = {p.name: i for i, p in enumerate(leader.protocols)}
    return min(votes, key=lambda name: (-votes[name], preference.get(name, len(preference)), name))


def matches(member: Member, protocols: Sequence[Protocol]) -> bool:
    """CGM:225: the ordered (name, metadata) list is exactly the same."""
    return tuple(member.protocols) == tuple(protocols)
