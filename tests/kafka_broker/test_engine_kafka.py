"""The engine's own Kafka client against the local broker, without Spark: request topics must
exist with LogAppendTime or the query does not start (before any session work), and the SASL
settings of a source reach the check and the answers topic's producer. The answers themselves
are written by Spark's Kafka sink: tests/spark/test_answers_topic.py."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from controlplane.core.config import parse_settings
from controlplane.engine.options import EngineOptions
from controlplane.engine.queries import build_coordinator_query, prepare_kafka
from controlplane.io.broker import LocalBroker
from controlplane.io.kafka_clients import KafkaSetupError
from controlplane.io.options import SourceOptions

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
    assert publisher.max_message_bytes == 1_048_588  # the broker's default, read at start
    assert (
        publisher.writer_options()["kafka.sasl.jaas.config"]
        == (resolved.kafka_options["sasl.jaas.config"])
    )
    monkeypatch.delenv("CP_TEST_BOB_PASSWORD")
    with pytest.raises(Exception, match="environment variable CP_TEST_BOB_PASSWORD is not set"):
        prepare_kafka(engine, sasl, None)
    with pytest.raises(KafkaSetupError, match="the answers topic 'nowhere' does not exist"):
        prepare_kafka(EngineOptions(answers_topic="nowhere"), source(kafka_broker, topic), None)
