"""The engine's own Kafka clients against the local broker, without Spark: request topics must
exist with LogAppendTime or the query does not start (before any session work), the SASL
settings of a source reach the check, and the answers publisher puts each answer under its key
with the ``table`` header, at least once: a batch run again publishes again, while Delta keeps
one row."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from controlplane.core.config import parse_settings
from controlplane.engine.batch import BatchSink
from controlplane.engine.envelope import envelope_table
from controlplane.engine.options import EngineOptions
from controlplane.engine.queries import build_coordinator_query, prepare_kafka
from controlplane.io.broker import LocalBroker
from controlplane.io.kafka_clients import (
    AnswerRecord,
    AnswersNotDelivered,
    AnswersPublisher,
    KafkaSetupError,
)
from controlplane.io.options import KafkaEndpoint, SourceOptions

pytestmark = pytest.mark.kafka

LOG_APPEND_TIME = {"message.timestamp.type": "LogAppendTime"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def source(broker: LocalBroker, path: str) -> SourceOptions:
    return SourceOptions(
        format="kafka", path=path, kafka_bootstrap_servers=broker.bootstrap_servers
    )


def test_a_request_topic_without_log_append_time_is_refused_at_start(
    kafka_broker: LocalBroker, tmp_path: Path
) -> None:
    """Explicitly CreateTime, or the broker's default (CreateTime): the query is not even
    built (no session is needed to refuse), and the error names the topic and the fix."""
    good = unique("good")
    kafka_broker.create_topic(good, 2, LOG_APPEND_TIME)
    created = unique("create-time")
    kafka_broker.create_topic(created, 1, {"message.timestamp.type": "CreateTime"})
    inherited = unique("broker-default")
    kafka_broker.create_topic(inherited, 1)
    for topic in (created, inherited):
        options = EngineOptions(coordinator_source=source(kafka_broker, f"{good},{topic}"))
        with pytest.raises(KafkaSetupError) as refused:
            build_coordinator_query(None, parse_settings({}), options=options)
        message = str(refused.value)
        assert f"{{'{topic}': 'CreateTime'}}" in message
        assert good not in message.split("{")[1]
        assert f"--entity-name {topic} --add-config message.timestamp.type=LogAppendTime" in message
    missing = unique("missing")
    with pytest.raises(KafkaSetupError, match=f"\\['{missing}'\\] do not exist"):
        prepare_kafka(EngineOptions(), source(kafka_broker, missing), None)
    resolved, answers = prepare_kafka(EngineOptions(), source(kafka_broker, good), None)
    assert resolved.path == good
    assert answers is None


def test_the_check_logs_in_with_the_sources_sasl_settings_and_resolved_references(
    kafka_broker: LocalBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = unique("sasl-requests")
    kafka_broker.create_topic(topic, 1, LOG_APPEND_TIME)
    monkeypatch.setenv("CP_TEST_BOB_PASSWORD", kafka_broker.users["bob"])
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="bob" password="${ENV:CP_TEST_BOB_PASSWORD}";'
    )
    options = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": jaas,
    }
    sasl = SourceOptions(
        format="kafka",
        path=topic,
        kafka_bootstrap_servers=kafka_broker.sasl_bootstrap_servers,
        kafka_options=options,
    )
    answers = unique("sasl-answers")
    kafka_broker.create_topic(answers, 1)
    engine = EngineOptions(answers_topic=answers)
    resolved, publisher = prepare_kafka(engine, sasl, None)
    assert resolved.kafka_options["sasl.jaas.config"].endswith('password="bob-secret";')
    assert publisher is not None
    assert publisher.endpoint.options == resolved.kafka_options  # the source's, resolved
    publisher.publish([AnswerRecord("bob", {"event_id": "x"}, "quota_decisions")])
    publisher.close()
    monkeypatch.delenv("CP_TEST_BOB_PASSWORD")
    with pytest.raises(Exception, match="environment variable CP_TEST_BOB_PASSWORD is not set"):
        prepare_kafka(engine, sasl, None)
    with pytest.raises(KafkaSetupError, match="the answers topic 'nowhere' does not exist"):
        prepare_kafka(EngineOptions(answers_topic="nowhere"), source(kafka_broker, topic), None)


def consume_all(broker: LocalBroker, topic: str) -> list[Any]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**broker.client_config(), enable_auto_commit=False)
    try:
        partitions = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(partitions)
        got: list[Any] = []
        while any(consumer.position(tp) < ends[tp] for tp in partitions):
            for batch in consumer.poll(timeout_ms=1000).values():
                got.extend(batch)
        return got
    finally:
        consumer.close()


def partition_of(key: bytes, partitions: int) -> int:
    from kafka.partitioner.default import murmur2

    return int((murmur2(key) & 0x7FFFFFFF) % partitions)


class Batch:
    """What foreachBatch is handed, as far as the sink looks at it."""

    sparkSession = None

    def __init__(self, envelopes: list[tuple[str, dict[str, Any]]]) -> None:
        self.envelopes = envelopes

    def toArrow(self) -> pa.Table:
        return envelope_table(self.envelopes)


def test_a_batch_run_twice_writes_delta_once_and_publishes_twice_each_with_its_event_id(
    kafka_broker: LocalBroker, tmp_path: Path
) -> None:
    """At least once on the topic: the replayed batch's answers go out again, under the same
    key, to the partition Kafka's default partitioner gives that key, with the ``table``
    header; a client drops the second copy by its event_id. Delta keeps one row."""
    from controlplane.io.sinks import DeltaRsWriter

    topic = unique("answers")
    kafka_broker.create_topic(topic, 3)
    publisher = AnswersPublisher(KafkaEndpoint(kafka_broker.bootstrap_servers), topic, 10_000)
    sink = BatchSink(
        "coordinator",
        ("decisions", "group_events", "groups", "rejected_events"),
        str(tmp_path / "tables"),
        str(tmp_path / "checkpoint"),
        "delta-rs",
        publisher,
    )
    sink._writer = DeltaRsWriter(tmp_path / "tables", "controlplane-coordinator-test")
    groups = ["orders", "payments", "audit", "clicks"]
    batch = Batch(
        [("decisions", {"event_id": f"e-{g}", "group_id": g, "type": "join"}) for g in groups]
    )
    try:
        sink(batch, 0)
        sink(batch, 0)  # Spark runs a failed batch again with the same id
    finally:
        publisher.close()
    from deltalake import DeltaTable

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


def test_an_answer_the_broker_refuses_fails_the_publish_quickly(
    kafka_broker: LocalBroker,
) -> None:
    topic = unique("tiny-answers")
    kafka_broker.create_topic(topic, 1, {"max.message.bytes": "64"})
    publisher = AnswersPublisher(KafkaEndpoint(kafka_broker.bootstrap_servers), topic, 5_000)
    with pytest.raises(AnswersNotDelivered, match=f"answers topic {topic}: .*acknowledged"):
        publisher.publish(
            [
                AnswerRecord("g", {"event_id": "small"}, "decisions"),
                AnswerRecord("g", {"event_id": "big", "pad": "x" * 200}, "decisions"),
            ]
        )
    assert publisher._producer is None  # dropped: the replayed batch starts on a fresh one
