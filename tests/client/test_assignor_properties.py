"""Properties of both assignors over random groups: every subscribed partition is assigned
exactly once, only to a member subscribed to its topic; round-robin over one shared
subscription is balanced to within one partition."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from controlplane.client.assignors import (
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    TopicPartition,
)

TOPICS = ("a", "b", "c", "d")

groups = st.lists(
    st.tuples(st.booleans(), st.sets(st.sampled_from(TOPICS), min_size=1)),
    min_size=1,
    max_size=8,
).map(
    lambda specs: [
        MemberSubscription(f"m{i}", f"i{i}" if static else None, tuple(sorted(topics)))
        for i, (static, topics) in enumerate(specs)
    ]
)
counts = st.fixed_dictionaries({t: st.integers(min_value=0, max_value=12) for t in TOPICS})


@given(groups, counts)
def test_each_subscribed_partition_goes_to_exactly_one_subscribed_member(
    members: list[MemberSubscription], partitions: dict[str, int]
) -> None:
    subscribed = {t for m in members for t in m.topics}
    expected = sorted(TopicPartition(t, p) for t in subscribed for p in range(partitions[t]))
    for assignor in (RangeAssignor(), RoundRobinAssignor()):
        plan = assignor.assign(partitions, members)
        assert set(plan) == {m.member_id for m in members}
        assert sorted(tp for tps in plan.values() for tp in tps) == expected
        topics_of = {m.member_id: set(m.topics) for m in members}
        for member_id, tps in plan.items():
            assert all(tp.topic in topics_of[member_id] for tp in tps)


@given(st.integers(min_value=1, max_value=8), counts)
def test_roundrobin_is_balanced_when_everyone_subscribes_to_everything(
    size: int, partitions: dict[str, int]
) -> None:
    members = [MemberSubscription(f"m{i}", None, TOPICS) for i in range(size)]
    loads = [len(tps) for tps in RoundRobinAssignor().assign(partitions, members).values()]
    assert max(loads) - min(loads) <= 1
