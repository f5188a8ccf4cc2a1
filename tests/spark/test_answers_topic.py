"""The answers topic as Spark's Kafka sink writes it, on the local broker: each decision under
its group and each quota decision under its user (its client when it has none), in Kafka's
default partition for that key, with the ``table`` header and the Delta row as JSON; in batch
order; at least once (a batch run again publishes again, while Delta keeps one row); and an
answer the brokers refuse fails the publish within its timeout."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from controlplane.engine.batch import ANSWER_THREADS, BatchSink, split_batch
from controlplane.engine.envelope import envelope_table
from controlplane.engine.options import AnswersOrder
from controlplane.io.answers import (
    ANSWERS_TABLE,
    AnswersNotDelivered,
    AnswersPublisher,
    answer_records,
    record_frame,
)
from controlplane.io.broker import LocalBroker
from controlplane.io.kafka_clients import check_topic_exists
from controlplane.io.options import KafkaEndpoint
from controlplane.io.schemas import TABLES
from spark.test_kafka_engine import consume_all, new_topic, partition_of

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


def test_the_records_are_keyed_with_their_table_s_header_in_one_partition(spark: Any) -> None:
    """The Kafka sink's rows, in the batch's order (the values themselves: the answers'
    tests in tests/engine/test_sink_arrow.py)."""
    calls = [
        [
            ("decisions", {"event_id": "e1", "group_id": "orders", "type": "join"}),
            ("quota_decisions", {"event_id": "q1", "user": "alice", "client_id": "tf"}),
        ],
        [
            ("decisions", {"event_id": "e2", "group_id": "payments", "type": "heartbeat"}),
            ("quota_decisions", {"event_id": "q2", "user": None, "client_id": "tf"}),
            ("group_events", {"group_id": "orders", "kind": "member_added"}),
        ],
    ]
    batch = pa.concat_tables([envelope_table(rows, answers=True) for rows in calls])
    tables, _ = split_batch(batch, 7, 1234)
    records = answer_records(tables[ANSWERS_TABLE], 7, 1234)
    assert records is not None
    frame = record_frame(spark, records)
    assert frame.rdd.getNumPartitions() == 1  # one producer, the batch's order
    got = frame.collect()
    assert [(r["key"], json.loads(r["value"])["event_id"]) for r in got] == [
        ("orders", "e1"),
        ("payments", "e2"),
        ("alice", "q1"),
        ("tf", "q2"),
    ]
    assert [[(h["key"], bytes(h["value"])) for h in r["headers"]] for r in got] == [
        [("table", b"decisions")],
        [("table", b"decisions")],
        [("table", b"quota_decisions")],
        [("table", b"quota_decisions")],
    ]
    assert json.loads(got[0]["value"])["batch_id"] == 7
    assert list(json.loads(got[2]["value"])) == TABLES["quota_decisions"].fieldNames()


class Batch:
    """What foreachBatch is handed, as far as the sink looks at it."""

    def __init__(self, spark: Any, envelopes: list[tuple[str, dict[str, Any]]]) -> None:
        self.sparkSession = spark
        self.envelopes = envelopes

    def toArrow(self) -> pa.Table:
        return envelope_table(self.envelopes, answers=True)


def coordinator_sink(tmp_path: Path, publisher: Any, order: AnswersOrder, writer: Any) -> BatchSink:
    """The coordinator query's sink over ``tmp_path``, publishing with ``publisher`` in
    ``order``, writing with ``writer``."""
    sink = BatchSink(
        "coordinator",
        ("decisions", "group_events", "groups", "rejected_events"),
        str(tmp_path / "tables"),
        str(tmp_path / "checkpoint"),
        "delta-rs",
        publisher,
        order,
    )
    sink._writer = writer
    return sink


@pytest.mark.parametrize("order", list(AnswersOrder))
def test_a_batch_run_twice_writes_delta_once_and_publishes_twice_each_with_its_event_id(
    spark: Any, kafka_broker: LocalBroker, tmp_path: Path, order: AnswersOrder
) -> None:
    """At least once on the topic: the replayed batch's answers go out again, under the same
    key, to the partition Kafka's default partitioner gives that key, with the ``table``
    header; a client drops the second copy by its event_id. Delta keeps one row. Published
    beside the Delta writes (``with_delta``), from a thread of the sink's, the same."""
    from deltalake import DeltaTable

    from controlplane.io.sinks import DeltaRsWriter

    topic = new_topic(kafka_broker, f"answers-{order}", 3)
    publisher = AnswersPublisher(KafkaEndpoint(kafka_broker.bootstrap_servers), topic, 10_000)
    writer = DeltaRsWriter(tmp_path / "tables", "controlplane-coordinator-test")
    sink = coordinator_sink(tmp_path, publisher, order, writer)
    groups = ["orders", "payments", "audit", "clicks"]
    batch = Batch(
        spark,
        [("decisions", {"event_id": f"e-{g}", "group_id": g, "type": "join"}) for g in groups],
    )
    sink(batch, 0)
    sink(batch, 0)  # Spark runs a failed batch again with the same id
    rows = DeltaTable(str(tmp_path / "tables" / "decisions")).to_pyarrow_table().to_pylist()
    assert sorted(r["event_id"] for r in rows) == sorted(f"e-{g}" for g in groups)
    published = consume_all(kafka_broker, topic)
    assert len(published) == 2 * len(groups)
    for record in published:
        row = json.loads(record.value)
        assert record.key == row["group_id"].encode()
        assert row["event_id"] == f"e-{row['group_id']}"
        assert record.partition == partition_of(record.key, 3)
        assert record.headers == [("table", b"decisions")]
        assert row["batch_id"] == 0
    assert len({record.partition for record in published}) > 1
    # in batch order within a partition: each group's two copies follow the batch's order
    by_partition: dict[int, list[str]] = {}
    for record in sorted(published, key=lambda r: (r.partition, r.offset)):
        by_partition.setdefault(record.partition, []).append(json.loads(record.value)["event_id"])
    for partition, ids in by_partition.items():
        once = [f"e-{g}" for g in groups if partition_of(g.encode(), 3) == partition]
        assert ids == once + once


def test_an_answer_the_broker_refuses_fails_the_publish_within_its_timeout(
    spark: Any, kafka_broker: LocalBroker
) -> None:
    topic = new_topic(kafka_broker, "tiny-answers", 1, **{"max.message.bytes": "64"})
    endpoint = KafkaEndpoint(kafka_broker.bootstrap_servers)
    limit = check_topic_exists(endpoint, topic)
    assert limit == 64
    publisher = AnswersPublisher(endpoint, topic, 5_000, limit)
    rows = [
        ("decisions", {"event_id": "small", "group_id": "g"}),
        ("decisions", {"event_id": "big", "group_id": "g"}),
    ]
    answers = split_batch(envelope_table(rows, answers=True), 0, 1)[0][ANSWERS_TABLE]
    started = time.monotonic()
    with pytest.raises(
        AnswersNotDelivered, match=f"answers topic {topic}: 2 answers not all published"
    ) as e:
        publisher.publish(spark, answers, 0, 1)
    assert time.monotonic() - started < 60
    # the producer's own error, by its class, not Py4J's "An error occurred while calling"
    assert "(org.apache.kafka.common.errors." in str(e.value), str(e.value)
    nowhere = AnswersPublisher(
        KafkaEndpoint(kafka_broker.bootstrap_servers), "no-such-topic", 3_000
    )
    started = time.monotonic()
    with pytest.raises(AnswersNotDelivered, match="answers topic no-such-topic") as e:
        nowhere.publish(spark, answers, 0, 1)
    assert "(org.apache.kafka.common.errors." in str(e.value), str(e.value)
    assert time.monotonic() - started < 60


def test_the_publish_beside_delta_runs_with_the_batch_s_job_properties(spark: Any) -> None:
    """PySpark pins each Python thread to a JVM thread of its own, which starts without the
    caller's job properties: the publish's job would then be outside the query's job group,
    and stopping the query would not cancel it. The sink's thread carries them over."""
    from concurrent.futures import ThreadPoolExecutor

    from controlplane.engine.batch import with_job_properties

    context = spark.sparkContext
    group = "spark.jobGroup.id"
    context.setLocalProperty(group, "the-query-run")
    try:
        carried = with_job_properties(spark, lambda: context.getLocalProperty(group))
        bare = lambda: context.getLocalProperty(group)  # noqa: E731
    finally:
        context.setLocalProperty(group, None)
    with ThreadPoolExecutor(1) as pool:  # a fresh thread: what it would have had
        assert pool.submit(bare).result() is None
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(carried).result() == "the-query-run"


def test_each_batch_s_publish_beside_delta_runs_in_that_batch_s_job_group(
    spark: Any, tmp_path: Path
) -> None:
    """Through the sink, two batches in a row: the publish's thread (one, reused) takes each
    batch's own job group, as a streaming query sets it, and is left without job tags."""

    class GroupRecordingPublisher:
        topic = "answers"

        def __init__(self) -> None:
            self.seen: list[tuple[str | None, set[str]]] = []
            self.threads: list[str] = []

        def publish(self, session: Any, answers: Any, batch_id: int, processed_at_ms: int) -> int:
            group = session.sparkContext.getLocalProperty("spark.jobGroup.id")
            self.seen.append((group, set(session.getTags())))
            self.threads.append(threading.current_thread().name)
            return 0 if answers is None else int(answers.num_rows)

    class NoWriter:
        kind = "fake"

        def write(self, table: str, rows: Any, batch_id: int) -> bool:
            return True

    publisher = GroupRecordingPublisher()
    sink = coordinator_sink(tmp_path, publisher, AnswersOrder.WITH_DELTA, NoWriter())
    context = spark.sparkContext
    batch = Batch(spark, [("decisions", {"event_id": "e", "group_id": "g", "type": "join"})])
    try:
        for run in ("run-a", "run-b"):
            context.setJobGroup(run, f"batch of {run}")
            spark.addTag(f"tag-{run}")
            sink(batch, 1)
            spark.clearTags()
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
        spark.clearTags()
    assert [group for group, _ in publisher.seen] == ["run-a", "run-b"]
    assert [tags for _, tags in publisher.seen] == [{"tag-run-a"}, {"tag-run-b"}]
    assert all(name.startswith(ANSWER_THREADS) for name in publisher.threads)
