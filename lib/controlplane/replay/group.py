"""``python -m controlplane replay group --events FILE --out DIR [--config FILE] [--summary]``

Feeds a JSON Lines file of coordinator requests (docs/reference/events.md §1), line by line and in
file order, through the coordinator core (one in-memory shard holding every group; no encoding
between events), and writes ``DIR/decisions.jsonl`` and ``DIR/group_events.jsonl``. Each group's
clock is its events' ``event_time_ms`` (docs/reference/events.md §6); timers fire only when a later
event or a ``tick`` reaches them, so a replay never invents time past its last event. ``--summary``
prints what happened: rebalances, removals by reason, answers by error, requests left parked.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from controlplane.core.config import Settings
from controlplane.core.coordinator.runner import DECISIONS, GROUP_EVENTS, CoordinatorShard
from controlplane.core.runtime import TimedEvent
from controlplane.replay.common import replay_main

OUTPUTS = (DECISIONS, GROUP_EVENTS)

Rows = Mapping[str, Sequence[Mapping[str, Any]]]


class GroupReplay:
    """The replay's processor: one coordinator shard, fed event by event."""

    def __init__(self, settings: Settings) -> None:
        self.shard = CoordinatorShard(settings.coordinator)
        self.stats = ReplayStats()

    def feed(self, event: TimedEvent) -> Rows:
        rows = self.shard.feed(event)
        self.stats.add(rows)
        return rows

    def finish(self) -> Rows:
        return {DECISIONS: [], GROUP_EVENTS: []}

    def summary(self) -> str:
        return self.stats.render(parked=count_parked(self.shard))


class ReplayStats:
    """Counts for what-if analysis: compare two replays of the same traffic."""

    def __init__(self) -> None:
        self.decisions: Counter[str] = Counter()
        self.events: Counter[str] = Counter()
        self.removed: Counter[str] = Counter()
        self.rebalances_by_group: Counter[str] = Counter()

    def add(self, rows: Rows) -> None:
        for decision in rows.get(DECISIONS, ()):
            self.decisions[str(decision["error"])] += 1
        for event in rows.get(GROUP_EVENTS, ()):
            kind = str(event["kind"])
            self.events[kind] += 1
            if kind == "member_removed":
                self.removed[str(event["reason"])] += 1
            elif kind == "rebalance_started":
                self.rebalances_by_group[str(event["group_id"])] += 1

    def render(self, *, parked: int) -> str:
        lines = [
            f"rebalances started: {self.events['rebalance_started']} "
            f"in {len(self.rebalances_by_group)} group(s)",
            f"generations completed: {self.events['generation_completed']}",
            f"members added: {self.events['member_added']}",
            f"members removed: {self.events['member_removed']}"
            + _breakdown(self.removed, "by reason"),
            f"members fenced: {self.events['member_fenced']}",
            f"static members offline/returned: {self.events['static_member_offline']}"
            f"/{self.events['static_member_returned']}",
            f"requests replaced/duplicate: {self.events['request_replaced']}"
            f"/{self.events['duplicate_request']}",
            f"requests still parked at the end of the input: {parked}",
            f"answers: {sum(self.decisions.values())}" + _breakdown(self.decisions, "by error"),
        ]
        busiest = self.rebalances_by_group.most_common(5)
        if busiest:
            lines.append("most rebalanced groups: " + ", ".join(f"{g} ({n})" for g, n in busiest))
        return "\n".join(lines)


def _breakdown(counts: Counter[str], title: str) -> str:
    if not counts:
        return ""
    parts = ", ".join(f"{key} {value}" for key, value in sorted(counts.items()))
    return f" ({title}: {parts})"


def count_parked(shard: CoordinatorShard) -> int:
    """Joins and syncs that were never answered (docs/reference/events.md §2: still parked at the
    end)."""
    total = 0
    for group_id in shard.group_ids:
        group = shard.group(group_id)
        if group is None:
            continue
        for member in (*group.members, *group.expansion_queue):
            total += (member.awaiting_join is not None) + (member.awaiting_sync is not None)
    return total


def main(argv: list[str]) -> int:
    return replay_main(argv, kind="group", outputs=OUTPUTS, make_processor=GroupReplay)
