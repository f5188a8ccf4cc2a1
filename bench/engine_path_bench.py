"""The engine's Python path without Spark: the core called as the engine calls it. Prints
figures; asserts nothing about speed.

    PYTHONPATH=lib .venv/bin/python bench/engine_path_bench.py [--groups 30000] [--seconds 20]
        [--shards 64] [--scaling 10,100,1000,3000] [--profile]

The workload is bench/engine_bench.py's (one dynamic member per group: a join, a sync, a
heartbeat every 3 s; one group in ten goes silent and is removed by its session timeout),
one batch per second-slot, every shard called once per batch with its events. Two figures,
both in process CPU time (the machine is shared: see docs/benchmarks.md):

* ``core``: CoordinatorRunner.run per key per batch on wire dicts (keying, state bytes in and
  out, wire parsing, output rows as dicts): the figure bench/engine_bench.py prints as ``core``;
* ``engine path``: what a micro-batch costs in Python, in order: the key's rows as the pandas
  frame Spark hands the function (Arrow -> pandas), the state function (``StateFunction``
  with a GroupState double: rows ordered and parsed from JSON text, the runner, the state and
  its timeout, the output envelopes), the output frame back to Arrow, then the driver's
  foreachBatch sink (``BatchSink``) up to the Arrow tables the Delta writer commits (the
  ``groups`` rows reduced to the latest per group with their ``deleted`` flag), without
  writing them. Printed per part, in µs per event. ``--answers`` runs it again as a query
  with an answers topic runs it: the state function also writes each decision's JSON, and the
  sink builds the records up to the Arrow table Spark's Kafka sink would be handed.

Then the steady heartbeats of one shard (470 groups, the batches after the joins, best of 20:
the core's cost of the bulk of a running job's input), the state: bytes per group in the shard
blobs at the end, and the cost of one call with one heartbeat on a shard of N groups
(``--scaling``), which should not grow with N.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from engine_bench import check_seconds, member_id, workload  # noqa: E402

T0 = 1_000_000


class GroupStateDouble:
    """What the state function sees of Spark's GroupState in processing-time mode."""

    def __init__(self, batch_time_ms: int, value: tuple[Any, ...] | None) -> None:
        self.batch_time_ms = batch_time_ms
        self.value = value
        self.hasTimedOut = False
        self.timeout_ms: int | None = None

    @property
    def exists(self) -> bool:
        return self.value is not None

    @property
    def get(self) -> tuple[Any, ...]:
        assert self.value is not None
        return self.value

    def update(self, value: tuple[Any, ...]) -> None:
        self.value = tuple(value)
        self.timeout_ms = None

    def remove(self) -> None:
        self.value = None
        self.timeout_ms = None

    def setTimeoutDuration(self, duration_ms: int) -> None:
        self.timeout_ms = self.batch_time_ms + duration_ms

    def getCurrentProcessingTimeMs(self) -> int:
        return self.batch_time_ms


class ArrowFrame:
    """The foreachBatch DataFrame as the sink uses it: ``toArrow`` and ``sparkSession``."""

    sparkSession = None

    def __init__(self, table: Any) -> None:
        self.table = table

    def toArrow(self) -> Any:
        return self.table


class ArrowOnlyPublisher:
    """The answers topic up to the records Spark's Kafka sink would be handed (no Spark)."""

    topic = "answers"

    def __init__(self) -> None:
        self.records = 0

    def publish(self, spark: Any, answers: Any, batch_id: int, processed_at_ms: int) -> int:
        from controlplane.io.answers import answer_records

        records = answer_records(answers, batch_id, processed_at_ms)
        count = 0 if records is None else records.num_rows
        self.records += count
        return count


class ArrowOnlyWriter:
    """The delta-rs writer up to the Arrow table it would commit (no Delta I/O)."""

    kind = "arrow-only"

    def __init__(self) -> None:
        self.rows = 0

    def write(self, table: str, rows: Any, batch_id: int) -> bool:
        from controlplane.io import sinks

        if not len(rows):
            return False
        if table in sinks.MERGED_TABLES:
            arrow = sinks.with_deleted(table, sinks.latest_per_group(rows))
        else:
            arrow = sinks.to_arrow(table, rows)
        self.rows += arrow.num_rows
        return True


Batch = tuple[int, dict[str, Any]]


def keyed_batches(slots: list[list[dict[str, Any]]], shards: int) -> list[Batch]:
    """Per second-slot: the batch time and, per Spark key, the rows as Spark's Arrow batch
    (KEYED_INPUT: the raw line, its source position)."""
    import pyarrow as pa

    from controlplane.engine.keying import spark_key_of
    from controlplane.engine.options import Keying
    from controlplane.engine.schemas import KEYED_INPUT
    from controlplane.io.schemas import arrow_schema

    schema = arrow_schema(KEYED_INPUT)
    batches: list[Batch] = []
    for second, events in enumerate(slots):
        now = T0 + second * 1000
        by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for seq, event in enumerate(events):
            key = spark_key_of(event["group_id"], Keying.SHARD, shards)
            by_key[key].append(
                {
                    "key": key,
                    "raw": json.dumps({**event, "event_time_ms": now}),
                    "source": f"file:///landing/s{second:04d}.jsonl",
                    "arrival_time_ms": now,
                    "event_time_ms": now,
                    "seq": seq,
                    "principal": None,
                    "reject_reason": None,
                }
            )
        tables = {key: pa.Table.from_pylist(rows, schema=schema) for key, rows in by_key.items()}
        batches.append((now, tables))
    return batches


def state_function(answers: bool = False, shards: int | None = None) -> Any:
    """The coordinator's state function as the engine builds it; with ``shards``, checking each
    request's group id against its Spark key (the plain names of that many shards) as the
    engine does."""
    from controlplane.core.config import parse_settings
    from controlplane.engine.adapter import StateFormat, StateFunction
    from controlplane.engine.keying import SparkKeys
    from controlplane.engine.options import EngineOptions, Keying, TimeMode
    from controlplane.engine.queries import CoordinatorRunners
    from controlplane.engine.reload import SettingsSource

    settings = parse_settings({"group.initial.rebalance.delay.ms": 0})
    runners = CoordinatorRunners(SettingsSource(None, settings), EngineOptions().failover_gap_ms)
    route = None if shards is None else SparkKeys(Keying.SHARD, shards).of
    # a new checkpoint's state format
    return StateFunction(runners, TimeMode.PROCESSING_TIME, StateFormat.TEXT, answers, route)


class Clock:
    """CPU seconds per part."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = defaultdict(float)

    def time(self, part: str, work: Callable[[], Any]) -> Any:
        started = time.process_time()
        result = work()
        self.parts[part] += time.process_time() - started
        return result


def engine_path(
    batches: list[Batch],
    clock: Clock,
    answers: bool = False,
    by_batch: list[tuple[int, dict[str, float]]] | None = None,
    shards: int | None = None,
) -> tuple[int, dict[str, Any]]:
    """Every batch through the Python path of a micro-batch; returns (events, states).
    ``by_batch`` (when given) gets each batch's events and CPU seconds per part; ``shards``:
    the state function checks each request's key as the engine's does (``state_function``)."""
    import pyarrow as pa

    from controlplane.engine.batch import BatchSink

    function = state_function(answers, shards)
    tables = ("decisions", "group_events", "groups", "rejected_events")
    publisher = ArrowOnlyPublisher() if answers else None
    sink = BatchSink("bench", tables, "", "", answers=publisher)  # type: ignore[arg-type]
    writer = ArrowOnlyWriter()
    sink._writer = writer
    states: dict[str, Any] = {}
    events = 0
    for batch_id, (now, tables) in enumerate(batches):
        before, events_before = dict(clock.parts), events
        outputs: list[Any] = []
        for key, table in tables.items():
            frame = clock.time("input: Arrow -> pandas frame", table.to_pandas)
            state = GroupStateDouble(now, states.get(key))

            def call(frame: Any = frame, state: Any = state, key: str = key) -> list[Any]:
                return list(function((key,), iter([frame]), state))

            frames = clock.time("state function", call)
            outputs.extend(
                clock.time(
                    "output: pandas frame -> Arrow",
                    lambda frames=frames: [
                        pa.Table.from_pandas(f, preserve_index=False) for f in frames
                    ],
                )
            )
            states[key] = state.value
            events += table.num_rows
        envelopes = pa.concat_tables(outputs)
        frame = ArrowFrame(envelopes)
        clock.time("driver: foreachBatch sink", lambda f=frame, b=batch_id: sink(f, b))
        if by_batch is not None:
            spent = {part: cpu - before.get(part, 0.0) for part, cpu in clock.parts.items()}
            by_batch.append((events - events_before, spent))
    return events, states


def core(
    slots: list[list[dict[str, Any]]], shards: int
) -> tuple[int, float, dict[str, bytes | None]]:
    """bench/engine_bench.py's ``core`` figure, in CPU time: (events, seconds, states)."""
    from controlplane.core.config import CoordinatorConfig
    from controlplane.core.coordinator.runner import CoordinatorRunner
    from controlplane.core.runtime import TimedEvent
    from controlplane.engine.keying import spark_key_of
    from controlplane.engine.options import Keying

    runner = CoordinatorRunner(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    states: dict[str, bytes | None] = {}
    total, started = 0, time.process_time()
    for second, events in enumerate(slots):
        now = T0 + second * 1000
        by_key: dict[str, list[TimedEvent]] = defaultdict(list)
        for event in events:
            key = spark_key_of(event["group_id"], Keying.SHARD, shards)
            by_key[key].append(TimedEvent({**event, "event_time_ms": now}, now))
        for key, timed in by_key.items():
            states[key] = runner.run(states.get(key), timed, now).state
        total += len(events)
    return total, time.process_time() - started, states


def call_scaling(sizes: list[int], repeat: int = 200) -> list[tuple[int, float, float]]:
    """Per shard size N: µs of CPU for one runner call with one heartbeat, and for one call
    with no event and nothing due (an idle tick), on a shard of N stable groups."""
    from controlplane.core.config import CoordinatorConfig
    from controlplane.core.coordinator.runner import CoordinatorRunner
    from controlplane.core.runtime import TimedEvent

    runner = CoordinatorRunner(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    figures = []
    for size in sizes:
        slots = workload(size, 4)  # joins and syncs: every group Stable
        state: bytes | None = None
        for second, events in enumerate(slots):
            now = T0 + second * 1000
            timed = [TimedEvent({**e, "event_time_ms": now}, now) for e in events]
            state = runner.run(state, timed, now)
            state = state.state  # type: ignore[assignment]
        group = "g00000"
        member = member_id(group, f"{group}-join", "c00000")
        now = T0 + 4000
        beats = [
            TimedEvent(
                {
                    "event_id": f"scaling-{i}",
                    "type": "heartbeat",
                    "group_id": group,
                    "member_id": member,
                    "generation_id": 1,
                    "event_time_ms": now,
                },
                now,
            )
            for i in range(repeat)
        ]
        started = time.process_time()
        for beat in beats:
            runner.run(state, [beat], now)
        one = (time.process_time() - started) / repeat
        started = time.process_time()
        for _ in range(repeat):
            runner.run(state, [], now)
        idle = (time.process_time() - started) / repeat
        figures.append((size, one * 1e6, idle * 1e6))
    return figures


def steady_heartbeats(groups: int, seconds: int = 30, warm: int = 6, repeat: int = 20) -> float:
    """µs of CPU per event, best of ``repeat``, for one shard of ``groups`` groups (470: the
    30,000 groups over 64 shards) fed the workload's batches after the first ``warm`` seconds:
    heartbeats on groups carried in the state, a session expiry in ten groups, one call a
    second (the steady part of bench/engine_bench.py's load, without its joins)."""
    from controlplane.core.config import CoordinatorConfig
    from controlplane.core.coordinator.runner import CoordinatorRunner
    from controlplane.core.runtime import TimedEvent

    runner = CoordinatorRunner(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    batches = [
        ([TimedEvent({**e, "event_time_ms": T0 + s * 1000}, T0 + s * 1000) for e in events], s)
        for s, events in enumerate(workload(groups, seconds))
    ]
    state: bytes | None = None
    for timed, second in batches[:warm]:
        state = runner.run(state, timed, T0 + second * 1000).state
    steady = batches[warm:]
    best = float("inf")
    for _ in range(repeat):
        carried, started = state, time.process_time()
        for timed, second in steady:
            carried = runner.run(carried, timed, T0 + second * 1000).state
        best = min(best, time.process_time() - started)
    return best / sum(len(timed) for timed, _ in steady) * 1e6


def state_bytes(states: dict[str, Any], groups: int) -> tuple[int, float]:
    blobs = [s[2] if isinstance(s, tuple) else s for s in states.values()]
    size = sum(len(b) for b in blobs if b)
    return size, size / groups


def slot_kinds(events: list[dict[str, Any]]) -> str:
    """A second-slot's requests by type, in the order they first appear."""
    kinds: dict[str, int] = {}
    for event in events:
        kinds[event["type"]] = kinds.get(event["type"], 0) + 1
    return ", ".join(f"{count:,} {kind}s" for kind, count in kinds.items())


def slot_cost(events: int, spent: dict[str, float]) -> str:
    """A batch's CPU µs an event, in all and by part (the parts' first words)."""
    total = sum(spent.values()) / events * 1e6
    parts = ", ".join(
        f"{part.split(':')[0]} {cpu / events * 1e6:.1f}" for part, cpu in spent.items()
    )
    return f"{total:.1f} µs/event ({parts})"


def print_slots(
    slots: list[list[dict[str, Any]]], by_batch: list[tuple[int, dict[str, float]]]
) -> None:
    """Each given batch's cost, as the second-slot it carried (``--by-slot``)."""
    for slot, (count, spent) in enumerate(by_batch):
        print(f"  second {slot}: {slot_kinds(slots[slot])}: {slot_cost(count, spent)}")


def print_parts(title: str, events: int, clock: Clock) -> None:
    spent = sum(clock.parts.values())
    print(f"{title}: {events / spent:,.0f} events/s CPU")
    for part, cpu in clock.parts.items():
        print(f"  {part:34s} {cpu:7.2f} s  {cpu / events * 1e6:7.1f} µs/event")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=30_000)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--scaling", default="10,100,1000,3000")
    parser.add_argument("--profile", action="store_true", help="cProfile the engine path")
    parser.add_argument(
        "--answers", action="store_true", help="the engine path again, with an answers topic"
    )
    parser.add_argument(
        "--by-slot",
        type=int,
        default=0,
        metavar="N",
        help="the first N second-slots' cost by part (the join burst: joins, then syncs)",
    )
    args = parser.parse_args()
    check_seconds(parser, args.seconds)
    gc.collect()
    slots = workload(args.groups, args.seconds)
    offered = sum(len(s) for s in slots)
    print(f"{args.groups} groups, {args.shards} shards, {offered} events in {args.seconds} batches")

    events, seconds, states = core(slots, args.shards)
    size, per_group = state_bytes(states, args.groups)
    print(f"core (runner on wire dicts): {events / seconds:,.0f} events/s CPU")
    print(f"state: {size:,} bytes in {sum(1 for s in states.values() if s)} shards")
    print(f"state bytes per group: {per_group:,.0f}")

    batches = keyed_batches(slots, args.shards)
    clock = Clock()
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
    by_batch: list[tuple[int, dict[str, float]]] = []
    events, _ = engine_path(batches, clock, by_batch=by_batch, shards=args.shards)
    if args.profile:
        profiler.disable()
        pstats.Stats(profiler).sort_stats(os.environ.get("SORT", "tottime")).print_stats(
            int(os.environ.get("TOP", "35"))
        )
    print_parts("engine path (worker + driver, Python)", events, clock)
    print_slots(slots, by_batch[: args.by_slot])
    if args.answers:
        clock, by_batch = Clock(), []
        events, _ = engine_path(batches, clock, answers=True, by_batch=by_batch, shards=args.shards)
        print_parts("engine path with an answers topic", events, clock)
        print_slots(slots, by_batch[: args.by_slot])

    size = min(470, args.groups)
    print(
        f"steady heartbeats, one shard of {size} groups: {steady_heartbeats(size):.1f} µs/event CPU"
    )
    print("one call on a shard of N groups (µs CPU): N, one heartbeat, idle tick")
    for size, one, idle in call_scaling([int(s) for s in args.scaling.split(",")]):
        print(f"  {size:6d} {one:10.0f} {idle:10.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
