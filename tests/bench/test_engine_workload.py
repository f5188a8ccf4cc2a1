"""The engine benchmark's workload and its latency windows (bench/engine_bench.py): the Spark
run itself is by hand, but what it offers and how it buckets its figures are checked here."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import engine_bench

GROUPS, SECONDS = 600, 20


def heartbeats(slots: list[list[dict[str, Any]]]) -> Counter[str]:
    return Counter(e["group_id"] for s in slots for e in s if e["type"] == "heartbeat")


def test_by_default_the_silent_groups_stop_after_their_sync() -> None:
    beats = heartbeats(engine_bench.workload(GROUPS, SECONDS))
    assert not [g for g in beats if engine_bench.silent(g)]
    assert len(beats) == GROUPS - GROUPS // 10
    # a group joining in second 0 beats in seconds 4, 7, ..., 19: six times
    assert beats["g00000"] == len(range(4, SECONDS, 3))


def test_spread_silence_stops_every_silent_group_early_at_spread_times() -> None:
    plain = engine_bench.workload(GROUPS, SECONDS)
    spread = engine_bench.workload(GROUPS, SECONDS, spread_silence=True)
    beats, plain_beats = heartbeats(spread), heartbeats(plain)
    silent = [f"g{g:05d}" for g in range(GROUPS) if engine_bench.silent(f"g{g:05d}")]
    for group in silent:  # fewer heartbeats than an ordinary group joining in the same second
        ordinary = f"g{int(group[1:]) - 3:05d}"
        assert beats[group] < beats[ordinary] == plain_beats[ordinary], group
    for start in range(3):  # per join second: each count from none to all but one, evenly
        own = len(range(start + 4, SECONDS, 3))
        counts = Counter(beats[g] for g in silent if int(g[1:]) % 3 == start)
        assert set(counts) == set(range(own)), start
        assert max(counts.values()) - min(counts.values()) <= 1, start
    assert {g: n for g, n in beats.items() if not engine_bench.silent(g)} == plain_beats
    others = [[e for e in s if e["type"] != "heartbeat"] for s in spread]
    assert others == [[e for e in s if e["type"] != "heartbeat"] for s in plain]


def test_latency_windows_bucket_answers_by_drop_time_and_timers_by_deadline() -> None:
    # out of order, and answered in another window than the one they were dropped or due in
    answers = [
        (26_000, 27_000),
        (3_000, 4_500),
        (12_500, 12_600),
        (3_900, 13_900),
        (14_000, 14_100),
    ]
    timers = [(15_000, 25_400)]
    lines = engine_bench.latency_windows(answers, timers, first_drop_ms=3_000, window_s=10)
    assert lines == [
        "answers 0-10 s: 3, p50 1500 / p99 10000 ms",
        "answers 10-20 s: 1, p50 100 / p99 100 ms",
        "answers 20-30 s: 1, p50 1000 / p99 1000 ms",
        "timers 10-20 s: 1, p50 10400 / p99 10400 ms",
    ]


@pytest.mark.parametrize("seconds", [4, 5, 6])
def test_a_run_too_short_for_heartbeats_still_builds(seconds: int) -> None:
    slots = engine_bench.workload(30, seconds, spread_silence=True)
    assert len(slots) == seconds
    assert sum(1 for s in slots for e in s if e["type"] == "join") == 30


@pytest.mark.parametrize("seconds", [0, 1, 3])
def test_a_run_too_short_for_the_syncs_is_refused(seconds: int) -> None:
    with pytest.raises(ValueError, match="at least 4 seconds"):
        engine_bench.workload(30, seconds)


def test_one_drop_a_second_is_each_slot_as_one_file() -> None:
    texts = [["a", "b", "c"], [], ["d"]]
    assert engine_bench.drop_schedule(texts, 1) == [
        (0.0, ["a", "b", "c"], "s0000"),
        (1.0, [], "s0001"),
        (2.0, ["d"], "s0002"),
    ]


def test_more_drops_a_second_split_each_slot_evenly_in_order_over_its_second() -> None:
    texts = [[f"e{n}" for n in range(10)], ["f0", "f1"]]
    schedule = engine_bench.drop_schedule(texts, 4)
    assert [at for at, _, _ in schedule] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]
    assert [len(lines) for _, lines, _ in schedule] == [3, 3, 2, 2, 1, 1, 0, 0]
    # every line once, in the slot's order, and the names sort in drop order
    assert [line for _, lines, _ in schedule for line in lines] == texts[0] + texts[1]
    names = [name for _, _, name in schedule]
    assert names == sorted(names)
    assert len(set(names)) == len(names)


def test_a_drop_schedule_needs_a_drop_a_second() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        engine_bench.drop_schedule([["a"]], 0)


def progress(batch_id: int, rows: int, total_ms: int, add_batch_ms: int) -> dict[str, Any]:
    return {
        "batchId": batch_id,
        "numInputRows": rows,
        "durationMs": {"triggerExecution": total_ms, "addBatch": add_batch_ms},
    }


def test_steady_batches_are_summed_up_by_their_input_files() -> None:
    batches = [
        progress(14, 10_000, 9_000, 8_000),  # before the steady state
        progress(15, 10_300, 1_200, 1_100),
        progress(16, 9_800, 1_000, 900),
        progress(17, 10_100, 1_400, 1_300),
        progress(18, 20_500, 2_000, 1_900),
        progress(19, 10_000, 5_000, 4_900),  # no sink timings: not counted
    ]
    sinks = {
        14: {"compute": 7_000},
        15: {"compute": 800, "groups": 150},
        16: {"compute": 700},
        17: {"compute": 1_000},
        18: {"compute": 1_500},
        19: {},
    }
    assert engine_bench.steady_by_files(batches, sinks, rows_per_file=10_200) == [
        "steady batches of 1 file: 3, medians: batch 1200 ms, compute 800, after compute 300",
        "steady batches of 2 files: 1, medians: batch 2000 ms, compute 1500, after compute 400",
    ]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (
            "-XX:+UseParallelGC -XX:SharedArchiveFile=/v/class-archive/spark-1.jsa -Dx=1",
            "/v/class-archive/spark-1.jsa",
        ),
        ("-XX:+UseParallelGC", "none"),
        ("", "none"),
    ],
)
def test_the_bench_says_which_class_archive_its_jvm_was_given(options: str, named: str) -> None:
    assert engine_bench.class_archive_named(options) == named


def test_the_steady_batch_cost_is_fitted_to_the_rows() -> None:
    # 200 ms fixed + 0.08 ms a row, exactly; batch 14 is before the steady state and a batch
    # without the sink's timings is left out, each far off the line
    batches = [
        progress(14, 10_000, 9_000, 8_000),
        progress(15, 10_000, 1_000, 900),
        progress(16, 20_000, 1_800, 1_700),
        progress(17, 5_000, 600, 500),
        progress(18, 10_000, 7_000, 6_900),
    ]
    sinks = {14: {"compute": 1}, 15: {"compute": 1}, 16: {"compute": 1}, 17: {"compute": 1}}
    assert engine_bench.steady_cost(batches, sinks, offered_per_s=10_000) == (
        "steady batch cost (least squares, 3 batches): fixed 200 ms + 80.0 us a row;"
        " at 10,000 rows/s the rows take 80% of the time, batches back to back last 1000 ms"
    )
    assert engine_bench.steady_cost(batches, sinks, offered_per_s=12_500).endswith(
        "the rows take 100% of the time, batches back to back last never: over capacity"
    )


@pytest.mark.parametrize(
    ("batches", "said"),
    [
        # one file each: the sizes differ by a few rows, and a line through them is noise
        (
            [progress(15, 10_000, 1_000, 900), progress(16, 10_100, 900, 800)],
            "2 batches, too little spread in their rows to fit",
        ),
        ([], "0 batches, too little spread in their rows to fit"),
        # the larger batch was quicker: the VM's speed moved more than the rows did
        (
            [progress(15, 10_000, 1_500, 1_400), progress(16, 20_000, 1_200, 1_100)],
            "2 batches, no cost a row in the noise",
        ),
    ],
)
def test_no_steady_batch_cost_without_a_line_in_the_batches(
    batches: list[dict[str, Any]], said: str
) -> None:
    sinks = {15: {"compute": 800}, 16: {"compute": 850}}
    assert engine_bench.steady_cost(batches, sinks, offered_per_s=10_000) == (
        f"steady batch cost: {said}"
    )


def test_a_kafka_record_is_an_event_stamped_and_keyed_by_its_group() -> None:
    slots = engine_bench.workload(40, 8)
    texts = engine_bench.encode_slots(slots)
    sent: list[tuple[str, str, str]] = []
    flushed: list[float] = []

    class Producer:
        def produce(self, topic: str, *, value: str, key: str) -> None:
            sent.append((topic, value, key))

        def flush(self, timeout_s: float) -> None:
            flushed.append(timeout_s)

    kafka = object.__new__(engine_bench.KafkaInput)
    kafka.topic, kafka.producer = "requests", Producer()
    kafka.send(texts[4], 1_234)
    assert flushed  # the second's records are out before the next second's
    events = [json.loads(value) for _, value, _ in sent]
    assert events == [{**event, "event_time_ms": 1_234} for event in slots[4]]
    assert [key for _, _, key in sent] == [event["group_id"] for event in slots[4]]
    assert {topic for topic, _, _ in sent} == {"requests"}


def test_the_cpu_line_names_a_broker_when_one_was_measured() -> None:
    import cpu_meter

    cores = {"machine": 1.5, "worker": 0.5, "jvm": 0.8, "driver": 0.1, "jvm tasks": 0.3}
    assert "broker" not in cpu_meter.describe(cores)
    assert cpu_meter.describe({**cores, "broker": 0.07}).endswith("; broker 0.07")


def test_the_bench_checks_its_kafka_options_as_the_engine_checks_a_configuration() -> None:
    import argparse

    from controlplane.core.config import ConfigError

    given = argparse.Namespace(kafka_option=["fetch.max.wait.ms=500", "client.id=a=b"])
    assert engine_bench.kafka_options(given) == {"fetch.max.wait.ms": "500", "client.id": "a=b"}
    with pytest.raises(ConfigError, match=r"bootstrap\.servers"):
        engine_bench.kafka_options(argparse.Namespace(kafka_option=["bootstrap.servers=x:1"]))


def test_the_answers_topic_line_counts_records_against_decisions_and_their_latency() -> None:
    # (drop time, broker's append time): latencies 100, 200, ..., 1000 ms
    pairs = [(10_000 * n, 10_000 * n + 100 * n) for n in range(1, 11)]
    line = engine_bench.describe_topic_answers(pairs, 9)
    assert line == "answers topic: 10 records for 9 decisions, latency p50 600 / p99 1000 ms"


def test_the_warm_up_is_describe_requests_for_groups_outside_the_workload() -> None:
    from controlplane.core.coordinator.requests import DescribeGroup
    from controlplane.core.coordinator.wire import parse_request
    from controlplane.engine.keying import spark_key_of
    from controlplane.engine.options import Keying

    lines = engine_bench.warm_lines(500)
    events = [json.loads(line + ', "event_time_ms": 1}') for line in lines]
    assert len({e["event_id"] for e in events}) == len(events) == 500
    assert all(isinstance(parse_request(e), DescribeGroup) for e in events)
    groups = {e["group_id"] for e in events}
    assert len(groups) == 500
    assert all(engine_bench.is_warm(g) for g in groups)
    assert "warm" in groups  # the one warm-up of the runs before the option: same answer
    workload_groups = {e["group_id"] for s in engine_bench.workload(GROUPS, 6) for e in s}
    assert not [g for g in workload_groups if engine_bench.is_warm(g)]
    # spread over the shards, so that every state partition's worker takes part
    assert len({spark_key_of(g, Keying.SHARD, 64) for g in groups}) == 64


class FakeQuery:
    def __init__(self, name: str, log: list[str], fail: bool = False) -> None:
        self.name, self.log, self.fail = name, log, fail
        self.recentProgress = [{"batchId": 0, "query": name}]

    def stop(self) -> None:
        self.log.append(f"stop {self.name}")
        if self.fail:
            raise RuntimeError("stuck")


class FakeStreams:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def removeListener(self, listener: str) -> None:
        self.log.append(f"remove {listener}")


def test_a_stop_stops_the_query_once_and_starts_it_again_on_its_checkpoint_once() -> None:
    log: list[str] = []
    started: list[bool] = []

    def begin(fresh: bool) -> tuple[FakeQuery, str]:
        started.append(fresh)
        return FakeQuery(f"q{len(started)}", log), f"listener{len(started)}"

    spark = type("Spark", (), {"streams": FakeStreams(log)})()
    restart = engine_bench.Restart(engine_bench.Stop(at_s=10, for_s=5), begin)
    for offset_s in (0.0, 9.0, 10.0, 12.0, 14.0):
        restart.at(offset_s, spark)
    assert restart.stopping is not None
    restart.stopping.join()
    assert (started, log, restart.restarted_at_s) == ([True], ["stop q1"], None)
    for offset_s in (15.0, 16.0, 30.0):
        restart.at(offset_s, spark)
    assert started == [True, False]  # the second start keeps the checkpoint
    assert log == ["stop q1", "remove listener1"]
    assert restart.query.name == "q2"
    assert restart.listener == "listener2"
    assert restart.restarted_at_s is not None
    assert restart.before == [{"batchId": 0, "query": "q1"}]  # the stopped query's progress


def test_a_query_that_fails_to_stop_is_not_started_again() -> None:
    log: list[str] = []
    started: list[bool] = []

    def begin(fresh: bool) -> tuple[FakeQuery, str]:
        started.append(fresh)
        return FakeQuery("q", log, fail=True), "listener"

    spark = type("Spark", (), {"streams": FakeStreams(log)})()
    restart = engine_bench.Restart(engine_bench.Stop(at_s=10, for_s=5), begin)
    restart.at(10.0, spark)
    with pytest.raises(RuntimeError, match="did not stop"):
        restart.at(15.0, spark)
    assert started == [True]


class Progress(dict[str, Any]):
    """A query's progress as pyspark gives it: read by key, and ``sources`` by attribute."""

    @property
    def sources(self) -> list[Any]:
        return list(self["sources"])


def read_progress(rows: int, behind: int | None, at: str, seconds: float) -> Progress:
    metrics = {} if behind is None else {"maxOffsetsBehindLatest": str(behind)}
    return Progress(
        numInputRows=rows,
        timestamp=at,
        durationMs={"triggerExecution": int(seconds * 1000)},
        sources=[type("Source", (), {"metrics": metrics})()],
    )


def test_the_catch_up_line_counts_the_capped_batches_and_when_none_was_left() -> None:
    restarted = engine_bench._iso_ms("2026-11-29T10:00:00.000Z") / 1000
    batches = [
        read_progress(50_000, 90_000, "2026-11-29T10:00:02.000Z", 6.5),
        read_progress(50_000, 20_000, "2026-11-29T10:00:08.500Z", 5.0),
        read_progress(0, None, "2026-11-29T10:00:13.500Z", 0.2),
        read_progress(31_000, 0, "2026-11-29T10:00:13.700Z", 3.0),
    ]
    assert engine_bench.catch_up(batches, restarted) == (
        "catch-up: 2 capped batches after the restart (50000, 50000 records; 6.5, 5.0 s),"
        " caught up at 13.7 s after the restart"
    )
    assert engine_bench.catch_up(batches[:2], restarted).endswith("not caught up after the restart")
    # no capped batch: the first that reports nothing left, not a batch without the metric
    assert engine_bench.catch_up(batches[2:], restarted) == (
        "catch-up: 0 capped batches after the restart ( records;  s), caught up at 13.7 s after"
        " the restart"
    )
    replayed = read_progress(20_000, None, "2026-11-29T10:00:01.000Z", 1.0)  # planned before
    assert engine_bench.catch_up([replayed, *batches], restarted) == engine_bench.catch_up(
        batches, restarted
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--stop-at", "10"], "go together"),
        (["--stop-for", "10"], "go together"),
        (["--stop-at", "3", "--stop-for", "5", "--source", "kafka"], "after the joins"),
        (
            ["--stop-at", "10", "--stop-for", "10", "--seconds", "20", "--source", "kafka"],
            "before the last drop",
        ),
        (["--stop-at", "10", "--stop-for", "5", "--source", "files"], "for --source kafka"),
    ],
)
def test_a_stop_the_run_cannot_hold_is_refused(
    arguments: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = engine_bench.build_parser()  # the bench's own command line
    args = parser.parse_args(arguments)
    with pytest.raises(SystemExit):
        engine_bench.check_args(parser, args)
    assert message in capsys.readouterr().err
    args = parser.parse_args(
        ["--stop-at", "10", "--stop-for", "9", "--seconds", "20", "--source", "kafka"]
    )
    engine_bench.check_args(parser, args)  # the restart one second before the last drop
