"""The heartbeat fast path on a group's encoding (fields.py): the cases it leaves to the general
path, the timers it keeps, and lists that are not a group's. test_stateful compares it with
``fast_heartbeat`` at every heartbeat of its random runs."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from controlplane.core.coordinator import admin, codec, fields
from controlplane.core.coordinator.heartbeat import fast_heartbeat
from controlplane.core.coordinator.requests import Heartbeat
from controlplane.core.coordinator.state import Group, TimerKind, make_timer
from support.harness import FOLLOWER_IID, CoordinatorHarness, static2

NOW_MS = 4000


def stable_pair() -> tuple[CoordinatorHarness, str, str]:
    h = CoordinatorHarness()
    leader, follower = static2(h)
    return h, leader, follower


def both_paths(group: Group, request: Heartbeat) -> tuple[Any, list[Any]]:
    """(fast_heartbeat's step, the fields path's answer and lists) on the same group."""
    lists = codec.read_fields(codec.encode_group(group))
    return fast_heartbeat(group, request, NOW_MS), [fields.heartbeat(lists, request, NOW_MS), lists]


def test_a_member_of_a_stable_group_is_answered_and_its_session_rescheduled() -> None:
    h, leader, _ = stable_pair()
    step, (decision, lists) = both_paths(h.state, h.heartbeat_request(leader, 1))
    assert step is not None
    assert decision is not None
    assert (decision,) == step.decisions
    assert codec.group_of_fields(lists) == step.group
    assert fields.next_deadline_ms(lists) == step.group.next_deadline_ms
    assert fields.group_row(lists, NOW_MS) == admin.group_row(step.group, NOW_MS)


@pytest.mark.parametrize(
    "case",
    ["offline member", "other generation", "unknown member", "other instance id"],
)
def test_what_the_fast_path_leaves_to_the_general_path_the_fields_path_leaves_too(
    case: str,
) -> None:
    h, leader, follower = stable_pair()
    group, generation, member_id, iid = h.state, 1, follower, None
    if case == "offline member":
        members = tuple(
            dataclasses.replace(m, offline_since_ms=3500) if m.member_id == follower else m
            for m in group.members
        )
        group = dataclasses.replace(group, members=members)
    elif case == "other generation":
        generation = 2
    elif case == "unknown member":
        member_id = "stranger"
    else:
        member_id, iid = leader, FOLLOWER_IID
    step, (decision, lists) = both_paths(group, h.heartbeat_request(member_id, generation, iid=iid))
    assert step is None
    assert decision is None
    assert codec.group_of_fields(lists) == group, "lists changed by a heartbeat it left"


def test_only_the_members_session_timer_is_replaced() -> None:
    """A timer of another kind under the member's id (none today: the rule, as the fast path's)
    stays, and the others keep their order."""
    h, leader, _follower = stable_pair()
    group = h.state
    extra = make_timer(kind=TimerKind.JOIN, member_id=leader, deadline_ms=NOW_MS + 1, seq=99)
    timers = sorted((*group.timers, extra), key=lambda t: (t.deadline_ms, t.seq))
    group = dataclasses.replace(group, timers=tuple(timers), timer_seq=100)
    step, (decision, lists) = both_paths(group, h.heartbeat_request(leader, 1))
    assert step is not None
    assert decision is not None
    assert codec.group_of_fields(lists) == step.group
    assert extra in step.group.timers


@pytest.mark.parametrize(
    ("position", "value"),
    [
        (codec.G_MEMBERS, None),
        (codec.G_MEMBERS, [["too short"]]),
        (codec.G_TIMERS, [[1]]),
        (codec.G_PHASE, [0]),
        (codec.G_TIMER_SEQ, "seven"),
    ],
)
def test_lists_that_are_not_a_groups_are_left_to_the_general_path(
    position: int, value: Any
) -> None:
    h, leader, _ = stable_pair()
    lists = codec.read_fields(codec.encode_group(h.state))
    lists[position] = value
    before = repr(lists)
    assert fields.heartbeat(lists, h.heartbeat_request(leader, 1), NOW_MS) is None
    assert repr(lists) == before


def test_a_row_of_lists_that_are_not_a_groups_is_refused_with_the_codecs_error() -> None:
    h, _, _ = stable_pair()
    lists = codec.read_fields(codec.encode_group(h.state))
    lists[codec.G_MEMBERS][1] = ["zz", None]
    with pytest.raises(ValueError, match="malformed"):
        fields.group_row(lists, NOW_MS)
