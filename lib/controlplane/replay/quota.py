"""``python -m controlplane replay quota --events FILE --out DIR [--config FILE] [--summary]``

Feeds a JSON Lines file of mutation requests (docs/reference/events.md §3), line by line and in file
order, through the quota core (one in-memory shard holding every bucket; no encoding between
events), and writes ``DIR/quota_decisions.jsonl`` and ``DIR/throttle_events.jsonl``
(docs/reference/events.md §4). Each bucket's clock is its events' ``event_time_ms``; idle buckets
are forgotten when a later event of theirs arrives more than an hour after their last recorded
mutation. A bad line or field is answered with an INVALID_REQUEST row naming the field and line; the
run goes on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from controlplane.core.config import Settings
from controlplane.core.quota.runner import DECISIONS, OUTPUTS, THROTTLES, QuotaShard
from controlplane.core.runtime import TimedEvent
from controlplane.replay.common import replay_main

Rows = Mapping[str, Sequence[Mapping[str, Any]]]


class QuotaReplay:
    """The replay's processor: one quota shard, fed event by event."""

    def __init__(self, settings: Settings) -> None:
        self.shard = QuotaShard(settings.quota)
        self.errors: Counter[str] = Counter()
        self.throttle_ms_by_key: Counter[str] = Counter()
        self.rejected_topics = 0

    def feed(self, event: TimedEvent) -> Rows:
        rows = self.shard.feed(event)
        for row in rows[DECISIONS]:
            self.errors[str(row["error"])] += 1
        for throttle in rows[THROTTLES]:
            self.throttle_ms_by_key[throttle["quota_key"]] += throttle["throttle_time_ms"]
            self.rejected_topics += len(throttle["rejected_topics"])
        return rows

    def finish(self) -> Rows:
        return {DECISIONS: [], THROTTLES: []}

    def summary(self) -> str:
        answers = ", ".join(f"{name} {count}" for name, count in sorted(self.errors.items()))
        lines = [
            f"requests answered: {sum(self.errors.values())} ({answers or 'none'})",
            f"topics rejected with THROTTLING_QUOTA_EXCEEDED: {self.rejected_topics}",
            f"buckets alive at the end: {len(self.shard.buckets)}",
        ]
        for key, total in self.throttle_ms_by_key.most_common(5):
            lines.append(f"throttled: {key or '(untracked)'} {total} ms in all")
        return "\n".join(lines)


def main(argv: list[str]) -> int:
    return replay_main(argv, kind="quota", outputs=OUTPUTS, make_processor=QuotaReplay)
