"""Coordinator core benchmark: prints figures, asserts nothing.

    PYTHONPATH=lib python bench/coordinator_bench.py [--groups 10000] [--storm-groups 1000]

* setup: every group gets 10 members (join v3 at one instant, the initial rebalance delay
  elapses at a tick and the join phase completes with all ten, the leader and the followers
  sync), through the shard (wire parsing + runner + machine); every group ends Stable;
* steady heartbeats: one heartbeat from every member of every group, twice, measured two
  ways: the machine alone (``machine.handle`` on parsed requests) and through the shard
  (wire dicts parsed, clock rules, idempotence window);
* rebalance storm from Stable groups: every member of ``--storm-groups`` groups rejoins (the
  leader's rejoin starts the rebalance, the tenth completes it), then all sync; measured on
  the machine alone (each group's state threaded from call to call) and through the shard;
* encoding: the machine's codec on one 10-member Stable group, and the shard envelope.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import platform
import pstats
import time
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from controlplane.core.config import CoordinatorConfig
from controlplane.core.coordinator import codec, machine
from controlplane.core.coordinator.runner import CoordinatorShard
from controlplane.core.coordinator.wire import parse_request
from controlplane.core.runtime import TimedEvent

CONFIG = CoordinatorConfig()  # Kafka's defaults: initial rebalance delay 3 s
MEMBERS = 10
SESSION_MS = 30_000
T0 = 1_700_000_000_000


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


class Traffic:
    """Builds wire events with unique ids."""

    def __init__(self) -> None:
        self.count = 0

    def event(self, kind: str, group: str, t: int, **fields: Any) -> TimedEvent:
        self.count += 1
        raw = {"event_id": f"b{self.count}", "event_time_ms": t, "type": kind, "group_id": group}
        raw.update(fields)
        return TimedEvent(raw, t)

    def join(self, group: str, t: int, member: str = "") -> TimedEvent:
        return self.event(
            "join",
            group,
            t,
            member_id=member,
            request_version=3,
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=SESSION_MS,
            protocol_type="consumer",
            protocols=[{"name": "range", "metadata": "AAEAAAABAAZvcmRlcnM="}],
            client_id="bench",
        )

    def sync(self, group: str, t: int, member: str, generation: int, everyone: list[str]):
        assignments = [{"member_id": m, "assignment": "AAEAAAAB"} for m in everyone]
        return self.event(
            "sync", group, t, member_id=member, generation_id=generation, assignments=assignments
        )

    def heartbeat(self, group: str, t: int, member: str, generation: int) -> TimedEvent:
        return self.event("heartbeat", group, t, member_id=member, generation_id=generation)


def timed(label: str, count: int, run: Callable[[], object]) -> float:
    """Runs once; prints wall-clock and CPU-time rates (the CPU rate is the per-core figure on a
    shared machine, where the wall clock also counts time spent waiting for a core)."""
    start, start_cpu = time.perf_counter(), time.process_time()
    run()
    seconds = time.perf_counter() - start
    cpu = time.process_time() - start_cpu
    rate = count / cpu if cpu else float("inf")
    print(
        f"{label:<58} {count:>9,} req {seconds:7.2f} s wall {count / seconds:>9,.0f}/s"
        f" | {cpu:7.2f} s CPU {rate:>9,.0f}/s"
    )
    return rate


def feed(shard: CoordinatorShard, events: Iterable[TimedEvent]) -> list[dict[str, Any]]:
    decisions: list[dict[str, Any]] = []
    for item in events:
        decisions.extend(shard.feed(item)["decisions"])
    return decisions


def members_of(shard: CoordinatorShard, group_id: str) -> tuple[list[str], int]:
    group = shard.group(group_id)
    assert group is not None
    return [m.member_id for m in group.members], group.generation_id


def form_groups(shard: CoordinatorShard, traffic: Traffic, groups: list[str], t: int) -> int:
    """Ten joins per group at ``t``; the initial delay runs out; leader and followers sync.
    Returns the time the groups are Stable at."""
    joins = [traffic.join(g, t) for g in groups for _ in range(MEMBERS)]
    feed(shard, joins)
    # The initial delay elapses, is extended once (members joined during it, Kafka's
    # InitialDelayedJoin), then the join phases complete with all ten members.
    for _ in range(2):
        t += CONFIG.group_initial_rebalance_delay_ms
        shard.tick(t)
    feed(shard, syncs_of(shard, traffic, groups, t))
    return t


def syncs_of(
    shard: CoordinatorShard, traffic: Traffic, groups: list[str], t: int
) -> list[TimedEvent]:
    """The leader's sync (with every assignment) then each follower's, for every group."""
    syncs = []
    for g in groups:
        ids, generation = members_of(shard, g)
        leader = str(shard.group(g).leader_id)  # type: ignore[union-attr]
        syncs.append(traffic.sync(g, t, leader, generation, ids))
        syncs.extend(traffic.sync(g, t, m, generation, []) for m in ids if m != leader)
    return syncs


def check(condition: bool, what: str) -> None:
    """The benchmark measures what it claims only if the protocol went as planned."""
    if not condition:
        raise SystemExit(f"benchmark setup went wrong: {what}")


def phases(shard: CoordinatorShard, groups: list[str]) -> Counter[str]:
    return Counter(str(shard.group(g).phase) for g in groups)  # type: ignore[union-attr]


def bench(args: argparse.Namespace) -> None:
    print(f"machine: {os.cpu_count()} CPU(s), {cpu_model()}, Python {platform.python_version()}")
    shard = CoordinatorShard(CONFIG)
    traffic = Traffic()
    groups = [f"group-{i:05d}" for i in range(args.groups)]
    setup = args.groups * (MEMBERS * 2)
    gc.disable()  # the setup builds a large heap; collect once, then freeze it (below)
    stable_at: list[int] = []
    timed(
        f"setup: {args.groups:,} groups x {MEMBERS} (join + sync, shard)",
        setup,
        lambda: stable_at.append(form_groups(shard, traffic, groups, T0)),
    )
    check(phases(shard, groups) == Counter({"Stable": len(groups)}), f"{phases(shard, groups)}")
    check(all(len(members_of(shard, g)[0]) == MEMBERS for g in groups), "a group is not full")

    # The shard now holds every group decoded (millions of objects); a Spark worker holds only
    # the key it runs. Freeze them out of the cyclic GC so its scans do not dominate the timing.
    gc.enable()
    gc.collect()
    gc.freeze()
    t = stable_at[0] + 3_000
    beats = [traffic.heartbeat(g, t, m, gen) for g in groups for m, gen in _ids(shard, g)]
    parsed = [(shard.group(str(e.event["group_id"])), parse_request(e.event)) for e in beats]

    def machine_only() -> None:
        for group, request in parsed:
            machine.handle(group, request, t, CONFIG)

    core_rate = timed("steady heartbeats: machine.handle alone", len(parsed), machine_only)
    answers: list[dict[str, Any]] = []
    shard_rate = timed(
        "steady heartbeats: shard.feed (wire + runner + machine)",
        len(beats),
        lambda: answers.extend(feed(shard, beats)),
    )
    errors = Counter(str(row["error"]) for row in answers)
    check(errors == Counter({"NONE": len(beats)}), f"heartbeat answers {errors}")
    beats2 = [traffic.heartbeat(g, t + 3_000, m, gen) for g in groups for m, gen in _ids(shard, g)]
    timed("steady heartbeats, second round: shard.feed", len(beats2), lambda: feed(shard, beats2))

    storm_groups = groups[: args.storm_groups]
    ts = t + 6_000
    rejoins = [traffic.join(g, ts, m) for g in storm_groups for m, _ in _ids(shard, g)]
    core_storm = storm_machine_alone(shard, storm_groups, rejoins, ts)
    storm = timed(
        f"rebalance storm: {len(storm_groups):,} Stable groups, every member rejoins, shard",
        len(rejoins),
        lambda: feed(shard, rejoins),
    )
    check(
        phases(shard, storm_groups) == Counter({"CompletingRebalance": len(storm_groups)}),
        f"after the rejoins {phases(shard, storm_groups)}",
    )
    resyncs = syncs_of(shard, traffic, storm_groups, ts)
    timed("rebalance storm: every member syncs, shard", len(resyncs), lambda: feed(shard, resyncs))
    check(phases(shard, storm_groups) == Counter({"Stable": len(storm_groups)}), "storm end")

    encoding(shard, groups[-1])
    if args.profile:
        profile(shard, traffic, groups, t + 9_000)
    print(
        f"\nsummary (CPU time, one core): heartbeats machine {core_rate:,.0f} req/s, "
        f"shard {shard_rate:,.0f} req/s; storm rejoins machine {core_storm:,.0f} req/s, "
        f"shard {storm:,.0f} req/s; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs"
    )


def storm_machine_alone(
    shard: CoordinatorShard, storm_groups: list[str], rejoins: list[TimedEvent], ts: int
) -> float:
    """The storm on ``machine.handle`` alone, from copies of the shard's Stable groups (frozen
    values, so the shard is untouched): rejoins, then the leader's and followers' syncs, each
    group's state threaded from one call to the next. Returns the rejoin rate (CPU)."""
    states = {g: shard.group(g) for g in storm_groups}
    joins = [(str(e.event["group_id"]), parse_request(e.event)) for e in rejoins]

    def rejoin_all() -> None:
        for group_id, request in joins:
            states[group_id] = machine.handle(states[group_id], request, ts, CONFIG).group

    rate = timed("rebalance storm: every member rejoins, machine alone", len(joins), rejoin_all)
    syncs = []
    for g in storm_groups:
        group = states[g]
        assert group is not None
        ids = [m.member_id for m in group.members]
        raw = Traffic().sync(g, ts, str(group.leader_id), group.generation_id, ids).event
        syncs.append((g, parse_request(raw)))
        for m in ids:
            if m != group.leader_id:
                follower = Traffic().sync(g, ts, m, group.generation_id, []).event
                syncs.append((g, parse_request(follower)))

    def sync_all() -> None:
        for group_id, request in syncs:
            states[group_id] = machine.handle(states[group_id], request, ts, CONFIG).group

    timed("rebalance storm: every member syncs, machine alone", len(syncs), sync_all)
    done = Counter(str(group.phase) for group in states.values() if group is not None)
    check(done == Counter({"Stable": len(storm_groups)}), f"machine-alone storm {done}")
    return rate


def _ids(shard: CoordinatorShard, group_id: str) -> list[tuple[str, int]]:
    ids, generation = members_of(shard, group_id)
    return [(m, generation) for m in ids]


def encoding(shard: CoordinatorShard, group_id: str) -> None:
    group = shard.group(group_id)
    assert group is not None
    rounds = 2_000
    data = codec.encode_group(group)
    start = time.process_time()
    for _ in range(rounds):
        codec.encode_group(group)
    encode_us = (time.process_time() - start) / rounds * 1e6
    start = time.process_time()
    for _ in range(rounds):
        codec.decode_group(data)
    decode_us = (time.process_time() - start) / rounds * 1e6
    print(
        f"codec (CPU time), one Stable group of {MEMBERS}: {len(data):,} bytes, "
        f"encode {encode_us:.1f} us, decode {decode_us:.1f} us"
    )
    start = time.process_time()
    envelope = shard.encode()
    first = time.process_time() - start
    start = time.process_time()
    again = CoordinatorShard.decode(envelope, CONFIG).encode()
    copy = time.process_time() - start
    assert envelope is not None
    assert again is not None
    # Equal content, not always equal bytes: marshal flags an object it meets more than once
    # (a back-reference) by its reference count, which differs after a round trip.
    assert len(again) == len(envelope)
    decoded = CoordinatorShard.decode(again, CONFIG)
    assert decoded.group_ids == shard.group_ids
    assert decoded.group(group_id) == group
    count = len(shard.group_ids)
    print(
        f"shard envelope (CPU time), {count:,} groups: {len(envelope) / 1e6:.1f} MB, "
        f"{len(envelope) / count:,.0f} bytes/group; encode after changes "
        f"{first / count * 1e6:.1f} us/group; decode + re-encode untouched "
        f"{copy / count * 1e6:.1f} us/group"
    )


def profile(shard: CoordinatorShard, traffic: Traffic, groups: list[str], t: int) -> None:
    beats = [traffic.heartbeat(g, t, m, gen) for g in groups for m, gen in _ids(shard, g)]
    profiler = cProfile.Profile()
    profiler.enable()
    feed(shard, beats)
    profiler.disable()
    print("\nprofile of one heartbeat round through the shard (top 15 by own time):")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--storm-groups", type=int, default=1_000)
    parser.add_argument("--profile", action="store_true", help="cProfile a heartbeat round")
    bench(parser.parse_args())


if __name__ == "__main__":
    main()
