"""The group encoding: exact round trip, versioned, refuses what it cannot read."""

from __future__ import annotations

import pytest

from controlplane.core.coordinator.codec import VERSION, decode_group, encode_group
from controlplane.core.coordinator.state import Group
from support.harness import RR, CoordinatorHarness, static2


def ten_member_group() -> Group:
    h = CoordinatorHarness()
    for i in range(10):
        h.join(iid=f"pod-{i}", protocols=RR, client_id="app", session_ms=10_000)
    h.advance_to(3000)
    h.commit("", -1)  # refused (not Empty) but harmless
    return h.state


def test_round_trip_of_a_busy_group() -> None:
    group = ten_member_group()
    data = encode_group(group)
    assert data[0] == VERSION
    assert decode_group(data) == group


def test_round_trip_of_a_stable_group_with_assignments_and_offsets() -> None:
    h = CoordinatorHarness()
    leader, _ = static2(h)
    h.commit(leader, 1, iid="leader-instance-id", offsets=[("t", 0, 3), ("ü", 1, 4)])
    assert decode_group(encode_group(h.state)) == h.state


def test_round_trip_of_a_fresh_group() -> None:
    assert decode_group(encode_group(Group("g"))) == Group("g")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "empty"),
        (bytes((VERSION + 1,)) + b"[]", "unknown encoding version"),
        (bytes((VERSION,)) + b"[1,2", "malformed"),
        (bytes((VERSION,)) + b"[]", "malformed"),
        (bytes((VERSION,)) + b"\xff", "malformed"),
    ],
)
def test_what_cannot_be_read_is_refused_with_a_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_group(data)


def test_the_encoding_is_compact() -> None:
    group = ten_member_group()
    # Positional arrays, no field names: a 10-member group is a few kilobytes at most.
    assert len(encode_group(group)) < 4096
