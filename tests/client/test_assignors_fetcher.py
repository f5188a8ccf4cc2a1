"""Range and round-robin assignors; the KIP-41 fetcher: max.poll.records, round-robin, prefetch."""

from __future__ import annotations

import pytest

from controlplane.client.assignors import (
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    TopicPartition,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from controlplane.client.records import Fetcher, InMemoryLog, Record


def _members(*specs: tuple[str, tuple[str, ...]]) -> list[MemberSubscription]:
    return [MemberSubscription(member_id, None, topics) for member_id, topics in specs]


def _names(assignment: dict[str, list[TopicPartition]]) -> dict[str, list[str]]:
    return {m: [f"{tp.topic}-{tp.partition}" for tp in tps] for m, tps in assignment.items()}


@pytest.mark.parametrize(
    ("partitions", "expected"),
    [
        # even split: consecutive ranges
        (4, {"a": ["t-0", "t-1"], "b": ["t-2", "t-3"]}),
        # the first n % c members get one more
        (5, {"a": ["t-0", "t-1", "t-2"], "b": ["t-3", "t-4"]}),
        # fewer partitions than members: the last member gets nothing
        (1, {"a": ["t-0"], "b": []}),
    ],
)
def test_range_splits_each_topic_into_ranges(partitions: int, expected: object) -> None:
    members = _members(("b", ("t",)), ("a", ("t",)))
    assert _names(RangeAssignor().assign({"t": partitions}, members)) == expected


def test_range_is_per_topic_so_first_members_get_the_extras_of_each_topic() -> None:
    members = _members(("a", ("x", "y")), ("b", ("x", "y")))
    got = _names(RangeAssignor().assign({"x": 3, "y": 3}, members))
    assert got == {"a": ["x-0", "x-1", "y-0", "y-1"], "b": ["x-2", "y-2"]}


def test_roundrobin_deals_all_partitions_in_turn() -> None:
    members = _members(("a", ("x", "y")), ("b", ("x", "y")))
    got = _names(RoundRobinAssignor().assign({"x": 3, "y": 3}, members))
    assert got == {"a": ["x-0", "x-2", "y-1"], "b": ["x-1", "y-0", "y-2"]}


def test_roundrobin_skips_members_not_subscribed() -> None:
    members = _members(("a", ("x",)), ("b", ("x", "y")), ("c", ("y",)))
    got = _names(RoundRobinAssignor().assign({"x": 2, "y": 3}, members))
    # the ring keeps its place: after x-1 (b), y-0 goes to c; y-1 skips a
    assert got == {"a": ["x-0"], "b": ["x-1", "y-1"], "c": ["y-0", "y-2"]}


def test_static_members_are_ordered_by_instance_id() -> None:
    members = [
        MemberSubscription("zzz-1", "i-1", ("t",)),
        MemberSubscription("aaa-2", "i-2", ("t",)),
    ]
    got = _names(RangeAssignor().assign({"t": 2}, members))
    assert got == {"zzz-1": ["t-0"], "aaa-2": ["t-1"]}


def test_static_members_come_before_dynamic_ones_as_kafka_sorts_them() -> None:
    # Kafka's MemberInfo order: static members first (by instance id), then dynamic members
    # (by member id), whatever the ids' spelling.
    members = [
        MemberSubscription("a-dynamic", None, ("t",)),
        MemberSubscription("m-static", "z-instance", ("t",)),
        MemberSubscription("b-dynamic", None, ("t",)),
    ]
    assert _names(RangeAssignor().assign({"t": 4}, members)) == {
        "m-static": ["t-0", "t-1"],
        "a-dynamic": ["t-2"],
        "b-dynamic": ["t-3"],
    }
    assert _names(RoundRobinAssignor().assign({"t": 4}, members)) == {
        "m-static": ["t-0", "t-3"],
        "a-dynamic": ["t-1"],
        "b-dynamic": ["t-2"],
    }


def test_every_partition_assigned_exactly_once() -> None:
    members = _members(("a", ("x", "y", "z")), ("b", ("x", "y")), ("c", ("z",)))
    counts = {"x": 7, "y": 2, "z": 5}
    for assignor in (RangeAssignor(), RoundRobinAssignor()):
        got = assignor.assign(counts, members)
        flat = sorted(tp for tps in got.values() for tp in tps)
        assert flat == sorted(TopicPartition(t, p) for t, n in counts.items() for p in range(n))


def test_metadata_and_assignment_round_trip_and_bad_bytes_are_empty() -> None:
    assert decode_subscription(encode_subscription(["b", "a", "a"])) == ("a", "b")
    tps = [TopicPartition("t", 1), TopicPartition("s", 0)]
    assert decode_assignment(encode_assignment(tps)) == tuple(sorted(tps))
    assert decode_assignment(None) == ()
    assert decode_assignment("not base64!") == ()
    assert decode_subscription("") == ()


class CountingLog(InMemoryLog):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[TopicPartition] = []

    def read(self, tp: TopicPartition, offset: int, max_records: int) -> list[Record]:
        self.reads.append(tp)
        return super().read(tp, offset, max_records)


def _fetcher(
    records_per_partition: int, partitions: int = 3, fetch_size: int = 10
) -> tuple[Fetcher, CountingLog]:
    log = CountingLog()
    log.create_topic("t", partitions)
    for p in range(partitions):
        log.append("t", p, [f"v{i}" for i in range(records_per_partition)])
    fetcher = Fetcher(log, max_partition_fetch_records=fetch_size)
    tps = [TopicPartition("t", p) for p in range(partitions)]
    fetcher.assign(tps)
    for tp in tps:
        fetcher.seek(tp, 0)
    return fetcher, log


def test_poll_returns_at_most_max_poll_records() -> None:
    fetcher, _ = _fetcher(100)
    assert len(fetcher.poll(7)) == 7


def test_round_robin_remembers_where_it_stopped_so_no_partition_starves() -> None:
    fetcher, _ = _fetcher(100, fetch_size=10)
    order = []
    for _ in range(12):
        batch = fetcher.poll(5)
        assert len(batch) == 5
        assert len({r.partition for r in batch}) == 1
        order.append((batch[0].partition, batch[0].offset))
    # each partition's fetch (10 records) is drained over two polls, then the next partition
    assert order == [
        (0, 0), (0, 5), (1, 0), (1, 5), (2, 0), (2, 5),
        (0, 10), (0, 15), (1, 10), (1, 15), (2, 10), (2, 15),
    ]  # fmt: skip


def test_positions_follow_returned_records_and_seek_resets() -> None:
    fetcher, _ = _fetcher(30)
    records = fetcher.poll(12)
    assert fetcher.positions()[TopicPartition("t", 0)] == 10
    assert fetcher.positions()[TopicPartition("t", 1)] == 2
    assert [r.offset for r in records[-2:]] == [0, 1]
    fetcher.seek(TopicPartition("t", 1), 25)
    rest = [r for r in fetcher.poll(100) if r.partition == 1]
    assert [r.offset for r in rest] == [25, 26, 27, 28, 29]


def test_prefetch_only_for_partitions_with_nothing_buffered() -> None:
    fetcher, log = _fetcher(100, fetch_size=10)
    fetcher.poll(5)  # initial fetch for all three, then partition 0 still holds 5 records
    assert log.reads == [TopicPartition("t", p) for p in range(3)]
    log.reads.clear()
    fetcher.poll(5)  # partition 0 exhausted during this poll: only it is fetched again
    assert log.reads == [TopicPartition("t", 0)]


def test_unassigned_partition_state_is_dropped_and_unseeked_partitions_wait() -> None:
    fetcher, _ = _fetcher(10)
    fetcher.assign([TopicPartition("t", 2), TopicPartition("t", 3)])
    assert fetcher.assignment() == [TopicPartition("t", 2), TopicPartition("t", 3)]
    assert {r.partition for r in fetcher.poll(100)} == {2}
    assert TopicPartition("t", 3) not in fetcher.positions()
