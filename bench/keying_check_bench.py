"""The driver's side of checking a checkpoint started before the keying record
(engine.checkpoints: every group in each shard's state under the shard the configured count
puts it in). Prints figures; asserts nothing.

    PYTHONPATH=lib .venv/bin/python bench/keying_check_bench.py [--groups 30000] [--shards 16]

Builds ``--groups`` one-member Stable groups (a join and a sync each) in ``--shards`` coordinator
shards under the plain names, as the state data source hands them to the driver (the base64
text of each shard's bytes), then times reading the group ids out of every shard and checking
their shards, and its peak of Python memory (tracemalloc, a second pass). The Spark job that
reads the state from the checkpoint is not in the figures.
"""

from __future__ import annotations

import argparse
import base64
import time
import tracemalloc
from typing import Any

from controlplane.core.config import CoordinatorConfig
from controlplane.core.coordinator.runner import DECISIONS, CoordinatorShard
from controlplane.core.runtime import TimedEvent
from controlplane.engine import checkpoints
from controlplane.engine.keying import SparkKeys
from controlplane.engine.options import Keying
from controlplane.engine.queries import coordinator_routing_keys

CONFIG = CoordinatorConfig(group_initial_rebalance_delay_ms=0)


def request(kind: str, event_id: str, group: str, member: str = "", **extra: Any) -> TimedEvent:
    raw: dict[str, Any] = {
        "event_id": event_id,
        "event_time_ms": 0,
        "type": kind,
        "group_id": group,
        "member_id": member,
        **extra,
    }
    return TimedEvent(raw, 0)


def stable_group(shard: CoordinatorShard, group: str) -> None:
    joined = shard.feed(
        request(
            "join",
            f"{group}-j",
            group,
            request_version=3,
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            protocol_type="consumer",
            protocols=[{"name": "range", "metadata": ""}],
        )
    )
    joined_rows = joined[DECISIONS] + shard.tick(0)[DECISIONS]
    member = next(r["member_id"] for r in joined_rows if r["event_id"] == f"{group}-j")
    shard.feed(request("sync", f"{group}-s", group, member, generation_id=1, assignments=[]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=30_000)
    parser.add_argument("--shards", type=int, default=16)
    args = parser.parse_args()
    keys = SparkKeys(Keying.SHARD, args.shards)
    shards: dict[str, CoordinatorShard] = {}
    for i in range(args.groups):
        group = f"group-{i}"
        stable_group(shards.setdefault(keys.of(group), CoordinatorShard(CONFIG)), group)
    blobs = [(key, base64.b64encode(s.encode() or b"").decode()) for key, s in shards.items()]
    state_bytes = sum(len(base64.b64decode(text)) for _, text in blobs)
    started = time.perf_counter()
    checkpoints.check_routed("bench", keys, blobs, coordinator_routing_keys)
    elapsed_s = time.perf_counter() - started
    tracemalloc.start()
    checkpoints.check_routed("bench", keys, blobs, coordinator_routing_keys)
    peak_bytes = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(
        f"{args.groups} groups in {len(blobs)} shards: {state_bytes / 1e6:.1f} MB of state"
        f" ({state_bytes / args.groups:.0f} bytes a group); checked in {elapsed_s * 1000:.0f} ms,"
        f" peak {peak_bytes / 1e6:.1f} MB of Python memory beside the state's text"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
