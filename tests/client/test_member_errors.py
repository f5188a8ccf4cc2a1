"""GroupMember's answer to each error the coordinator gives a heartbeat or a commit, against a
scripted coordinator (AbstractCoordinator / ConsumerCoordinator handlers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from client.scripted import Responder, ScriptedTransport
from controlplane.client.assignors import TopicPartition, encode_assignment, encode_subscription
from controlplane.client.clock import VirtualClock
from controlplane.client.config import ConsumerConfig
from controlplane.client.member import (
    CommitFailedError,
    FencedInstanceIdError,
    GroupMember,
    MemberState,
    RebalanceInProgressError,
)
from controlplane.client.records import InMemoryLog
from controlplane.client.transport import Stream
from controlplane.core.errors import Errors

START_MS = 1_700_000_000_000
MEMBER = "c1-1"


class Coordinator:
    """Answers joins, syncs and fetches at once; heartbeats and commits with ``error`` once."""

    def __init__(self, heartbeat_error: str = "NONE", commit_error: str = "NONE") -> None:
        self.heartbeat_error = heartbeat_error
        self.commit_error = commit_error
        self.generation = 0

    def __call__(self, stream: Stream, request: Mapping[str, Any]) -> dict[str, Any]:
        kind = request["type"]
        if kind == "join":
            self.generation += 1
            member = request["member_id"] or MEMBER
            return {
                "error": "NONE", "member_id": member, "generation_id": self.generation,
                "protocol_name": "range", "leader_id": member,
                "members": [{"member_id": member, "metadata": _metadata()}],
            }  # fmt: skip
        if kind == "sync":
            assignment = encode_assignment([TopicPartition("t", 0)])
            return {"error": "NONE", "assignment": assignment}
        if kind == "offset_fetch":
            return {"error": "NONE", "offsets": []}
        if kind == "heartbeat":
            error, self.heartbeat_error = self.heartbeat_error, "NONE"
            return _error(error)
        if kind == "offset_commit":
            error, self.commit_error = self.commit_error, "NONE"
            return _error(error)
        return _error("NONE")


def _metadata() -> str:
    return encode_subscription(["t"])


def _error(name: str) -> dict[str, Any]:
    return {"error": name, "error_code": Errors[name].code}


def _member(coordinator: Responder, **kw: Any) -> tuple[VirtualClock, GroupMember, Any]:
    clock = VirtualClock(START_MS)
    log = InMemoryLog(clock)
    log.create_topic("t", 1)
    log.append("t", 0, [f"v{i}" for i in range(5)])
    transport = ScriptedTransport(clock, coordinator)
    config = ConsumerConfig(
        "g", ("t",), client_id="c1", session_timeout_ms=10_000, heartbeat_interval_ms=1_000,
        max_poll_interval_ms=60_000, **kw,
    )  # fmt: skip
    member = GroupMember(config, transport, clock, log, auto_offset_reset="earliest")
    assert len(member.poll(1_000)) == 5
    return clock, member, transport


@pytest.mark.parametrize(
    ("error", "keeps_member_id", "keeps_generation"),
    [
        ("REBALANCE_IN_PROGRESS", True, True),
        ("ILLEGAL_GENERATION", True, False),
        ("UNKNOWN_MEMBER_ID", False, False),
    ],
)
def test_heartbeat_errors_lead_to_a_rejoin(
    error: str, keeps_member_id: bool, keeps_generation: bool
) -> None:
    clock, member, transport = _member(Coordinator(heartbeat_error=error))
    clock.sleep(1_500)  # the first heartbeat gets the error
    assert [e.detail for e in member.events("heartbeat_error")] == [error]
    assert (member.member_id == MEMBER) is keeps_member_id
    assert member.generation.valid is keeps_generation
    member.poll(1_000)
    rejoin = transport.requests("join")[-1]
    assert rejoin["member_id"] == (MEMBER if keeps_member_id else "")
    assert member.state is MemberState.STABLE
    assert member.generation.generation_id == 2
    member.close()


def test_heartbeat_coordinator_not_available_is_retried_without_a_rejoin() -> None:
    clock, member, transport = _member(Coordinator(heartbeat_error="COORDINATOR_NOT_AVAILABLE"))
    clock.sleep(2_500)
    assert len(transport.requests("heartbeat")) == 2
    assert member.events("heartbeat_error") == []
    member.poll(0)
    assert len(transport.requests("join")) == 1
    member.close()


def _holding_the_first_heartbeat(held: list[str]) -> Responder:
    """The scripted coordinator, but the first heartbeat is left unanswered (its event id is
    put in ``held``) for the test to answer late."""
    coordinator = Coordinator()

    def responder(stream: Stream, request: Mapping[str, Any]) -> Mapping[str, Any] | None:
        if request["type"] == "heartbeat" and not held:
            held.append(str(request["event_id"]))
            return None  # not answered (yet)
        return coordinator(stream, request)

    return responder


def _heartbeats_ms(transport: ScriptedTransport) -> list[int]:
    return [r["event_time_ms"] for r in transport.requests("heartbeat")]


def test_a_late_none_answer_changes_nothing() -> None:
    # The heartbeat at +1 s is answered after the next one (+2 s) was due: the answer is still
    # heard (it comes within request.timeout.ms) and, saying NONE, it is a successful heartbeat
    # and nothing more: no rejoin, the heartbeats keep their schedule (not re-armed by it).
    held: list[str] = []
    clock, member, transport = _member(_holding_the_first_heartbeat(held))
    joined_ms = clock.now_ms()
    clock.sleep(2_500)
    assert transport.answer(held[0], _error("NONE")) is True
    clock.sleep(3_000)
    assert _heartbeats_ms(transport) == [joined_ms + k * 1_000 for k in range(1, 6)]
    assert member.events("heartbeat_error") == []
    assert (member.member_id, member.generation.generation_id) == (MEMBER, 1)
    member.poll(0)
    assert len(transport.requests("join")) == 1
    member.close()


@pytest.mark.parametrize(
    ("error", "member_id", "generation_valid"),
    [
        ("REBALANCE_IN_PROGRESS", MEMBER, True),
        ("ILLEGAL_GENERATION", MEMBER, False),
        ("UNKNOWN_MEMBER_ID", "", False),
    ],
)
def test_a_late_heartbeat_error_about_the_current_generation_is_acted_upon(
    error: str, member_id: str, generation_valid: bool
) -> None:
    # Answered after the next heartbeat was due, within request.timeout.ms: handled as a
    # timely answer would be (rejoin needed; the resets), then the next poll() rejoins.
    held: list[str] = []
    clock, member, transport = _member(_holding_the_first_heartbeat(held))
    clock.sleep(2_500)  # heartbeats at +1 s (held) and +2 s (answered)
    answered_ms = clock.now_ms()
    assert transport.answer(held[0], _error(error)) is True
    clock.sleep(100)
    errors = member.events("heartbeat_error")
    assert [(e.at_ms, e.detail) for e in errors] == [(answered_ms, error)]
    assert member.member_id == member_id
    assert member.generation.valid is generation_valid
    member.poll(1_000)
    assert transport.requests("join")[-1]["member_id"] == member_id
    assert member.generation.generation_id == 2
    member.close()


def test_a_late_fenced_instance_id_about_the_current_generation_fences_the_member() -> None:
    held: list[str] = []
    clock, member, transport = _member(_holding_the_first_heartbeat(held), group_instance_id="i-1")
    clock.sleep(2_500)
    assert transport.answer(held[0], _error("FENCED_INSTANCE_ID")) is True
    clock.sleep(100)
    assert member.state is MemberState.FENCED
    with pytest.raises(FencedInstanceIdError):
        member.poll(0)


def test_a_heartbeat_answer_after_the_request_timeout_is_not_heard() -> None:
    held: list[str] = []
    clock, member, transport = _member(_holding_the_first_heartbeat(held), request_timeout_ms=5_000)
    clock.sleep(6_500)  # the held heartbeat was sent at +1 s: given up for good at +6 s
    assert transport.answer(held[0], _error("UNKNOWN_MEMBER_ID")) is False
    clock.sleep(100)
    assert member.events("heartbeat_error") == []
    assert (member.member_id, member.generation.valid) == (MEMBER, True)
    member.close()


def test_heartbeat_fenced_instance_id_is_fatal() -> None:
    clock, member, _ = _member(
        Coordinator(heartbeat_error="FENCED_INSTANCE_ID"), group_instance_id="i-1"
    )
    clock.sleep(1_500)
    assert member.state is MemberState.FENCED
    with pytest.raises(FencedInstanceIdError):
        member.poll(0)


@pytest.mark.parametrize(
    ("error", "raised", "member_id", "generation_valid"),
    [
        ("REBALANCE_IN_PROGRESS", RebalanceInProgressError, MEMBER, True),
        ("ILLEGAL_GENERATION", CommitFailedError, MEMBER, False),
        ("UNKNOWN_MEMBER_ID", CommitFailedError, "", False),
    ],
)
def test_commit_errors(
    error: str, raised: type[Exception], member_id: str, generation_valid: bool
) -> None:
    _, member, transport = _member(Coordinator(commit_error=error), enable_auto_commit=False)
    with pytest.raises(raised):
        member.commit()
    assert member.member_id == member_id
    assert member.generation.valid is generation_valid
    member.poll(0)  # rejoins
    assert len(transport.requests("join")) == 2
    member.close()


def test_commit_retries_coordinator_not_available_within_its_timeout() -> None:
    clock, member, transport = _member(
        Coordinator(commit_error="COORDINATOR_NOT_AVAILABLE"), enable_auto_commit=False
    )
    started = clock.now_ms()
    member.commit(timeout_ms=5_000)
    assert len(transport.requests("offset_commit")) == 2
    assert clock.now_ms() - started == member.config.retry_backoff_ms
    member.close()
