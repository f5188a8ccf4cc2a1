"""Quota core benchmark: prints figures, asserts nothing.

    PYTHONPATH=lib python bench/quota_bench.py [--requests 200000] [--topics 5]

* admission loop: ``admit_strict`` on 5-topic requests against one bucket (the arithmetic);
* machine: ``machine.handle`` on parsed requests of 1,000 principals (buckets, decisions and
  throttle events built; the idempotence window is the shard's);
* shard: raw wire dicts through ``QuotaShard.feed`` (parse, resolve, clock, expiry, idempotence
  window, machine, rows), as the replay and the engine call it;
* resolution: a 1,000-entry quota configuration (all 8 level shapes) and 100,000 principals:
  index build, ``resolve`` and ``key_of``;
* codec: encode + decode of one bucket (a full window: 64 event ids) and of a 1,000-bucket shard.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from controlplane.core.config import parse_settings
from controlplane.core.idempotence import digest
from controlplane.core.quota import codec
from controlplane.core.quota.bucket import Bucket, burst_of
from controlplane.core.quota.machine import admit_strict, handle
from controlplane.core.quota.requests import MutationRequest, MutationType, TopicMutation
from controlplane.core.quota.resolution import build_index, key_of, resolve
from controlplane.core.quota.runner import QuotaShard
from controlplane.core.runtime import TimedEvent

T0 = 1_700_000_000_000
WALL = False


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def timed(fn: Callable[[], Any]) -> float:
    """CPU seconds of this process (the machine is shared: wall time would count the waits for
    a core held by someone else; ``--wall`` measures wall time instead)."""
    clock = time.perf_counter if WALL else time.process_time
    start = clock()
    fn()
    return clock() - start


def best_of(runs: int, fn: Callable[[], Any]) -> float:
    return min(timed(fn) for _ in range(runs))


def config_with(entries: int) -> Any:
    quotas: list[dict[str, Any]] = [
        {"user": "<default>", "controller_mutation_rate": 50},
        {"user": "<default>", "client_id": "<default>", "controller_mutation_rate": 40},
        {"client_id": "<default>", "controller_mutation_rate": 30},
    ]
    shapes = [
        lambda i: {"user": f"user{i}", "controller_mutation_rate": 10},
        lambda i: {
            "user": f"user{i}",
            "client_id": f"client{i % 50}",
            "controller_mutation_rate": 5,
        },
        lambda i: {"user": f"user{i}", "client_id": "<default>", "controller_mutation_rate": 6},
        lambda i: {"user": "<default>", "client_id": f"client{i}", "controller_mutation_rate": 7},
        lambda i: {"client_id": f"client{i}", "controller_mutation_rate": 8},
    ]
    i = 0
    while len(quotas) < entries:
        quotas.append(shapes[i % len(shapes)](i))
        i += 1
    return parse_settings({"quotas": quotas}).quota


def bench_admission(requests: int, topics: int) -> None:
    burst = burst_of(11, 1, 1e9)
    parts = [3] * topics
    tokens, last = burst, T0

    def run() -> None:
        nonlocal tokens, last
        for i in range(requests):
            result = admit_strict(tokens, last, parts, 1e9, burst, T0 + i)
            tokens, last = result.tokens, T0 + i

    seconds = best_of(3, run)
    print(
        f"admission loop   : {requests * topics / seconds:12,.0f} topic mutations/s "
        f"({requests / seconds:,.0f} requests/s of {topics} topics)"
    )


def bench_machine(requests: int, topics: int) -> None:
    config = config_with(1000)
    principals = [(f"user{i}", f"client{i % 50}") for i in range(1000)]
    index = build_index(config)
    resolutions = [index.resolve(u, c) for u, c in principals]
    parsed = [
        MutationRequest(
            event_id=f"e{i}",
            event_time_ms=T0 + i,
            type=MutationType.CREATE_TOPICS,
            user=principals[i % 1000][0],
            client_id=principals[i % 1000][1],
            request_version=None,
            validate_only=False,
            topics=tuple(TopicMutation(f"t{i}-{j}", 2) for j in range(topics)),
        )
        for i in range(requests)
    ]

    def run() -> None:
        buckets: dict[str, Bucket] = {}
        for i, request in enumerate(parsed):
            resolution = resolutions[i % 1000]
            key = resolution.quota_key
            assert key is not None
            step = handle(buckets.get(key), request, request.event_time_ms, config, resolution)
            if step.bucket is not None:
                buckets[key] = step.bucket

    seconds = best_of(3, run)
    print(
        f"machine.handle   : {requests * topics / seconds:12,.0f} topic mutations/s "
        f"({requests / seconds:,.0f} requests/s)"
    )


def bench_shard(requests: int, topics: int) -> None:
    config = config_with(1000)
    events = [
        TimedEvent(
            {
                "event_id": f"e{i}",
                "event_time_ms": T0 + i,
                "type": "create_topics",
                "user": f"user{i % 1000}",
                "client_id": f"client{i % 50}",
                "topics": [{"name": f"t{i}-{j}", "partitions": 2} for j in range(topics)],
            },
            T0 + i,
        )
        for i in range(requests)
    ]

    def run() -> None:
        shard = QuotaShard(config)
        for event in events:
            shard.feed(event)

    seconds = best_of(3, run)
    print(
        f"shard (wire)     : {requests * topics / seconds:12,.0f} topic mutations/s "
        f"({requests / seconds:,.0f} requests/s, parse + resolve + rows)"
    )


def bench_resolution(principals: int) -> None:
    config = config_with(1000)
    build_seconds = best_of(3, lambda: build_index(config))
    names = [(f"user{i}", f"client{i % 2000}") for i in range(principals)]

    def cold() -> None:  # a fresh index each time: no memo, index build included
        index = build_index(config)
        for user, client in names:
            index.resolve(user, client)

    cold_seconds = best_of(3, cold)
    resolve(names[0][0], names[0][1], config)
    warm_seconds = best_of(3, lambda: [resolve(u, c, config) for u, c in names])
    events = [{"user": u, "client_id": c} for u, c in names]

    def cold_keys() -> None:
        fresh = replace(config)  # another configuration object: another index, empty memo
        for event in events:
            key_of(event, fresh)

    key_seconds = best_of(3, cold_keys)
    print(
        f"resolution       : index of 1,000 entries built in {build_seconds * 1000:.2f} ms; "
        f"{principals:,} distinct principals resolved cold in {cold_seconds:.3f} s "
        f"({cold_seconds / principals * 1e6:.2f} us each), warm (memo) {warm_seconds:.3f} s; "
        f"key_of cold {key_seconds:.3f} s"
    )


def bench_codec() -> None:
    one = {"user=alice": Bucket(-12.5, T0, T0)}
    full = {"user=alice": b"".join(digest(f"event-{i:06d}") for i in range(64))}
    shard = {f"user=u{i}": Bucket(float(i), T0, T0) for i in range(1000)}
    windows = {key: digest(key) for key in shard}
    n = 2000
    one_seconds = best_of(3, lambda: [codec.decode(codec.encode(one, full)) for _ in range(n)])
    shard_seconds = best_of(3, lambda: codec.decode(codec.encode(shard, windows)))
    size = len(codec.encode(one, full))
    print(
        f"codec            : one bucket with 64 ids {one_seconds / n * 1e6:.1f} us "
        f"encode+decode ({size} bytes); 1,000-bucket shard {shard_seconds * 1000:.2f} ms "
        f"({len(codec.encode(shard, windows)):,} bytes)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--topics", type=int, default=5)
    parser.add_argument("--principals", type=int, default=100_000)
    parser.add_argument("--wall", action="store_true", help="wall-clock time, not CPU time")
    args = parser.parse_args()
    global WALL
    WALL = args.wall
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(
        f"timing: {'wall-clock' if WALL else 'process CPU'} time, best of 3; load {os.getloadavg()}"
    )
    bench_admission(args.requests, args.topics)
    bench_machine(args.requests, args.topics)
    bench_shard(args.requests, args.topics)
    bench_admission(args.requests, 1)
    bench_machine(args.requests, 1)
    bench_resolution(args.principals)
    bench_codec()


if __name__ == "__main__":
    main()
