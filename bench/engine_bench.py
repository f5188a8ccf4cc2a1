"""Engine benchmark: the coordinator query on local[2], group vs shard keying, 100 / 1,000 /
10,000 groups. Prints figures; asserts nothing about speed.

    PYTHONPATH=lib .venv/bin/python bench/engine_bench.py [--groups 100,1000,10000]
        [--keyings group,shard] [--writers delta-rs,native] [--seconds 20] [--out out/bench]

Workload per group (one dynamic member, JoinGroup v3, initial rebalance delay 0): a join, a
sync one second later, then a heartbeat every 3 s; one group in ten goes silent after its sync
and is removed by its session timeout (6 s). Files are dropped once a second for ``--seconds``
(the offered rate), into the landing directory of a processing-time query (trigger 500 ms).

Figures per run:
* offered and sustained events/s (events / (last decision committed - first file dropped));
* busy events/s: the events of the batches that had input over those batches' durations
  (``query_progress``), the engine's rate while it works, without the wait for the first file
  and the last batch's tail: above the offered rate, the engine keeps up once the join burst of
  the first seconds is worked off;
* latency p50/p99: ``processed_at_ms`` of the decision's batch - the request's drop time;
* timer lateness p50/p99/max: ``processed_at_ms`` of a session-timeout removal - its deadline;
* the foreachBatch time per batch (Spark's ``addBatch`` duration: the Delta writes), p50/p90,
  to compare the two writers (``--writers``);
* the CPU while loaded (bench/cpu_meter.py, Linux), in cores, from the first file to the
  last answer: the Python workers, the JVM by thread (JIT compilers, task threads, the stream
  thread, GC, the rest) and the driver's Python (foreachBatch and its delta-rs threads, the
  listener, and this script, which drops files it encoded before the clock started and, after
  the last one, counts the decisions table's rows once a second from Parquet footers);
* the core's events/s on the same events (CoordinatorRunner in-process, one call per key per
  file, state encoded between calls) and the ratio engine / core.

``--windows N`` prints the answer latency by when the request was dropped, and the timer
lateness by when the timer was due, N seconds a window: a backlog built in the first seconds
(a fresh JVM, the join burst) and how it drains. ``--spread-silence`` has the silent groups
stop after a number of heartbeats spread over the run, so sessions expire throughout it (by
default they all stop after their sync and expire in the first ten seconds). ``--phases``
prints each loaded batch's phases as Spark timed them (of the last 100 batches: Spark keeps
that many progress updates), then the steady batches' medians by the number of input files
they took: the batch, its Spark job and what ``addBatch`` spends after the job (the writes),
and the steady batch's cost fitted to its rows (a fixed part and a cost a row, by least
squares), with the share of each second the offered rows take and how long batches run back
to back would last at that load.

``--drops-per-second N`` splits each second's events into N files dropped evenly over the
second (one by default), nearer a continuous stream such as Kafka's: with one file a second, a
batch that runs a little over a second finds two files waiting, and batches go by whole
seconds of input.

``--source kafka`` sends the events as Kafka records instead (``KafkaInput``: a local broker,
a LogAppendTime topic per run, confluent-kafka as the producer, which is not a project
dependency); ``--kafka-partitions``, ``--kafka-max-records`` and ``--kafka-option NAME=VALUE``
shape the topic and the engine's Kafka source, and ``--drops-per-second`` spreads the records
the same way. ``--answers-partitions N`` adds an answers topic (``engine.answers_topic``) of N
partitions on the same broker and prints, after the run, its records against the decisions and
their latency as a client reading the topic sees it (the broker's append time - the drop time).

``--idle N`` measures idle batches instead: N groups join and sync with a 25-minute session
(so no timer falls due), then the query runs on with no input for ``--seconds``; printed:
each idle batch's duration (Spark's ``triggerExecution``, p50/p90/max) and its parts, the
state rows and the state store's size (RocksDB's SST files, bytes per group).
bench/engine_path_bench.py gives the Python side without Spark.

State (shuffle) partitions: ``--partitions``, 2 by default as in conf/local.yaml. The script
runs its own checkout's ``lib/`` (first on sys.path and on the workers' PYTHONPATH): to measure
another build, run that build's copy of this script.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import statistics
import sys
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

from cpu_meter import CpuMeter, describe  # noqa: E402  (bench/, beside this script)

SESSION_MS = 6000
MIN_SECONDS = 4  # the joins take the first three seconds, the last syncs the fourth
PROGRESS_KEPT = "spark.sql.streaming.numRecentProgressUpdates"
PROTOCOLS = [{"name": "range", "metadata": "AAEAAAABAAZvcmRlcnM="}]


def silent(group_id: str) -> bool:
    """One group in ten stops heartbeating and is removed by its session timeout."""
    return int(group_id[1:]) % 10 == 9


def member_id(group: str, event_id: str, client: str) -> str:
    return f"{client}-{uuid.uuid5(uuid.NAMESPACE_URL, group + '/' + event_id)}"


def workload(
    groups: int, seconds: int, *, spread_silence: bool = False
) -> list[list[dict[str, Any]]]:
    """Events per second-slot (one file each); event_time_ms is filled in at drop time.

    One group in ten goes silent (``silent``): right after its sync, or, with
    ``spread_silence``, after a number of heartbeats spread evenly over the run (fewer than
    the group would send), so that sessions expire (timers fire) throughout it and not only in
    its first seconds."""
    if seconds < MIN_SECONDS:
        raise ValueError(f"the workload needs at least {MIN_SECONDS} seconds, got {seconds}")
    slots: list[list[dict[str, Any]]] = [[] for _ in range(seconds)]
    for g in range(groups):
        group, client = f"g{g:05d}", f"c{g:05d}"
        start = g % 3  # spread the joins over the first seconds
        join_id = f"{group}-join"
        member = member_id(group, join_id, client)
        slots[start].append(
            {
                "event_id": join_id,
                "type": "join",
                "group_id": group,
                "member_id": "",
                "client_id": client,
                "session_timeout_ms": SESSION_MS,
                "rebalance_timeout_ms": SESSION_MS,
                "protocol_type": "consumer",
                "protocols": PROTOCOLS,
                "request_version": 3,
            }
        )
        slots[start + 1].append(
            {
                "event_id": f"{group}-sync",
                "type": "sync",
                "group_id": group,
                "member_id": member,
                "generation_id": 1,
                "assignments": [{"member_id": member, "assignment": ""}],
            }
        )
        beats = range(start + 4, seconds, 3)
        if silent(group):  # removed by its session timeout
            if not spread_silence:
                continue
            # the silent groups of a join second stop after 0, 1, 2, ... heartbeats in turn
            beats = beats[: (g // 30) % max(1, len(beats))]
        for n, slot in enumerate(beats):
            slots[slot].append(
                {
                    "event_id": f"{group}-hb{n}",
                    "type": "heartbeat",
                    "group_id": group,
                    "member_id": member,
                    "generation_id": 1,
                }
            )
    return slots


IDLE_SESSION_MS = 1_500_000


def warm_lines(count: int) -> list[str]:
    """The warm-up before the clock starts: ``count`` describe requests for groups that do not
    exist (answered, nothing kept in state), spread over the shards, as ``encode_slots`` leaves
    a line (without its closing brace). One warms the query's first pass; more warm the JVM's
    compilers on the source's, the shuffle's and the sink's code before the load."""
    events = (
        {"event_id": f"warm{n}", "type": "describe", "group_id": "warm" if n == 0 else f"warm{n}"}
        for n in range(count)
    )
    return [json.dumps(event)[:-1] for event in events]


def is_warm(group_id: str) -> bool:
    return group_id.startswith("warm")


def idle_workload(groups: int) -> list[list[dict[str, Any]]]:
    """A join in the first slot and a sync in the second for every group: all Stable, every
    timer 25 minutes away."""
    joins, syncs = [], []
    for g in range(groups):
        group, client = f"g{g:05d}", f"c{g:05d}"
        member = member_id(group, f"{group}-join", client)
        joins.append(
            {
                "event_id": f"{group}-join",
                "type": "join",
                "group_id": group,
                "member_id": "",
                "client_id": client,
                "session_timeout_ms": IDLE_SESSION_MS,
                "rebalance_timeout_ms": IDLE_SESSION_MS,
                "protocol_type": "consumer",
                "protocols": PROTOCOLS,
                "request_version": 3,
            }
        )
        syncs.append(
            {
                "event_id": f"{group}-sync",
                "type": "sync",
                "group_id": group,
                "member_id": member,
                "generation_id": 1,
                "assignments": [{"member_id": member, "assignment": ""}],
            }
        )
    return [joins, syncs]


def start_query(
    spark: Any,
    out: Path,
    trigger_ms: int,
    keying: str,
    shards: int,
    writer: str,
    kafka: KafkaInput | None = None,
    answers_order: str = "after_delta",
    fresh: bool = True,
) -> tuple[Any, Any]:
    """A coordinator query (and its progress listener) over ``out``'s landing directory (or
    ``kafka``'s topic), tables and checkpoint; initial rebalance delay 0. ``fresh``: ``out``
    emptied first; else the query starts again on its checkpoint."""
    from controlplane.core.config import parse_settings
    from controlplane.engine.options import (
        AnswersOrder,
        CleanSource,
        EngineOptions,
        Keying,
        SourceOptions,
    )
    from controlplane.engine.queries import build_coordinator_query, register_progress_listener

    if fresh:
        shutil.rmtree(out, ignore_errors=True)
    (out / "landing").mkdir(parents=True, exist_ok=True)
    options = EngineOptions(
        trigger_interval_ms=trigger_ms,
        keying=Keying(keying),
        shards=shards,
        checkpoint_root=str(out / "checkpoints"),
        tables_root=str(out / "tables"),
        writer=writer,
        coordinator_source=SourceOptions(
            format="jsonl",
            path=str(out / "landing"),
            max_files_per_trigger=1000,
            clean_source=CleanSource.DELETE,
        )
        if kafka is None
        else kafka.source_options(),
        answers_topic=None if kafka is None else kafka.answers_topic,
        answers_order=AnswersOrder(answers_order),
    )
    settings = parse_settings({"group.initial.rebalance.delay.ms": 0})
    listener = register_progress_listener(spark, options)
    return build_coordinator_query(spark, settings, options=options).start(), listener


def run_idle(
    spark: Any, groups: int, shards: int, seconds: int, out: Path, writer: str
) -> dict[str, Any]:
    """Idle batches with ``groups`` Stable groups in state: their durations and parts."""
    landing, tables = out / "landing", out / "tables"
    query, listener = start_query(spark, out, 1000, "shard", shards, writer)
    try:
        for number, events in enumerate(idle_workload(groups)):
            now_ms = int(time.time() * 1000)
            _drop(landing, [{**e, "event_time_ms": now_ms} for e in events], f"s{number}")
            time.sleep(1.0)
        _wait(lambda: count(tables / "decisions") >= 2 * groups, 1800)
        time.sleep(3.0)  # the batch that wrote the last answers is done
        started = time.time()
        time.sleep(seconds)
        progress = [
            p
            for p in query.recentProgress
            if not p["numInputRows"] and _iso_ms(p["timestamp"]) >= started * 1000
        ]
    finally:
        query.stop()
        spark.streams.removeListener(listener)
    total = [p["durationMs"].get("triggerExecution", 0) for p in progress]
    parts: dict[str, list[float]] = defaultdict(list)
    for p in progress:
        for name, value in p["durationMs"].items():
            parts[name].append(value)
    operator = progress[-1]["stateOperators"][0] if progress else {}
    metrics = operator.get("customMetrics") or {}
    return {
        "batches": len(progress),
        "p50_ms": percentile(total, 0.5),
        "p90_ms": percentile(total, 0.9),
        "max_ms": max(total, default=float("nan")),
        "parts_p50_ms": {name: percentile(values, 0.5) for name, values in parts.items()},
        "state_rows": operator.get("numRowsTotal"),
        "state_memory_bytes": operator.get("memoryUsedBytes"),
        "state_store_bytes": metrics.get("rocksdbSstFileSize", 0),
        "timers_fired": sum(
            r["timers_fired"] for r in read(tables / "query_progress") if not r["input_rows"]
        ),
    }


def _iso_ms(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000


def core_rate(slots: list[list[dict[str, Any]]], keying: str, shards: int) -> float:
    from controlplane.core.config import CoordinatorConfig
    from controlplane.core.coordinator.runner import CoordinatorRunner
    from controlplane.core.runtime import TimedEvent
    from controlplane.engine.keying import spark_key_of
    from controlplane.engine.options import Keying

    runner = CoordinatorRunner(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
    states: dict[str, bytes | None] = {}
    total, started = 0, time.perf_counter()
    for second, events in enumerate(slots):
        now = 1_000_000 + second * 1000
        by_key: dict[str, list[TimedEvent]] = defaultdict(list)
        for event in events:
            key = spark_key_of(event["group_id"], Keying(keying), shards)
            by_key[key].append(TimedEvent({**event, "event_time_ms": now}, now))
        for key, timed in by_key.items():
            states[key] = runner.run(states.get(key), timed, now).state
        total += len(events)
    return total / (time.perf_counter() - started)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def count(path: Path, where: Any = None) -> int:
    """Rows of a Delta table (matching ``where``), read from the Parquet footers and the
    filter's columns only: the waits poll this every second while the engine works, and
    reading a whole table into Python each time took CPU from the engine it measures."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path)):
        return 0
    return int(DeltaTable(str(path)).to_pyarrow_dataset().count_rows(filter=where))


def removed_by_timeout(group_ids: list[str]) -> Any:
    """The session-timeout removals of these groups (a filter for ``count`` and ``read``)."""
    import pyarrow.compute as pc

    removed = (pc.field("reason") == "session_timeout") & (pc.field("kind") == "member_removed")
    return removed & pc.field("group_id").isin(group_ids)


def _reason(reason: str) -> Any:
    import pyarrow.compute as pc

    return pc.field("reason") == reason


def removed_except(group_ids: list[str], before_ms: int) -> Any:
    """Member removals of groups other than these (the fleet's heartbeating groups) before
    ``before_ms`` (the last drop: after it every session runs out)."""
    import pyarrow.compute as pc

    removed = (pc.field("kind") == "member_removed") & (pc.field("at_ms") < before_ms)
    return removed & ~pc.field("group_id").isin(group_ids)


def read(path: Path, where: Any = None) -> list[dict[str, Any]]:
    """Rows of a Delta table (matching ``where``, as ``count`` takes it)."""
    from deltalake import DeltaTable

    if not DeltaTable.is_deltatable(str(path)):
        return []
    return DeltaTable(str(path)).to_pyarrow_dataset().to_table(filter=where).to_pylist()


class SinkTimings(logging.Handler):
    """The sink's own timings of each batch, from its debug records (engine.batch): the
    Spark job that computes the batch (``toArrow``), then each table's write."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.by_batch: dict[int, dict[str, int]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        from controlplane.engine.batch import SINK_TIMINGS

        timings = getattr(record, SINK_TIMINGS, None)
        if timings is not None:
            self.by_batch[int(getattr(record, "batch_id", -1))] = dict(timings)
        elif record.levelno >= logging.WARNING:  # not propagated while attached: pass it on
            logging.getLogger("controlplane.engine").handle(record)

    def attach(self) -> SinkTimings:
        logger = logging.getLogger("controlplane.engine.batch")
        self._saved = (logger.level, logger.propagate)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False  # the sink's other debug lines stay out of the output
        logger.addHandler(self)
        return self

    def detach(self) -> None:
        logger = logging.getLogger("controlplane.engine.batch")
        logger.removeHandler(self)
        logger.setLevel(self._saved[0])
        logger.propagate = self._saved[1]


@dataclass(frozen=True)
class Stop:
    """``--stop-at``/``--stop-for``: the query stopped ``at_s`` seconds into the drops and
    started again on its checkpoint ``for_s`` seconds later, the drops going on meanwhile."""

    at_s: int
    for_s: int


class Restart:
    """The query of a run with a ``Stop``: stopped (in a thread, so the drops keep their
    schedule) and started again at the times the stop gives. ``before``: the stopped query's
    progress."""

    def __init__(self, stop: Stop, begin: Any) -> None:
        self.stop, self.begin = stop, begin
        self.query, self.listener = begin(True)
        self.stopping: threading.Thread | None = None
        self.failure: BaseException | None = None
        self.restarted_at_s: float | None = None
        self.before: list[Any] = []

    def at(self, offset_s: float, spark: Any) -> None:
        """What the stop asks for before the drop at ``offset_s``."""
        if self.stopping is None and offset_s >= self.stop.at_s:
            self.stopping = threading.Thread(target=self._stop_query)
            self.stopping.start()
            return
        back = self.restarted_at_s is None and offset_s >= self.stop.at_s + self.stop.for_s
        if self.stopping is not None and back:
            self.join()
            self.before = list(self.query.recentProgress)
            spark.streams.removeListener(self.listener)
            self.restarted_at_s = time.time()
            self.query, self.listener = self.begin(False)

    def join(self) -> None:
        """Wait for the stop; raise what it raised (the query must not start twice)."""
        if self.stopping is not None:
            self.stopping.join()
        if self.failure is not None:
            raise RuntimeError("the query did not stop") from self.failure

    def _stop_query(self) -> None:
        try:
            self.query.stop()
        except BaseException as exc:  # handed to the drop loop's thread by join()
            self.failure = exc


def _behind(progress: Any) -> int | None:
    """Spark's ``maxOffsetsBehindLatest`` of the batch's Kafka source; None when it has none (a
    batch planned before a stop and run again after it reports none)."""
    from controlplane.engine.progress import unread_metrics

    return max(unread_metrics(progress), default=None)


def catch_up(progress: list[Any], restarted_at_s: float) -> str:
    """The batches after the restart that read the source's cap with records left (Spark's
    ``maxOffsetsBehindLatest``), and when the first that left none began."""
    capped = [p for p in progress if (_behind(p) or 0) > 0]
    after = progress[progress.index(capped[-1]) + 1 :] if capped else progress
    caught = next((p for p in after if p["numInputRows"] and _behind(p) == 0), None)
    durations = ", ".join(
        f"{p['durationMs'].get('triggerExecution', 0) / 1000:.1f}" for p in capped
    )
    rows = ", ".join(str(p["numInputRows"]) for p in capped)
    when = (
        "not caught up"
        if caught is None
        else f"caught up at {_iso_ms(caught['timestamp']) / 1000 - restarted_at_s:.1f} s"
    )
    return (
        f"catch-up: {len(capped)} capped batches after the restart ({rows} records; "
        f"{durations} s), {when} after the restart"
    )


def run_engine(
    spark: Any,
    slots: list[list[dict[str, Any]]],
    keying: str,
    shards: int,
    out: Path,
    writer: str = "delta-rs",
    drops_per_second: int = 1,
    kafka: KafkaInput | None = None,
    warm_events: int = 1,
    answers_order: str = "after_delta",
    stop: Stop | None = None,
) -> dict[str, Any]:
    landing, tables = out / "landing", out / "tables"

    def begin(fresh: bool) -> tuple[Any, Any]:
        return start_query(spark, out, 500, keying, shards, writer, kafka, answers_order, fresh)

    restart = None
    kept = spark.conf.get(PROGRESS_KEPT)
    if stop is not None:  # the catch-up's batches kept past Spark's default of 100
        spark.conf.set(PROGRESS_KEPT, "2000")
        restart = Restart(stop, begin)
    query, listener = (restart.query, restart.listener) if restart is not None else begin(True)

    def drop(lines: list[str], now_ms: int, name: str) -> None:
        if kafka is None:
            _drop_texts(landing, lines, now_ms, name)
        else:
            kafka.send(lines, now_ms)

    expected = sum(len(s) for s in slots)
    quiet = sorted({e["group_id"] for s in slots for e in s if silent(e["group_id"])})
    removed = removed_by_timeout(quiet)
    texts = encode_slots(slots)  # before the clock starts: the producer is not the engine
    cores: dict[str, float] | None = None
    sink = SinkTimings().attach()
    try:
        drop(warm_lines(warm_events), 1, "warm")
        _wait(lambda: count(tables / "decisions") >= warm_events, 600)
        first_drop = time.time()
        meter = CpuMeter.start(spark, None if kafka is None else {"broker": kafka.broker.pid})
        last_drop_ms = 0
        for offset_s, lines, name in drop_schedule(texts, drops_per_second):
            time.sleep(max(0.0, first_drop + offset_s - time.time()))
            if restart is not None:
                restart.at(offset_s, spark)
                query, listener = restart.query, restart.listener
            last_drop_ms = int(time.time() * 1000)
            drop(lines, last_drop_ms, name)
        _wait(lambda: count(tables / "decisions") >= expected + warm_events, 1800)
        cores = meter.stop() if meter is not None else None  # the last answer is in
        # the silent groups' removals: the others' sessions expire after the last drop, and
        # how many of those a run counts would depend on when this wait ends
        _wait(lambda: count(tables / "group_events", removed) >= len(quiet), 600)
    finally:
        if restart is not None and restart.stopping is not None:
            restart.join()  # a run that ended while its query was stopping
        after_restart = list(query.recentProgress)
        before = restart.before if restart is not None else []
        loaded_progress = [p for p in before + after_restart if p["numInputRows"]]
        add_batch_ms = [p["durationMs"].get("addBatch", 0) for p in loaded_progress]
        phases = [_phases(p, sink.by_batch.get(p["batchId"])) for p in loaded_progress]
        per_file = expected / (len(slots) * drops_per_second)
        steady = steady_by_files(loaded_progress, sink.by_batch, per_file)
        steady_per_s = statistics.median(len(s) for s in slots)  # a file a second
        steady.append(steady_cost(loaded_progress, sink.by_batch, steady_per_s))
        query.stop()
        spark.streams.removeListener(listener)
        sink.detach()
        spark.conf.set(PROGRESS_KEPT, kept)
    decisions = [r for r in read(tables / "decisions") if not is_warm(r["group_id"])]
    removals = read(tables / "group_events", removed)
    stopped = None
    if restart is not None and restart.restarted_at_s is not None:
        stopped = {
            "catch_up": catch_up(after_restart, restart.restarted_at_s),
            "failover_resets": count(tables / "group_events", _reason("coordinator_failover")),
            "heartbeating_removed": count(
                tables / "group_events", removed_except(quiet, last_drop_ms)
            ),
        }
    last_commit = max(r["processed_at_ms"] for r in decisions) / 1000
    errors: dict[str, int] = defaultdict(int)
    for r in decisions:
        errors[r["error"]] += 1
    progress = read(tables / "query_progress")
    # not the warm-up's batch (by its size), not idle
    loaded = [r for r in progress if (r["events"] or 0) > 1 and r["events"] != warm_events]
    busy_s = sum(r["duration_ms"] or 0 for r in loaded) / 1000
    return {
        "events": len(decisions),
        "sustained_eps": len(decisions) / (last_commit - first_drop),
        "busy_eps": sum(r["events"] for r in loaded) / busy_s if busy_s else float("nan"),
        "latency_p50_ms": percentile(
            [r["processed_at_ms"] - r["event_time_ms"] for r in decisions], 0.5
        ),
        "latency_p99_ms": percentile(
            [r["processed_at_ms"] - r["event_time_ms"] for r in decisions], 0.99
        ),
        "lateness_p50_ms": percentile([r["processed_at_ms"] - r["at_ms"] for r in removals], 0.5),
        "lateness_p99_ms": percentile([r["processed_at_ms"] - r["at_ms"] for r in removals], 0.99),
        "lateness_max_ms": max(
            (r["processed_at_ms"] - r["at_ms"] for r in removals), default=float("nan")
        ),
        "removals": len(removals),
        "errors": dict(errors),
        "batches": len(progress),
        "add_batch_p50_ms": percentile(add_batch_ms, 0.5),
        "add_batch_p90_ms": percentile(add_batch_ms, 0.9),
        "cores": cores,
        "phases": phases,
        "steady": steady,
        "answers": [(r["event_time_ms"], r["processed_at_ms"]) for r in decisions],
        "removals_at": [(r["at_ms"], r["processed_at_ms"]) for r in removals],
        "first_drop_ms": int(first_drop * 1000),
        "topic_answers": None if kafka is None or kafka.answers_topic is None else kafka.answers(),
        "stopped": stopped,
    }


def latency_windows(
    answers: list[tuple[int, int]],
    removals: list[tuple[int, int]],
    first_drop_ms: int,
    window_s: int,
) -> list[str]:
    """Answer latency by when the request was dropped, and timer lateness by when the timer
    was due, ``window_s`` seconds a window from the first drop: how a backlog built at the
    start (a cold JVM, the join burst) grows or drains."""
    lines = []
    for what, pairs in (("answers", answers), ("timers", removals)):
        windows: dict[int, list[float]] = defaultdict(list)
        for at_ms, done_ms in pairs:
            windows[(at_ms - first_drop_ms) // (window_s * 1000)].append(done_ms - at_ms)
        lines += [
            f"{what} {n * window_s}-{(n + 1) * window_s} s: {len(late)}, p50 "
            f"{percentile(late, 0.5):.0f} / p99 {percentile(late, 0.99):.0f} ms"
            for n, late in sorted(windows.items())
        ]
    return lines


_PHASES = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


def _phases(progress: dict[str, Any], sink: dict[str, int] | None = None) -> str:
    """One loaded batch as Spark timed it: its input rows and the ms of its phases (what is
    left of ``triggerExecution`` is Spark's own: the state store commit, the progress), then
    ``addBatch`` as the sink timed it (``SinkTimings``) when it did."""
    durations = progress["durationMs"]
    total = durations.get("triggerExecution", 0)
    parts = " ".join(f"{name} {durations.get(name, 0)}" for name in _PHASES)
    rest = total - sum(durations.get(name, 0) for name in _PHASES)
    rows = progress["numInputRows"]
    text = f"batch {progress['batchId']}: {rows} rows, {total} ms: {parts}, rest {rest}"
    if sink:
        text += "; sink: " + " ".join(f"{name} {ms}" for name, ms in sink.items())
    return text


STEADY_FROM_BATCH = 15  # the batches before it carry the join burst and a fresh JIT


def steady_batches(
    progress: list[dict[str, Any]], sinks: dict[int, dict[str, int]], first_batch: int
) -> list[tuple[dict[str, Any], dict[str, int]]]:
    """The batches from ``first_batch`` on that the sink timed (its Spark job's ``compute``),
    each with the sink's timings."""
    return [
        (p, sink)
        for p in progress
        if p["batchId"] >= first_batch and "compute" in (sink := sinks.get(p["batchId"]) or {})
    ]


def steady_by_files(
    progress: list[dict[str, Any]],
    sinks: dict[int, dict[str, int]],
    rows_per_file: float,
    first_batch: int = STEADY_FROM_BATCH,
) -> list[str]:
    """The steady batches (from ``first_batch``, with the sink's timings) by how many input
    files each took (its rows over a file's, rounded), with the medians of the batch
    (``triggerExecution``), of the Spark job that computes it (the sink's ``compute``) and of
    what ``addBatch`` spends after that job (the split and the Delta writes)."""
    by_files: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for p, sink in steady_batches(progress, sinks, first_batch):
        files = max(1, round(p["numInputRows"] / rows_per_file))
        durations = p["durationMs"]
        after = durations.get("addBatch", 0) - sink["compute"]
        by_files[files].append((durations.get("triggerExecution", 0), sink["compute"], after))
    lines = []
    for files, batches in sorted(by_files.items()):
        batch, compute, after = (statistics.median(b[i] for b in batches) for i in range(3))
        lines.append(
            f"steady batches of {files} file{'s' if files > 1 else ''}: {len(batches)}, "
            f"medians: batch {batch:.0f} ms, compute {compute:.0f}, after compute {after:.0f}"
        )
    return lines


MIN_FIT_SPREAD = 1.5  # the largest steady batch's rows over the smallest's, to fit a line


def steady_cost(
    progress: list[dict[str, Any]],
    sinks: dict[int, dict[str, int]],
    offered_per_s: float,
    first_batch: int = STEADY_FROM_BATCH,
) -> str:
    """A steady batch's duration (``triggerExecution``) fitted to its input rows by least
    squares: a fixed part and a cost a row. The rows alone keep the engine busy for
    ``offered_per_s`` times the cost a row of each second (its load), so batches that run back
    to back last about fixed / (1 - load): what the timers wait for, twice at worst (the batch
    in which one falls due, then the one that fires it). Only when the batches' sizes differ
    (some took two files): among batches of one file each the line is the noise's."""
    batches = [p for p, _ in steady_batches(progress, sinks, first_batch)]
    rows = [p["numInputRows"] for p in batches]
    if not rows or max(rows) < MIN_FIT_SPREAD * min(rows):  # one file each: noise, no line
        return f"steady batch cost: {len(batches)} batches, too little spread in their rows to fit"
    durations_ms = [p["durationMs"].get("triggerExecution", 0) for p in batches]
    per_row_ms, fixed_ms = statistics.linear_regression(rows, durations_ms)
    if per_row_ms <= 0:  # larger batches were not slower: the VM's speed moved more than they
        return f"steady batch cost: {len(batches)} batches, no cost a row in the noise"
    load = offered_per_s * per_row_ms / 1000
    back_to_back = f"{fixed_ms / (1 - load):.0f} ms" if load < 1 else "never: over capacity"
    return (
        f"steady batch cost (least squares, {len(batches)} batches): fixed {fixed_ms:.0f} ms"
        f" + {per_row_ms * 1000:.1f} us a row; at {offered_per_s:,.0f} rows/s the rows take"
        f" {load:.0%} of the time, batches back to back last {back_to_back}"
    )


def encode_slots(slots: list[list[dict[str, Any]]]) -> list[list[str]]:
    """Each event as its JSON text without ``event_time_ms`` and the closing brace, for
    ``_drop_texts`` to finish at drop time: encoding the events then took ~10 µs each, a tenth
    of a core at 9,600 events/s, from the two cores the engine is measured on."""
    return [
        [json.dumps({k: v for k, v in e.items() if k != "event_time_ms"})[:-1] for e in events]
        for events in slots
    ]


class KafkaInput:
    """The events as Kafka records instead of files (``--source kafka``): a topic with
    LogAppendTime on a local broker (controlplane.io.broker.LocalBroker), one record an event,
    keyed by its group (so a group's requests stay in one partition, in order), produced with
    confluent-kafka (librdkafka, in C): kafka-python's producer took 80-93 µs of this process's
    CPU a record, most of a core at the issue's rate, where with confluent-kafka this process
    used about what it uses dropping files (the CPU line's "driver Python"). The broker is a JVM
    of its own on the same two cores; its CPU is printed beside the engine's."""

    def __init__(
        self,
        broker: Any,
        topic: str,
        partitions: int,
        options: dict[str, str],
        max_records: int,
        answers_partitions: int = 0,
    ) -> None:
        from confluent_kafka import Producer

        self.broker, self.topic, self.options = broker, topic, options
        self.max_records = max_records
        log_append_time = {"message.timestamp.type": "LogAppendTime"}
        broker.create_topic(topic, partitions, log_append_time)
        self.answers_topic = f"{topic}-answers" if answers_partitions else None
        if self.answers_topic is not None:
            broker.create_topic(self.answers_topic, answers_partitions, log_append_time)
        self.producer = Producer(
            {"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5, "acks": "1"}
        )

    def source_options(self) -> Any:
        from controlplane.io.options import SourceOptions

        return SourceOptions(
            format="kafka",
            path=self.topic,
            kafka_bootstrap_servers=self.broker.bootstrap_servers,
            max_records_per_trigger=self.max_records,
            starting_offsets="earliest",
            kafka_options=self.options,
        )

    def send(self, texts: list[str], now_ms: int) -> None:
        """The events (as ``encode_slots`` left them) stamped with ``now_ms``, each a record."""
        stamp = f', "event_time_ms": {now_ms}}}'
        produce = self.producer.produce
        for text in texts:
            while True:
                try:
                    produce(self.topic, value=text + stamp, key=group_of(text))
                    break
                except BufferError:  # the client's queue is full (a warm-up larger than it)
                    self.producer.poll(0.1)
        self.producer.flush(10)

    def answers(self) -> list[tuple[int, int]]:
        """Every record on the answers topic as (the request's ``event_time_ms``, the time
        the broker appended the answer): the latency a client reading the topic sees. The
        warm-up's answer is left out."""
        from confluent_kafka import Consumer, TopicPartition

        topic = self.answers_topic
        assert topic is not None, "a run without an answers topic"
        consumer = Consumer(
            {
                "bootstrap.servers": self.broker.bootstrap_servers,
                "group.id": f"{topic}-bench",
                "enable.auto.commit": False,
            }
        )
        try:
            metadata = consumer.list_topics(topic, timeout=10)
            ends = {}
            for partition in metadata.topics[topic].partitions:
                ends[partition] = consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=10
                )[1]
            consumer.assign([TopicPartition(topic, p, 0) for p in ends])
            pairs, left, empty = [], sum(ends.values()), 0
            while left > 0:
                messages = consumer.consume(10_000, timeout=5)
                empty = 0 if messages else empty + 1
                if empty == 3:
                    raise RuntimeError(f"{topic}: {left} records not read in 15 s")
                for message in messages:
                    if message.error() is not None:
                        raise RuntimeError(str(message.error()))
                    left -= 1
                    row = json.loads(message.value() or b"{}")
                    if not is_warm(row.get("group_id") or ""):
                        pairs.append((row["event_time_ms"], message.timestamp()[1]))
            return pairs
        finally:
            consumer.close()


def describe_topic_answers(pairs: list[tuple[int, int]], decisions: int) -> str:
    """The answers topic against the decisions table: how many records (at least once: a
    replayed batch sends its answers again) and their latency as a client reading the topic
    sees it (the broker's append time - the request's drop time)."""
    late = [float(appended - dropped) for dropped, appended in pairs]
    return (
        f"answers topic: {len(pairs)} records for {decisions} decisions, latency p50 "
        f"{percentile(late, 0.5):.0f} / p99 {percentile(late, 0.99):.0f} ms"
    )


def kafka_options(args: argparse.Namespace) -> dict[str, str]:
    """``--kafka-option NAME=VALUE`` as the source's kafka_options, checked as the engine checks
    a configuration's (``bootstrap.servers`` and the like are refused)."""
    from controlplane.engine.options import kafka_options as checked

    return checked("--kafka-option", dict(o.split("=", 1) for o in args.kafka_option))


def group_of(text: str) -> str:
    """The ``group_id`` of an event's JSON text as ``encode_slots`` writes it."""
    start = text.index('"group_id": "') + len('"group_id": "')
    return text[start : text.index('"', start)]


def drop_schedule(
    texts: list[list[str]], drops_per_second: int
) -> list[tuple[float, list[str], str]]:
    """When each file is dropped (seconds from the first drop), its lines and its name: each
    second-slot's lines in ``drops_per_second`` files of (nearly) equal size, evenly spaced
    over its second, in the slot's order. One file a second quantizes the input: a batch that
    takes a little over a second finds two files, where a continuous stream (Kafka) would have
    given it a little over a second's rows."""
    if drops_per_second < 1:
        raise ValueError("drops_per_second must be at least 1")
    schedule = []
    for second, lines in enumerate(texts):
        size, extra = divmod(len(lines), drops_per_second)
        start = 0
        for part in range(drops_per_second):
            end = start + size + (part < extra)
            name = f"s{second:04d}" if drops_per_second == 1 else f"s{second:04d}-{part:02d}"
            schedule.append((second + part / drops_per_second, lines[start:end], name))
            start = end
    return schedule


def _drop_texts(landing: Path, texts: list[str], now_ms: int, name: str) -> None:
    stamp = f', "event_time_ms": {now_ms}}}\n'
    _land(landing, stamp.join(texts) + stamp if texts else "", name)


def _drop(landing: Path, events: list[dict[str, Any]], name: str) -> None:
    _land(landing, "".join(json.dumps(e) + "\n" for e in events), name)


def _land(landing: Path, text: str, name: str) -> None:
    """A whole file in the landing directory at once (written aside, then renamed)."""
    temp = landing / f".{name}.tmp"
    temp.write_text(text)
    os.rename(temp, landing / f"{name}.jsonl")


def _wait(check: Any, deadline_s: float) -> None:
    end = time.time() + deadline_s
    while time.time() < end:
        if check():
            return
        time.sleep(1.0)
    raise TimeoutError("the engine did not catch up before the deadline")


HEADER = (
    "groups keying  writer    events  offered/s  engine/s  busy/s  core/s  ratio  lat_p50  lat_p99"
    "  late_p50  late_p99  late_max  batches  write_p50  write_p90  errors"
)


def line(
    groups: int, keying: str, writer: str, offered: float, core: float, f: dict[str, Any]
) -> str:
    eps = f["sustained_eps"]
    return (
        f"{groups:6d} {keying:7s} {writer:8s} {f['events']:7d} {offered:9.0f} {eps:9.0f}"
        f" {f['busy_eps']:7.0f} {core:7.0f}"
        f" {eps / core:6.3f} {f['latency_p50_ms']:8.0f} {f['latency_p99_ms']:8.0f}"
        f" {f['lateness_p50_ms']:9.0f} {f['lateness_p99_ms']:9.0f} {f['lateness_max_ms']:9.0f}"
        f" {f['batches']:8d} {f['add_batch_p50_ms']:10.0f} {f['add_batch_p90_ms']:10.0f}"
        f"  {json.dumps(f['errors'])}"
    )


def class_archive_named(java_options: str) -> str:
    """The archive a session's JVM was given (docs/engine.md, "The JVM's class archive"), or
    "none": start-up figures depend on it."""
    named = [
        o.split("=", 1)[1] for o in java_options.split() if o.startswith("-XX:SharedArchiveFile=")
    ]
    return named[0] if named else "none"


def spark_java_options(spark: Any) -> str:
    conf = spark.sparkContext.getConf()
    keys = ("spark.driver.defaultJavaOptions", "spark.driver.extraJavaOptions")
    return " ".join(conf.get(key, "") for key in keys)


def check_seconds(parser: argparse.ArgumentParser, seconds: int) -> None:
    """``--seconds`` long enough for the workload (``parser.error`` if not)."""
    if seconds < MIN_SECONDS:
        parser.error(f"--seconds must be at least {MIN_SECONDS} (the joins and their syncs)")


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The command line's numbers and options, as ``main`` needs them (``parser.error`` if not)."""
    if not args.idle:
        check_seconds(parser, args.seconds)
    if args.windows < 0:
        parser.error("--windows must be 0 (off) or a number of seconds")
    if args.drops_per_second < 1:
        parser.error("--drops-per-second must be at least 1")
    if args.warm_events < 1:
        parser.error("--warm-events must be at least 1")
    if any("=" not in option for option in args.kafka_option):
        parser.error("--kafka-option takes NAME=VALUE")
    if args.kafka_max_records < 1 or args.kafka_partitions < 1:
        parser.error("--kafka-max-records and --kafka-partitions must be at least 1")
    if (args.stop_at > 0) != (args.stop_for > 0) or min(args.stop_at, args.stop_for) < 0:
        parser.error("--stop-at and --stop-for go together, each a positive number of seconds")
    if args.stop_at and args.source != "kafka":
        parser.error("--stop-at is for --source kafka (whose cap the catch-up is about)")
    if (
        args.stop_at
        and not MIN_SECONDS < args.stop_at < args.stop_at + args.stop_for < args.seconds
    ):
        parser.error(
            f"--stop-at must be after the joins (> {MIN_SECONDS} s), and the restart"
            " (--stop-at + --stop-for) before the last drop (--seconds)"
        )
    if args.answers_partitions < 0 or (args.answers_partitions and args.source != "kafka"):
        parser.error("--answers-partitions is a number of partitions, with --source kafka only")
    try:
        args.kafka_options = kafka_options(args)
    except ValueError as exc:  # the engine's ConfigError
        parser.error(str(exc))


def build_parser() -> argparse.ArgumentParser:
    """The command line (``check_args`` checks what it parsed)."""
    from controlplane.io.options import MAX_RECORDS_PER_TRIGGER

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", default="100,1000,10000")
    parser.add_argument("--keyings", default="group,shard")
    parser.add_argument("--writers", default="delta-rs", help="delta-rs and/or native")
    parser.add_argument(
        "--shards", type=int, default=16, help="under shard keying (conf/local.yaml: 16)"
    )
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--out", default="out/bench/engine")
    parser.add_argument("--idle", type=int, default=0, help="idle batches with N groups")
    parser.add_argument(
        "--partitions", type=int, default=2, help="shuffle (state) partitions (conf/local.yaml: 2)"
    )
    parser.add_argument("--phases", action="store_true", help="each loaded batch's phases")
    parser.add_argument(
        "--spread-silence",
        action="store_true",
        help="silent groups stop at times spread over the run (timers fire throughout)",
    )
    parser.add_argument(
        "--windows", type=int, default=0, help="answer latency per N seconds of drops (0: off)"
    )
    parser.add_argument(
        "--drops-per-second",
        type=int,
        default=1,
        help="input files a second (each second's events split evenly; 1: one file a second)",
    )
    parser.add_argument(
        "--source",
        choices=("files", "kafka"),
        default="files",
        help="kafka: a local broker's topic (needs confluent-kafka: pip install confluent-kafka)",
    )
    parser.add_argument("--kafka-partitions", type=int, default=2, help="the topic's partitions")
    parser.add_argument(
        "--kafka-max-records",
        type=int,
        default=MAX_RECORDS_PER_TRIGGER,
        help="the source's max_records_per_trigger (default: the engine's)",
    )
    parser.add_argument(
        "--kafka-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Kafka client property of the source (the engine's kafka_options), repeatable",
    )
    parser.add_argument(
        "--answers-partitions",
        type=int,
        default=0,
        help="with --source kafka: an answers topic of N partitions (0: none)",
    )
    parser.add_argument(
        "--answers-order",
        choices=("after_delta", "with_delta"),
        default="after_delta",
        help="with --answers-partitions: the engine's answers_order",
    )
    parser.add_argument(
        "--warm-events",
        type=int,
        default=1,
        help="describe requests answered before the clock starts (1: the query's first pass)",
    )
    parser.add_argument(
        "--stop-at",
        type=int,
        default=0,
        help="stop the query S seconds into the drops (0: never), the drops going on",
    )
    parser.add_argument(
        "--stop-for", type=int, default=0, help="with --stop-at: start it again S seconds later"
    )
    parser.add_argument("--master", default="local[2]", help="e.g. local[1] against local[2]")
    parser.add_argument(
        "--no-core", action="store_true", help="skip the core's in-process replay (long runs)"
    )
    return parser


def main() -> int:
    parser = build_parser()
    args = parser.parse_args()
    check_args(parser, args)
    if args.source == "kafka":
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            parser.error("--source kafka needs confluent-kafka: pip install confluent-kafka")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "lib"), os.environ.get("PYTHONPATH", "")]
    )
    from controlplane.engine.session import build_local_session

    spark = build_local_session(
        "engine-bench",
        shuffle_partitions=args.partitions,
        require_jars="native" in args.writers,
        master=args.master,
    )
    print(f"JVM class archive: {class_archive_named(spark_java_options(spark))}", flush=True)
    if args.idle:
        for writer in args.writers.split(","):
            out = Path(args.out) / f"idle-{args.idle}-{writer}"
            figures = run_idle(spark, args.idle, args.shards, args.seconds, out, writer)
            per_group = (figures["state_store_bytes"] or 0) / args.idle
            print(f"idle batches, {args.idle} groups in state, writer {writer}:")
            print(
                f"  {figures['batches']} batches: p50 {figures['p50_ms']:.0f} ms, "
                f"p90 {figures['p90_ms']:.0f} ms, max {figures['max_ms']:.0f} ms; "
                f"timers fired {figures['timers_fired']}"
            )
            print(f"  parts p50 (ms): {json.dumps(figures['parts_p50_ms'])}")
            print(
                f"  state rows {figures['state_rows']}, memory {figures['state_memory_bytes']} "
                f"bytes, RocksDB SST files {figures['state_store_bytes']} bytes "
                f"({per_group:.0f} / group)"
            )
        spark.stop()
        return 0
    with contextlib.ExitStack() as stack:
        broker = None
        if args.source == "kafka":
            from controlplane.io.broker import LocalBroker

            broker = stack.enter_context(LocalBroker())
            print(f"Kafka {broker.kafka_version} on {broker.bootstrap_servers}", flush=True)
        loaded_runs(spark, args, broker)
    spark.stop()
    return 0


def loaded_runs(spark: Any, args: argparse.Namespace, broker: Any) -> None:
    """Each loaded run of the command line, its figures printed as it ends."""
    print(HEADER)
    for groups in [int(g) for g in args.groups.split(",")]:
        slots = workload(groups, args.seconds, spread_silence=args.spread_silence)
        offered = sum(len(s) for s in slots) / args.seconds
        for keying in args.keyings.split(","):
            core = float("nan") if args.no_core else core_rate(slots, keying, args.shards)
            for writer in args.writers.split(","):
                name = f"{keying}-{groups}-{writer}"
                out = Path(args.out) / name
                kafka = (
                    None
                    if broker is None
                    else KafkaInput(
                        broker,
                        name,
                        args.kafka_partitions,
                        args.kafka_options,
                        args.kafka_max_records,
                        args.answers_partitions,
                    )
                )
                figures = run_engine(
                    spark,
                    slots,
                    keying,
                    args.shards,
                    out,
                    writer,
                    args.drops_per_second,
                    kafka,
                    args.warm_events,
                    args.answers_order,
                    Stop(args.stop_at, args.stop_for) if args.stop_at else None,
                )
                print(line(groups, keying, writer, offered, core, figures), flush=True)
                if figures["cores"] is not None:
                    print(f"  {describe(figures['cores'])}", flush=True)
                stopped = figures["stopped"]
                if stopped is not None:
                    print(
                        f"  stopped at {args.stop_at} s for {args.stop_for} s;"
                        f" {stopped['catch_up']}; coordinator_failover resets"
                        f" {stopped['failover_resets']}; members removed from heartbeating"
                        f" groups before the last drop {stopped['heartbeating_removed']}",
                        flush=True,
                    )
                if args.phases:
                    for phase in figures["phases"] + figures["steady"]:
                        print(f"  {phase}", flush=True)
                topic = figures["topic_answers"]
                if topic is not None:
                    print(f"  {describe_topic_answers(topic, figures['events'])}", flush=True)
                if args.windows:
                    answers, first = figures["answers"], figures["first_drop_ms"]
                    removals = figures["removals_at"]
                    for window in latency_windows(answers, removals, first, args.windows):
                        print(f"  {window}", flush=True)
                    for window in latency_windows(topic or [], [], first, args.windows):
                        print(f"  topic {window}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
