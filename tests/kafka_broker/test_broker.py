"""The local Kafka broker (lib/controlplane/io/broker.py) is a real Kafka: records go round
trip, topic configs apply, SASL/PLAIN users are principals that per-user quotas apply to, and the
settings we write are settings the broker knows. Starting it without Java or jars fails at once
with one line; the CLI runs it in the foreground and stops on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from controlplane.io.broker import ADMIN_USER, LocalBroker, plain_jaas_config, properties_text
from controlplane.io.kafka_clients import timestamp_types
from controlplane.jvm import JARS_ENV, MissingJvm
from kafka_broker.conftest import poll_until, send_request

ROOT = Path(__file__).resolve().parents[2]
LOG_APPEND_TIME = 1  # a record's timestamp_type: 0 CreateTime, 1 LogAppendTime
THROTTLING_QUOTA_EXCEEDED = 89


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def produce(broker: LocalBroker, topic: str, records: list[dict[str, Any]]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(**broker.client_config(), acks="all", linger_ms=0)
    try:
        for record in records:
            producer.send(topic, **record).get(timeout=30)
    finally:
        producer.close()


def consume(broker: LocalBroker, topic: str, count: int, user: str | None = None) -> list[Any]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**broker.client_config(user), enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        got: list[Any] = []

        def fetched() -> bool:
            for batch in consumer.poll(timeout_ms=500).values():
                got.extend(batch)
            return len(got) >= count

        poll_until(fetched, what=f"{count} records on {topic}")
        return got
    finally:
        consumer.close()


@pytest.mark.kafka
def test_records_go_round_trip_on_the_plaintext_listener(kafka_broker: LocalBroker) -> None:
    topic = unique("round-trip")
    kafka_broker.create_topic(topic)
    sent = [{"key": f"k{i}".encode(), "value": f"v{i}".encode()} for i in range(3)]
    produce(kafka_broker, topic, sent)
    got = consume(kafka_broker, topic, 3)
    assert [(r.offset, r.key, r.value) for r in got] == [
        (0, b"k0", b"v0"),
        (1, b"k1", b"v1"),
        (2, b"k2", b"v2"),
    ]


@pytest.mark.kafka
def test_a_log_append_time_topic_stamps_records_with_broker_time(
    kafka_broker: LocalBroker,
) -> None:
    topic = unique("append-time")
    kafka_broker.create_topic(topic, config={"message.timestamp.type": "LogAppendTime"})
    client_time_ms = 1_000  # what the producer claims: 1970, far from now
    before_ms = time.time_ns() // 1_000_000
    produce(kafka_broker, topic, [{"value": b"x", "timestamp_ms": client_time_ms}])
    after_ms = time.time_ns() // 1_000_000
    [record] = consume(kafka_broker, topic, 1)
    assert record.timestamp_type == LOG_APPEND_TIME
    assert before_ms - 1_000 <= record.timestamp <= after_ms + 1_000


@pytest.mark.kafka
def test_topics_are_not_auto_created(kafka_broker: LocalBroker) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    topic = unique("never-created")
    producer = KafkaProducer(**kafka_broker.client_config(), max_block_ms=2_000)
    try:
        with pytest.raises(KafkaTimeoutError):
            producer.send(topic, b"x").get(timeout=5)
    finally:
        producer.close()
    admin = kafka_broker.admin()
    try:
        assert topic not in admin.list_topics()
    finally:
        admin.close()


@pytest.mark.kafka
def test_sasl_plain_users_log_in_and_a_wrong_password_is_refused(
    kafka_broker: LocalBroker,
) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaTimeoutError

    topic = unique("sasl")
    kafka_broker.create_topic(topic)
    produce(kafka_broker, topic, [{"value": b"over plaintext"}])
    [record] = consume(kafka_broker, topic, 1, user="alice")
    assert record.value == b"over plaintext"

    # kafka-python sees only a closed connection and keeps retrying; the broker says why.
    refusals_before = refused_logins(kafka_broker)
    wrong = {**kafka_broker.client_config("bob"), "sasl_plain_password": "alice-secret"}
    with pytest.raises(KafkaTimeoutError):
        KafkaAdminClient(**wrong, bootstrap_timeout_ms=2_000).close()
    assert refused_logins(kafka_broker) > refusals_before


def refused_logins(broker: LocalBroker) -> int:
    text = broker.log_file.read_text(encoding="utf-8", errors="replace")
    return text.count("Authentication failed: Invalid username or password")


def set_mutation_rate(broker: LocalBroker, user: str, rate: float | None) -> None:
    """Set (or with None remove) the user's controller_mutation_rate, as ``admin``."""
    from kafka.protocol.admin import AlterClientQuotasRequest

    entry = AlterClientQuotasRequest.EntryData
    request = AlterClientQuotasRequest(
        version=1,
        entries=[
            entry(
                entity=[entry.EntityData(entity_type="user", entity_name=user)],
                ops=[
                    entry.OpData(
                        key="controller_mutation_rate", value=rate or 0.0, remove=rate is None
                    )
                ],
            )
        ],
        validate_only=False,
    )
    response = send_request(broker, request, user=ADMIN_USER)
    assert [e.error_code for e in response.entries] == [0]


def create_partitions_as(broker: LocalBroker, user: str, partitions: int) -> Any:
    """CreateTopics v7 (strict quota: refused while the user's quota is exceeded) as ``user``."""
    from kafka.protocol.admin import CreateTopicsRequest

    topic = CreateTopicsRequest.CreatableTopic(
        name=unique(f"quota-{user}"),
        num_partitions=partitions,
        replication_factor=1,
        assignments=[],
        configs=[],
    )
    request = CreateTopicsRequest(version=7, topics=[topic], timeout_ms=10_000, validate_only=False)
    response = send_request(broker, request, user=user)
    [result] = response.topics
    return result.error_code, response.throttle_time_ms


@pytest.mark.kafka
def test_a_per_user_mutation_quota_applies_to_the_sasl_principal(
    kafka_broker: LocalBroker,
) -> None:
    """The SASL login is the quota's principal: ``User:alice`` is held to her
    controller_mutation_rate of 1 partition/s (a second 20-partition create is refused while
    the first is paid off), ``User:bob``, who has no quota, is not."""

    def alice_refused() -> tuple[int, int] | None:
        error_code, throttle_ms = create_partitions_as(kafka_broker, "alice", 20)
        return (error_code, throttle_ms) if error_code == THROTTLING_QUOTA_EXCEEDED else None

    set_mutation_rate(kafka_broker, "alice", 1.0)
    try:
        _, throttle_ms = poll_until(alice_refused, what="alice's quota to apply")
        assert throttle_ms > 0
        for _ in range(2):
            assert create_partitions_as(kafka_broker, "bob", 20) == (0, 0)
    finally:
        set_mutation_rate(kafka_broker, "alice", None)  # the broker is shared by the session


@pytest.mark.kafka
def test_every_setting_written_is_one_the_broker_knows_with_our_value(
    kafka_broker: LocalBroker,
) -> None:
    """A misspelt key would be ignored by Kafka without a word: DescribeConfigs lists only the
    settings it knows. Sensitive ones (the JAAS config) are listed without their value."""
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = kafka_broker.admin()
    try:
        described = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all"
        )
    finally:
        admin.close()
    reported = described["broker"]["1"]
    written = kafka_broker.properties()
    assert sorted(set(written) - set(reported)) == []
    assert {k: "STATIC_BROKER_CONFIG" for k in written} == {
        k: reported[k]["config_source"] for k in written
    }
    public = {k: v for k, v in written.items() if not reported[k]["is_sensitive"]}
    assert {k: reported[k]["value"] for k in public} == public
    assert sorted(set(written) - set(public)) == [
        "listener.name.sasl_plaintext.plain.sasl.jaas.config"
    ]
    assert reported["group.initial.rebalance.delay.ms"]["value"] == "0"


def test_starting_without_java_fails_at_once_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    broker = LocalBroker()
    with pytest.raises(MissingJvm) as raised:
        broker.start()
    message = str(raised.value)
    assert "\n" not in message
    assert "Java" in message
    assert broker.directory is None  # nothing was started
    assert broker.pid is None


def test_starting_without_the_jars_fails_at_once_naming_make_setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(JARS_ENV, str(tmp_path))
    broker = LocalBroker()
    with pytest.raises(MissingJvm) as raised:
        broker.start()
    message = str(raised.value)
    assert "\n" not in message
    assert str(tmp_path / "broker") in message
    assert "make setup" in message
    assert broker.directory is None
    assert broker.pid is None


def test_the_cli_without_the_jars_prints_one_line_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from controlplane.__main__ import main

    monkeypatch.setenv(JARS_ENV, str(tmp_path))
    assert main(["kafka-broker"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("kafka-broker: ")
    assert "make setup" in err


def test_the_properties_file_escapes_what_java_would_misread() -> None:
    text = properties_text({"a.key": r"C:\dir", "with space": "line\nbreak"})
    assert text == "a.key=C:\\\\dir\nwith\\ space=line\\nbreak\n"


@pytest.mark.kafka
def test_the_cli_runs_in_the_foreground_keeps_data_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    data = tmp_path / "broker"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "lib"))
    command = [sys.executable, "-m", "controlplane", "kafka-broker", "--data", str(data)]
    command += ["--topic", "kept:2"]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # like a terminal: SIGINT goes to the Python process only
    )
    lines: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("Ctrl-C stops the broker"):
                break
        assert any(line.startswith("  PLAINTEXT       127.0.0.1:") for line in lines), lines
        assert "kafka-broker: created topic kept (2 partitions, LogAppendTime)" in lines
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert out.strip().splitlines() == ["kafka-broker: stopped"]
    assert err == ""
    # --data keeps the directory: a second broker on it finds the topic and the cluster id.
    cluster_id = (data / "data" / "meta.properties").read_text()
    with LocalBroker(data_dir=data) as again:
        admin = again.admin()
        try:
            assert timestamp_types(admin, ["kept"]) == {"kept": "LogAppendTime"}
        finally:
            admin.close()
        assert f"cluster.id={again.cluster_id}" in cluster_id
    assert (data / "server.properties").is_file()


def test_extra_users_log_in_with_their_own_passwords_beside_the_standard_ones() -> None:
    """Users given at construction join the JAAS config the broker starts with (no JVM needed
    to check what is written)."""
    broker = LocalBroker(extra_users={"carol": "carol-pw"})
    assert broker.client_config("carol")["sasl_plain_password"] == "carol-pw"
    assert broker.client_config("alice")["sasl_plain_password"] == "alice-secret"
    jaas = plain_jaas_config(broker.users, ADMIN_USER)
    assert 'user_carol="carol-pw"' in jaas
    assert 'user_bob="bob-secret"' in jaas
    with pytest.raises(KeyError):
        LocalBroker().client_config("carol")
